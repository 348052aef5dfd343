"""Serving models whose output sizes are known only after a run (plans made
in stages, src/engine/plan_stages.c): the reply carries each run's own
shape, plans for repeated shapes are reused, and dynamic batching, which
needs sizes before running, refuses such a model with the reason."""
import json

import numpy as np
import onnx
from onnx import TensorProto, helper

from test_serve import request, serving  # noqa: E402


def positives_model():
    """y: the elements of x above 0.5, as a list."""
    nodes = [
        helper.make_node("Greater", ["x", "half"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        helper.make_node("GatherND", ["x", "idx"], ["y"]),
    ]
    g = helper.make_graph(nodes, "positives",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["k"])],
                          [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def add(root, name, config):
    (root / name / "1").mkdir(parents=True)
    onnx.save(positives_model(), str(root / name / "1" / "model.onnx"))
    (root / name / "config.json").write_text(json.dumps(config))


def infer(port, model, x):
    body = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                        "data": x.ravel().tolist()}]}
    status, raw, _ = request(port, "POST", f"/v2/models/{model}/infer", json.dumps(body).encode())
    return status, json.loads(raw)


def test_each_reply_has_its_own_size(tmp_path):
    add(tmp_path, "pos", {"max_batch_size": 0})
    rng = np.random.default_rng(3)
    with serving(tmp_path) as port:
        for rows in (2, 5, 2, 0, 5):
            x = rng.uniform(0, 1, size=(rows, 4)).astype(np.float32)
            status, reply = infer(port, "pos", x)
            assert status == 200, reply
            want = x[x > 0.5]
            out = reply["outputs"][0]
            assert out["shape"] == [len(want)], out
            np.testing.assert_allclose(out["data"], want, rtol=1e-6)


def test_dynamic_batching_refuses_it_with_the_reason(tmp_path):
    add(tmp_path, "pos", {"max_batch_size": 4, "dynamic_batching": {}})
    with serving(tmp_path) as port:
        status, reply = infer(port, "pos", np.ones((1, 4), np.float32))
        assert status == 400, reply
        assert "NonZero" in reply["error"], reply
