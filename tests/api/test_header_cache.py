"""The parse of a repeated inference header (src/api/header_cache.c): a
request whose JSON header repeats an earlier one byte for byte takes that
parse's result, and still reads its own binary data, for its own model, as
loaded now. Each HTTP thread keeps its own headers, so every case sends
enough requests for each of the server's threads to see the header again."""
import json
import os
import re
import sys

import numpy as np
import onnx
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "engine"))
sys.path.insert(0, os.path.dirname(__file__))
from models import mlp  # noqa: E402
from test_serve import add_model, admin_token, ort_run, request, serving  # noqa: E402

ROUNDS = 24  # several requests for each HTTP thread
THREADS = 8  # at most: each thread parses a header the first time it sees it


def reused(port):
    text = request(port, "GET", "/metrics")[1].decode()
    return int(re.search(r"^gpusrv_http_inference_headers_reused_total (\d+)$", text, re.M).group(1))


def header(width, rows=1, request_id=None):
    h = {"inputs": [{"name": "x", "shape": [rows, width], "datatype": "FP32",
                     "parameters": {"binary_data_size": rows * width * 4}}],
         "outputs": [{"name": "probs", "parameters": {"binary_data": True}}]}
    if request_id:
        h["id"] = request_id
    return json.dumps(h).encode()


def infer(port, model, head, data):
    status, raw, headers = request(port, "POST", f"/v2/models/{model}/infer", head + data,
                                   {"Inference-Header-Content-Length": str(len(head))})
    if status != 200:
        return status, json.loads(raw)["error"], None
    hl = int(headers["Inference-Header-Content-Length"])
    reply = json.loads(raw[:hl])
    return status, reply, np.frombuffer(raw[hl:], np.float32).reshape(reply["outputs"][0]["shape"])


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    add_model(root, "inline", {})  # no batcher: parsed and run on the HTTP thread
    add_model(root, "batched", {"max_batch_size": 8,
                                "dynamic_batching": {"max_queue_delay_microseconds": 100}})
    add_model(root, "other", {})  # an input of the same name, 128 wide
    onnx.save(mlp(seed=1, d_in=128), str(root / "other" / "1" / "model.onnx"))
    return root


@pytest.mark.parametrize("model", ["inline", "batched"])
def test_a_repeated_header_reads_each_requests_own_data(repo, model):
    path = str(repo / model / "1" / "model.onnx")
    rng = np.random.default_rng(5)
    head = header(256, rows=2, request_id="same-id")
    with serving(repo) as port:
        before = reused(port)
        for _ in range(ROUNDS):
            x = rng.standard_normal((2, 256)).astype(np.float32)
            status, reply, got = infer(port, model, head, x.tobytes())
            assert status == 200, reply
            assert reply["id"] == "same-id" and reply["model_name"] == model
            np.testing.assert_allclose(got, ort_run(path, {"x": x}), rtol=1e-4, atol=1e-6)
        assert ROUNDS - THREADS <= reused(port) - before <= ROUNDS - 1


def test_one_header_sent_to_two_models_is_parsed_for_each(repo):
    x = np.random.default_rng(6).standard_normal((1, 256)).astype(np.float32)
    want = ort_run(str(repo / "inline" / "1" / "model.onnx"), {"x": x})
    head = header(256)
    with serving(repo) as port:
        for _ in range(ROUNDS):
            status, reply, got = infer(port, "inline", head, x.tobytes())
            assert status == 200, reply
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
            status, error, _ = infer(port, "other", head, x.tobytes())
            assert status == 400 and "dimension 1 is 256, expected 128" in error, error


def test_a_repeated_header_with_too_little_data_is_refused(repo):
    head = header(256)
    x = np.ones((1, 256), np.float32).tobytes()
    with serving(repo) as port:
        for _ in range(ROUNDS):
            assert infer(port, "inline", head, x)[0] == 200
            status, error, _ = infer(port, "inline", head, x[:-4])
            assert status == 400 and "binary data are left" in error


def test_a_model_loaded_again_parses_the_header_again(repo, tmp_path):
    root = tmp_path / "models"
    add_model(root, "changing", {})
    head = header(256)
    x = np.ones((1, 256), np.float32).tobytes()
    with serving(root) as port:
        admin = {"Authorization": "Bearer " + admin_token(root, port)}
        for _ in range(ROUNDS):
            assert infer(port, "changing", head, x)[0] == 200
        # The same entry loaded again, now a model of 128 inputs: the header
        # that was good for the first is not for the second.
        assert request(port, "POST", "/v2/repository/models/changing/unload", b"{}", admin)[0] == 200
        onnx.save(mlp(d_in=128), str(root / "changing" / "1" / "model.onnx"))
        assert request(port, "POST", "/v2/repository/models/changing/load", b"{}", admin)[0] == 200
        for _ in range(ROUNDS):
            status, error, _ = infer(port, "changing", head, x)
            assert status == 400 and "dimension 1 is 256, expected 128" in error, error
            y = np.ones((1, 128), np.float32)
            status, reply, got = infer(port, "changing", header(128), y.tobytes())
            assert status == 200, reply
            want = ort_run(str(root / "changing" / "1" / "model.onnx"), {"x": y})
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_a_header_over_a_kibibyte_is_parsed_every_time(repo):
    """Headers are kept up to 1 KiB: a longer one (a request parameter of
    1100 bytes) is parsed in full each time, and answers as a kept one
    would."""
    x = np.random.default_rng(7).standard_normal((1, 256)).astype(np.float32)
    want = ort_run(str(repo / "inline" / "1" / "model.onnx"), {"x": x})
    h = json.loads(header(256, request_id="long"))
    h["parameters"] = {"note": "n" * 1100}
    head = json.dumps(h).encode()
    assert len(head) > 1024
    with serving(repo) as port:
        before = reused(port)
        for _ in range(ROUNDS):
            status, reply, got = infer(port, "inline", head, x.tobytes())
            assert status == 200 and reply["id"] == "long", reply
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
        assert reused(port) == before
        short = header(256, request_id="short")
        for _ in range(ROUNDS):
            assert infer(port, "inline", short, x.tobytes())[0] == 200
        assert reused(port) - before >= ROUNDS - THREADS  # the counter does move
