"""`gpusrv model quantize`: static quantisation calibrated on .npy data into a
QDQ model. The file must pass the ONNX checker and run in onnxruntime; the
quantised model's outputs must stay near the float model's (the error
quantisation makes); gpusrv must agree with onnxruntime on the quantised
file; the digits demo keeps 95% accuracy; and bad requests are refused
with a message.

Tolerance against onnxruntime (which runs the QDQ graph as written, its
basic level): gpusrv runs the patterns as integer ops, whose float32
requantisation may round a value to the neighbouring step, and a step in
one layer moves the next; the largest difference must stay within half of
the largest error quantisation itself makes, and the mean within a tenth
of its mean."""
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from gsonnx import GPUSRV, load_outputs, run_gpusrv
import models

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def quantize(src, dst, calib, *extra):
    args = [GPUSRV, "model", "quantize", src, "-o", dst]
    for c in calib:
        args += ["--calibrate", c]
    return subprocess.run(args + list(extra), capture_output=True, text=True, timeout=300)


def ort_run(path, feeds, level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_quantised_model_is_valid_and_close(tmp_path, name, per_channel, method):
    src, dst = str(tmp_path / "fp32.onnx"), str(tmp_path / "int8.onnx")
    onnx.save(models.BUILDERS[name](), src)
    calib = np.concatenate([models.example_input(name, 8, seed=s) for s in range(4)])
    np.save(tmp_path / "calib.npy", calib)
    p = quantize(src, dst, [str(tmp_path / "calib.npy")], "--method", method,
                 *(["--per-channel"] if per_channel else []))
    assert p.returncode == 0, p.stderr
    assert "quantized" in p.stdout
    model = onnx.load(dst)
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    x = models.example_input(name, 8, seed=11)
    want = ort_run(dst, {"x": x})
    ort_run(dst, {"x": x}, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)  # its int8 kernels take it
    fp32 = ort_run(src, {"x": x})
    r = run_gpusrv(dst, {"x": x}, str(tmp_path))
    assert r.returncode == 0, r.stderr
    got = load_outputs(str(tmp_path), [model.graph.output[0].name])[model.graph.output[0].name]
    quant_error, ours = np.abs(want - fp32), np.abs(got - want)
    print(f"{name} {method} per_channel={per_channel}: |gpusrv - onnxruntime| max "
          f"{ours.max():.5f} mean {ours.mean():.6f}; |quantised - float| max "
          f"{quant_error.max():.5f} mean {quant_error.mean():.6f}")
    assert 0 < quant_error.max() < 0.1 * np.abs(fp32).max() + 0.05
    assert ours.max() <= 0.5 * quant_error.max()
    assert ours.mean() <= 0.1 * quant_error.mean()


def test_weights_are_int8_and_planned_as_integer_ops(tmp_path):
    src, dst = str(tmp_path / "fp32.onnx"), str(tmp_path / "int8.onnx")
    onnx.save(models.mlp(), src)
    np.save(tmp_path / "calib.npy", models.example_input("mlp", 32))
    assert quantize(src, dst, [str(tmp_path / "calib.npy")]).returncode == 0
    model = onnx.load(dst)
    inits = {i.name: i for i in model.graph.initializer}
    weights = [i for n, i in inits.items() if n.endswith("/gsq/quantized")]
    assert weights and all(i.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.INT32)
                           for i in weights)
    assert not any(n in inits for n in ("w0", "w1", "wo"))  # the float weights are gone
    r = run_gpusrv(dst, {"x": models.example_input("mlp", 2)}, str(tmp_path), extra=["--report"])
    assert r.returncode == 0, r.stderr
    planned = int(r.stdout.split("plan: ")[1].split(" nodes")[0])
    assert planned < len(model.graph.node)  # the MatMul and Gemm patterns became integer ops


def test_digits_accuracy_quantised_by_gpusrv(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "models", "digits"))
    from train import held_out_split
    x_train, x_test, _, y_test = held_out_split()
    np.save(tmp_path / "calib.npy", x_train)
    dst = str(tmp_path / "digits.int8.onnx")
    src = os.path.join(ROOT, "models", "digits", "1", "model.onnx")
    p = quantize(src, dst, [f"pixels={tmp_path / 'calib.npy'}"], "--per-channel")
    assert p.returncode == 0, p.stderr
    r = run_gpusrv(dst, {"pixels": x_test}, str(tmp_path))
    assert r.returncode == 0, r.stderr
    probs = load_outputs(str(tmp_path), ["probs"])["probs"]
    accuracy = float((probs.argmax(axis=1) == y_test).mean())
    ort_accuracy = float((ort_run(dst, {"pixels": x_test}).argmax(axis=1) == y_test).mean())
    print(f"digits quantised by gpusrv: accuracy {accuracy:.4f} through gpusrv, "
          f"{ort_accuracy:.4f} through onnxruntime")
    assert accuracy >= 0.95 and ort_accuracy >= 0.95


def test_refusals_say_what_is_wrong(tmp_path):
    src = str(tmp_path / "fp32.onnx")
    onnx.save(models.mlp(), src)
    good = tmp_path / "calib.npy"
    np.save(good, models.example_input("mlp", 4))
    dst = str(tmp_path / "out.onnx")
    p = quantize(src, dst, [])
    assert p.returncode == 2 and "--calibrate" in p.stderr
    p = quantize(src, dst, [str(good)], "--method", "median")
    assert p.returncode == 2 and "minmax, percentile or entropy" in p.stderr
    p = quantize(src, dst, [f"y={good}"])
    assert p.returncode == 2 and "names no input" in p.stderr
    np.save(tmp_path / "ints.npy", np.zeros((4, 256), np.int64))
    p = quantize(src, dst, [str(tmp_path / "ints.npy")])
    assert p.returncode == 1 and "int64" in p.stderr and "float32" in p.stderr
    np.save(tmp_path / "short.npy", np.zeros((4, 100), np.float32))
    p = quantize(src, dst, [str(tmp_path / "short.npy")])
    assert p.returncode == 1 and not os.path.exists(dst), p.stderr
    # A model with no Conv, MatMul or Gemm to quantise.
    relu = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])], "r",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 256])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 256])]),
        opset_imports=[onnx.helper.make_opsetid("", 17)])
    relu.ir_version = 8
    onnx.save(relu, str(tmp_path / "relu.onnx"))
    p = quantize(str(tmp_path / "relu.onnx"), dst, [str(good)])
    assert p.returncode == 1 and "nothing to quantise" in p.stderr
    assert not os.path.exists(dst)


def test_external_data_is_refused(tmp_path):
    """An initializer in external data names a file beside the model: a
    quantised copy written elsewhere would lose it, so quantize refuses."""
    src, dst = str(tmp_path / "ext.onnx"), str(tmp_path / "out" / "int8.onnx")
    os.makedirs(tmp_path / "out")
    onnx.save(models.mlp(), src, save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.data", size_threshold=0)
    np.save(tmp_path / "calib.npy", models.example_input("mlp", 4))
    p = quantize(src, dst, [str(tmp_path / "calib.npy")])
    assert p.returncode == 1 and "external data" in p.stderr, p.stderr
    assert not os.path.exists(dst)
