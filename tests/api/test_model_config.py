"""A served model's configuration: config.json and Triton's config.pbtxt go
through one table of fields, so each field behaves the same in both: a
value out of bounds makes the model UNAVAILABLE with a reason naming the
field, in either format, and a full configuration reads the same in both."""
import json

import pytest

from test_serve import add_model, request, serving

# (field path, a bad value as JSON, the same in the text format, what the reason says)
BAD = [
    ("max_batch_size", -1, "max_batch_size: -1", "max_batch_size must be an integer"),
    ("precision", "fp8", 'precision: "fp8"', "precision must be fp32, fp16, bf16 or fp64"),
    ("warmup", "maybe", "warmup: maybe", "warmup must be true or false"),
    ("dynamic_batching", 5, "dynamic_batching: 5", "dynamic_batching must be a section"),
    ("dynamic_batching.preferred_batch_size", [0], "dynamic_batching { preferred_batch_size: 0 }",
     "preferred_batch_size holds up to 8 integers"),
    ("dynamic_batching.priority_levels", 101, "dynamic_batching { priority_levels: 101 }",
     "priority_levels must be an integer in [0, 100]"),
    ("dynamic_batching.default_priority_level", "high",
     "dynamic_batching { default_priority_level: high }", "default_priority_level must be"),
    ("dynamic_batching.max_queue_delay_microseconds", -5,
     "dynamic_batching { max_queue_delay_microseconds: -5 }", "max_queue_delay_microseconds must"),
    ("dynamic_batching.default_queue_policy.max_queue_size", -1,
     "dynamic_batching { default_queue_policy { max_queue_size: -1 } }", "max_queue_size must"),
    ("dynamic_batching.default_queue_policy.timeout_action", "DROP",
     "dynamic_batching { default_queue_policy { timeout_action: DROP } }",
     "timeout_action must be REJECT or DELAY"),
]


def nested(path, value):
    out = {"max_batch_size": 8}
    at = out
    keys = path.split(".")
    for k in keys[:-1]:
        at = at.setdefault(k, {})
    at[keys[-1]] = value
    return out


def test_every_field_is_checked_the_same_in_both_formats(tmp_path):
    for i, (path, value, text, reason) in enumerate(BAD):
        add_model(tmp_path, f"j{i}", nested(path, value))
        pb = text if path == "max_batch_size" else "max_batch_size: 8\n" + text
        add_model(tmp_path, f"p{i}", None, text=pb)
    with serving(tmp_path) as port:
        index = {m["name"]: m for m in json.loads(
            request(port, "POST", "/v2/repository/index", b"{}")[1])}
        for i, (path, _, _, reason) in enumerate(BAD):
            for name in (f"j{i}", f"p{i}"):
                assert index[name]["state"] == "UNAVAILABLE", (path, index[name])
                assert reason in index[name]["reason"], (path, index[name]["reason"])


def test_a_number_that_is_no_number_is_a_clear_error(tmp_path):
    add_model(tmp_path, "dash", None, text="dynamic_batching { preferred_batch_size: [ - ] }")
    with serving(tmp_path) as port:
        index = {m["name"]: m for m in json.loads(
            request(port, "POST", "/v2/repository/index", b"{}")[1])}
        assert "expected a number" in index["dash"]["reason"], index["dash"]


def test_a_full_configuration_reads_the_same_in_both_formats(tmp_path):
    config = {"max_batch_size": 16, "precision": "fp64", "warmup": False,
              "dynamic_batching": {"preferred_batch_size": [4, 8],
                                   "max_queue_delay_microseconds": 700, "priority_levels": 2,
                                   "default_priority_level": 1,
                                   "default_queue_policy": {"max_queue_size": 9,
                                                            "default_timeout_microseconds": 5000,
                                                            "timeout_action": "DELAY"}},
              "instance_group": [{"count": 2, "kind": "KIND_CPU"}]}
    add_model(tmp_path, "fromjson", config)
    add_model(tmp_path, "frompbtxt", None, text="""
max_batch_size: 16
precision: "fp64"
warmup: false
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 700
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { max_queue_size: 9 default_timeout_microseconds: 5000
                         timeout_action: DELAY }
}
instance_group { count: 2 kind: KIND_CPU }
""")
    with serving(tmp_path) as port:
        a = json.loads(request(port, "GET", "/v2/models/fromjson/config")[1])
        b = json.loads(request(port, "GET", "/v2/models/frompbtxt/config")[1])
        a.pop("name"), b.pop("name")
        for g in a["instance_group"] + b["instance_group"]:
            g.pop("name")
        assert a == b
        assert a["max_batch_size"] == 16 and a["precision"] == "fp64"
        assert a["dynamic_batching"]["preferred_batch_size"] == [4, 8]
        assert a["dynamic_batching"]["default_queue_policy"]["timeout_action"] == "DELAY"


def test_a_model_served_at_fp64_computes_in_double(tmp_path):
    """precision fp64 widens a float32 model and computes it in double:
    (x + 1e8) - 1e8 comes back as x, where float32 gives 0 or 8."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    for name, precision in (("wide", "fp64"), ("plain", "fp32")):
        (tmp_path / name / "1").mkdir(parents=True)
        g = helper.make_graph(
            [helper.make_node("Add", ["x", "big"], ["a"]), helper.make_node("Sub", ["a", "big"], ["y"])],
            "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 4])],
            [numpy_helper.from_array(np.array(1e8, np.float32), "big")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.save(m, str(tmp_path / name / "1" / "model.onnx"))
        (tmp_path / name / "config.json").write_text(
            json.dumps({"max_batch_size": 8, "precision": precision}))
    x = [0.25, -1.5, 3.0, 0.125]
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": x}]})
    with serving(tmp_path) as port:
        got = {}
        for name in ("wide", "plain"):
            status, raw, _ = request(port, "POST", f"/v2/models/{name}/infer", body)
            assert status == 200, raw
            out = json.loads(raw)["outputs"][0]
            assert out["datatype"] == "FP32"
            got[name] = out["data"]
    assert got["wide"] == x
    assert got["plain"] != x  # float32 itself loses x
