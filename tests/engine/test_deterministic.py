"""`deterministic`: the same bits from every run, whatever the threads
(`gpusrv model run --deterministic`), and from a served model's instances
whatever their threads (`"deterministic": true` in its config)."""
import json
import os
import sys
import tempfile
import threading

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from gsonnx import load_outputs, run_gpusrv

HERE = os.path.dirname(os.path.abspath(__file__))
K = 1 << 18


def summing_model():
    """One long sum per output: a [1, K] x [K, 8] MatMul. Big enough that
    oneDNN splits K over two threads, which changes the last bits (on this
    machine: 1 and 2 threads differ without `deterministic`)."""
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((K, 8)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "sums",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def feeds():
    return {"x": np.random.default_rng(6).standard_normal((1, K)).astype(np.float32)}


def run(model_path, f, *extra):
    with tempfile.TemporaryDirectory() as d:
        p = run_gpusrv(model_path, f, d, extra=extra)
        assert p.returncode == 0, p.stderr
        return load_outputs(d, ["y"])["y"]


def test_model_run_gives_the_same_bits_whatever_the_threads(tmp_path):
    path = str(tmp_path / "sums.onnx")
    onnx.save(summing_model(), path)
    f = feeds()
    runs = [run(path, f, "--deterministic", "--threads", str(t)).tobytes() for t in (1, 2, 2, 1, 2)]
    assert all(r == runs[0] for r in runs)
    np.testing.assert_allclose(np.frombuffer(runs[0], np.float32),
                               (f["x"].astype(np.float64) @ numpy_helper.to_array(
                                   summing_model().graph.initializer[0]).astype(np.float64)).ravel(),
                               rtol=1e-4, atol=1e-2)


def test_served_instances_give_the_same_bits(tmp_path):
    sys.path.insert(0, os.path.join(HERE, "..", "api"))
    from test_serve import request, serving  # noqa: E402
    (tmp_path / "sums" / "1").mkdir(parents=True)
    path = str(tmp_path / "sums" / "1" / "model.onnx")
    onnx.save(summing_model(), path)
    # Two instances of two threads each: without `deterministic` each would
    # split the sum over its two threads.
    (tmp_path / "sums" / "config.json").write_text(json.dumps(
        {"max_batch_size": 0, "deterministic": True,
         "instance_group": [{"count": 2, "kind": "KIND_CPU", "threads": 2}]}))
    f = feeds()
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, K], "datatype": "FP32",
                                   "data": f["x"].ravel().tolist()}]}).encode()
    answers = []

    def one():
        status, raw, _ = request(port, "POST", "/v2/models/sums/infer", body)
        answers.append((status, raw))

    with serving(tmp_path) as port:
        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert all(s == 200 for s, _ in answers), answers[0][1][:300]
    got = [np.array(json.loads(raw)["outputs"][0]["data"], np.float32) for _, raw in answers]
    one_thread = run(path, f, "--threads", "1").ravel()
    for g in got:
        assert g.tobytes() == one_thread.tobytes()
