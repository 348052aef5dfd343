"""Writes the fuzzer's seed corpus (tests/fuzz/seeds): tiny versions of the
test models and single-op models, so that fuzzing starts from valid files
that reach every part of the decoder. Run: .venv/bin/python tests/fuzz/make_seeds.py"""
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "engine"))
from gsonnx import make_model  # noqa: E402
from models import cnn, mlp, transformer  # noqa: E402


def main():
    out = os.path.join(HERE, "seeds")
    os.makedirs(out, exist_ok=True)
    seeds = {
        "mlp.onnx": mlp(d_in=4, hidden=(3,), d_out=2),
        "cnn.onnx": cnn(channels=2, size=4, classes=2),
        "transformer.onnx": transformer(seq=2, d=4, heads=2, ff=4),
    }
    x = np.zeros((1, 2, 3), np.float32)
    singles = [
        ("slice", helper.make_node("Slice", ["x", "s", "e", "a", "p"], ["y"]),
         {"s": np.array([0], np.int64), "e": np.array([-1], np.int64), "a": np.array([2], np.int64),
          "p": np.array([1], np.int64)}),
        ("resize", helper.make_node("Resize", ["x", "r", "sc"], ["y"], mode="linear"),
         {"r": np.array([], np.float32), "sc": np.array([1, 1, 2], np.float32)}),
        ("pad", helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect"),
         {"p": np.array([0, 0, 1, 0, 0, 1], np.int64)}),
        ("constant", helper.make_node("Constant", [], ["y"],
                                      value=numpy_helper.from_array(np.ones((2, 2), np.float16))), {}),
    ]
    for name, node, consts in singles:
        inputs = {"x": x} if "x" in node.input else {}
        seeds[name + ".onnx"] = make_model([node], inputs, consts)
    for name, model in seeds.items():
        onnx.save(model, os.path.join(out, name))
    np.save(os.path.join(out, "array.npy"), np.arange(6, dtype=np.float32).reshape(2, 3))


if __name__ == "__main__":
    main()
