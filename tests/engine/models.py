"""Whole models the tests and benchmarks generate with the onnx package: an
MLP, a small CNN (conv, batch-norm, pooling, a residual add) and a
transformer encoder block (attention with MatMul/Transpose/Softmax,
LayerNorm, Gelu). Each takes a symbolic batch dimension."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 20  # Gelu is an ONNX op from opset 20


def _model(nodes, inputs, outputs, inits, name):
    graph = helper.make_graph(nodes, name, inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="gpusrv tests")
    model.ir_version = 9
    return model


def mlp(seed=0, d_in=256, hidden=(512, 256), d_out=10):
    rng = np.random.default_rng(seed)
    inits, nodes, prev, width = {}, [], "x", d_in
    for i, h in enumerate(hidden):
        inits[f"w{i}"] = (rng.standard_normal((width, h)) / np.sqrt(width)).astype(np.float32)
        inits[f"b{i}"] = rng.standard_normal(h).astype(np.float32) * 0.1
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"h{i}"])]
        prev, width = f"h{i}", h
    inits["wo"] = (rng.standard_normal((width, d_out)) / np.sqrt(width)).astype(np.float32)
    inits["bo"] = np.zeros(d_out, np.float32)
    nodes += [helper.make_node("Gemm", [prev, "wo", "bo"], ["logits"]),
              helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", d_in])],
                  [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", d_out])],
                  inits, "mlp")


def cnn(seed=0, channels=16, size=32, classes=10):
    rng = np.random.default_rng(seed)
    c = channels
    inits = {}

    def conv(name, cin, cout, k):
        inits[name + ".w"] = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        inits[name + ".b"] = rng.standard_normal(cout).astype(np.float32) * 0.1

    def bn(name, ch):
        inits[name + ".s"] = rng.uniform(0.5, 1.5, ch).astype(np.float32)
        inits[name + ".b"] = rng.standard_normal(ch).astype(np.float32) * 0.1
        inits[name + ".m"] = rng.standard_normal(ch).astype(np.float32) * 0.1
        inits[name + ".v"] = rng.uniform(0.5, 1.5, ch).astype(np.float32)

    conv("c1", 3, c, 3)
    bn("bn1", c)
    conv("c2", c, c, 3)
    bn("bn2", c)
    conv("c3", c, c, 3)
    bn("bn3", c)
    inits["fc.w"] = (rng.standard_normal((classes, c)) / np.sqrt(c)).astype(np.float32)
    inits["fc.b"] = np.zeros(classes, np.float32)
    p1 = {"pads": [1, 1, 1, 1]}
    nodes = [
        helper.make_node("Conv", ["x", "c1.w", "c1.b"], ["c1"], **p1),
        helper.make_node("BatchNormalization", ["c1", "bn1.s", "bn1.b", "bn1.m", "bn1.v"], ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "c2.w", "c2.b"], ["c2"], **p1),
        helper.make_node("BatchNormalization", ["c2", "bn2.s", "bn2.b", "bn2.m", "bn2.v"], ["n2"]),
        helper.make_node("Relu", ["n2"], ["r2"]),
        helper.make_node("Conv", ["r2", "c3.w", "c3.b"], ["c3"], **p1),
        helper.make_node("BatchNormalization", ["c3", "bn3.s", "bn3.b", "bn3.m", "bn3.v"], ["n3"]),
        helper.make_node("Add", ["n3", "p1"], ["res"]),  # the residual connection
        helper.make_node("Relu", ["res"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], transB=1),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, size, size])],
                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])],
                  inits, "cnn")


def transformer(seed=0, seq=32, d=64, heads=4, ff=256):
    rng = np.random.default_rng(seed)
    dh = d // heads
    inits = {}

    def lin(name, i, o):
        inits[name + ".w"] = (rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32)
        inits[name + ".b"] = rng.standard_normal(o).astype(np.float32) * 0.02

    for n in ("q", "k", "v", "o"):
        lin(n, d, d)
    lin("ff1", d, ff)
    lin("ff2", ff, d)
    for n in ("ln1", "ln2"):
        inits[n + ".s"] = rng.uniform(0.8, 1.2, d).astype(np.float32)
        inits[n + ".b"] = rng.standard_normal(d).astype(np.float32) * 0.02
    inits["heads_shape"] = np.array([0, 0, heads, dh], np.int64)  # 0 copies batch and seq
    inits["model_shape"] = np.array([0, 0, d], np.int64)
    inits["scale"] = np.array(1.0 / np.sqrt(dh), np.float32)

    def linear(name, x, out):
        return [helper.make_node("MatMul", [x, name + ".w"], [out + "_mm"]),
                helper.make_node("Add", [out + "_mm", name + ".b"], [out])]

    nodes = [helper.make_node("LayerNormalization", ["x", "ln1.s", "ln1.b"], ["h"], axis=-1, epsilon=1e-5)]
    for n in ("q", "k", "v"):
        nodes += linear(n, "h", n)
        nodes += [helper.make_node("Reshape", [n, "heads_shape"], [n + "_4d"]),
                  helper.make_node("Transpose", [n + "_4d"], [n + "_h"], perm=[0, 2, 1, 3])]
    nodes += [
        helper.make_node("Transpose", ["k_h"], ["k_t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q_h", "k_t"], ["scores_raw"]),
        helper.make_node("Mul", ["scores_raw", "scale"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "v_h"], ["ctx_h"]),
        helper.make_node("Transpose", ["ctx_h"], ["ctx_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx_t", "model_shape"], ["ctx"]),
    ]
    nodes += linear("o", "ctx", "attn_out")
    nodes += [helper.make_node("Add", ["x", "attn_out"], ["res1"]),
              helper.make_node("LayerNormalization", ["res1", "ln2.s", "ln2.b"], ["h2"], axis=-1)]
    nodes += linear("ff1", "h2", "f1")
    nodes += [helper.make_node("Gelu", ["f1"], ["g"])]
    nodes += linear("ff2", "g", "f2")
    nodes += [helper.make_node("Add", ["res1", "f2"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, d])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", seq, d])],
                  inits, "transformer")


def example_input(name, batch, seed=1):
    rng = np.random.default_rng(seed)
    shapes = {"mlp": (batch, 256), "cnn": (batch, 3, 32, 32), "transformer": (batch, 32, 64)}
    return rng.standard_normal(shapes[name]).astype(np.float32)


BUILDERS = {"mlp": mlp, "cnn": cnn, "transformer": transformer}


def simple_add_sub():
    """Triton's "simple" example: OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 =
    INPUT0 - INPUT1, int32 [batch, 16]: next to no compute, so serving it
    measures the server's own overhead."""
    ins = [helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", 16]) for n in ("INPUT0", "INPUT1")]
    outs = [helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", 16]) for n in ("OUTPUT0", "OUTPUT1")]
    nodes = [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
             helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])]
    return _model(nodes, ins, outs, {}, "simple")
