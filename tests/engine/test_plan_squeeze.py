"""Squeeze-excitation blocks run as one step (src/engine/plan_squeeze.c, the
CPU's kernel in src/hal/cpu/ops/k_squeeze.c): GlobalAveragePool of x, a 1x1
Conv with its activation, a 1x1 Conv, Sigmoid or HardSigmoid, and the Mul of
x by that gate, as torchvision's EfficientNet, MobileNetV3 and RegNetY
exports write them. Each model against onnxruntime, with the plan's report
saying whether the block became one step: on the CPU it does; the other
devices lack the kernel and run the ops as written, with the same answers.
What differs from the pattern in any part stays as it is."""
import re

import numpy as np
import pytest
from onnx import helper

from gsonnx import DEVICE, check_model, make_model

FUSES = DEVICE in (None, "cpu0")  # the kernel is the CPU's alone

rng = np.random.default_rng(17)


def f32(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


# The activation after the first 1x1 Conv: nodes from "h" to "hr".
ACTS = {
    "none": [],
    "relu": [helper.make_node("Relu", ["h"], ["hr"])],
    "silu": [helper.make_node("Sigmoid", ["h"], ["hs"]), helper.make_node("Mul", ["h", "hs"], ["hr"])],
    "relu6": [helper.make_node("Clip", ["h", "lo", "hi"], ["hr"])],
}
GATES = {
    "sigmoid": helper.make_node("Sigmoid", ["e"], ["s"], name="gate"),
    "hardsigmoid": helper.make_node("HardSigmoid", ["e"], ["s"], alpha=1 / 6, beta=0.5,
                                    name="gate"),
}


def se_model(channels=32, squeezed=8, batch=1, spatial=(9, 7), act="relu", gate="sigmoid",
             biases=True, gate_first=False, conv_before=True, conv_after=True, outputs=None,
             changes=None):
    """A squeeze-excitation of x [batch, channels, *spatial], between two
    convolutions unless told otherwise (x is then the graph input, or m the
    output). changes: node name -> (a replacement node or a list of them,
    the constants they read), for the cases that must not fuse."""
    x = f32(batch, 3 if conv_before else channels, *spatial)
    ones = [1] * len(spatial)
    consts = {"w1": f32(squeezed, channels, *ones), "w2": f32(channels, squeezed, *ones),
              "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    if biases:
        consts.update(b1=f32(squeezed), b2=f32(channels))
    nodes = []
    if conv_before:
        consts["w0"] = f32(channels, 3, *[3] * len(spatial), lo=-0.3, hi=0.3)
        nodes.append(helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1] * 2 * len(spatial)))
    src = "a" if conv_before else "x"
    bias = (lambda b: [b]) if biases else (lambda b: [])
    nodes += [helper.make_node("GlobalAveragePool", [src], ["p"], name="pool"),
              helper.make_node("Conv", ["p", "w1", *bias("b1")], ["h"], name="reduce"),
              *ACTS[act],
              helper.make_node("Conv", ["hr" if ACTS[act] else "h", "w2", *bias("b2")], ["e"],
                               name="expand"),
              GATES[gate],
              helper.make_node("Mul", ["s", src] if gate_first else [src, "s"], ["m"],
                               name="scale")]
    if conv_after:
        consts["w3"] = f32(5, channels, *ones)
        nodes.append(helper.make_node("Conv", ["m", "w3"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", ["m"], ["y"], name="tail"))
    for name, (new, more) in (changes or {}).items():
        at = [n.name for n in nodes].index(name)
        nodes[at:at + 1] = new if isinstance(new, list) else [new]
        consts.update(more)
    consts = {k: v for k, v in consts.items()
              if any(k in n.input for n in nodes)}  # unread initializers would be refused
    return make_model(nodes, {"x": x}, consts, outputs or ["y"]), {"x": x}


def run(model, feeds):
    """Checks the answers; returns how many blocks the plan made one step
    of, and its report."""
    _, text = check_model(model, feeds, rtol=1e-4, atol=1e-5, with_report=True)
    m = re.search(r"(\d+) squeeze-excitation blocks", text)
    return (int(m.group(1)) if m else 0), text


@pytest.mark.parametrize("case", [
    {},  # RegNetY's: Relu, Sigmoid, between convolutions in blocks of 16 or 8 channels
    {"act": "silu"},  # EfficientNet's
    {"gate": "hardsigmoid", "act": "relu"},  # MobileNetV3's
    {"act": "relu6", "gate_first": True},
    {"act": "none", "biases": False},
    {"batch": 3},
    {"channels": 12, "squeezed": 3},  # a multiple of no block: NCHW
    {"conv_before": False, "conv_after": False},  # x a graph input, m the output
    {"spatial": (20,)},
    {"spatial": (4, 3, 5), "batch": 2},
    {"spatial": (1, 1), "channels": 48, "squeezed": 12},
])
def test_a_squeeze_excitation_is_one_step(case):
    model, feeds = se_model(**case)
    blocks, text = run(model, feeds)
    assert blocks == (1 if FUSES else 0), text


def test_x_read_after_the_block_is_not_written_over():
    """x also feeds a residual Add after the block: the block is still one
    step, which then writes an output of its own, and x keeps its values."""
    model, feeds = se_model(conv_after=False,
                            changes={"tail": (helper.make_node("Add", ["m", "a"], ["y"]), {})})
    blocks, text = run(model, feeds)
    assert blocks == (1 if FUSES else 0), text


def test_the_step_writes_over_x_and_keeps_it_blocked():
    """x dies at the Mul: the fused step writes its output over it, and
    between the two convolutions both stay in the blocked layout."""
    model, feeds = se_model()
    blocks, text = run(model, feeds)
    if not FUSES:
        pytest.skip(f"{DEVICE} has no SqueezeExcite kernel")
    assert blocks == 1, text
    assert re.search(r"write over an input dying there: 1\b", text), text
    assert "2 values between convolutions stay in oneDNN's blocked layout" in text, text


@pytest.mark.parametrize("case, extra", [
    ("the pooled means are also an output", {"outputs": ["y", "p"]}),
    ("the gate is also an output", {"outputs": ["y", "s"]}),
    ("the reduced values are also an output", {"outputs": ["y", "h"]}),
    ("the first product is a 3x3 convolution", {"changes": {"reduce": (helper.make_node(
        "Conv", ["p", "w1k", "b1"], ["h"], pads=[1, 1, 1, 1], name="reduce"),
        {"w1k": f32(8, 32, 3, 3)})}}),
    ("the second product has two groups", {"changes": {"expand": (helper.make_node(
        "Conv", ["hr", "w2g", "b2"], ["e"], group=2, name="expand"), {"w2g": f32(32, 4, 1, 1)})}}),
    ("the pooling takes the maximum", {"changes": {"pool": (helper.make_node(
        "GlobalMaxPool", ["a"], ["p"], name="pool"), {})}}),
    ("the gate scales another tensor", {"changes": {"scale": ([
        helper.make_node("Conv", ["x", "w0b"], ["a2"], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["a2", "s"], ["m"])], {"w0b": f32(32, 3, 3, 3)})}}),
    ("the second product has an activation", {"changes": {"gate": ([
        helper.make_node("Relu", ["e"], ["er"]), helper.make_node("Sigmoid", ["er"], ["s"])],
        {})}}),
    ("the second product's weights are an input", {"changes": {"expand": (helper.make_node(
        "Conv", ["hr", "w2in", "b2"], ["e"], name="expand"), {})}}),
])
def test_what_is_not_a_squeeze_excitation_stays(case, extra):
    model, feeds = se_model(**extra)
    if "w2in" in str(extra):
        w2 = f32(32, 8, 1, 1)
        model.graph.input.append(helper.make_tensor_value_info("w2in", 1, list(w2.shape)))
        feeds = {**feeds, "w2in": w2}
    blocks, text = run(model, feeds)
    assert blocks == 0, (case, text)
