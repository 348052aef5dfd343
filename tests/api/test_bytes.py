"""BYTES (string) tensors end to end, and the raw single-input request form:
a model whose string input only moves (Identity, Gather, Reshape), served
inline and through the dynamic batcher, spoken to with tritonclient (JSON
and binary) and raw HTTP."""
import json
import os
import shutil
import sys
import threading

import numpy as np
import onnx
import pytest
import tritonclient.http as triton
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_serve import ROOT, request, serving  # noqa: E402


def strings_model():
    """text [N, 2] STRING -> same (Identity), swapped (Gather along axis 1),
    flat (Reshape to [N*2]... kept [-1] per row: [N, 2])."""
    text = helper.make_tensor_value_info("text", TensorProto.STRING, ["N", 2])
    same = helper.make_tensor_value_info("same", TensorProto.STRING, ["N", 2])
    swapped = helper.make_tensor_value_info("swapped", TensorProto.STRING, ["N", 2])
    order = helper.make_tensor("order", TensorProto.INT64, [2], [1, 0])
    graph = helper.make_graph([
        helper.make_node("Identity", ["text"], ["same"]),
        helper.make_node("Gather", ["text", "order"], ["swapped"], axis=1),
    ], "strings", [text], [same, swapped], [order])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def compare_model():
    """Strings into Equal: an op that reads them, which gpusrv refuses."""
    a = helper.make_tensor_value_info("a", TensorProto.STRING, [2])
    b = helper.make_tensor_value_info("b", TensorProto.STRING, [2])
    eq = helper.make_tensor_value_info("eq", TensorProto.BOOL, [2])
    graph = helper.make_graph([helper.make_node("Equal", ["a", "b"], ["eq"])], "cmp", [a, b], [eq])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def any_strings_model():
    """text [N] STRING -> same: a dimension the client chooses freely."""
    text = helper.make_tensor_value_info("text", TensorProto.STRING, ["N"])
    same = helper.make_tensor_value_info("same", TensorProto.STRING, ["N"])
    graph = helper.make_graph([helper.make_node("Identity", ["text"], ["same"])], "any",
                              [text], [same])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def column_sum_model():
    """x [N, 2] -> y [2], the sum over the rows: its output has no batch
    dimension, so it cannot be split between batched requests."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    graph = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
                              "colsum", [x], [y], [axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def add(root, name, model, config):
    (root / name / "1").mkdir(parents=True)
    onnx.save(model, str(root / name / "1" / "model.onnx"))
    (root / name / "config.json").write_text(json.dumps(config))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    add(root, "strings", strings_model(), {"max_batch_size": 8})
    add(root, "stringsdb", strings_model(), {
        "max_batch_size": 8,
        "dynamic_batching": {"max_queue_delay_microseconds": 20000}})
    add(root, "compare", compare_model(), {"max_batch_size": 0})
    add(root, "any", any_strings_model(), {"max_batch_size": 0})
    add(root, "colsum", column_sum_model(), {
        "max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 300000}})
    shutil.copytree(os.path.join(ROOT, "models", "digits"), root / "digits")
    with serving(root) as port:
        yield port


def infer(port, model, text, binary_in, binary_out):
    client = triton.InferenceServerClient(f"127.0.0.1:{port}")
    inp = triton.InferInput("text", list(text.shape), "BYTES")
    inp.set_data_from_numpy(text, binary_data=binary_in)
    outs = [triton.InferRequestedOutput(n, binary_data=binary_out) for n in ("same", "swapped")]
    return client.infer(model, [inp], outputs=outs)


@pytest.mark.parametrize("model", ["strings", "stringsdb"])
@pytest.mark.parametrize("binary", [False, True])
def test_strings_move_through_the_model(server, model, binary):
    text = np.array([["héllo", "world"], ["", "a longer string with spaces"]], dtype=object)
    res = infer(server, model, text, binary, binary)
    same, swapped = res.as_numpy("same"), res.as_numpy("swapped")
    want = np.vectorize(lambda s: s.encode())(text)
    assert same.shape == (2, 2) and swapped.shape == (2, 2)
    assert [[bytes(x) if isinstance(x, bytes) else x.encode() for x in row] for row in same] == \
        want.tolist()
    got_swapped = [[bytes(x) if isinstance(x, bytes) else x.encode() for x in row] for row in swapped]
    assert got_swapped == want[:, ::-1].tolist()
    meta = json.loads(request(server, "GET", f"/v2/models/{model}")[1])
    assert meta["inputs"][0]["datatype"] == "BYTES"


def test_any_bytes_go_binary_but_not_as_json(server):
    text = np.array([[b"\xff\x00raw", b"ok"]], dtype=object)
    res = infer(server, "strings", text, True, True)
    assert res.as_numpy("same").tolist() == [[b"\xff\x00raw", b"ok"]]
    with pytest.raises(triton.InferenceServerException, match="not valid UTF-8.*binary_data"):
        infer(server, "strings", text, True, False)


def test_batched_string_requests_get_their_own_rows(server):
    got = {}

    def one(i):
        text = np.array([[f"a{i}", f"b{i}" * (i + 1)]] * (1 + i % 3), dtype=object)
        got[i] = (text, infer(server, "stringsdb", text, i % 2 == 0, i % 2 == 1))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 24
    for text, res in got.values():
        want = [[s.encode() for s in row] for row in text]
        same = [[x if isinstance(x, bytes) else x.encode() for x in row]
                for row in res.as_numpy("same")]
        assert same == want
    stats = json.loads(request(server, "GET", "/v2/models/stringsdb/stats")[1])["model_stats"][0]
    assert any(b["batch_size"] > 1 for b in stats["batch_stats"])


def raw_strings(strings):
    return b"".join(len(s).to_bytes(4, "little") + s for s in strings)


def test_malformed_binary_strings_are_refused(server):
    body = raw_strings([b"abc"])[:-1]  # the last string is one byte short
    header = json.dumps({"inputs": [{"name": "text", "shape": [1, 2], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": len(body)}}]}).encode()
    status, raw, _ = request(server, "POST", "/v2/models/strings/infer", header + body,
                             {"Inference-Header-Content-Length": str(len(header))})
    assert status == 400 and "input 'text'" in json.loads(raw)["error"]
    body = raw_strings([b"a", b"b", b"extra"])  # three strings where the shape holds two
    header = json.dumps({"inputs": [{"name": "text", "shape": [1, 2], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": len(body)}}]}).encode()
    status, raw, _ = request(server, "POST", "/v2/models/strings/infer", header + body,
                             {"Inference-Header-Content-Length": str(len(header))})
    assert status == 400 and "left after its 2 strings" in json.loads(raw)["error"]
    bad_json = json.dumps({"inputs": [{"name": "text", "shape": [1, 2], "datatype": "BYTES",
                                       "data": ["a", 3]}]}).encode()
    status, raw, _ = request(server, "POST", "/v2/models/strings/infer", bad_json)
    assert status == 400 and "other than strings" in json.loads(raw)["error"]


def test_an_op_that_reads_strings_is_refused_by_name(server):
    body = json.dumps({"inputs": [{"name": "a", "shape": [2], "datatype": "BYTES", "data": ["x", "y"]},
                                  {"name": "b", "shape": [2], "datatype": "BYTES", "data": ["x", "z"]}]})
    status, raw, _ = request(server, "POST", "/v2/models/compare/infer", body.encode())
    error = json.loads(raw)["error"]
    assert status == 500 and "Equal does not take BYTES" in error, error


def test_raw_single_input_request(server):
    x = np.random.default_rng(2).random((1, 64)).astype(np.float32)
    status, raw, headers = request(server, "POST", "/v2/models/digits/infer", x.tobytes(),
                                   {"Inference-Header-Content-Length": "0"})
    assert status == 200, raw
    hl = int(headers["Inference-Header-Content-Length"])
    meta = json.loads(raw[:hl])
    assert meta["outputs"][0]["parameters"]["binary_data_size"] == len(raw) - hl
    # The same input through JSON gives the same answer.
    body = json.dumps({"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32",
                                   "data": x.ravel().tolist()}],
                       "outputs": [{"name": meta["outputs"][0]["name"],
                                    "parameters": {"binary_data": True}}]}).encode()
    status2, raw2, headers2 = request(server, "POST", "/v2/models/digits/infer", body)
    assert status2 == 200 and raw2[int(headers2["Inference-Header-Content-Length"]):] == raw[hl:]
    # A body of the wrong size is refused with both sizes named.
    status, raw, _ = request(server, "POST", "/v2/models/digits/infer", x.tobytes()[:-4],
                             {"Inference-Header-Content-Length": "0"})
    assert status == 400 and "252 bytes" in json.loads(raw)["error"] and "256" in json.loads(raw)["error"]
    # A model with two inputs cannot take the raw form.
    status, raw, _ = request(server, "POST", "/v2/models/compare/infer", b"xx",
                             {"Inference-Header-Content-Length": "0"})
    assert status == 400 and "one input" in json.loads(raw)["error"]


def test_shapes_larger_than_the_request_are_refused(server):
    """A shape whose element count the body cannot hold is refused before
    anything is allocated for it (2^60 strings once overflowed a size)."""
    body = raw_strings([b""] * 1000)
    header = json.dumps({"inputs": [{"name": "text", "shape": [2 ** 60], "datatype": "BYTES",
                                     "parameters": {"binary_data_size": len(body)}}]}).encode()
    status, raw, _ = request(server, "POST", "/v2/models/any/infer", header + body,
                             {"Inference-Header-Content-Length": str(len(header))})
    assert status == 400 and "more values than" in json.loads(raw)["error"], raw
    js = json.dumps({"inputs": [{"name": "text", "shape": [2 ** 62], "datatype": "BYTES",
                                 "data": ["a"]}]}).encode()
    status, raw, _ = request(server, "POST", "/v2/models/any/infer", js)
    assert status == 400 and "more values than" in json.loads(raw)["error"], raw
    # A fair shape still works.
    client = triton.InferenceServerClient(f"127.0.0.1:{server}")
    inp = triton.InferInput("text", [3], "BYTES")
    inp.set_data_from_numpy(np.array([b"x", b"", b"yz"], dtype=object), binary_data=True)
    assert client.infer("any", [inp]).as_numpy("same").tolist() == [b"x", b"", b"yz"]


def test_a_batch_whose_output_loses_its_rows_fails_clearly(server):
    results = []

    def one(rows):
        body = json.dumps({"inputs": [{"name": "x", "shape": [rows, 2], "datatype": "FP32",
                                       "data": [1.0] * (2 * rows)}]}).encode()
        results.append(request(server, "POST", "/v2/models/colsum/infer", body))

    threads = [threading.Thread(target=one, args=(r,)) for r in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Batched together: refused with the reason, nothing read past the output.
    batched = [r for r in results if r[0] != 200]
    if batched:
        assert all(r[0] == 500 and b"cannot be batched" in r[1] for r in batched), results
    else:  # they happened to run apart: each got its own sum
        assert sorted(json.loads(r[1])["outputs"][0]["data"][0] for r in results) == [1.0, 2.0]


def test_binary_reply_with_an_id_that_json_must_escape(server):
    """All-binary replies are written by a fast path for plain names and ids;
    an id with a quote, a backslash, a control character or non-ASCII text
    takes the general encoder: the same binary data, the id given back intact."""
    x = np.random.default_rng(3).random((1, 64)).astype(np.float32)
    replies = {}
    for rid in ["plain-id-7", 'quote" back\\slash\ttab \u00e9\u4e2d']:
        body = json.dumps({"id": rid,
                           "inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32",
                                       "data": x.ravel().tolist()}],
                           "parameters": {"binary_data_output": True}}).encode()
        status, raw, headers = request(server, "POST", "/v2/models/digits/infer", body)
        assert status == 200, raw
        hl = int(headers["Inference-Header-Content-Length"])
        meta = json.loads(raw[:hl])
        assert meta["id"] == rid and meta["model_name"] == "digits"
        assert sum(o["parameters"]["binary_data_size"] for o in meta["outputs"]) == len(raw) - hl
        replies[rid] = (meta["outputs"], raw[hl:])
    (fast_meta, fast_data), (slow_meta, slow_data) = replies.values()
    assert fast_meta == slow_meta and fast_data == slow_data
