"""Every op of the engine against onnxruntime: shapes, attributes, types,
broadcasting and edge cases (empty tensors, size-1 dims, negative axes)."""
import numpy as np
import onnx
import pytest

from onnx import helper

from gsonnx import (DEVICE, KERNEL_DEVICES, check_model, check_op, load_outputs, make_model,
                    run_gpusrv)

rng = np.random.default_rng(1234)


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def i64(*shape, lo=-5, hi=5):
    return rng.integers(lo, hi, size=shape).astype(np.int64)


# ---- unary -----------------------------------------------------------------------

UNARY = ["Relu", "Sigmoid", "Tanh", "Erf", "Neg", "Abs", "Exp"]


@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("shape", [(3, 4), (2, 1, 5), (7,), (), (0, 3)])
def test_unary_float32(op, shape):
    check_op(op, {"x": f32(*shape)})


@pytest.mark.parametrize("op", ["Sqrt", "Log"])
def test_unary_positive(op):
    check_op(op, {"x": f32(4, 5, lo=0.1, hi=5)})


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Neg", "Abs"])
def test_unary_float16(op):
    check_op(op, {"x": f32(6, 7).astype(np.float16)})


def test_unary_float64():
    # On devices with fp64 the float64 build of the kernels runs it.
    check_op("Exp", {"x": f32(3, 3).astype(np.float64)})


@pytest.mark.parametrize("op", ["Relu", "Neg", "Abs"])
def test_unary_int(op):
    check_op(op, {"x": rng.integers(-100, 100, size=(4, 5)).astype(np.int32)})


def test_leaky_relu():
    check_op("LeakyRelu", {"x": f32(4, 6)}, {"alpha": 0.2})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    check_op("Gelu", {"x": f32(3, 8)}, {"approximate": approximate}, opset=20)


def test_not():
    check_op("Not", {"x": rng.integers(0, 2, size=(3, 4)).astype(bool)})


@pytest.mark.parametrize("to,dt", [(6, np.int32), (7, np.int64), (10, np.float16), (9, np.bool_),
                                   (11, np.float64)])
def test_cast_from_float(to, dt):
    x = f32(4, 5, lo=-50, hi=50)
    check_op("Cast", {"x": x}, {"to": to}, outputs=[("y", dt)])


def test_cast_int_to_float():
    check_op("Cast", {"x": i64(3, 4)}, {"to": 1}, outputs=[("y", np.float32)])


@pytest.mark.parametrize("src,to", [(np.int64, 1), (np.uint64, 1), (np.int32, 1), (np.uint8, 1),
                                    (np.int8, 1), (np.float64, 1), (np.float32, 11)])
def test_cast_rounds_once(tmp_path, src, to):
    """The casts with loops of their own (a quantised model's int32 and
    8-bit tensors made float) give the nearest float, as numpy and
    onnxruntime do, exactly: 2**60 + 2**36 + 1 is just above a halfway
    point of float32, which a detour through double would round down to."""
    rng = np.random.default_rng(60)  # not the module's: the other tests keep their data
    if np.issubdtype(src, np.integer):
        info = np.iinfo(src)
        x = rng.integers(info.min, info.max, size=37, endpoint=True, dtype=src)
        if src == np.int64:
            x[:3] = [2**60 + 2**36 + 1, -(2**60 + 2**36 + 1), 2**53 + 1]
        if src == np.uint64:
            x[:2] = [2**60 + 2**36 + 1, 2**63 + 2**39 + 1]
        if src == np.int32:
            x[:2] = [2**24 + 1, 2**31 - 1]
    else:
        x = rng.standard_normal(37).astype(src) * 1e3
        x[:3] = [np.nan, np.inf, -np.inf]
    dt = {1: np.float32, 11: np.float64}[to]
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=to)], {"x": x}, {}, [("y", dt)],
                       17)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    p = run_gpusrv(path, {"x": x}, str(tmp_path))
    assert p.returncode == 0, p.stderr
    got = load_outputs(str(tmp_path), ["y"])["y"]
    np.testing.assert_array_equal(got, x.astype(dt))


def test_clip():
    x = f32(5, 6)
    check_op("Clip", {"x": x}, consts={"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)})
    check_op("Clip", {"x": x}, consts={"lo": np.array(-0.5, np.float32)})
    check_op("Clip", {"x": x}, consts={"hi": np.array(0.1, np.float32)}, input_names=["x", "", "hi"])


def test_identity_and_dropout():
    check_op("Identity", {"x": f32(2, 3)})
    check_op("Dropout", {"x": f32(2, 3)}, outputs=[("y", np.float32), ("mask", np.bool_)])


# ---- binary, broadcasting ----------------------------------------------------------

BROADCASTS = [((3, 4), (4,)), ((2, 3, 4), (3, 1)), ((3, 4), ()), ((1, 4), (3, 1)),
              ((2, 1, 3), (2, 5, 1)), ((0, 4), (4,)), ((5,), (5,)),
              # one vector per [image, channel] or per channel, along the third axis (the
              # CPU's Mul takes these rows of a blocked layout's per-channel scale at once)
              ((2, 3, 4, 8), (2, 3, 1, 8)), ((2, 3, 4, 8), (1, 3, 1, 8)), ((2, 3, 1, 8), (2, 3, 4, 8)),
              ((1, 3, 1, 8), (2, 3, 4, 8)), ((1, 3, 4, 8), (1, 3, 1, 8)),
              ((4, 16, 64, 8), (4, 16, 1, 8))]  # the last spread over the threads


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("a,b", BROADCASTS)
def test_arith_float32(op, a, b):
    y = f32(*b, lo=0.5, hi=2.0) if op == "Div" else f32(*b)
    check_op(op, {"a": f32(*a), "b": y})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul"])
def test_arith_int64(op):
    check_op(op, {"a": i64(3, 4), "b": i64(4)})


def test_int_division_truncates():
    a = np.array([7, -7, 7, -7, 0], np.int32)
    b = np.array([2, 2, -2, -2, 3], np.int32)
    check_op("Div", {"a": a, "b": b})


@pytest.mark.parametrize("op,what", [("Div", "division"), ("Mod", "modulo")])
@pytest.mark.parametrize("dt", [np.int32, np.int64])
def test_int_division_by_zero_is_an_error(tmp_path, dt, op, what):
    # On a device the kernel reports it through the stream's status.
    from gsonnx import make_model, run_gpusrv
    import onnx
    from onnx import helper
    feeds = {"a": np.array([4, 5, 6], dt), "b": np.array([1, 0, 2], dt)}
    model = make_model([helper.make_node(op, ["a", "b"], ["y"], name="div0")], feeds,
                       outputs=[("y", dt)])
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    p = run_gpusrv(path, feeds, str(tmp_path), extra=["--report"])
    assert p.returncode == 1
    assert f"node div0 ({op}): integer {what} by zero" in p.stderr, p.stderr
    if DEVICE in KERNEL_DEVICES:  # found by the device's kernel, not a CPU fallback
        assert "instead" not in p.stdout, p.stdout


def test_pow():
    check_op("Pow", {"a": f32(3, 4, lo=0.1, hi=3)}, consts={"b": np.array([0.5, 2, 3, -1], np.float32)})


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater"])
def test_compare(op):
    a = rng.integers(0, 3, size=(3, 4)).astype(np.float32)
    b = rng.integers(0, 3, size=(4,)).astype(np.float32)
    check_op(op, {"a": a, "b": b}, outputs=[("y", np.bool_)])
    check_op(op, {"a": i64(2, 3), "b": i64(1, 3)}, outputs=[("y", np.bool_)])


@pytest.mark.parametrize("op", ["Min", "Max"])
def test_min_max_variadic(op):
    check_op(op, {"a": f32(3, 1), "b": f32(1, 4), "c": f32(4)})
    check_op(op, {"a": f32(2, 3)})


def test_where():
    cond = rng.integers(0, 2, size=(3, 1)).astype(bool)
    check_op("Where", {"c": cond, "x": f32(3, 4), "y_": f32(4)}, outputs=[("y", np.float32)])
    check_op("Where", {"c": rng.integers(0, 2, size=(2, 5)).astype(bool), "x": i64(2, 5), "y_": i64(1)},
             outputs=[("y", np.int64)])


# ---- matrix products -------------------------------------------------------------------

@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm(ta, tb):
    a = f32(4, 3) if ta else f32(3, 4)
    b = f32(5, 4) if tb else f32(4, 5)
    check_op("Gemm", {"a": a}, {"transA": ta, "transB": tb, "alpha": 0.5, "beta": 2.0},
             consts={"b": b, "c": f32(5)})
    check_op("Gemm", {"a": a, "b": b, "c": f32(3, 5)}, {"transA": ta, "transB": tb})


# A few rows against a B of over 256K values: on the CPU, the product that
# reads B once instead of packing it on every call (sgemm_few_rows.c; up to
# 8 rows, 4 where B is transposed). The odd sizes reach its edges: k not a
# multiple of 4 or 8, columns not of 16, 8 or 2.
@pytest.mark.parametrize("rows", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("tb", [0, 1])
def test_gemm_few_rows_of_a_large_b(rows, tb):
    k, n = 515, 517
    b = f32(n, k) if tb else f32(k, n)
    # Sums of 515 products of up to 4 in magnitude: where one cancels to near
    # zero, float32 rounding on either side reaches 1e-5 absolute.
    check_op("Gemm", {"a": f32(rows, k)}, {"transB": tb, "alpha": 0.5, "beta": 2.0},
             consts={"b": b, "c": f32(n)}, atol=1e-4)


def test_matmul_few_rows_of_a_large_b():
    # Two by three rows: one GEMM of 6 rows against the shared weights.
    check_op("MatMul", {"a": f32(2, 3, 700)}, consts={"b": f32(700, 401)}, atol=1e-4)


def test_gemm_without_c():
    check_op("Gemm", {"a": f32(2, 7), "b": f32(7, 3)})


def test_gemm_of_an_empty_sum_is_beta_c(tmp_path):
    # Against the ONNX definition, Y = alpha A B + beta C: onnxruntime 1.20
    # returns C unscaled when K is 0, so numpy is the reference here.
    from gsonnx import load_outputs, make_model, run_gpusrv
    import onnx
    from onnx import helper
    feeds = {"a": f32(2, 0), "b": f32(0, 3), "c": f32(3)}
    model = make_model([helper.make_node("Gemm", ["a", "b", "c"], ["y"], beta=0.5)], feeds)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    p = run_gpusrv(path, feeds, str(tmp_path))
    assert p.returncode == 0, p.stderr
    got = load_outputs(str(tmp_path), ["y"])["y"]
    np.testing.assert_allclose(got, np.broadcast_to(0.5 * feeds["c"], (2, 3)), rtol=1e-6)


@pytest.mark.parametrize("a,b", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 2)),
                                 ((4,), (4, 3)), ((3, 4), (4,)), ((2, 3, 4), (2, 4, 6)),
                                 ((1, 0), (0, 3)), ((1, 5, 3, 4), (2, 1, 4, 3)),
                                 ((3, 1, 2, 2, 8), (1, 4, 1, 8, 3))])
def test_matmul(a, b):
    check_op("MatMul", {"a": f32(*a), "b": f32(*b)})


@pytest.mark.parametrize("a", [(2, 3, 4), (2, 2, 3, 4), (3, 4)])
def test_matmul_add_relu_fused(a):
    # Batched products with a fused bias and ReLU run as one oneDNN matmul
    # with a post-op on the CPU; the bias broadcasts over every row.
    feeds = {"a": f32(*a)}
    nodes = [helper.make_node("MatMul", ["a", "w"], ["p"]),
             helper.make_node("Add", ["p", "bias"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    check_model(make_model(nodes, feeds, {"w": f32(4, 5), "bias": f32(5)}), feeds)


def test_matmul_int():
    # Integer GEMM is the CPU's: CLBlast and cuBLAS are used for float32.
    check_op("MatMul", {"a": i64(3, 4), "b": i64(4, 2)}, on_device=False)


# Einsum of two operands that is a batch of matrix products runs as products
# (k_einsum.c): labels in any order, transposed operands, broadcasting, a dot
# product and an outer product; a diagonal keeps the loop. Einsum is the
# CPU's on every device.
@pytest.mark.parametrize("equation,a,b", [
    ("bghid,bghjd->bghij", (2, 3, 2, 5, 8), (2, 3, 2, 6, 8)),   # MaxViT's attention
    ("bghij,bghjd->bghid", (2, 3, 2, 5, 6), (2, 3, 2, 6, 8)),
    ("bhqd,bkhd->bhqk", (2, 3, 4, 5), (2, 7, 3, 5)),            # labels out of order
    ("ij,kj->ki", (4, 9), (3, 9)),                              # B transposed, Y transposed
    ("...ij,...jk->...ik", (1, 4, 5), (3, 5, 2)),               # a batch broadcast
    ("i,i->", (17,), (17,)),                                    # a dot product
    ("i,j->ij", (3,), (4,)),                                    # an outer product
])
def test_einsum_as_products(equation, a, b):
    check_op("Einsum", {"a": f32(*a), "b": f32(*b)}, {"equation": equation}, on_device=False)


def test_einsum_of_an_empty_batch(tmp_path):
    # onnxruntime 1.20 dies of a division by zero here: numpy is the reference.
    a, b = f32(0, 3, 4), f32(0, 4, 2)
    model = make_model([helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij,bjk->bik")],
                       {"a": a, "b": b})
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    p = run_gpusrv(path, {"a": a, "b": b}, str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert load_outputs(str(tmp_path), ["y"])["y"].shape == (0, 3, 2)


def test_einsum_diagonal_keeps_the_loop():
    check_op("Einsum", {"a": f32(4, 4), "b": f32(4)}, {"equation": "ii,i->i"}, on_device=False)


# ---- convolution and pooling -------------------------------------------------------------

CONVS = [
    dict(x=(1, 3, 8, 8), w=(4, 3, 3, 3), attrs={}),
    dict(x=(2, 3, 9, 7), w=(6, 3, 3, 3), attrs={"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    dict(x=(1, 4, 10, 10), w=(4, 2, 3, 3), attrs={"group": 2, "dilations": [2, 2], "pads": [2, 1, 2, 1]}),
    dict(x=(1, 6, 7, 7), w=(6, 1, 3, 3), attrs={"group": 6, "pads": [1, 1, 1, 1]}),
    dict(x=(2, 8, 5, 5), w=(16, 8, 1, 1), attrs={}),
    dict(x=(1, 2, 11), w=(3, 2, 4), attrs={"strides": [3], "pads": [1, 2]}),
    dict(x=(1, 2, 4, 5, 6), w=(3, 2, 2, 3, 2), attrs={"pads": [1, 0, 1, 0, 1, 1]}),
    dict(x=(1, 3, 8, 7), w=(2, 3, 3, 3), attrs={"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    dict(x=(1, 3, 8, 7), w=(2, 3, 4, 4), attrs={"auto_pad": "SAME_LOWER"}),
    # A first convolution (3 channels in: NCHW straight into oneDNN) and
    # channel counts off oneDNN's block that its channels-last kernels take
    # on AVX-512 (NCHW <-> NHWC transposed by dnnl_conv.c), in 1, 2 and 3 dims.
    # Sums of 60 to 324 products of values up to 2 in size: two float32 sums
    # in other orders can differ by more than 1e-5 where the result is near 0.
    dict(x=(2, 3, 34, 30), w=(24, 3, 3, 3), attrs={"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    dict(x=(2, 20, 12, 11), w=(24, 20, 3, 3), attrs={"pads": [1, 1, 1, 1]}, atol=1e-4),
    dict(x=(2, 20, 40), w=(12, 20, 3), attrs={"pads": [1, 1]}, atol=1e-4),
    dict(x=(1, 12, 6, 7, 8), w=(20, 12, 3, 3, 3), attrs={}, atol=1e-4),
]


@pytest.mark.parametrize("case", CONVS, ids=range(len(CONVS)))
@pytest.mark.parametrize("bias", [False, True])
def test_conv(case, bias):
    consts = {"w": f32(*case["w"])}
    if bias:
        consts["b"] = f32(case["w"][0])
    check_op("Conv", {"x": f32(*case["x"])}, case["attrs"], consts=consts,
             atol=case.get("atol"))


@pytest.mark.parametrize("c_in, c_out", [(24, 24), (24, 116), (116, 24)])
def test_conv_off_block_channels_transposed_by_the_engine(c_in, c_out, tmp_path):
    """Where oneDNN's convolution reads or writes channels-last and the
    engine's tensor is NCHW, a side of up to 32 channels is transposed by
    the engine: oneDNN makes and runs no reorder of that activation (seen
    with ONEDNN_VERBOSE=2); a wider side keeps oneDNN's reorder. On a CPU
    whose oneDNN picks another layout there is nothing to see."""
    if DEVICE and DEVICE != "cpu0":
        pytest.skip("oneDNN runs the CPU device's convolutions")
    x, w = f32(2, c_in, 9, 8), f32(c_out, c_in, 3, 3)
    path = str(tmp_path / "m.onnx")
    onnx.save(make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                         {"x": x}, {"w": w}), path)
    p = run_gpusrv(path, {"x": x}, str(tmp_path), env={"ONEDNN_VERBOSE": "2"})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    conv = [l for l in lines if ",exec," in l and ",convolution," in l]
    assert len(conv) == 1, p.stdout[-2000:]
    if "src_f32::blocked:acdb" not in conv[0] or "dst_f32::blocked:acdb" not in conv[0]:
        pytest.skip(f"oneDNN chose another layout here: {conv[0][:200]}")
    reordered = {int(l.split(",")[-2].split("x")[1]) for l in lines
                 if ",reorder," in l and l.split(",")[-2].startswith("2x")}
    assert reordered == {c for c in (c_in, c_out) if c > 32}, p.stdout[-3000:]
    check_op("Conv", {"x": x}, {"pads": [1, 1, 1, 1]}, consts={"w": w}, atol=1e-4)


# Depthwise convolutions that the engine's own NCHW kernel takes
# (depthwise_conv.c: more than 32 channels, planes of 576 outputs or more):
# stride 1 and 2 windows of 3x3, dilation with uneven pads, strides 3 x 2 on
# a 3x2 window, a 5x5 window.
DEPTHWISE = [
    dict(x=(2, 40, 24, 24), k=(3, 3), attrs={"pads": [1, 1, 1, 1]}),
    dict(x=(1, 36, 50, 48), k=(3, 3), attrs={"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    dict(x=(1, 34, 30, 28), k=(5, 5), attrs={"pads": [4, 3, 2, 4], "dilations": [2, 2]}),
    dict(x=(1, 33, 80, 75), k=(3, 2), attrs={"pads": [0, 1, 2, 0], "strides": [3, 2]}),
    dict(x=(2, 48, 28, 28), k=(5, 5), attrs={"pads": [2, 2, 2, 2]}),
    dict(x=(1, 40, 61, 70), k=(3, 3), attrs={"pads": [1, 2, 0, 1], "strides": [2, 3]}),
    dict(x=(1, 40, 90, 90), k=(3, 3), attrs={"pads": [5, 5, 5, 5], "strides": [4, 4]}),
    dict(x=(1, 40, 60, 60), k=(3, 3), attrs={"pads": [3, 3, 3, 3], "strides": [2, 2],
                                             "dilations": [3, 3]}),
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=range(len(DEPTHWISE)))
@pytest.mark.parametrize("bias", [False, True])
def test_depthwise_conv(case, bias, tmp_path):
    """One filter per channel, against onnxruntime; on cpu0 no oneDNN
    convolution runs (ONEDNN_VERBOSE), so the engine's kernel did."""
    ch = case["x"][1]
    x, w = f32(*case["x"]), f32(ch, 1, *case["k"])
    attrs = {"group": ch, **case["attrs"]}
    consts = {"w": w, **({"b": f32(ch)} if bias else {})}
    check_op("Conv", {"x": x}, attrs, consts=consts, atol=1e-4)
    if DEVICE and DEVICE != "cpu0":
        return
    path = str(tmp_path / "m.onnx")
    onnx.save(make_model([helper.make_node("Conv", ["x", *consts], ["y"], **attrs)], {"x": x},
                         consts), path)
    p = run_gpusrv(path, {"x": x}, str(tmp_path), env={"ONEDNN_VERBOSE": "1"})
    assert p.returncode == 0, p.stderr
    assert ",convolution," not in p.stdout, p.stdout[-2000:]


def test_depthwise_conv_on_16_channels_stays_with_onednn(tmp_path):
    """The control of the test above: on 16 channels the engine's kernel does
    not take the window, and oneDNN's log says that it ran the convolution."""
    if DEVICE and DEVICE != "cpu0":
        pytest.skip("oneDNN runs convolutions on cpu0 only")
    x, w = f32(1, 16, 24, 24), f32(16, 1, 3, 3)
    path = str(tmp_path / "m.onnx")
    onnx.save(make_model([helper.make_node("Conv", ["x", "w"], ["y"], group=16,
                                           pads=[1, 1, 1, 1])], {"x": x}, {"w": w}), path)
    p = run_gpusrv(path, {"x": x}, str(tmp_path), env={"ONEDNN_VERBOSE": "1"})
    assert p.returncode == 0 and ",convolution," in p.stdout, p.stdout[-2000:]


@pytest.mark.parametrize("act", ["Relu", "Clip", "HardSwish", "Sigmoid"])
def test_depthwise_conv_with_its_activation(act):
    """The activation the plan fuses into the convolution, applied by the
    depthwise kernel (Sigmoid then Mul: SiLU)."""
    x, w, b = f32(2, 40, 24, 24), f32(40, 1, 3, 3), f32(40)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=40, pads=[1, 1, 1, 1])]
    consts = {"w": w, "b": b}
    if act == "Clip":
        consts.update(lo=np.array(0, np.float32), hi=np.array(6, np.float32))
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    elif act == "Sigmoid":
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    else:
        nodes.append(helper.make_node(act, ["c"], ["y"]))
    check_model(make_model(nodes, {"x": x}, consts), {"x": x}, atol=1e-4)


CONV_TRANSPOSES = [
    dict(x=(1, 3, 4, 4), w=(3, 2, 3, 3), attrs={}),
    dict(x=(2, 4, 5, 5), w=(4, 3, 3, 3), attrs={"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                 "output_padding": [1, 1]}),
    dict(x=(1, 4, 3, 3), w=(4, 2, 2, 2), attrs={"group": 2, "strides": [2, 2]}),
    dict(x=(1, 2, 6), w=(2, 3, 3), attrs={"dilations": [2]}),
]


@pytest.mark.parametrize("case", CONV_TRANSPOSES, ids=range(len(CONV_TRANSPOSES)))
def test_conv_transpose(case):
    out_ch = case["w"][1] * case["attrs"].get("group", 1)
    check_op("ConvTranspose", {"x": f32(*case["x"])}, case["attrs"],
             consts={"w": f32(*case["w"]), "b": f32(out_ch)})


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2]},
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 3], "dilations": [2, 1]},
])
def test_maxpool(attrs):
    check_op("MaxPool", {"x": f32(2, 3, 9, 8)}, attrs)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
])
def test_averagepool(attrs):
    check_op("AveragePool", {"x": f32(1, 2, 7, 7)}, attrs)


def test_pool_1d_and_global():
    check_op("MaxPool", {"x": f32(2, 3, 10)}, {"kernel_shape": [3], "strides": [2]})
    check_op("GlobalAveragePool", {"x": f32(2, 5, 4, 3)})
    check_op("GlobalAveragePool", {"x": f32(2, 3, 7, 9)})  # more than the 16 running sums
    check_op("GlobalMaxPool", {"x": f32(2, 5, 4, 3)})
    check_op("GlobalMaxPool", {"x": f32(1, 3, 17)})


def test_det():
    check_op("Det", {"x": f32(3, 4, 4)}, on_device=False)
    # float64: onnxruntime has no Det for it; numpy is the reference
    import os
    import tempfile
    from gsonnx import load_outputs, run_gpusrv
    x = f32(2, 2, 6, 6).astype(np.float64)
    node = helper.make_node("Det", ["x"], ["y"])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "det.onnx")
        onnx.save(make_model([node], {"x": x}, outputs=[("y", np.float64)]), path)
        assert run_gpusrv(path, {"x": x}, d).returncode == 0
        np.testing.assert_allclose(load_outputs(d, ["y"])["y"], np.linalg.det(x), rtol=1e-12)
    singular = np.array([[1, 2, 3], [2, 4, 6], [0, 1, 1]], np.float32)  # rows 0 and 1 in line
    check_op("Det", {"x": singular}, on_device=False)
    check_op("Det", {"x": f32(1, 1)}, on_device=False)
    with_nan = np.array([[0, 1], [np.nan, 1]], np.float32)  # a zero pivot before the NaN row
    check_op("Det", {"x": with_nan}, on_device=False)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3]},                                    # p = 2, the default
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "p": 1},
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1, "p": 3},
    {"kernel_shape": [2, 3], "dilations": [2, 1], "p": 2},
])
def test_lppool(attrs):
    check_op("LpPool", {"x": f32(2, 3, 7, 8)}, attrs, opset=18)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lppool(p):
    # p = 3 has no device reduction (ReduceL1 and ReduceL2 are the norms there)
    check_op("GlobalLpPool", {"x": f32(2, 4, 5, 6)}, {"p": p}, on_device=p <= 2)



# ---- normalisation and softmax -------------------------------------------------------------

def test_batchnorm():
    c = 4
    check_op("BatchNormalization", {"x": f32(2, c, 5, 3)},
             {"epsilon": 1e-3},
             consts={"s": f32(c), "b": f32(c), "m": f32(c), "v": f32(c, lo=0.5, hi=2)})


@pytest.mark.parametrize("axis,bias", [(-1, True), (1, True), (-1, False)])
def test_layernorm(axis, bias):
    x = f32(2, 3, 8)
    inner = int(np.prod(x.shape[axis:]))
    shape = x.shape[axis:]
    consts = {"s": f32(*shape)}
    if bias:
        consts["b"] = f32(*shape)
    assert inner > 0
    check_op("LayerNormalization", {"x": x}, {"axis": axis}, consts=consts)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax(op, axis):
    check_op(op, {"x": f32(3, 4, 5, lo=-10, hi=10)}, {"axis": axis})


# Rows from 64 elements long are reduced by a work-group each on the devices;
# these cross the group's 256 items, with a ragged end.
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("length", [64, 700])
def test_softmax_long_rows(op, length):
    check_op(op, {"x": f32(5, length, lo=-10, hi=10)}, {"axis": -1})


def test_softmax_of_masked_scores_is_exactly_zero():
    # Scores masked with -1e9 or -inf (attention's padding) get exactly 0,
    # as in exact arithmetic: a tiny value there, scaled by 1 / sum, was a
    # subnormal that slowed the product after it hundreds of times.
    x = f32(6, 100, lo=-5, hi=5)
    x[:, 70:] = -1e9
    x[::2, 90:] = -np.inf
    y = check_op("Softmax", {"x": x}, {"axis": -1})["y"]
    assert not y[:, 70:].any()
    tiny = np.abs(y[(y != 0)]) < np.finfo(np.float32).tiny
    assert not tiny.any(), "subnormal probabilities"


def test_layernorm_long_rows():
    check_op("LayerNormalization", {"x": f32(3, 2, 300)}, {"axis": -1},
             consts={"s": f32(300), "b": f32(300)})


# ---- reductions ------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax"])
@pytest.mark.parametrize("axes,keep", [([1], 1), ([0, 2], 0), ([-1], 1), (None, 0)])
def test_reduce(op, axes, keep):
    consts = {"axes": np.array(axes, np.int64)} if axes is not None else {}
    check_op(op, {"x": f32(3, 4, 5)}, {"keepdims": keep}, consts=consts, opset=18)


# Long trailing reductions are a work-group per row on the devices.
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax"])
def test_reduce_long_rows(op):
    consts = {"axes": np.array([-2, -1], np.int64)}
    check_op(op, {"x": f32(3, 20, 30)}, {"keepdims": 1}, consts=consts, opset=18)


@pytest.mark.parametrize("row_groups", ["0", "1"])  # the devices' two reduction kernels
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceSumSquare"])
def test_long_float32_sums_are_compensated(op, row_groups, monkeypatch):
    """Two rows of a million float32 values near 0.1: on every backend the
    sum is within a few roundings of the exact one (the CPU adds in double,
    the devices with Neumaier's compensation; a plain float32 loop was 2e-5
    off on OpenCL)."""
    monkeypatch.setenv("GPUSRV_ROW_GROUPS", row_groups)
    import os
    import tempfile
    from gsonnx import load_outputs, run_gpusrv
    x = (0.1 + 0.01 * rng.standard_normal((2, 1 << 20))).astype(np.float32)
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)
    m = make_model([node], {"x": x}, {"axes": np.array([1], np.int64)}, opset=18)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        onnx.save(m, path)
        p = run_gpusrv(path, {"x": x}, d, extra=("--report",))
        assert p.returncode == 0, p.stderr
        got = load_outputs(d, ["y"])["y"].astype(np.float64)
    x64 = x.astype(np.float64)
    want = {"ReduceSum": x64.sum(axis=1), "ReduceMean": x64.mean(axis=1),
            "ReduceSumSquare": (x64 * x64).sum(axis=1)}[op]
    assert np.abs(got - want).max() / np.abs(want).max() < 3e-7, (got, want)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceL1"])
def test_sums_through_infinities(op):
    # the compensated device sums stay inf (and NaN for inf - inf), as plain sums do
    x = np.array([[1.0, np.inf, 2.0], [np.inf, -np.inf, 1.0], [-np.inf, 5.0, 1.0]], np.float32)
    check_op(op, {"x": x}, {"keepdims": 0}, consts={"axes": np.array([1], np.int64)}, opset=18)


def test_reduce_axes_attribute_opset13():
    check_op("ReduceMean", {"x": f32(2, 6)}, {"axes": [1]}, opset=13)
    check_op("ReduceSum", {"x": f32(2, 6)}, consts={"axes": np.array([0], np.int64)}, opset=13)


def test_reduce_int():
    check_op("ReduceSum", {"x": i64(3, 4)}, consts={"axes": np.array([1], np.int64)}, opset=18)


def test_argmax():
    x = rng.integers(0, 4, size=(3, 5, 2)).astype(np.float32)  # ties on purpose
    check_op("ArgMax", {"x": x}, {"axis": 1, "keepdims": 0}, outputs=[("y", np.int64)])
    check_op("ArgMax", {"x": x}, {"axis": -1, "select_last_index": 1}, outputs=[("y", np.int64)])


@pytest.mark.parametrize("largest", [1, 0])
def test_topk(largest):
    x = rng.integers(0, 6, size=(3, 7)).astype(np.float32)
    check_op("TopK", {"x": x}, {"axis": 1, "largest": largest}, consts={"k": np.array([3], np.int64)},
             outputs=[("v", np.float32), ("i", np.int64)])


# ---- data movement ---------------------------------------------------------------------------

def test_reshape():
    x = f32(2, 3, 4)
    check_op("Reshape", {"x": x}, consts={"s": np.array([4, -1], np.int64)})
    check_op("Reshape", {"x": x}, consts={"s": np.array([0, 12], np.int64)})
    check_op("Reshape", {"x": x}, consts={"s": np.array([24], np.int64)})


def test_flatten():
    check_op("Flatten", {"x": f32(2, 3, 4, 5)}, {"axis": 2})
    check_op("Flatten", {"x": f32(2, 3, 4)}, {"axis": 0})


@pytest.mark.parametrize("perm", [[1, 0, 2], [2, 0, 1], [0, 2, 1], None])
def test_transpose(perm):
    attrs = {"perm": perm} if perm else {}
    check_op("Transpose", {"x": f32(2, 3, 4)}, attrs)
    check_op("Transpose", {"x": i64(2, 3, 4)}, attrs)


@pytest.mark.parametrize("shape,perm", [
    ([1, 96, 56, 56], [0, 2, 3, 1]),   # NCHW -> NHWC, as around ConvNeXt's LayerNorm
    ([1, 56, 56, 96], [0, 3, 1, 2]),   # and back
    ([3, 13, 37], [0, 2, 1]),          # a batch of three, with blocks left over both ways
    ([2, 5, 9, 40], [0, 3, 2, 1]),     # a strided middle dimension: not one 2-D transpose
    ([8, 8], [1, 0]),                  # one block exactly
    ([7, 300], [1, 0]),                # too thin for a block
])
def test_transpose_in_blocks(shape, perm):
    """The 8x8-block path of four-byte values, against numpy, with sizes
    that leave partial blocks and bands; int32 takes the same path."""
    n = int(np.prod(shape))
    check_op("Transpose", {"x": np.arange(n, dtype=np.float32).reshape(shape)}, {"perm": perm})
    check_op("Transpose", {"x": np.arange(n, dtype=np.int32).reshape(shape)}, {"perm": perm})


def test_concat():
    check_op("Concat", {"a": f32(2, 1, 3), "b": f32(2, 4, 3), "c": f32(2, 2, 3)}, {"axis": 1})
    check_op("Concat", {"a": f32(2, 3), "b": f32(1, 3)}, {"axis": -2})


def test_split():
    x = f32(6, 4)
    check_op("Split", {"x": x}, {"axis": 0}, consts={"s": np.array([1, 2, 3], np.int64)},
             outputs=["a", "b", "c"])
    check_op("Split", {"x": x}, {"axis": 1}, outputs=["a", "b"])


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], [0], [1]),
    ([0, 1], [-1, 100], [1, 2], [1, 2]),
    ([-1], [-100], [1], [-1]),
    ([3], [0], [2], [-2]),
    ([0], [5], [1], [2]),  # every other row, each with its whole last dim in one copy
])
def test_slice(starts, ends, axes, steps):
    consts = {"st": np.array(starts, np.int64), "en": np.array(ends, np.int64),
              "ax": np.array(axes, np.int64), "sp": np.array(steps, np.int64)}
    check_op("Slice", {"x": f32(4, 5, 6)}, consts=consts)


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([58], [116], [1], [1]),            # ShuffleNet's second half of the channels
    ([1, 0], [100, 13], [1, 3], [3, 2]),  # strided in two dims
    ([0, 13], [32, -100], [0, 3], [1, -1]),
])
def test_slice_spread_over_threads(starts, ends, axes, steps):
    """Slices large enough that their runs are spread over the threads."""
    consts = {"st": np.array(starts, np.int64), "en": np.array(ends, np.int64),
              "ax": np.array(axes, np.int64), "sp": np.array(steps, np.int64)}
    check_op("Slice", {"x": f32(32, 116, 7, 14)}, consts=consts)


def test_concat_spread_over_threads():
    """A Concat large enough that its rows are spread over the threads."""
    check_op("Concat", {"a": f32(32, 58, 14, 14), "b": f32(32, 3, 14, 14),
                        "c": f32(32, 61, 14, 14)}, {"axis": 1})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather(axis):
    x = f32(4, 5, 3)
    idx = np.array([[0, -1], [2, 1]], np.int64)
    check_op("Gather", {"x": x}, {"axis": axis}, consts={"i": idx})


def test_gather_out_of_range_is_an_error(tmp_path):
    from gsonnx import make_model, run_gpusrv
    import onnx
    from onnx import helper
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name="lookup")
    model = make_model([node], {"x": f32(3, 2), "i": np.array([5], np.int64)})
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    p = run_gpusrv(path, {"x": f32(3, 2), "i": np.array([5], np.int64)}, str(tmp_path),
                   extra=["--report"])
    assert p.returncode == 1
    assert "node lookup (Gather): index 5 is out of range [-3, 3)" in p.stderr, p.stderr
    if DEVICE in KERNEL_DEVICES:  # found by the device's kernel, not a CPU fallback
        assert "instead" not in p.stdout, p.stdout


def test_squeeze_unsqueeze():
    check_op("Squeeze", {"x": f32(1, 3, 1, 2)}, consts={"a": np.array([0, -2], np.int64)})
    check_op("Squeeze", {"x": f32(1, 3, 1, 2)})
    check_op("Unsqueeze", {"x": f32(3, 2)}, consts={"a": np.array([0, -1], np.int64)})


def test_expand():
    check_op("Expand", {"x": f32(3, 1)}, consts={"s": np.array([2, 3, 4], np.int64)})
    check_op("Expand", {"x": f32(4)}, consts={"s": np.array([1], np.int64)})


def test_shape_and_constant_of_shape():
    check_op("Shape", {"x": f32(2, 3, 4)}, outputs=[("y", np.int64)])
    check_op("Shape", {"x": f32(2, 3, 4)}, {"start": 1, "end": -1}, outputs=[("y", np.int64)],
             opset=15)
    from onnx import numpy_helper
    check_op("ConstantOfShape", {}, {"value": numpy_helper.from_array(np.array([7], np.int64))},
             consts={"s": np.array([2, 3], np.int64)}, outputs=[("y", np.int64)])


def test_constant():
    from onnx import numpy_helper
    check_op("Constant", {}, {"value": numpy_helper.from_array(f32(2, 3))}, outputs=[("y", np.float32)])
    check_op("Constant", {}, {"value_ints": [1, 2, 3]}, outputs=[("y", np.int64)])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(mode):
    consts = {"p": np.array([1, 0, 2, 1, 2, 0], np.int64)}
    if mode == "constant":
        consts["v"] = np.array(1.5, np.float32)
    check_op("Pad", {"x": f32(3, 4, 5)}, {"mode": mode}, consts=consts)


def test_pad_negative_crops():
    check_op("Pad", {"x": f32(4, 5)}, consts={"p": np.array([-1, 1, 0, -2], np.int64)})


@pytest.mark.parametrize("mode,coord,nearest", [
    ("nearest", "asymmetric", "floor"), ("nearest", "half_pixel", "round_prefer_floor"),
    ("linear", "half_pixel", None), ("linear", "align_corners", None),
    ("linear", "pytorch_half_pixel", None), ("linear", "asymmetric", None)])
def test_resize_scales(mode, coord, nearest):
    attrs = {"mode": mode, "coordinate_transformation_mode": coord}
    if nearest:
        attrs["nearest_mode"] = nearest
    check_op("Resize", {"x": f32(1, 2, 4, 5)}, attrs,
             consts={"roi": np.array([], np.float32), "sc": np.array([1, 1, 2, 1.5], np.float32)})


def test_resize_sizes_downsample():
    check_op("Resize", {"x": f32(1, 1, 8, 9)}, {"mode": "linear"},
             consts={"roi": np.array([], np.float32), "sc": np.array([], np.float32),
                     "sz": np.array([1, 1, 3, 4], np.int64)})


# ---- graphs of several nodes: shape subgraphs fold while planning ------------------------------

def test_shape_subgraph_is_folded():
    from onnx import helper
    from gsonnx import check_model, make_model
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "zero1"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus1"], ["ns"], axis=0),
        helper.make_node("Reshape", ["x", "ns"], ["y"]),
    ]
    consts = {"zero": np.array(0, np.int64), "zero1": np.array([0], np.int64),
              "minus1": np.array([-1], np.int64)}
    x = f32(3, 4, 5)
    check_model(make_model(nodes, {"x": x}, consts), {"x": x})


# ---- ops without device kernels yet: the CPU runs them for every device --------------------------
# (on OpenCL and CUDA through the plan's CPU fallback, which these cases check)

@pytest.mark.parametrize("op,attrs", [
    ("HardSwish", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("Softplus", {}),
    ("Elu", {"alpha": 0.7}), ("Selu", {}), ("Celu", {"alpha": 1.5}),
    ("Floor", {}), ("Ceil", {}), ("Round", {}), ("Sin", {}), ("Cos", {}), ("Atan", {}),
    ("Reciprocal", {}), ("Sign", {}), ("Softsign", {}), ("ThresholdedRelu", {"alpha": 0.5})])
def test_more_unary(op, attrs):
    x = f32(3, 5)
    x[0, 0], x[0, 1] = 0.5, -2.5  # halves: Round goes to even
    check_op(op, {"x": x}, attrs)



@pytest.mark.parametrize("op,attrs,lo,hi", [
    ("Tan", {}, -1.2, 1.2), ("Asin", {}, -0.95, 0.95), ("Acos", {}, -0.95, 0.95),
    ("Sinh", {}, -3, 3), ("Cosh", {}, -3, 3), ("Asinh", {}, -3, 3), ("Acosh", {}, 1.05, 4),
    ("Atanh", {}, -0.95, 0.95), ("Shrink", {"lambd": 0.6, "bias": 0.2}, -2, 2)])
def test_trigonometric_and_shrink(op, attrs, lo, hi):
    check_op(op, {"x": f32(4, 6, lo=lo, hi=hi)}, attrs)


def test_isnan_isinf():
    x = f32(3, 4)
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    check_op("IsNaN", {"x": x}, outputs=[("y", np.bool_)])
    check_op("IsInf", {"x": x}, outputs=[("y", np.bool_)])
    check_op("IsInf", {"x": x}, {"detect_positive": 0}, outputs=[("y", np.bool_)])
    check_op("IsInf", {"x": x.astype(np.float16)}, {"detect_negative": 0},
             outputs=[("y", np.bool_)], opset=20)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical(op):
    a = rng.integers(0, 2, size=(3, 4)).astype(np.bool_)
    b = rng.integers(0, 2, size=(4,)).astype(np.bool_)
    check_op(op, {"a": a, "b": b})


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dt", [np.int32, np.int64, np.uint8])
def test_bitwise(op, dt):
    a = rng.integers(0, 120, size=(3, 4)).astype(dt)
    b = rng.integers(0, 120, size=(3, 1)).astype(dt)
    check_op(op, {"a": a, "b": b}, opset=18)


def test_prelu_int_and_sum_mean_edges():
    check_op("PRelu", {"x": i64(3, 4)}, consts={"s": i64(4)}, opset=16)
    check_op("Sum", {"a": f32(2, 3)})  # one input: itself
    check_op("Mean", {"a": f32(2, 1, 3), "b": f32(4, 1), "c": f32(3)})
    check_op("Mean", {"a": f32(3, 3).astype(np.float16), "b": f32(3).astype(np.float16)})


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceProd", "ReduceL1", "ReduceSumSquare",
                                "ReduceSum", "ReduceMax"])
def test_int_reductions(op):
    check_op(op, {"x": i64(3, 4, 5, lo=-3, hi=4)}, {"keepdims": 1},
             consts={"axes": np.array([0, 2], np.int64)}, opset=18)


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceMax", "ReduceProd", "ReduceL1", "ReduceL2",
                                "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
                                "ReduceMean"])
def test_reductions_of_long_rows(op):
    """Rows of 300: the work-group-per-row kernels on a device (GPUSRV_ROW_GROUPS=1)."""
    x = f32(4, 300, lo=0.9, hi=1.1) if op == "ReduceProd" else f32(4, 300, lo=0.1, hi=3)
    if op == "ReduceLogSumExp":
        x[1, 7] = 95.0  # exp overflows float32 unless the largest is taken out first
    check_op(op, {"x": x}, {"keepdims": 0}, consts={"axes": np.array([-1], np.int64)}, opset=18,
             rtol=2e-3)


def test_argmin_ties_and_float16():
    x = np.array([[3, 1, 1, 2], [0, 0, 5, -1]], np.float32)
    check_op("ArgMin", {"x": x}, {"axis": 1, "select_last_index": 1}, outputs=[("y", np.int64)])
    check_op("ArgMin", {"x": f32(3, 4).astype(np.float16)}, {"axis": 0},
             outputs=[("y", np.int64)])


@pytest.mark.parametrize("dt", [np.int64, np.int32])
def test_cumsum_int(dt):
    check_op("CumSum", {"x": i64(2, 3, 4).astype(dt)}, {"exclusive": 1, "reverse": 1},
             consts={"axis": np.array(-2, np.int64)})


def test_tile_ranks():
    check_op("Tile", {"x": i64(2, 1, 3)}, consts={"r": np.array([1, 4, 2], np.int64)})
    check_op("Tile", {"x": f32(3, 2, 2, 2)}, consts={"r": np.array([2, 1, 3, 2], np.int64)})
    # five dims repeated: a walk of ten, past the kernels' eight, runs on the CPU
    check_op("Tile", {"x": f32(1, 2, 1, 2, 1)},
             consts={"r": np.array([2, 2, 2, 2, 2], np.int64)}, on_device=False)


def test_depth_to_space_dcr_and_bytes():
    check_op("DepthToSpace", {"x": f32(2, 12, 2, 3)}, {"blocksize": 2})
    check_op("DepthToSpace", {"x": f32(1, 18, 2, 2).astype(np.float16)},
             {"blocksize": 3, "mode": "CRD"})
    check_op("SpaceToDepth", {"x": f32(2, 3, 6, 9)}, {"blocksize": 3})


def test_trilu_bytes_and_range_types():
    check_op("Trilu", {"x": rng.integers(0, 2, size=(3, 5)).astype(np.bool_)}, {"upper": 0})
    for dt, start, limit, delta in [(np.float32, 0.5, 7.3, 0.7), (np.int32, 10, -5, -3),
                                    (np.int64, -4, 9, 2)]:
        check_op("Range", {}, consts={"s": np.array(start, dt), "l": np.array(limit, dt),
                                      "d": np.array(delta, dt)}, outputs=[("y", dt)])


def test_norms_of_groups_and_instances():
    check_op("InstanceNormalization", {"x": f32(2, 3, 4, 5)}, consts={"s": f32(3), "b": f32(3)})
    # groups of 2 channels x 100: the work-group-per-row kernel on a device
    check_op("GroupNormalization", {"x": f32(2, 8, 10, 10)}, {"num_groups": 4},
             consts={"s": f32(8), "b": f32(8)}, opset=21)
    check_op("GroupNormalization", {"x": f32(1, 4, 6)}, {"num_groups": 2},
             consts={"s": f32(2), "b": f32(2)}, opset=18)


def test_cast_like():
    check_op("CastLike", {"x": f32(3, 4, lo=-300, hi=300)},
             consts={"t": np.array([1], np.int16)}, outputs=[("y", np.int16)], opset=15)


def test_mish():
    check_op("Mish", {"x": f32(4, 5)}, opset=18)


@pytest.mark.parametrize("op", ["LessOrEqual", "GreaterOrEqual"])
def test_compare_or_equal(op):
    a = i64(3, 4).astype(np.float32)
    check_op(op, {"a": a, "b": a[:1] + 0}, outputs=[("y", np.bool_)])


@pytest.mark.parametrize("fmod,dt", [(0, np.int64), (1, np.int32), (1, np.float32)])
def test_mod(fmod, dt):
    a = (rng.integers(-20, 20, size=(4, 5))).astype(dt)
    b = rng.choice([-7, -3, 2, 5], size=(5,)).astype(dt)
    check_op("Mod", {"a": a, "b": b}, {"fmod": fmod})


def test_prelu_and_sum_and_mean():
    check_op("PRelu", {"x": f32(2, 3, 4)}, consts={"s": f32(3, 1)})
    check_op("Sum", {"a": f32(2, 3), "b": f32(3), "c": f32(2, 1)})
    check_op("Mean", {"a": f32(2, 3), "b": f32(3)})


@pytest.mark.parametrize("op", ["ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                                "ReduceLogSumExp", "ReduceSumSquare"])
def test_more_reductions(op):
    check_op(op, {"x": f32(3, 4, 5, lo=0.1)}, {"keepdims": 0},
             consts={"axes": np.array([1, -1], np.int64)}, opset=18)


def test_argmin():
    check_op("ArgMin", {"x": f32(3, 4, 5)}, {"axis": 1}, outputs=[("y", np.int64)])


@pytest.mark.parametrize("upper,k", [(1, 0), (0, 1), (1, -1)])
def test_trilu(upper, k):
    check_op("Trilu", {"x": f32(2, 4, 5)}, {"upper": upper},
             consts={"k": np.array(k, np.int64)})


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(exclusive, reverse):
    check_op("CumSum", {"x": f32(3, 4)}, {"exclusive": exclusive, "reverse": reverse},
             consts={"axis": np.array(1, np.int64)})


def test_tile_gather_elements_scatter():
    check_op("Tile", {"x": f32(2, 3)}, consts={"r": np.array([2, 3], np.int64)})
    idx = rng.integers(-3, 3, size=(2, 4)).astype(np.int64)
    check_op("GatherElements", {"x": f32(2, 3)}, {"axis": 1}, consts={"i": idx})
    upd = f32(2, 2)
    check_op("ScatterElements", {"x": f32(2, 3)}, {"axis": 1, "reduction": "add"},
             consts={"i": np.array([[0, 2], [1, 1]], np.int64), "u": upd})
    check_op("ScatterND", {"x": f32(4, 3)}, consts={"i": np.array([[1], [3]], np.int64),
                                                   "u": f32(2, 3)})
    check_op("GatherND", {"x": f32(3, 4, 2)}, consts={"i": np.array([[0, 1], [2, 3]], np.int64)})


def test_depth_space_and_onehot():
    check_op("DepthToSpace", {"x": f32(1, 8, 2, 3)}, {"blocksize": 2, "mode": "CRD"})
    check_op("SpaceToDepth", {"x": f32(1, 2, 4, 6)}, {"blocksize": 2})
    check_op("OneHot", {"i": np.array([[0, 2], [-1, 5]], np.int64)}, {"axis": 1},
             consts={"d": np.array(4, np.int64), "v": np.array([0.0, 3.0], np.float32)},
             outputs=[("y", np.float32)])


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_reductions(reduction):
    # duplicate indices: with a reduction each update lands, in order
    idx = np.array([[1, 0, 2], [0, 0, 1]], np.int32 if reduction != "none" else np.int64)
    if reduction == "none":
        idx = np.array([[1, 0, 2], [2, 0, 1]], np.int64)
    check_op("ScatterElements", {"x": f32(2, 4)}, {"axis": 1, "reduction": reduction},
             consts={"i": idx, "u": f32(2, 3)}, opset=18)
    nd_idx = np.array([[1], [3], [1]], np.int64) if reduction != "none" else \
        np.array([[1], [3], [0]], np.int64)
    check_op("ScatterND", {"x": i64(4, 2)}, {"reduction": reduction},
             consts={"i": nd_idx, "u": i64(3, 2)}, opset=18)


def test_gather_nd_batches_and_index_types():
    x = f32(2, 3, 4)
    check_op("GatherND", {"x": x}, {"batch_dims": 1},
             consts={"i": np.array([[[2, 1], [0, -1]], [[1, 3], [2, 0]]], np.int64)})
    check_op("GatherElements", {"x": i64(3, 4)}, {"axis": 0},
             consts={"i": np.array([[2, -1, 0, 1]], np.int32)})
    check_op("OneHot", {"i": np.array([[1, -1], [3, 7]], np.int32)}, {"axis": -1},
             consts={"d": np.array(4, np.float32), "v": np.array([5, 9], np.float32)},
             outputs=[("y", np.float32)])


@pytest.mark.parametrize("op", ["GatherElements", "GatherND", "ScatterElements", "ScatterND"])
def test_index_out_of_range_is_an_error(tmp_path, op):
    from gsonnx import run_gpusrv
    import onnx
    x = f32(2, 3)
    feeds = {"x": x, "i": np.array([[0, 5]], np.int64) if "Elements" in op else
             np.array([[1, 7]], np.int64)}
    names = ["x", "i"] + (["u"] if op.startswith("Scatter") else [])
    consts = {"u": f32(1, 2) if "Elements" in op else f32(1)}
    attrs = {"axis": 1} if "Elements" in op else {}
    node = helper.make_node(op, names, ["y"], name="pick", **attrs)
    model = make_model([node], feeds, consts if op.startswith("Scatter") else None,
                       [("y", np.float32)])
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    p = run_gpusrv(path, feeds, str(tmp_path), extra=["--report"])
    assert p.returncode == 1
    assert f"node pick ({op}): index" in p.stderr and "is out of range" in p.stderr, p.stderr
    if DEVICE in KERNEL_DEVICES:  # found by the device's kernel, not a CPU fallback
        assert "instead" not in p.stdout, p.stdout

def test_group_norm_and_lrn():
    check_op("GroupNormalization", {"x": f32(2, 6, 3, 3)}, {"num_groups": 3},
             consts={"s": f32(6), "b": f32(6)}, opset=21)
    check_op("LRN", {"x": f32(1, 5, 3, 3)}, {"size": 3})
    check_op("LRN", {"x": f32(2, 6, 4, 3)}, {"size": 5, "alpha": 0.01, "beta": 0.6, "bias": 2.0})


def test_hardmax_and_bitwise_not():
    x = f32(3, 4, 5)
    x[0, 1, 2] = x[0, 3, 2] = 9.0  # a tie: the first wins
    check_op("Hardmax", {"x": x}, {"axis": 1}, opset=13)
    check_op("Hardmax", {"x": f32(4, 6).astype(np.float16)}, opset=13)
    check_op("BitwiseNot", {"x": i64(3, 4)}, opset=18)
    check_op("BitwiseNot", {"x": i64(5).astype(np.int32)}, opset=18)


def test_resize_cubic_and_antialias():
    roi, none = np.array([], np.float32), np.array([], np.float32)
    check_op("Resize", {"x": f32(1, 2, 6, 7)}, {"mode": "cubic"},
             consts={"roi": roi, "sc": np.array([1, 1, 2, 1.5], np.float32)}, opset=18,
             on_device=False)
    check_op("Resize", {"x": f32(1, 2, 9, 8)}, {"mode": "linear", "antialias": 1},
             consts={"roi": roi, "sc": none, "sz": np.array([1, 2, 4, 3], np.int64)}, opset=18,
             on_device=False)


def test_quantize_dequantize_per_axis():
    x = f32(2, 3, 4)
    scale, zp = np.array([0.02, 0.05, 0.1], np.float32), np.array([3, -4, 0], np.int8)
    check_op("QuantizeLinear", {"x": x}, {"axis": 1}, consts={"s": scale, "z": zp},
             outputs=[("y", np.int8)], opset=19, on_device=False)
    q = rng.integers(0, 255, size=(2, 3, 4)).astype(np.uint8)
    check_op("DequantizeLinear", {"q": q}, {"axis": 1},
             consts={"s": scale, "z": np.array([3, 100, 0], np.uint8)}, opset=19,
             outputs=[("y", np.float32)], on_device=False)


@pytest.mark.parametrize("dt", [np.uint16, np.uint32, np.uint64])
def test_unsigned_types(dt):
    a = rng.integers(0, 60000, size=(3, 4)).astype(dt)
    b = rng.integers(1, 60000, size=(4,)).astype(dt)
    if dt == np.uint64:  # past int64: order and division must read them unsigned
        a[0, 0], b[1] = np.uint64(2**63 + 5), np.uint64(2**63 + 1)
    # The ops onnxruntime implements for these types.
    if dt == np.uint16:  # onnxruntime has only Mod for uint16
        check_op("Mod", {"a": a, "b": b}, on_device=False)
        return
    for op in ("Max", "Min", "Mod"):
        check_op(op, {"a": a, "b": b}, on_device=False)
    check_op("BitShift", {"a": a, "b": (b % 7).astype(dt)}, {"direction": "RIGHT"},
             on_device=False)
    check_op("Cast", {"a": a}, {"to": 1}, outputs=[("y", np.float32)], on_device=False)


def test_shapes_from_input_values():
    """A Range's bounds and a Reshape's shape as model inputs: planned with their values."""
    from onnx import helper
    from gsonnx import check_model, make_model
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["y"])]
    feeds = {"start": np.array(2, np.int64), "limit": np.array(14, np.int64),
             "delta": np.array(2, np.int64), "shape": np.array([2, 3], np.int64)}
    check_model(make_model(nodes, feeds, outputs=[("y", np.int64)]), feeds)


# ---- recurrent ops (the CPU's reference loop on every device) ------------------------------------

def _rnn_case(op, gates, direction="forward", layout=0, extra=None, seq_lens=False, hidden=5):
    seq, batch, inp = 4, 3, 6
    dirs = 2 if direction == "bidirectional" else 1
    x = f32(batch, seq, inp) if layout else f32(seq, batch, inp)
    consts = {"W": f32(dirs, gates * hidden, inp, lo=-0.5, hi=0.5),
              "R": f32(dirs, gates * hidden, hidden, lo=-0.5, hi=0.5),
              "B": f32(dirs, 2 * gates * hidden, lo=-0.5, hi=0.5)}
    names = ["x", "W", "R", "B"]
    if seq_lens:
        consts["L"] = np.array([4, 2, 3], np.int32)
        consts["h0"] = f32(*((batch, dirs, hidden) if layout else (dirs, batch, hidden)))
        names += ["L", "h0"]
    attrs = {"hidden_size": hidden, "direction": direction, "layout": layout, **(extra or {})}
    outs = [("y", np.float32), ("y_h", np.float32)] + ([("y_c", np.float32)] if op == "LSTM" else [])
    check_op(op, {"x": x}, attrs, consts=consts, outputs=outs, input_names=names, opset=14,
             on_device=False)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op,gates", [("RNN", 1), ("GRU", 3), ("LSTM", 4)])
def test_recurrent(op, gates, direction):
    _rnn_case(op, gates, direction)


@pytest.mark.parametrize("op,gates,extra", [
    ("GRU", 3, {"linear_before_reset": 1}), ("LSTM", 4, {"input_forget": 1}),
    ("RNN", 1, {"activations": ["Relu"]}), ("LSTM", 4, {"clip": 0.5})])
def test_recurrent_options(op, gates, extra):
    _rnn_case(op, gates, "forward", extra=extra)


def test_recurrent_lengths():
    _rnn_case("LSTM", 4, "bidirectional", seq_lens=True)
    _rnn_case("GRU", 3, "reverse", seq_lens=True)


def test_recurrent_batch_first(tmp_path):
    """layout=1 (onnxruntime and the onnx reference both refuse it here):
    gpusrv's batch-first LSTM against onnxruntime's sequence-first one on
    the same data, transposed."""
    import onnx
    import onnxruntime as ort
    from onnx import helper
    from gsonnx import load_outputs, make_model, run_gpusrv
    hidden, dirs = 5, 2
    x0 = f32(4, 3, 6)  # [seq, batch, input]
    consts = {"W": f32(dirs, 4 * hidden, 6, lo=-0.5, hi=0.5),
              "R": f32(dirs, 4 * hidden, hidden, lo=-0.5, hi=0.5),
              "B": f32(dirs, 8 * hidden, lo=-0.5, hi=0.5)}
    outs = ["y", "y_h", "y_c"]
    models = []
    for layout, x in ((0, x0), (1, x0.transpose(1, 0, 2).copy())):
        node = helper.make_node("LSTM", ["x", "W", "R", "B"], outs, hidden_size=hidden,
                                direction="bidirectional", layout=layout)
        models.append(make_model([node], {"x": x}, consts, outputs=outs, opset=14))
    path0, path1 = str(tmp_path / "m0.onnx"), str(tmp_path / "m1.onnx")
    onnx.save(models[0], path0)
    onnx.save(models[1], path1)
    want = ort.InferenceSession(path0, providers=["CPUExecutionProvider"]).run(None, {"x": x0})
    p = run_gpusrv(path1, {"x": x0.transpose(1, 0, 2).copy()}, str(tmp_path))
    assert p.returncode == 0, p.stderr
    got = load_outputs(str(tmp_path), outs)
    np.testing.assert_allclose(got["y"], want[0].transpose(2, 0, 1, 3), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["y_h"], want[1].transpose(1, 0, 2), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["y_c"], want[2].transpose(1, 0, 2), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode,ct,ratio", [("avg", "half_pixel", 0), ("avg", "output_half_pixel", 2),
                                           ("max", "half_pixel", 2)])
def test_roi_align(mode, ct, ratio):
    rois = np.array([[0.5, 1.0, 6.0, 5.5], [2.0, 0.0, 7.5, 7.9], [-1.0, 3.0, 3.0, 9.5]], np.float32)
    check_op("RoiAlign", {"x": f32(2, 3, 8, 9)},
             {"mode": mode, "coordinate_transformation_mode": ct, "output_height": 3,
              "output_width": 2, "sampling_ratio": ratio, "spatial_scale": 0.9},
             consts={"rois": rois, "b": np.array([1, 0, 1], np.int64)}, opset=16, on_device=False)


def test_uint64_reductions_order_unsigned(tmp_path):
    # onnxruntime has no uint64 ReduceMax/Min: numpy is the reference.
    import onnx
    from onnx import helper
    from gsonnx import load_outputs, make_model, run_gpusrv
    x = np.array([[1, 2**63 + 7, 5], [2**64 - 1, 0, 3]], np.uint64)
    for op, want in (("ReduceMax", x.max(axis=1)), ("ReduceMin", x.min(axis=1))):
        node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)
        m = make_model([node], {"x": x}, {"axes": np.array([1], np.int64)},
                       outputs=[("y", np.uint64)], opset=18)
        path = str(tmp_path / "m.onnx")
        onnx.save(m, path)
        p = run_gpusrv(path, {"x": x}, str(tmp_path))
        assert p.returncode == 0, p.stderr
        np.testing.assert_array_equal(load_outputs(str(tmp_path), ["y"])["y"], want)


# Large enough that each kernel cuts its work into pieces, one per thread
# (parallel.h); 3 threads split unevenly. Each against onnxruntime.
LARGE_CASES = {
    "Sigmoid": ({"x": f32(3, 40000)}, {}, {}),
    "Add": ({"a": f32(2, 300, 257), "b": f32(300, 1)}, {}, {}),
    "Softmax": ({"x": f32(700, 200)}, {"axis": 1}, {}),
    "LayerNormalization": ({"x": f32(500, 96)}, {"axis": -1},
                           {"scale": f32(96), "bias": f32(96)}),
    "BatchNormalization": ({"x": f32(2, 32, 30, 30)}, {},
                           {"s": f32(32), "b": f32(32), "m": f32(32), "v": f32(32, lo=0.5)}),
    "MaxPool": ({"x": f32(2, 32, 40, 40)}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, {}),
    "GlobalAveragePool": ({"x": f32(4, 64, 30, 30)}, {}, {}),
    "Transpose": ({"x": f32(8, 64, 300)}, {"perm": [2, 0, 1]}, {}),
    "ReduceSum": ({"x": f32(64, 40, 50)}, {"keepdims": 0}, {"axes": np.array([1, 2], np.int64)}),
    "Gather": ({"x": f32(3, 5000, 20)}, {"axis": 1},
               {"i": rng.integers(-5000, 5000, size=(7000,)).astype(np.int64)}),
    "Resize": ({"x": f32(2, 16, 40, 40)}, {"mode": "linear"},
               {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 1.5, 1.5], np.float32)}),
}


@pytest.mark.parametrize("op", sorted(LARGE_CASES))
def test_large_tensors_split_over_threads(op):
    inputs, attrs, consts = LARGE_CASES[op]
    names = list(inputs) + list(consts)
    node = helper.make_node(op, names, ["y"], **attrs)
    check_model(make_model([node], inputs, consts), inputs, extra=("--threads", "3"))



# ---- opset 23's transformer ops: the ONNX node tests (set 1.20) hold their values; these
# check the refusals and the data errors (onnxruntime 1.20 has no opset 23)

def _refusal(tmp_path, node, feeds, consts=None, opset=23):
    from gsonnx import run_gpusrv
    import onnx
    path = str(tmp_path / "m.onnx")
    onnx.save(make_model([node], feeds, consts, [("y", np.float32)], opset), path)
    p = run_gpusrv(path, feeds, str(tmp_path))
    assert p.returncode == 1, p.stderr
    return p.stderr


def test_attention_refusals(tmp_path):
    q, k = f32(2, 4, 8), f32(2, 5, 8)
    err = _refusal(tmp_path, helper.make_node("Attention", ["q", "k", "v"], ["y"], name="att"),
                   {"q": q, "k": k, "v": k})
    assert "node att (Attention): 3-D inputs need q_num_heads and kv_num_heads" in err, err
    err = _refusal(tmp_path, helper.make_node("Attention", ["q", "k", "v"], ["y"], name="att",
                                              q_num_heads=3, kv_num_heads=2),
                   {"q": f32(2, 4, 12), "k": f32(2, 5, 8), "v": f32(2, 5, 8)})
    assert "query heads must be a multiple of the 2 key/value heads" in err, err
    err = _refusal(tmp_path, helper.make_node("Attention", ["q", "k", "v", "m"], ["y"], name="att"),
                   {"q": f32(1, 2, 3, 4), "k": f32(1, 2, 5, 4), "v": f32(1, 2, 5, 4),
                    "m": f32(1, 3, 3, 5)})
    assert "attn_mask's dim 1 (3) does not broadcast to 2" in err, err


def test_rotary_position_out_of_range(tmp_path):
    node = helper.make_node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], name="rope")
    feeds = {"x": f32(1, 2, 3, 4), "p": np.array([[0, 1, 9]], np.int64)}
    err = _refusal(tmp_path, node, feeds, {"c": f32(4, 2), "s": f32(4, 2)})
    assert "node rope (RotaryEmbedding): position 9 is out of range [0, 4)" in err, err


def test_tensor_scatter_write_index_out_of_range(tmp_path):
    node = helper.make_node("TensorScatter", ["cache", "u", "at"], ["y"], name="kv")
    feeds = {"cache": f32(2, 4, 3), "u": f32(2, 2, 3), "at": np.array([0, 3], np.int64)}
    err = _refusal(tmp_path, node, feeds, opset=24)
    assert "node kv (TensorScatter): write index 4 is out of range [0, 4)" in err, err
