"""Whole models through gpusrv's engine against onnxruntime (rtol 1e-4 for
float32), the plan's memory report, and the digits demo's accuracy."""
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest

from gsonnx import GPUSRV, check_model, load_outputs, run_gpusrv
from models import BUILDERS, example_input

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("batch", [1, 4])
def test_model_matches_onnxruntime(name, batch):
    x = example_input(name, batch)
    check_model(BUILDERS[name](), {"x": x}, rtol=1e-4, atol=1e-4)


# Kernels spread their loops, GEMMs and convolutions over the threads they
# are given; large enough batches cut the work into pieces. 5 threads is
# more than this machine's cores: pieces then share them.
@pytest.mark.parametrize("threads", [1, 2, 5])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_model_matches_onnxruntime_on_any_thread_count(name, threads):
    x = example_input(name, 16)
    check_model(BUILDERS[name](), {"x": x}, rtol=1e-4, atol=1e-4, extra=("--threads", str(threads)))


def test_plan_folds_fuses_and_reuses_memory(tmp_path):
    path = str(tmp_path / "cnn.onnx")
    onnx.save(BUILDERS["cnn"](), path)
    p = run_gpusrv(path, {"x": example_input("cnn", 2)}, str(tmp_path), extra=["--report"])
    assert p.returncode == 0, p.stderr
    m = re.search(r"(\d+) nodes -> (\d+) kernels \((\d+) folded while planning, (\d+) fused\); "
                  r"arena (\d+) bytes \(naive sum (\d+)\)", p.stdout)
    assert m, p.stdout
    nodes, kernels, folded, fused, arena, naive = map(int, m.groups())
    assert nodes == 14
    # Three Conv+BatchNormalization pairs, and two Relus after a fused conv; the Flatten
    # before the classifier takes its input's bytes in place.
    assert fused == 5 and kernels == nodes - fused - 1
    assert "reshapes that copy nothing (the output takes the input's memory): 1" in p.stdout
    # The peak is the 2x16x32x32 float map beside the pooled one (160 KiB):
    # nothing else needs to be alive then, so no layout can do better.
    assert arena == (2 * 16 * 32 * 32 + 2 * 16 * 16 * 16) * 4, (arena, naive)
    assert arena < 0.6 * naive


def test_elementwise_steps_write_over_inputs_that_die():
    """A squeeze-excitation's Mul(scale, x) writes over x, the full-shape
    input that dies there (never over the broadcast scale); a Tanh whose
    input is read again later writes a tensor of its own; the graph output
    is never an input's place. The report counts the three steps that
    write over their inputs (Sigmoid, Mul, Add), and the values equal
    onnxruntime's, on every device (all of them allow it)."""
    from gsonnx import make_model
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 8, 6, 6)).astype(np.float32)
    w = rng.standard_normal((8, 8, 1, 1)).astype(np.float32)
    nodes = [onnx.helper.make_node("Conv", ["x", "w"], ["a"]),
             onnx.helper.make_node("GlobalAveragePool", ["a"], ["p"]),
             onnx.helper.make_node("Sigmoid", ["p"], ["s"]),
             onnx.helper.make_node("Mul", ["s", "a"], ["c"]),
             onnx.helper.make_node("Tanh", ["c"], ["t"]),
             onnx.helper.make_node("Add", ["t", "c"], ["u"]),
             onnx.helper.make_node("Neg", ["u"], ["y"])]
    _, report = check_model(make_model(nodes, {"x": x}, {"w": w}), {"x": x}, with_report=True,
                            on_device=["Sigmoid", "Mul", "Tanh", "Add", "Neg"])
    m = re.search(r"write over an input dying there: (\d+)", report)
    assert m and int(m.group(1)) == 3, report


def test_a_squeeze_excitation_between_convolutions_writes_over_its_input():
    """EfficientNet's block: Conv, then its pooled, squeezed and sigmoided
    scale times it, then a 1x1 Conv (the Relu joins its Conv). Two steps
    write over their inputs: the Sigmoid and the Mul. With the Conv's
    output also a graph output, so that it outlives the Mul, only the
    Sigmoid does: the Mul was the other. On cpu0 the block is one
    SqueezeExcite step (test_plan_squeeze.py), which writes over the Conv's
    output in the same way, on the channel-blocked tensors between the
    convolutions (both stay blocked). The values equal onnxruntime's."""
    from gsonnx import make_model, DEVICE
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 32, 10, 10)).astype(np.float32)
    consts = {"w1": rng.standard_normal((32, 32, 3, 3)).astype(np.float32) * 0.1,
              "wr": rng.standard_normal((8, 32, 1, 1)).astype(np.float32),
              "we": rng.standard_normal((32, 8, 1, 1)).astype(np.float32),
              "w2": rng.standard_normal((32, 32, 1, 1)).astype(np.float32)}
    nodes = [onnx.helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             onnx.helper.make_node("GlobalAveragePool", ["a"], ["p"]),
             onnx.helper.make_node("Conv", ["p", "wr"], ["q"]),
             onnx.helper.make_node("Relu", ["q"], ["r"]),
             onnx.helper.make_node("Conv", ["r", "we"], ["e"]),
             onnx.helper.make_node("Sigmoid", ["e"], ["s"]),
             onnx.helper.make_node("Mul", ["a", "s"], ["c"]),
             onnx.helper.make_node("Conv", ["c", "w2"], ["y"])]
    counts = []
    for outputs in (["y"], ["y", "a"]):
        _, report = check_model(make_model(nodes, {"x": x}, consts, outputs=outputs), {"x": x},
                                with_report=True, on_device=["Sigmoid", "Mul", "Conv"])
        m = re.search(r"write over an input dying there: (\d+)", report)
        counts.append(int(m.group(1)) if m else 0)
        if outputs == ["y"] and DEVICE in (None, "cpu0"):
            assert "2 values between convolutions stay in oneDNN's blocked layout" in report, \
                report
    assert counts == ([1, 0] if DEVICE in (None, "cpu0") else [2, 1]), counts


def slice_node(src, out, start, end, axis=1, step=None):
    """A Slice of src along `axis` (constants named after the output)."""
    names = [src, f"{out}_s", f"{out}_e", f"{out}_a"] + ([f"{out}_p"] if step else [])
    consts = {f"{out}_s": np.array([start], np.int64), f"{out}_e": np.array([end], np.int64),
              f"{out}_a": np.array([axis], np.int64)}
    if step:
        consts[f"{out}_p"] = np.array([step], np.int64)
    return onnx.helper.make_node("Slice", names, [out]), consts


def slice_case(case):
    """A Conv's output c [batch, 8, 4, 4] (64 bytes a channel) sliced as the
    case says, and the slices through later steps."""
    from gsonnx import make_model
    rng = np.random.default_rng(9)
    batch = 2 if case == "batch of two" else 1
    side = 3 if case == "unaligned" else 4  # 36 bytes a channel: a run from channel 1 is not
    x = rng.standard_normal((batch, 3, side, side)).astype(np.float32)
    consts = {"w": rng.standard_normal((8, 3, 1, 1)).astype(np.float32)}
    nodes = [onnx.helper.make_node("Conv", ["x", "w"], ["c"])]
    outputs = ["y"]

    def add(node_consts):
        nodes.append(node_consts[0])
        consts.update(node_consts[1])

    def split_and_join(first, second, second_op):
        """c's channels [first) and [second) each through a step, then joined."""
        add(slice_node("c", "a", *first))
        add(slice_node("c", "b", *second))
        nodes.extend([onnx.helper.make_node("Relu", ["a"], ["ra"]),
                      onnx.helper.make_node(second_op, ["b"], ["tb"]),
                      onnx.helper.make_node("Concat", ["ra", "tb"], ["y"], axis=1)])

    if case in ("channel split", "batch of two", "also an output"):
        # ShuffleNet's split: each half through its own step, then joined again.
        split_and_join((0, 4), (4, 8), "Sigmoid")
        if case == "also an output":
            outputs.append("c")
    elif case == "a view read beside its root":
        # Mul(c, c[:, :1]) broadcast: c dies there, but the step reads the view
        # of its first channel after writing over it, were c written over.
        add(slice_node("c", "v", 0, 1))
        nodes += [onnx.helper.make_node("Mul", ["c", "v"], ["m"]),
                  onnx.helper.make_node("Neg", ["m"], ["y"])]
    elif case == "overlapping views":
        # Relu of the first view may not write over bytes the second reads later.
        split_and_join((0, 4), (2, 6), "Neg")
    elif case == "a graph input":
        nodes = []
        add(slice_node("x", "a", 1, 3))
        nodes.append(onnx.helper.make_node("Relu", ["a"], ["y"]))
    elif case == "unaligned":
        add(slice_node("c", "a", 1, 5))  # one run, 36 bytes in
        nodes.append(onnx.helper.make_node("Relu", ["a"], ["y"]))
    elif case == "strided":
        add(slice_node("c", "a", 0, 8, step=2))
        nodes.append(onnx.helper.make_node("Relu", ["a"], ["y"]))
    if case == "a graph input":
        consts = {k: v for k, v in consts.items() if k != "w"}
    return make_model(nodes, {"x": x}, consts, outputs), {"x": x}


@pytest.mark.parametrize("case, views", [
    ("channel split", 2), ("a view read beside its root", 1), ("overlapping views", 2),
    ("batch of two", 0), ("also an output", 0), ("a graph input", 0), ("unaligned", 0),
    ("strided", 0)])
def test_a_contiguous_slice_is_read_in_place(case, views):
    """A Slice whose output is one run of its input's bytes, starting on the
    arena's 64-byte alignment, copies nothing: its output is a view of that
    part of the input (ShuffleNet v2's channel split at batch 1). Never
    where the caller's buffers may stand in for the input (a graph input or
    output), and no step writes over bytes a view still reads. The values
    equal onnxruntime's in every case, on every device."""
    model, feeds = slice_case(case)
    _, report = check_model(model, feeds, with_report=True)
    m = re.search(r"slices read in place \(a contiguous part of the input\): (\d+)", report)
    assert (int(m.group(1)) if m else 0) == views, report


@pytest.mark.parametrize("name", ["cnn", "mlp", "transformer"])
def test_fallback_is_reported(tmp_path, name):
    """A backend with none of the engine's kernels (testcpu0) runs every op
    on the CPU instead, and the plan says so; the CPU itself and the devices
    with the engine's kernels (OpenCL, CUDA) run every op of the test models
    themselves."""
    from gsonnx import DEVICE, KERNEL_DEVICES
    path = str(tmp_path / f"{name}.onnx")
    onnx.save(BUILDERS[name](), path)
    p = run_gpusrv(path, {"x": example_input(name, 1)}, str(tmp_path), extra=["--report"])
    assert p.returncode == 0, p.stderr
    if DEVICE == "testcpu0":
        op = {"cnn": "Conv", "mlp": "MatMul", "transformer": "MatMul"}[name]
        assert "run on the CPU instead" in p.stdout and op in p.stdout, p.stdout
        if name == "mlp":  # every kernel on the host: x goes down, the output up
            assert "copied around them per run: 1 to the host, 1 to the device" in p.stdout, \
                p.stdout
        # The values kept on the host share places by lifetime, as the arena's do.
        staging, unshared = map(float, re.search(
            r"in ([\d.]+) KiB of staging \(([\d.]+) KiB unshared\)", p.stdout).groups())
        assert staging < unshared, p.stdout
    elif DEVICE in (None, "cpu0") + KERNEL_DEVICES:
        assert "instead" not in p.stdout, p.stdout


def test_transformer_reshapes_fold_and_matmul_add_fuses(tmp_path):
    path = str(tmp_path / "t.onnx")
    onnx.save(BUILDERS["transformer"](), path)
    p = run_gpusrv(path, {"x": example_input("transformer", 1)}, str(tmp_path), extra=["--report"])
    assert p.returncode == 0, p.stderr
    from gsonnx import DEVICE
    fused = int(re.search(r"(\d+) fused", p.stdout).group(1))
    # q, k, v, o, ff1 and ff2 each fold their bias Add into the MatMul; where the
    # device has the Attention kernel (the CPU), the scores' MatMul, their scale,
    # the Softmax and K's last Transpose join the second MatMul as one step.
    attention = DEVICE in (None, "cpu0")
    assert fused == 6 + 4 * attention, p.stdout
    assert ("1 attention blocks" in p.stdout) == attention, p.stdout


def test_digits_demo_accuracy(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "models", "digits"))
    from train import held_out_split
    _, x_test, _, y_test = held_out_split()
    model = os.path.join(ROOT, "models", "digits", "1", "model.onnx")
    p = run_gpusrv(model, {"pixels": x_test}, str(tmp_path))
    assert p.returncode == 0, p.stderr
    probs = load_outputs(str(tmp_path), ["probs"])["probs"]
    assert probs.shape == (len(y_test), 10)
    accuracy = float((probs.argmax(axis=1) == y_test).mean())
    print(f"digits held-out accuracy through gpusrv: {accuracy:.4f} on {len(y_test)} images")
    assert accuracy >= 0.95


def test_wrong_input_shape_names_input_expected_and_got(tmp_path):
    model = os.path.join(ROOT, "models", "digits", "1", "model.onnx")
    p = run_gpusrv(model, {"pixels": np.zeros((3, 60), np.float32)}, str(tmp_path))
    assert p.returncode == 1
    assert "input pixels" in p.stderr and "[batch, 64]" in p.stderr.replace("?", "batch") \
        or "expected shape" in p.stderr, p.stderr
    assert "[3, 60]" in p.stderr


def test_run_argument_errors(tmp_path):
    model = os.path.join(ROOT, "models", "digits", "1", "model.onnx")
    np.save(tmp_path / "x.npy", np.zeros((2, 64), np.float32))
    np.save(tmp_path / "x64.npy", np.zeros((2, 64), np.float64))
    cases = [
        ([model, "-o", str(tmp_path / "o")], 2, "input 'pixels' is missing"),
        ([model, "-i", f"nope={tmp_path}/x.npy", "-o", str(tmp_path / "o")], 2, "no input 'nope'"),
        ([model, "-i", f"pixels={tmp_path}/x64.npy", "-o", str(tmp_path / "o")], 1, "must be float32"),
        ([model, "-i", f"pixels={tmp_path}/missing.npy", "-o", str(tmp_path / "o")], 1, "cannot open"),
        ([model, "-i", f"pixels={tmp_path}/x.npy"], 2, "-o OUTDIR is required"),
        ([model, "-i", f"pixels={tmp_path}/x.npy", "-o", str(tmp_path / "o"), "--device", "gpu9"], 1,
         "no device 'gpu9'"),
        ([model, "-i", f"pixels={tmp_path}/x.npy", "-o", str(tmp_path / "o"), "--precision", "fp8"], 2,
         "--precision"),
        ([model, "-i", f"pixels={tmp_path}/x.npy", "-o", str(tmp_path / "o"), "--threads", "0"], 2,
         "--threads"),
        ([str(tmp_path / "none.onnx"), "-i", f"pixels={tmp_path}/x.npy", "-o", str(tmp_path / "o")], 1,
         "cannot open"),
    ]
    for args, code, text in cases:
        p = subprocess.run([GPUSRV, "model", "run", *args], capture_output=True, text=True)
        assert p.returncode == code, (args, p.returncode, p.stderr)
        assert text in p.stderr, (args, p.stderr)
        assert p.stdout == ""


# Reduced precision: 16-bit weights and activations (each kernel computes in
# float32). The test reports how far each model's outputs move from
# onnxruntime's float32 ones, relative to the outputs' range, and bounds it.
PRECISION_BOUNDS = {"fp16": 2e-3, "bf16": 2e-2}


@pytest.mark.parametrize("precision", sorted(PRECISION_BOUNDS))
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_reduced_precision_accuracy(tmp_path, name, precision):
    import onnxruntime as ort
    path = str(tmp_path / "m.onnx")
    onnx.save(BUILDERS[name](), path)
    x = example_input(name, 4)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    p = run_gpusrv(path, {"x": x}, str(tmp_path), extra=["--precision", precision, "--report"])
    if p.returncode != 0 and f"cannot run {precision} plans" in p.stderr:
        pytest.skip(p.stderr.strip())  # the device lacks 16-bit tensors (caps.half_precision)
    assert p.returncode == 0, p.stderr
    from gsonnx import DEVICE, KERNEL_DEVICES
    if DEVICE in KERNEL_DEVICES and precision == "fp16":  # float16 kernels: nothing falls back
        assert "instead" not in p.stdout, p.stdout
    out_name = onnx.load(path).graph.output[0].name
    got = load_outputs(str(tmp_path), [out_name])[out_name]
    assert got.dtype == np.float32 and got.shape == ref.shape
    scale = float(np.abs(ref).max())
    err = float(np.abs(got.astype(np.float64) - ref).max()) / scale
    print(f"{name} {precision}: max |gpusrv - onnxruntime fp32| = {err:.2e} of the output range")
    assert err <= PRECISION_BOUNDS[precision], err
    assert err > 0  # the plan did compute in 16 bits


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_digits_accuracy_in_reduced_precision(tmp_path, precision):
    sys.path.insert(0, os.path.join(ROOT, "models", "digits"))
    from train import held_out_split
    _, x_test, _, y_test = held_out_split()
    model = os.path.join(ROOT, "models", "digits", "1", "model.onnx")
    p = run_gpusrv(model, {"pixels": x_test}, str(tmp_path), extra=["--precision", precision])
    if p.returncode != 0 and f"cannot run {precision} plans" in p.stderr:
        pytest.skip(p.stderr.strip())  # the device lacks 16-bit tensors (caps.half_precision)
    assert p.returncode == 0, p.stderr
    probs = load_outputs(str(tmp_path), ["probs"])["probs"]
    accuracy = float((probs.argmax(axis=1) == y_test).mean())
    print(f"digits held-out accuracy in {precision}: {accuracy:.4f}")
    assert accuracy >= 0.95


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_reduced_precision_plans_take_float_inputs_by_value(tmp_path, precision):
    """Resize's scales and a float Range's limit as model inputs, in a 16-bit plan."""
    from onnx import helper
    from gsonnx import make_model
    x = np.random.default_rng(3).random((1, 2, 4, 4), dtype=np.float32)
    feeds = {"x": x, "scales": np.array([1, 1, 2, 1.5], np.float32),
             "limit": np.array(3.0, np.float32)}
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest"),
             helper.make_node("Range", ["zero", "limit", "one"], ["r"])]
    consts = {"zero": np.array(0.0, np.float32), "one": np.array(1.0, np.float32)}
    m = make_model(nodes, feeds, consts, outputs=["y", "r"])
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    p = run_gpusrv(path, feeds, str(tmp_path), extra=["--precision", precision])
    assert p.returncode == 0, p.stderr
    y, r = load_outputs(str(tmp_path), ["y", "r"]).values()
    assert y.shape == (1, 2, 8, 6) and y.dtype == np.float32
    np.testing.assert_allclose(r, [0.0, 1.0, 2.0])
