"""Nothing on the request path waits for a model's load (hardening item 8):
while a model loads, the repository index says LOADING, /metrics and the
statistics answer without it, and requests to it get 503 with Retry-After
at once; they used to wait on the model's lock inside HTTP threads, and
four such requests froze the server. A load has a time limit
(--model-load-timeout), and a FIFO in place of a model's file or its
configuration is refused instead of holding the load for ever."""
import json
import os
import threading
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from test_serve import add_model, admin_token, request, serving  # noqa: E402


def slow_model(channels=16, size=512, layers=6):
    """Convolutions whose warm-up at load takes a second or two here."""
    nodes, inits, prev = [], [], "x"
    rng = np.random.default_rng(0)
    for i in range(layers):
        w = (rng.standard_normal((channels, channels, 3, 3)) * 0.05).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        out = "y" if i == layers - 1 else f"h{i}"
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [out], pads=[1, 1, 1, 1]))
        prev = out
    shape = ["N", channels, size, size]
    g = helper.make_graph(nodes, "slow", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_requests_never_wait_for_a_load(tmp_path):
    (tmp_path / "slow" / "1").mkdir(parents=True)
    onnx.save(slow_model(), str(tmp_path / "slow" / "1" / "model.onnx"))
    (tmp_path / "slow" / "config.json").write_text(json.dumps({"max_batch_size": 4}))
    with serving(tmp_path) as port:
        loaded = {}
        auth = {"Authorization": "Bearer " + admin_token(tmp_path, port)}

        def reload():
            loaded["status"] = request(port, "POST", "/v2/repository/models/slow/load", b"{}",
                                       auth)[0]

        t = threading.Thread(target=reload)
        t.start()
        seen = None
        while t.is_alive():
            index = {m["name"]: m for m in json.loads(
                request(port, "POST", "/v2/repository/index", b"{}")[1])}
            if index["slow"]["state"] == "LOADING":
                seen = {
                    "metrics": request(port, "GET", "/metrics")[0],
                    "stats": request(port, "GET", "/v2/models/stats")[0],
                    "ready": request(port, "GET", "/v2/models/slow/ready")[0],
                    "infer": request(port, "POST", "/v2/models/slow/infer", b"{}"),
                }
                break
        t.join()
        assert seen is not None, "the index never answered while the model loaded"
        assert seen["metrics"] == 200 and seen["stats"] == 200 and seen["ready"] == 503
        status, body, headers = seen["infer"]
        assert status == 503 and headers.get("Retry-After") == "1", body
        assert b"loading" in body
        assert loaded["status"] == 200
        assert request(port, "GET", "/v2/models/slow/ready")[0] == 200


def index_of(port):
    return {m["name"]: m for m in json.loads(request(port, "POST", "/v2/repository/index",
                                                      b"{}")[1])}


def test_a_load_past_its_time_limit_leaves_the_model_unavailable(tmp_path):
    (tmp_path / "slow" / "1").mkdir(parents=True)
    # About 65 GFLOP at warm-up (0.75 s on this 2-core machine; tens of milliseconds on the
    # fastest CPUs): far past a limit of 10 ms whatever the machine.
    onnx.save(slow_model(channels=96, size=256, layers=6),
              str(tmp_path / "slow" / "1" / "model.onnx"))
    (tmp_path / "slow" / "config.json").write_text(json.dumps({"max_batch_size": 1}))
    with serving(tmp_path, "--model-load-timeout", "0.01") as port:
        index = index_of(port)
        assert index["slow"]["state"] == "UNAVAILABLE", index["slow"]
        assert "longer than its limit of 0.01 s (--model-load-timeout)" in index["slow"]["reason"]
        status, body, _ = request(port, "POST", "/v2/models/slow/infer", b"{}")
        assert status == 503 and b"--model-load-timeout" in body, body
        auth = {"Authorization": "Bearer " + admin_token(tmp_path, port)}
        t0 = time.time()
        status, body, _ = request(port, "POST", "/v2/repository/models/slow/load", b"{}", auth)
        assert status == 400 and b"--model-load-timeout" in body, body
        assert time.time() - t0 < 30
        assert index_of(port)["slow"]["state"] == "UNAVAILABLE"
    # The same model within the default limit: the limit was the reason.
    with serving(tmp_path) as port:
        assert index_of(port)["slow"]["state"] == "READY"


def test_a_fifo_for_a_model_or_its_configuration_is_refused(tmp_path):
    (tmp_path / "fifo_model" / "1").mkdir(parents=True)
    os.mkfifo(tmp_path / "fifo_model" / "1" / "model.onnx")
    (tmp_path / "fifo_model" / "config.json").write_text(json.dumps({"max_batch_size": 8}))
    add_model(tmp_path, "fifo_config", {"max_batch_size": 8})
    (tmp_path / "fifo_config" / "config.json").unlink()
    os.mkfifo(tmp_path / "fifo_config" / "config.json")
    add_model(tmp_path, "fifo_pbtxt", {"max_batch_size": 8})
    (tmp_path / "fifo_pbtxt" / "config.json").unlink()
    os.mkfifo(tmp_path / "fifo_pbtxt" / "config.pbtxt")
    add_model(tmp_path, "mlp", {"max_batch_size": 8})
    with serving(tmp_path) as port:  # it used to wait for a writer at load
        index = index_of(port)
        assert index["mlp"]["state"] == "READY"
        for name, file in (("fifo_model", "1/model.onnx"), ("fifo_config", "config.json"),
                           ("fifo_pbtxt", "config.pbtxt")):
            assert index[name]["state"] == "UNAVAILABLE", index[name]
            assert f"{file} is not a regular file" in index[name]["reason"], index[name]
