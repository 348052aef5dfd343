"""Nothing on the request path waits for a model's load (hardening item 8):
while a model loads, the repository index says LOADING, /metrics and the
statistics answer without it, and requests to it get 503 with Retry-After
at once; they used to wait on the model's lock inside HTTP threads, and
four such requests froze the server."""
import json
import threading

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from test_serve import admin_token, request, serving  # noqa: E402


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
