"""Numbers in JSON requests and replies (hardening items 11 and 13): a JSON
value an input's type cannot hold is a 400 naming the value, never a wrapped
or undefined conversion; an output holding NaN or an infinity is a 400
saying to ask for binary data, never a shorter array; with binary data the
values come back exactly (read by tritonclient)."""
import json
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper
import pytest
import tritonclient.http as triton

from test_serve import request, serving  # noqa: E402

TYPES = {"UINT8": TensorProto.UINT8, "INT8": TensorProto.INT8, "INT16": TensorProto.INT16,
         "INT32": TensorProto.INT32, "INT64": TensorProto.INT64, "BOOL": TensorProto.BOOL,
         "FP32": TensorProto.FLOAT, "FP16": TensorProto.FLOAT16}


def identity(onnx_type):
    x = helper.make_tensor_value_info("x", onnx_type, [3])
    y = helper.make_tensor_value_info("y", onnx_type, [3])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def log_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    g = helper.make_graph([helper.make_node("Log", ["x"], ["y"])], "log", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    models = {f"id_{k.lower()}": identity(v) for k, v in TYPES.items()}
    models["log"] = log_model()
    for name, model in models.items():
        (root / name / "1").mkdir(parents=True)
        onnx.save(model, str(root / name / "1" / "model.onnx"))
        (root / name / "config.json").write_text(json.dumps({"max_batch_size": 0}))
    with serving(root) as port:
        yield port


def infer_json(port, model, datatype, data):
    body = {"inputs": [{"name": "x", "shape": [3], "datatype": datatype, "data": data}]}
    status, raw, _ = request(port, "POST", f"/v2/models/{model}/infer", json.dumps(body).encode())
    return status, json.loads(raw)


@pytest.mark.parametrize("datatype,value", [
    ("UINT8", 300), ("UINT8", -1), ("INT8", 128), ("INT16", 40000), ("INT32", 2 ** 31),
    ("INT64", 1e300), ("INT64", 9.3e18), ("UINT8", 1.5), ("BOOL", 2), ("FP32", 1e300),
    ("FP16", 1e6),
])
def test_values_out_of_range_are_refused_naming_them(server, datatype, value):
    status, reply = infer_json(server, f"id_{datatype.lower()}", datatype, [0, value, 0])
    assert status == 400, reply
    assert "out of range for " + datatype in reply["error"], reply
    assert "the value " in reply["error"], reply
    if isinstance(value, int):
        assert f"the value {value} " in reply["error"], reply


@pytest.mark.parametrize("datatype,values", [
    ("UINT8", [0, 255, 7]), ("INT64", [-2 ** 63, 2 ** 63 - 1, 0]), ("INT32", [-2 ** 31, 5, 2 ** 31 - 1]),
    ("BOOL", [True, False, 1]), ("FP32", [1.5, -3e38, 0.0]),
])
def test_values_in_range_come_back(server, datatype, values):
    status, reply = infer_json(server, f"id_{datatype.lower()}", datatype, values)
    assert status == 200, reply
    want = [bool(v) for v in values] if datatype == "BOOL" else values
    got = reply["outputs"][0]["data"]
    assert got == pytest.approx(want) if datatype == "FP32" else got == want


def test_nan_and_infinity_are_not_dropped_from_json(server):
    status, reply = infer_json(server, "log", "FP32", [1.0, 0.0, -1.0])  # 0, -inf, nan
    assert status == 400, reply
    assert "NaN or an infinity" in reply["error"] and "binary_data" in reply["error"], reply
    client = triton.InferenceServerClient(f"127.0.0.1:{server}")
    x = triton.InferInput("x", [3], "FP32")
    x.set_data_from_numpy(np.array([1.0, 0.0, -1.0], np.float32))
    y = client.infer("log", [x], outputs=[triton.InferRequestedOutput("y", binary_data=True)])
    got = y.as_numpy("y")
    assert got[0] == 0 and np.isneginf(got[1]) and np.isnan(got[2])
