"""Fusions of a plan's steps (src/engine/plan_fuse.c): the activations that
exporters write after a Conv, Gemm or MatMul (Relu, Clip as ReLU6,
HardSwish, SiLU as Sigmoid and Mul, GELU as torch's Div, Erf, Add, Mul,
Mul) run inside that op's kernel on the CPU. Each against onnxruntime, with
the plan's report saying how many steps went; on a device whose kernels
take only Relu the other steps stay, and the answers are the same."""
import os
import re
import tempfile

import numpy as np
import onnx
import pytest
from onnx import helper

from gsonnx import DEVICE, check_model, cpu_fallback_ops, make_model, run_gpusrv

rng = np.random.default_rng(11)


def f32(*shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def scalar(v):
    return np.array(v, np.float32)


# Each activation: nodes from "p" to "y", the constants they read, and how
# many steps it spans.
ACTIVATIONS = {
    "relu": ([helper.make_node("Relu", ["p"], ["y"])], {}, 1),
    "relu6": ([helper.make_node("Clip", ["p", "lo", "hi"], ["y"])],
              {"lo": scalar(0), "hi": scalar(6)}, 1),
    "clip_max_only": ([helper.make_node("Clip", ["p", "", "hi"], ["y"])], {"hi": scalar(0.5)}, 1),
    "hardswish": ([helper.make_node("HardSwish", ["p"], ["y"])], {}, 1),
    "silu": ([helper.make_node("Sigmoid", ["p"], ["s"]),
              helper.make_node("Mul", ["p", "s"], ["y"])], {}, 2),
    "gelu": ([helper.make_node("Div", ["p", "sqrt2"], ["d"]),
              helper.make_node("Erf", ["d"], ["e"]),
              helper.make_node("Add", ["e", "one"], ["a"]),
              helper.make_node("Mul", ["p", "a"], ["m"]),
              helper.make_node("Mul", ["m", "half"], ["y"])],
             {"sqrt2": scalar(1.4142135), "one": scalar(1), "half": scalar(0.5)}, 5),
}

# Each producer: its nodes from "x" to "p", its weights, and an input.
PRODUCERS = {
    "conv": (lambda: [helper.make_node("Conv", ["x", "w", "b"], ["p"], pads=[1, 1, 1, 1])],
             lambda: {"w": f32(8, 4, 3, 3, lo=-0.5, hi=0.5), "b": f32(8)},
             lambda: f32(2, 4, 9, 9)),
    # 1x1, 5 -> 7 channels: on the CPU a GEMM rather than oneDNN (channels that are not a
    # multiple of its block), with bias and activation applied row by row.
    "conv1x1": (lambda: [helper.make_node("Conv", ["x", "w", "b"], ["p"])],
                lambda: {"w": f32(7, 5, 1, 1, lo=-0.5, hi=0.5), "b": f32(7)},
                lambda: f32(2, 5, 6, 7)),
    "depthwise": (lambda: [helper.make_node("Conv", ["x", "w"], ["p"], group=4, pads=[1, 1, 1, 1])],
                  lambda: {"w": f32(4, 1, 3, 3)},
                  lambda: f32(1, 4, 16, 16)),
    "gemm": (lambda: [helper.make_node("Gemm", ["x", "w", "b"], ["p"], transB=1)],
             lambda: {"w": f32(6, 5), "b": f32(6)},
             lambda: f32(3, 5)),
    "matmul_add": (lambda: [helper.make_node("MatMul", ["x", "w"], ["q"]),
                            helper.make_node("Add", ["q", "b"], ["p"])],
                   lambda: {"w": f32(5, 7), "b": f32(7)},
                   lambda: f32(2, 3, 5)),
}


def report_text(model, feeds):
    """What `gpusrv model run --report` prints about the plan."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        onnx.save(model, path)
        p = run_gpusrv(path, feeds, d, extra=("--report",))
    assert p.returncode == 0, p.stderr
    return p.stdout


def report(model, feeds):
    text = report_text(model, feeds)
    m = re.search(r"(\d+) nodes -> (\d+) kernels \((\d+) folded while planning, (\d+) fused\)",
                  text)
    assert m, text
    return tuple(map(int, m.groups()))


@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
@pytest.mark.parametrize("producer", sorted(PRODUCERS))
def test_activation_runs_inside_its_producer(producer, act):
    nodes_of, weights_of, input_of = PRODUCERS[producer]
    act_nodes, consts, spans = ACTIVATIONS[act]
    x = input_of()
    consts = {**weights_of(), **consts}
    model = make_model(nodes_of() + act_nodes, {"x": x}, consts)
    check_model(model, {"x": x}, rtol=1e-4, atol=1e-4)
    nodes, kernels, folded, fused = report(model, {"x": x})
    bias_fused = 1 if producer == "matmul_add" else 0
    # The CPU's kernels take every activation, also where a device without
    # the op's kernel (testcpu0) runs them; device kernels take Relu only.
    if DEVICE in (None, "cpu0", "testcpu0") or act == "relu":
        assert fused == bias_fused + 1 and kernels == 1, (nodes, kernels, fused)
    else:
        assert kernels == 1 + spans, (nodes, kernels, fused)


def test_shared_producer_output_is_not_fused():
    # The conv's output is read by the Sigmoid, the Mul and a graph output:
    # it must stay as it is.
    x = f32(1, 4, 8, 8)
    nodes = [helper.make_node("Conv", ["x", "w"], ["p"]),
             helper.make_node("Sigmoid", ["p"], ["s"]),
             helper.make_node("Mul", ["p", "s"], ["y"])]
    model = make_model(nodes, {"x": x}, {"w": f32(4, 4, 1, 1)}, ["y", "p"])
    check_model(model, {"x": x}, rtol=1e-4, atol=1e-4)
    assert report(model, {"x": x})[3] == 0


def test_gelu_with_other_constants_is_not_fused():
    # Div by 2 is not GELU's sqrt(2): the steps run as written.
    x = f32(3, 5)
    act_nodes, consts, _ = ACTIVATIONS["gelu"]
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["p"])] + act_nodes, {"x": x},
                       {"w": f32(5, 4), **consts, "sqrt2": scalar(2.0)})
    check_model(model, {"x": x}, rtol=1e-4, atol=1e-4)
    assert report(model, {"x": x})[3] == 0


def blocked_values(model, feeds, with_block=False):
    """The count of values the plan keeps blocked (0 where none), and with
    with_block the channels of a block too (0 where none is said)."""
    m = re.search(r"(\d+) values between convolutions stay in oneDNN's blocked layout"
                  r" \(blocks of (\d+) channels\)", report_text(model, feeds))
    count, block = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    return (count, block) if with_block else count


@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_values_between_convolutions_stay_blocked(spatial):
    # conv -> depthwise conv (SiLU fused) -> conv -> conv with 24 channels
    # (a multiple of AVX2's block of 8, not of AVX-512's 16). The first two
    # values between convolutions stay in oneDNN's blocked layout on the CPU,
    # and the third where the block is 8; the answers are onnxruntime's.
    size = {1: [50], 2: [12, 11], 3: [6, 5, 7]}[spatial]
    k = [3] * spatial
    pads = [1] * (2 * spatial)
    x = f32(2, 8, *size)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=k, pads=pads),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], group=32, kernel_shape=k, pads=pads),
             helper.make_node("Sigmoid", ["c2"], ["s2"]),
             helper.make_node("Mul", ["c2", "s2"], ["m2"]),
             helper.make_node("Conv", ["m2", "w3"], ["c3"], kernel_shape=[1] * spatial),
             helper.make_node("Conv", ["c3", "w4"], ["y"], kernel_shape=[1] * spatial)]
    consts = {"w1": f32(32, 8, *k, lo=-0.3, hi=0.3), "b1": f32(32),
              "w2": f32(32, 1, *k, lo=-0.3, hi=0.3), "w3": f32(24, 32, *[1] * spatial),
              "w4": f32(5, 24, *[1] * spatial)}
    model = make_model(nodes, {"x": x}, consts)
    check_model(model, {"x": x}, rtol=1e-4, atol=1e-4)
    count, block = blocked_values(model, {"x": x}, with_block=True)
    if DEVICE in (None, "cpu0"):
        assert block in (8, 16)
        assert count == (3 if block == 8 else 2)
    else:
        assert count == 0



def test_blocked_layout_runs_through_add_and_relu():
    # A residual block as ResNet's: the sums and the Relus between its convolutions stay
    # blocked too, as does a value read by a convolution and by an Add; the graph's output
    # is NCHW. Its answers are onnxruntime's.
    x = f32(2, 16, 10, 9)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w1"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["b"], ["rb"]),
             helper.make_node("Conv", ["rb", "w2"], ["c"]),
             helper.make_node("Add", ["c", "a"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Conv", ["r", "w3"], ["d"]),
             helper.make_node("Mul", ["d", "r"], ["e"]),
             helper.make_node("Conv", ["e", "w4"], ["y"])]
    consts = {"w0": f32(32, 16, 3, 3, lo=-0.2, hi=0.2), "w1": f32(32, 32, 3, 3, lo=-0.1, hi=0.1),
              "w2": f32(32, 32, 1, 1, lo=-0.3, hi=0.3), "w3": f32(32, 32, 1, 1, lo=-0.3, hi=0.3),
              "w4": f32(5, 32, 1, 1)}
    model = make_model(nodes, {"x": x}, consts)
    check_model(model, {"x": x}, rtol=1e-4, atol=1e-4)
    # a, rb (its Relu fused), r, d and e; c and s, which the Conv's residual sum and
    # its Relu took in, are no longer made.
    assert blocked_values(model, {"x": x}) == (5 if DEVICE in (None, "cpu0") else 0)


def test_a_broadcast_ends_a_blocked_run():
    # An Add of a per-channel constant reads the tensor by position in NCHW: the values
    # around it stay NCHW, and only the pair of convolutions after it keeps one blocked.
    x = f32(1, 16, 6, 6)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"]),
             helper.make_node("Add", ["a", "bias"], ["s"]),
             helper.make_node("Conv", ["s", "w1"], ["c"]),
             helper.make_node("Conv", ["c", "w2"], ["y"])]
    consts = {"w0": f32(32, 16, 1, 1), "bias": f32(1, 32, 1, 1), "w1": f32(32, 32, 1, 1),
              "w2": f32(4, 32, 1, 1)}
    model = make_model(nodes, {"x": x}, consts)
    check_model(model, {"x": x}, rtol=1e-4, atol=1e-4)
    assert blocked_values(model, {"x": x}) == (1 if DEVICE in (None, "cpu0") else 0)


def test_residual_sums_run_inside_the_convolution():
    # Two residual sums between blocked convolutions: the first, Add then Relu, has its
    # other operand made by a convolution listed after the one it is fused into (the fused
    # step runs where the Add was); the second adds the conv's own input, has no Relu, and
    # its conv no bias. On the CPU
    # oneDNN adds them as it writes (3 nodes fused); answers are onnxruntime's. With the
    # first sum also a graph output, kept in NCHW, the values around it stay NCHW too and
    # nothing is fused.
    x = f32(2, 16, 10, 9)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w1"], ["m"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w2", "b2"], ["sc"]),
             helper.make_node("Add", ["m", "sc"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Conv", ["r", "w3", ""], ["c"]),  # its bias left out by name
             helper.make_node("Add", ["r", "c"], ["t"]),
             helper.make_node("Conv", ["t", "w4"], ["y"])]
    consts = {"w0": f32(32, 16, 3, 3, lo=-0.2, hi=0.2), "w1": f32(32, 32, 3, 3, lo=-0.1, hi=0.1),
              "w2": f32(32, 16, 1, 1, lo=-0.3, hi=0.3), "b2": f32(32),
              "w3": f32(32, 32, 1, 1, lo=-0.3, hi=0.3), "w4": f32(5, 32, 1, 1)}
    model = make_model(nodes, {"x": x}, consts)
    check_model(model, {"x": x}, rtol=1e-4, atol=1e-4)
    on_cpu = DEVICE in (None, "cpu0")
    assert report(model, {"x": x})[3] == (3 if on_cpu else 0)
    shared = make_model(nodes, {"x": x}, consts, ["y", "s"])
    check_model(shared, {"x": x}, rtol=1e-4, atol=1e-4)
    assert report(shared, {"x": x})[3] == 0


def test_batchnorm_takes_the_relu_after_it():
    # DenseNet's pre-activation: a BatchNormalization no Conv before it can take (here
    # after a Concat), then Relu. The CPU's kernel applies the Relu in its pass; device
    # kernels do not take it, so the steps stay there. Values near 0 make the Relu matter.
    x = f32(2, 6, 5, 4)
    nodes = [helper.make_node("Concat", ["x", "x"], ["c"], axis=1),
             helper.make_node("BatchNormalization", ["c", "sc", "bi", "mu", "va"], ["b"]),
             helper.make_node("Relu", ["b"], ["y"])]
    consts = {"sc": f32(12), "bi": f32(12), "mu": f32(12),
              "va": np.abs(f32(12)) + np.float32(0.1)}
    model = make_model(nodes, {"x": x}, consts)
    check_model(model, {"x": x}, rtol=1e-5, atol=1e-6)
    assert report(model, {"x": x})[3] == (1 if DEVICE in (None, "cpu0", "testcpu0") else 0)
    # The normalised values also a graph output: they must stay as they are.
    shared = make_model(nodes, {"x": x}, consts, ["y", "b"])
    check_model(shared, {"x": x}, rtol=1e-5, atol=1e-6)
    assert report(shared, {"x": x})[3] == 0


@pytest.mark.parametrize("scale_first", [False, True])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("per_image", [True, False])
def test_squeeze_excitation_stays_blocked(per_image, batch, scale_first):
    # A squeeze-excitation between convolutions, as EfficientNet, MobileNet v3 and RegNetY
    # have: the pooled mean, two small convolutions and a sigmoid make one value per
    # channel, and a Mul scales the tensor by it. On the CPU the tensor and its scaled copy
    # stay in oneDNN's blocked layout (the pooling and the Mul read it so, or the one
    # SqueezeExcite step they become where the scale is per image: test_plan_squeeze.py),
    # where before both were reordered to NCHW. The scale is per image, or one per channel
    # shared by the batch. Answers are onnxruntime's.
    x = f32(batch, 16, 9, 7)
    se = [helper.make_node("GlobalAveragePool", ["a"], ["g"]),
          helper.make_node("Conv", ["g", "w1", "b1"], ["h"]),
          helper.make_node("Relu", ["h"], ["hr"]),
          helper.make_node("Conv", ["hr", "w2", "b2"], ["e"]),
          helper.make_node("Sigmoid", ["e"], ["s"])]
    if not per_image:
        se.append(helper.make_node("ReduceMean", ["s", "axes0"], ["s0"], keepdims=1))
    nodes = ([helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1])] + se +
             [helper.make_node("Mul", (["s" if per_image else "s0", "a"] if scale_first
                                       else ["a", "s" if per_image else "s0"]), ["m"]),
              helper.make_node("Conv", ["m", "w3"], ["y"])])
    # The excitation's 12 channels are a multiple of no block: its small values stay NCHW.
    consts = {"w0": f32(32, 16, 3, 3, lo=-0.2, hi=0.2), "w1": f32(12, 32, 1, 1), "b1": f32(12),
              "w2": f32(32, 12, 1, 1), "b2": f32(32), "w3": f32(5, 32, 1, 1)}
    if not per_image:
        consts["axes0"] = np.array([0], np.int64)
    model = make_model(nodes, {"x": x}, consts, opset=18)
    check_model(model, {"x": x}, rtol=1e-4, atol=1e-4)
    # a and m; the scale s ([N, C, 1, 1]) is read per channel, in NCHW.
    assert blocked_values(model, {"x": x}) == (2 if DEVICE in (None, "cpu0") else 0)


def shuffle_model(groups, channels, spatial, perm=None, concat_out=False, dtype=np.float32):
    """ShuffleNet's channel shuffle as torch.onnx writes it: Concat along the
    channels, Reshape to [N, G, C, ...], Transpose of axes 1 and 2, Reshape
    back to [N, G C, ...]."""
    n = 2
    inputs = {f"x{g}": (rng.uniform(-2, 2, (n, channels, *spatial)) * 100).astype(dtype)
              for g in range(groups)}
    rank = 3 + len(spatial)
    consts = {"mid": np.array([n, groups, channels, *spatial], np.int64),
              "flat": np.array([n, groups * channels, *spatial], np.int64)}
    nodes = [helper.make_node("Concat", list(inputs), ["c"], axis=1),
             helper.make_node("Reshape", ["c", "mid"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"],
                              perm=perm or [0, 2, 1, *range(3, rank)]),
             helper.make_node("Reshape", ["t", "flat"], ["y"])]
    outputs = [("y", dtype)] + ([("c", dtype)] if concat_out else [])
    return make_model(nodes, inputs, consts, outputs), inputs


def shuffle_fused(model, feeds):
    """The steps the plan fused, and what it would fuse in a shuffle: two
    where the device runs Concat itself (a device without the kernel, as
    testcpu0, leaves the steps to the CPU's fallback as written)."""
    text = report_text(model, feeds)
    fused = int(re.search(r"(\d+) fused\)", text).group(1))
    return fused, 0 if "Concat" in cpu_fallback_ops(text) else 2


@pytest.mark.parametrize("groups, channels, spatial",
                         [(2, 58, (7, 6)), (3, 5, (4,)), (2, 4, (3, 2, 2)), (4, 1, (5, 5)),
                          (2, 58, (28, 28))])
def test_channel_shuffle_is_one_concat(groups, channels, spatial):
    """The Concat interleaves the channels itself (plan_shuffle.c): the
    Transpose and the Reshape before it go, the answers stay."""
    model, feeds = shuffle_model(groups, channels, spatial)
    check_model(model, feeds)
    fused, expected = shuffle_fused(model, feeds)
    assert fused == expected


@pytest.mark.parametrize("case", ["other_perm", "concat_read_elsewhere", "int64"])
def test_what_is_not_a_channel_shuffle_stays(case):
    """Another permutation, or the Concat's output also a graph output,
    runs as written; other types shuffle too."""
    if case == "other_perm":
        model, feeds = shuffle_model(2, 3, (4, 5), perm=[0, 2, 1, 4, 3])
    elif case == "concat_read_elsewhere":
        model, feeds = shuffle_model(2, 3, (4, 5), concat_out=True)
    else:
        model, feeds = shuffle_model(2, 3, (4, 5), dtype=np.int64)
    check_model(model, feeds)
    fused, expected = shuffle_fused(model, feeds)
    assert fused == (expected if case == "int64" else 0)
