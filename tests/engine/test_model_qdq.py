"""The QDQ rewrite (src/engine/model_qdq.c) on random patterns: a MatMul,
Gemm, Conv, Add or Mul between QuantizeLinear/DequantizeLinear pairs, with
int8 and uint8 activations and weights, per-tensor and per-channel scales,
biases at the scale the integer ops assume and at another, quantised and
float outputs. Whether or not the rewrite takes a pattern, gpusrv must
agree with onnxruntime running the graph as written (its basic level):
within one output step where the output is quantised (the integer ops
round once where the graph rounds its float32 sum), else within 1e-3 of
the output's size; and both must refuse the same invalid ones."""
import os
import subprocess
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from gsonnx import GPUSRV

OPS = ["MatMul", "Gemm", "Conv", "Add", "Mul"]


def q_params(rng, inits, name, dtype, count=1):
    inits[name + "_s"] = rng.uniform(0.001, 0.1, count if count > 1 else ()).astype(np.float32)
    info = np.iinfo(dtype)
    inits[name + "_z"] = rng.integers(info.min, info.max + 1, count if count > 1 else ()).astype(dtype)


def random_pattern(rng, op):
    """(model, input, output step or 0 for a float output)."""
    act = rng.choice([np.uint8, np.int8])
    wt = rng.choice([np.uint8, np.int8])
    inits, nodes = {}, []
    shape = {"Conv": [2, 4, 6, 6], "Add": [3, 5], "Mul": [3, 5]}.get(op, [3, 8])
    q_params(rng, inits, "x", act)
    nodes += [helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"]),
              helper.make_node("DequantizeLinear", ["xq", "x_s", "x_z"], ["xf"])]
    w_shape = {"Conv": [4, 4, 3, 3], "Add": [5], "Mul": [5]}.get(op, [8, 7])
    axis = 0 if op in ("Conv", "Add", "Mul") else int(rng.integers(0, 2))
    info = np.iinfo(wt)
    inits["w"] = rng.integers(info.min, info.max + 1, w_shape).astype(wt)
    per_channel = bool(rng.integers(0, 2)) and op not in ("Add", "Mul")
    q_params(rng, inits, "w", wt, w_shape[axis] if per_channel else 1)
    nodes.append(helper.make_node("DequantizeLinear", ["w", "w_s", "w_z"], ["wf"],
                                  **({"axis": axis} if per_channel else {})))
    inputs = ["xf", "wf"]
    attrs = {"Gemm": {"transB": int(rng.integers(0, 2))}, "Conv": {"pads": [1, 1, 1, 1]}}.get(op, {})
    if op in ("Gemm", "Conv") and rng.integers(0, 2):
        n = w_shape[0] if op == "Conv" or attrs.get("transB") else w_shape[1]
        inits["b"] = rng.integers(-500, 500, n).astype(np.int32)
        scale = inits["x_s"] * inits["w_s"]
        if rng.integers(0, 3) == 0 or np.size(scale) not in (1, n):  # not what the ops assume
            scale = rng.uniform(0.0001, 0.01, n)
        inits["b_s"] = np.broadcast_to(np.float32(scale), (n,)).astype(np.float32).copy()
        nodes.append(helper.make_node("DequantizeLinear", ["b", "b_s"], ["bf"], axis=0))
        inputs.append("bf")
    nodes.append(helper.make_node(op, inputs, ["y"], **attrs))
    step = 0.0
    if rng.integers(0, 3) > 0:
        q_params(rng, inits, "y", act)
        nodes += [helper.make_node("QuantizeLinear", ["y", "y_s", "y_z"], ["yq"]),
                  helper.make_node("DequantizeLinear", ["yq", "y_s", "y_z"], ["out"])]
        step = float(inits["y_s"])
    else:
        nodes.append(helper.make_node("Identity", ["y"], ["out"]))
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    return model, (rng.standard_normal(shape) * 3).astype(np.float32), step


@pytest.mark.parametrize("seed", range(4))
def test_random_qdq_patterns_agree_with_onnxruntime(seed):
    rng = np.random.default_rng(seed)
    checked = fused = 0
    for i in range(30):
        op = OPS[i % len(OPS)]
        model, x, step = random_pattern(rng, op)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.onnx")
            onnx.save(model, path)
            np.save(os.path.join(d, "x.npy"), x)
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            so.log_severity_level = 4
            try:
                want = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(
                    None, {"x": x})[0]
            except Exception:  # noqa: BLE001 - onnxruntime refuses the pattern
                want = None
            p = subprocess.run([GPUSRV, "model", "run", path, "-i", f"x={d}/x.npy", "-o", f"{d}/o",
                                "--report"], capture_output=True, text=True, timeout=60)
            assert p.returncode in (0, 1) and "Sanitizer" not in p.stderr, p.stderr
            assert (want is None) == (p.returncode == 1), (op, p.stderr)
            if want is None:
                continue
            got = np.load(f"{d}/o/out.npy")
            planned = int(p.stdout.split("plan: ")[1].split(" nodes")[0])
            fused += planned < len(model.graph.node)
        tol = step * 1.01 if step else 1e-3 * (np.abs(want).max() + 1)
        assert np.abs(got - want).max() <= tol, (op, seed, i)
        checked += 1
    assert checked >= 20  # most patterns are valid and compared
    assert fused >= 5  # and the rewrite took a good part of them
