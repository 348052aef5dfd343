"""Writes the fuzzers' seed corpora: for the decoder (tests/fuzz/seeds), tiny
versions of the test models and single-op models, so that fuzzing starts from
valid files that reach every part of the decoder; for the HTTP requests
(tests/fuzz/seeds-http), the models fuzz_http serves (http_model*.onnx) and
valid requests of every kind it reads (the first byte picks the parser, see
fuzz_http.c). Run: .venv/bin/python tests/fuzz/make_seeds.py"""
import json
import os
import struct
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
    http_seeds()


def http_model():
    """Identity of one input of each kind the protocol carries, batched."""
    kinds = [("x", onnx.TensorProto.FLOAT, 4), ("ids", onnx.TensorProto.INT64, 3),
             ("s", onnx.TensorProto.STRING, 2), ("h", onnx.TensorProto.FLOAT16, 2),
             ("b", onnx.TensorProto.BOOL, 1), ("u", onnx.TensorProto.UINT8, 2)]
    nodes = [helper.make_node("Identity", [n], [n + "_out"]) for n, _, _ in kinds]
    ins = [helper.make_tensor_value_info(n, t, ["N", d]) for n, t, d in kinds]
    outs = [helper.make_tensor_value_info(n + "_out", t, ["N", d]) for n, t, d in kinds]
    g = helper.make_graph(nodes, "http", ins, outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def http_seeds():
    out = os.path.join(HERE, "seeds-http")
    os.makedirs(out, exist_ok=True)
    onnx.save(http_model(), os.path.join(HERE, "http_model.onnx"))
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 4])
    one = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "raw", [x], [y])
    onnx.save(helper.make_model(one, opset_imports=[helper.make_opsetid("", 17)]),
              os.path.join(HERE, "http_model_raw.onnx"))
    request = {"id": "7", "parameters": {"priority": 1, "timeout": 1000},
               "inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]},
                          {"name": "ids", "shape": [1, 3], "datatype": "INT64", "data": [1, -2, 3]},
                          {"name": "s", "shape": [1, 2], "datatype": "BYTES", "data": ["a", "bc"]},
                          {"name": "h", "shape": [1, 2], "datatype": "FP16", "data": [0.5, 2]},
                          {"name": "b", "shape": [1, 1], "datatype": "BOOL", "data": [True]},
                          {"name": "u", "shape": [1, 2], "datatype": "UINT8", "data": [0, 255]}],
               "outputs": [{"name": "x_out", "parameters": {"binary_data": True}},
                           {"name": "s_out"}]}
    body = json.dumps(request).encode()
    binary = dict(request)
    binary["inputs"] = [dict(request["inputs"][0], parameters={"binary_data_size": 16})]
    binary["inputs"] += request["inputs"][1:]
    del binary["inputs"][0]["data"]
    head = json.dumps(binary).encode()
    seeds = {
        "url": b"\x00/v2/models/io/versions/1/infer\n123\nBearer abc",
        "json-batched": b"\x01" + body,
        "json-unbatched": b"\x02" + body,
        "binary": b"\x03" + struct.pack("<H", len(head)) + head + np.arange(4, dtype=np.float32).tobytes(),
        "raw": b"\x04" + np.arange(4, dtype=np.float32).tobytes(),
        "job": b"\x05" + json.dumps({"command": ["python3", "train.py"], "env": ["A=1"],
                                      "name": "t", "gpus": 1, "gpu_share": 50, "gpu_mem": "1G",
                                      "mem": 1 << 30, "cpus": 2.5, "priority": 3,
                                      "time_limit": "2h", "requeue": True}).encode(),
        "tenant": b"\x06" + json.dumps({"name": "lab", "user": "nobody", "weight": 2,
                                         "quotas": {"devices": 1, "device_mem": "8G", "jobs": 4,
                                                    "cpus": 8, "mem": "32G"}}).encode(),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
