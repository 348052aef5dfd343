"""Serving models whose output sizes are known only after a run (plans made
in stages, src/engine/plan_stages.c): the reply carries each run's own
shape, plans for repeated shapes are reused, and dynamic batching, which
needs sizes before running, refuses such a model with the reason."""
import json

import numpy as np
import onnx
from onnx import TensorProto, helper

from test_instances import booked_bytes  # noqa: E402
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


def test_later_stages_are_booked(tmp_path):
    """The ledger holds what the stages planned during a run use, not only the
    stage before the cut; where that does not fit the model's memory limit,
    the run fails with the ledger's reason and gives the memory back."""
    add(tmp_path, "pos", {"max_batch_size": 0, "warmup": False})
    rows = 20000
    x = np.linspace(0.0, 1.0, rows * 4, dtype=np.float32).reshape(rows, 4)
    k = int((x > 0.5).sum())
    with serving(tmp_path) as port:
        status, reply = infer(port, "pos", x)
        assert status == 200, reply
        booked = booked_bytes(port)
        # The stage after NonZero holds its indices, int64 [k, 2] and [2, k],
        # at the least: the stage before it (a [rows, 4] mask) holds far less.
        assert booked >= 16 * k, (booked, k)
    with serving(tmp_path, "--model-memory-limit", str(booked // 2)) as port:
        status, reply = infer(port, "pos", x)
        assert status == 500, reply
        assert "asked for" in reply["error"] and "is free" in reply["error"], reply
        assert booked_bytes(port) <= booked // 2
        small = np.array([[0.9, 0.1, 0.7, 0.2]], np.float32)
        status, reply = infer(port, "pos", small)  # a small run still fits
        assert status == 200, reply
        np.testing.assert_allclose(reply["outputs"][0]["data"], [0.9, 0.7])
