"""float64 end to end (issue 22): the neural-network ops computed in double
on the CPU (hal/cpu/ops/k_nn_f64.c), and on a device with fp64 (PoCL's
opencl0) every op of a float64 model run there, by the float64 build of the
device kernels (hal/devops/op_kernels.h with GS_REAL_F64).

The references are onnxruntime where it has the op in double, and otherwise
the ONNX project's own reference implementation (onnx.reference), which
computes in numpy at the inputs' precision."""
import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from gsonnx import (DEVICE, KERNEL_DEVICES, cpu_fallback_ops, load_outputs, make_model,
                    run_gpusrv)

RNG = np.random.default_rng(22)
X4 = RNG.standard_normal((2, 4, 7, 7))


def randn(*shape):
    return RNG.standard_normal(shape)


# op -> (node, graph inputs, initializers); every tensor float64.
CASES = {
    "MatMul": (helper.make_node("MatMul", ["x", "w"], ["y"]),
               {"x": randn(2, 3, 5)}, {"w": randn(5, 4)}),
    "Gemm": (helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0),
             {"x": randn(3, 5)}, {"w": randn(4, 5), "c": randn(4)}),
    "Conv": (helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 0, 1, 2], strides=[2, 1],
                              dilations=[1, 2], group=2),
             {"x": X4}, {"w": randn(6, 2, 3, 3), "b": randn(6)}),
    "ConvTranspose": (helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2],
                                       pads=[1, 1, 0, 0]),
                      {"x": X4}, {"w": randn(4, 3, 3, 3), "b": randn(3)}),
    "MaxPool": (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], pads=[1, 1, 1, 1],
                                 strides=[2, 2]), {"x": X4}, {}),
    "AveragePool": (helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3],
                                     pads=[1, 1, 1, 1], count_include_pad=1), {"x": X4}, {}),
    "LpPool": (helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=3), {"x": X4}, {}),
    "GlobalAveragePool": (helper.make_node("GlobalAveragePool", ["x"], ["y"]), {"x": X4}, {}),
    "GlobalMaxPool": (helper.make_node("GlobalMaxPool", ["x"], ["y"]), {"x": X4}, {}),
    "BatchNormalization": (helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"]),
                           {"x": X4}, {"s": randn(4), "b": randn(4), "m": randn(4),
                                       "v": RNG.random(4) + 0.5}),
    "LayerNormalization": (helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-2),
                           {"x": X4}, {"s": randn(7, 7), "b": randn(7, 7)}),
    "Softmax": (helper.make_node("Softmax", ["x"], ["y"], axis=1), {"x": X4}, {}),
    "LogSoftmax": (helper.make_node("LogSoftmax", ["x"], ["y"]), {"x": X4}, {}),
    # Compensated on the device as on the CPU (docs/precision.md).
    "CumSum": (helper.make_node("CumSum", ["x", "axis"], ["y"], reverse=1),
               {"x": randn(3, 500)}, {"axis": np.array(1, np.int64)}),
    # Divided by 3 exactly: float32's 1/3 would be 3e-8 off.
    "Mean": (helper.make_node("Mean", ["a", "b", "c"], ["y"]),
             {"a": randn(4, 9), "b": randn(4, 9), "c": randn(1, 9)}, {}),
    # Rows of 64 and more: on a GPU (and on opencl0 under GPUSRV_ROW_GROUPS=1,
    # as ctest runs it) a work-group reduces each row.
    "Softmax rows": (helper.make_node("Softmax", ["x"], ["y"]), {"x": randn(3, 300)}, {}),
    "LayerNormalization rows": (helper.make_node("LayerNormalization", ["x", "s"], ["y"]),
                                {"x": randn(3, 256)}, {"s": randn(256)}),
}


def reference(model, feeds):
    """onnxruntime's outputs where it runs the model in double, else onnx.reference's."""
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)
    except Exception as e:  # NOT_IMPLEMENTED: onnxruntime has no float64 kernel for the op
        assert "NOT_IMPLEMENTED" in str(e), e
        return ReferenceEvaluator(model).run(None, feeds)


def run(model, feeds, env=None, extra=()):
    """gpusrv's outputs and the ops its plan report says ran on the CPU instead."""
    names = [o.name for o in model.graph.output]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        onnx.save(model, path)
        p = run_gpusrv(path, feeds, d, extra=("--report", *extra), env=env)
        assert p.returncode == 0, p.stderr
        out = load_outputs(d, names)
    return [out[n] for n in names], cpu_fallback_ops(p.stdout)


def check(model, feeds, rtol=1e-11, atol=1e-12):
    got, fell_back = run(model, feeds)
    for g, w in zip(got, reference(model, feeds)):
        assert g.dtype == np.float64 and g.shape == w.shape, (g.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return fell_back


@pytest.mark.parametrize("op", sorted(CASES))
def test_the_op_computes_in_float64(op):
    node, inputs, consts = CASES[op]
    fell_back = check(make_model([node], inputs, consts, outputs=[("y", np.float64)]), inputs)
    if DEVICE in KERNEL_DEVICES:
        assert node.op_type not in fell_back, f"{op} ran on the CPU instead of {DEVICE}"


def test_conv_transpose_with_groups():
    """Against each group run alone (neither onnxruntime, in double, nor
    onnx.reference takes a grouped ConvTranspose)."""
    w, b = randn(4, 3, 2, 3), randn(6)
    attrs = {"strides": [1, 2], "output_padding": [0, 1]}

    def model(group, x, w, b):
        node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=group, **attrs)
        return make_model([node], {"x": x}, {"w": w, "b": b}, outputs=[("y", np.float64)])
    (got,), fell_back = run(model(2, X4, w, b), {"x": X4})
    want = np.concatenate([ReferenceEvaluator(model(1, X4[:, 2 * g:2 * g + 2], w[2 * g:2 * g + 2],
                                                    b[3 * g:3 * g + 3])).run(
        None, {"x": X4[:, 2 * g:2 * g + 2]})[0] for g in range(2)], axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)
    if DEVICE in KERNEL_DEVICES:
        assert "ConvTranspose" not in fell_back


def test_layer_norm_keeps_its_statistics_in_float32():
    """LayerNormalization's optional Mean and InvStdDev outputs are of
    stash_type's type (float32 by default) while Y is float64. The device
    kernel writes its outputs in one type: on a device this runs on the CPU,
    and the plan's report must say so."""
    x = randn(3, 5, 8)
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=-1)
    model = make_model([node], {"x": x}, {"s": randn(8), "b": randn(8)},
                       outputs=[("y", np.float64), ("mean", np.float32), ("inv", np.float32)])
    got, fell_back = run(model, {"x": x})
    want = ReferenceEvaluator(model).run(None, {"x": x})
    if DEVICE in KERNEL_DEVICES:
        assert "LayerNormalization" in fell_back
    assert [g.dtype for g in got] == [np.float64, np.float32, np.float32]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-11, atol=1e-12)
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w.reshape(g.shape), rtol=1e-6, atol=1e-7)


def test_digits_float32_cannot_hold_survive():
    """Values 1e8 apart by thousandths: float32 (spacing 8 there) makes them one
    number and the normalised row zeros; double keeps them."""
    x = (1e8 + np.arange(12) * 1e-3).reshape(2, 6)
    scale, bias = np.ones(6), np.zeros(6)
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], epsilon=0.0)
    model = make_model([node], {"x": x}, {"s": scale, "b": bias}, outputs=[("y", np.float64)])
    (got,), _ = run(model, {"x": x})
    centred = x - x.mean(axis=1, keepdims=True)
    want = centred / np.sqrt((centred ** 2).mean(axis=1, keepdims=True))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.abs(got).min() > 0.2  # in float32 every value would be 0


def classifier():
    """A small CNN and its head, float64 throughout."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s", "bn_b", "m", "v"], ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"]),
        helper.make_node("Tanh", ["c2"], ["t2"]),
        helper.make_node("GlobalAveragePool", ["t2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"]),
    ]
    consts = {"w1": randn(8, 3, 3, 3) * 0.3, "b1": randn(8), "s": RNG.random(8) + 0.5,
              "bn_b": randn(8), "m": randn(8) * 0.1, "v": RNG.random(8) + 0.5,
              "w2": randn(16, 8, 3, 3) * 0.2, "wf": randn(10, 16), "bf": randn(10)}
    # Values float32 holds exactly, so that the model stored in float32 is the same model.
    consts = {k: v.astype(np.float32).astype(np.float64) for k, v in consts.items()}
    x = RNG.standard_normal((4, 3, 16, 16)).astype(np.float32).astype(np.float64)
    return make_model(nodes, {"x": x}, consts, outputs=[("y", np.float64)]), {"x": x}


def test_a_float64_model_runs_wholly_where_it_was_placed():
    model, feeds = classifier()
    fell_back = check(model, feeds)
    if DEVICE in KERNEL_DEVICES:
        assert not fell_back, f"ran on the CPU instead of {DEVICE}: {sorted(fell_back)}"


@pytest.mark.skipif(DEVICE != "opencl0", reason="OpenCL's float64 program is switched off here")
def test_without_float64_kernels_the_cpu_runs_them():
    """GPUSRV_OPENCL_FP64=0 stands for a device without cl_khr_fp64: the plan
    then runs float64 on the CPU, says so, and the results are the same."""
    model, feeds = classifier()
    got, fell_back = run(model, feeds, env={"GPUSRV_OPENCL_FP64": "0"})
    assert {"Conv", "Gemm", "Softmax", "Tanh"} <= fell_back, fell_back
    np.testing.assert_allclose(got[0], reference(model, feeds)[0], rtol=1e-11, atol=1e-12)
    # Ops that only move elements need no fp64: they stay on the device.
    x = randn(3, 5)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
             helper.make_node("Concat", ["t", "t"], ["c"], axis=0),
             helper.make_node("Exp", ["c"], ["y"])]
    model = make_model(nodes, {"x": x}, outputs=[("y", np.float64)])
    (got,), fell_back = run(model, {"x": x}, env={"GPUSRV_OPENCL_FP64": "0"})
    assert fell_back == {"Exp"}, fell_back
    np.testing.assert_allclose(got, np.exp(np.concatenate([x.T, x.T])), rtol=1e-15)


def as_float32(model):
    """The same graph with every float64 tensor declared and stored as float32."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        if t.data_type == onnx.TensorProto.DOUBLE:
            t.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t).astype(np.float32),
                                                    t.name))
    for v in list(m.graph.input) + list(m.graph.output):
        if v.type.tensor_type.elem_type == onnx.TensorProto.DOUBLE:
            v.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    return m


def test_precision_fp64_computes_a_float32_model_in_double():
    """`--precision fp64`: weights and tensors widened once, every op in
    double, the float32 outputs handed back as float32. (x + 1e8) - 1e8 is 0
    or 8 in float32 and x in double; the classifier matches the float64
    reference to float32's last bit."""
    x = np.linspace(-2, 2, 16).astype(np.float32).reshape(4, 4)
    nodes = [helper.make_node("Add", ["x", "big"], ["a"]), helper.make_node("Sub", ["a", "big"], ["y"])]
    model = make_model(nodes, {"x": x}, {"big": np.array(1e8, np.float32)})
    (plain,), _ = run(model, {"x": x})
    (wide,), fell_back = run_precision(model, {"x": x})
    assert wide.dtype == np.float32
    np.testing.assert_array_equal(wide, x)
    assert not np.array_equal(plain, x)  # float32 itself loses x
    model64, feeds64 = classifier()
    model32 = as_float32(model64)
    feeds32 = {"x": feeds64["x"].astype(np.float32)}
    (got,), fell_back = run_precision(model32, feeds32)
    want = ReferenceEvaluator(model64).run(None, {"x": feeds32["x"].astype(np.float64)})[0]
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=2e-7, atol=1e-9)
    if DEVICE in KERNEL_DEVICES:
        assert not fell_back, f"ran on the CPU instead of {DEVICE}: {sorted(fell_back)}"


def run_precision(model, feeds):
    return run(model, feeds, extra=("--precision", "fp64"))


def test_a_bad_precision_is_refused_with_the_choices():
    x = np.ones((2, 2), np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        onnx.save(make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": x}), path)
        p = run_gpusrv(path, {"x": x}, d, extra=("--precision", "fp128"))
    assert p.returncode == 2 and "fp32, fp16, bf16 or fp64" in p.stderr, (p.returncode, p.stderr)
