"""`gpusrv serve`'s gRPC endpoint, spoken to by what others wrote: tritonclient.grpc
(sync, async and streaming), the protocol's messages as Triton's own generated Python
code builds them (typed contents, raw bytes, malformed messages), and perf_analyzer
-i grpc; results compared with onnxruntime and with the same server's HTTP side."""
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc
from tritonclient.utils import InferenceServerException

from test_serve import (PERF_ANALYZER, ROOT, add_model, admin_token, free_port, free_ports,
                        request, start, stats)

sys.path.insert(0, os.path.join(ROOT, "tests", "engine"))
from models import simple_add_sub  # noqa: E402

H = onnx.helper
T = onnx.TensorProto


def identity_model(path, types):
    """One Identity per (name, ONNX type) pair: inputs in_NAME, outputs out_NAME, shape [2, 3]."""
    nodes = [H.make_node("Identity", [f"in_{n}"], [f"out_{n}"]) for n, _ in types]
    g = H.make_graph(nodes, "types",
                     [H.make_tensor_value_info(f"in_{n}", t, [2, 3]) for n, t in types],
                     [H.make_tensor_value_info(f"out_{n}", t, [2, 3]) for n, t in types])
    path.parent.mkdir(parents=True)
    onnx.save(H.make_model(g, opset_imports=[H.make_opsetid("", 17)]), str(path))


TYPES = [("i8", T.INT8), ("u16", T.UINT16), ("b", T.BOOL), ("f64", T.DOUBLE), ("i64", T.INT64),
         ("f16", T.FLOAT16), ("s", T.STRING), ("u8", T.UINT8)]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    shutil.copytree(os.path.join(ROOT, "models", "digits"), root / "digits")
    add_model(root, "mlp", {"max_batch_size": 8,
                            "dynamic_batching": {"max_queue_delay_microseconds": 2000}})
    (root / "simple" / "1").mkdir(parents=True)
    onnx.save(simple_add_sub(), str(root / "simple" / "1" / "model.onnx"))
    (root / "simple" / "config.json").write_text(json.dumps({"max_batch_size": 8}))
    identity_model(root / "types" / "1" / "model.onnx", TYPES)
    return root


@pytest.fixture(scope="module")
def server(repo):
    proc, port = start(repo)
    try:
        yield port, proc.grpc_port
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def client(server):
    return tg.InferenceServerClient(f"127.0.0.1:{server[1]}")


def stub(server):
    return pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(f"127.0.0.1:{server[1]}"))


def ort_run(repo, model, feeds):
    return ort.InferenceSession(str(repo / model / "1" / "model.onnx"),
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def mlp_input(rows, seed):
    x = np.random.default_rng(seed).standard_normal((rows, 256)).astype(np.float32)
    i = tg.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return x, i


def grpc_code(excinfo):
    return excinfo.value.status()


# ---- health, metadata, configuration, statistics -----------------------------------------------

def test_health_metadata_and_config_agree_with_http(server):
    c = client(server)
    assert c.is_server_live()
    # Not ready: the server's state directory sits in the repository, an entry without
    # versions (UNAVAILABLE). The same answer as HTTP's.
    assert not c.is_server_ready() and request(server[0], "GET", "/v2/health/ready")[0] == 503
    assert c.is_model_ready("digits") and c.is_model_ready("digits", "1")
    meta = c.get_server_metadata()
    assert meta.name == "gpusrv" and "model_repository" in meta.extensions
    http = th.InferenceServerClient(f"127.0.0.1:{server[0]}")
    for model in ("digits", "mlp", "simple", "types"):
        got = c.get_model_metadata(model, as_json=True)
        want = http.get_model_metadata(model)
        for side in ("inputs", "outputs"):
            assert [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in got[side]] == \
                [(t["name"], t["datatype"], t["shape"]) for t in want[side]]
        config = c.get_model_config(model, as_json=True)["config"]
        hconfig = http.get_model_config(model)
        assert config["name"] == model and config.get("max_batch_size", 0) == hconfig["max_batch_size"]
        assert [i["data_type"] for i in config["input"]] == [i["data_type"] for i in hconfig["input"]]
        assert config["instance_group"][0]["kind"] == "KIND_CPU"
    assert "dynamic_batching" in c.get_model_config("mlp", as_json=True)["config"]
    index = {m["name"]: m["state"] for m in c.get_model_repository_index(as_json=True)["models"]}
    http_index = {m["name"]: m["state"]
                  for m in json.loads(request(server[0], "POST", "/v2/repository/index", b"{}")[1])}
    assert index == http_index and index["digits"] == "READY" and len(index) == 5


def test_unknown_model_and_version_are_not_found(server):
    c = client(server)
    for call in (lambda: c.get_model_metadata("ghost"), lambda: c.is_model_ready("ghost"),
                 lambda: c.get_model_config("digits", "7"), lambda: c.is_model_ready("digits", "7")):
        with pytest.raises(InferenceServerException) as e:
            call()
        assert grpc_code(e) == "StatusCode.NOT_FOUND"


def test_statistics_are_shared_with_http(server, repo):
    c = client(server)
    before = c.get_inference_statistics("simple", as_json=True)["model_stats"][0]
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    i0, i1 = tg.InferInput("INPUT0", [1, 16], "INT32"), tg.InferInput("INPUT1", [1, 16], "INT32")
    i0.set_data_from_numpy(a)
    i1.set_data_from_numpy(a)
    for _ in range(3):
        c.infer("simple", [i0, i1])
    after = c.get_inference_statistics("simple", as_json=True)["model_stats"][0]
    count = lambda s: int(s.get("inference_count", 0))  # noqa: E731  (uint64s come as strings)
    assert count(after) - count(before) == 3
    status, raw, _ = request(server[0], "GET", "/v2/models/simple/stats")
    assert json.loads(raw)["model_stats"][0]["inference_count"] == count(after)
    every = c.get_inference_statistics(as_json=True)["model_stats"]
    assert {s["name"] for s in every} == {"digits", "mlp", "simple", "types"}


# ---- inference -----------------------------------------------------------------------------------

def test_infer_matches_onnxruntime(server, repo):
    c = client(server)
    x, i = mlp_input(5, 1)
    res = c.infer("mlp", [i], request_id="g-5", outputs=[tg.InferRequestedOutput("probs")])
    np.testing.assert_allclose(res.as_numpy("probs"), ort_run(repo, "mlp", {"x": x})[0],
                               rtol=1e-4, atol=1e-6)
    assert res.get_response().id == "g-5" and res.get_response().model_version == "1"
    # The demo, run in the calling thread (no dynamic batching there).
    px = np.random.default_rng(2).random((3, 64), dtype=np.float32)
    p = tg.InferInput("pixels", [3, 64], "FP32")
    p.set_data_from_numpy(px)
    np.testing.assert_allclose(c.infer("digits", [p]).as_numpy("probs"),
                               ort_run(repo, "digits", {"pixels": px})[0], rtol=1e-4, atol=1e-6)


def test_two_outputs_and_a_chosen_one(server, repo):
    c = client(server)
    a = np.random.default_rng(3).integers(-100, 100, (2, 16)).astype(np.int32)
    b = np.random.default_rng(4).integers(-100, 100, (2, 16)).astype(np.int32)
    i0, i1 = tg.InferInput("INPUT0", [2, 16], "INT32"), tg.InferInput("INPUT1", [2, 16], "INT32")
    i0.set_data_from_numpy(a)
    i1.set_data_from_numpy(b)
    res = c.infer("simple", [i0, i1])
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
    only = c.infer("simple", [i0, i1], outputs=[tg.InferRequestedOutput("OUTPUT1")])
    assert only.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(only.as_numpy("OUTPUT1"), a - b)


def type_values():
    rng = np.random.default_rng(5)
    return {
        "i8": rng.integers(-128, 128, (2, 3)).astype(np.int8),
        "u16": rng.integers(0, 65536, (2, 3)).astype(np.uint16),
        "b": rng.integers(0, 2, (2, 3)).astype(bool),
        "f64": rng.standard_normal((2, 3)),
        "i64": rng.integers(-2**62, 2**62, (2, 3)).astype(np.int64),
        "f16": rng.standard_normal((2, 3)).astype(np.float16),
        "s": np.array([[b"a", b"", "\u00e9t\u00e9".encode()], [b"\x00\xff", b"x" * 300, b"z"]],
                      dtype=np.object_),
        "u8": rng.integers(0, 256, (2, 3)).astype(np.uint8),
    }


DATATYPE = {"i8": "INT8", "u16": "UINT16", "b": "BOOL", "f64": "FP64", "i64": "INT64",
            "f16": "FP16", "s": "BYTES", "u8": "UINT8"}


def test_every_datatype_as_raw_bytes(server):
    values = type_values()
    inputs = []
    for n, v in values.items():
        i = tg.InferInput(f"in_{n}", [2, 3], DATATYPE[n])
        i.set_data_from_numpy(v)
        inputs.append(i)
    res = client(server).infer("types", inputs)
    for n, v in values.items():
        got = res.as_numpy(f"out_{n}")
        assert got.dtype == v.dtype or n == "s", n
        np.testing.assert_array_equal(got, v, err_msg=n)


TYPED_FIELD = {"i8": "int_contents", "u16": "uint_contents", "b": "bool_contents",
               "f64": "fp64_contents", "i64": "int64_contents", "s": "bytes_contents",
               "u8": "uint_contents"}


def typed_request(values, skip=()):
    q = pb.ModelInferRequest(model_name="types")
    for n, v in values.items():
        if n in skip:
            continue
        t = q.inputs.add(name=f"in_{n}", datatype=DATATYPE[n], shape=[2, 3])
        getattr(t.contents, TYPED_FIELD[n]).extend(v.flatten().tolist())
    return q


def test_typed_contents_as_triton_generated_code_sends_them(server):
    values = type_values()
    q = typed_request(values, skip=("f16",))
    # FP16 has no typed list: it travels as raw bytes only, refused typed.
    with pytest.raises(grpc.RpcError) as e:
        stub(server).ModelInfer(q)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "in_f16" in e.value.details()
    f16 = q.inputs.add(name="in_f16", datatype="FP16", shape=[2, 3])
    f16.contents.fp32_contents.extend([0.0] * 6)
    with pytest.raises(grpc.RpcError) as e:
        stub(server).ModelInfer(q)
    assert "raw_input_contents" in e.value.details()
    # With every input typed but FP16 given raw: not allowed either (all raw or none).
    del q.inputs[-1]
    q.inputs.add(name="in_f16", datatype="FP16", shape=[2, 3])
    q.raw_input_contents.append(values["f16"].tobytes())
    with pytest.raises(grpc.RpcError) as e:
        stub(server).ModelInfer(q)
    assert "raw_input_contents has 1 entries for 8 inputs" in e.value.details()


def test_typed_contents_match(server, repo):
    values = {k: v for k, v in type_values().items() if k != "f16"}
    # A model without the FP16 input: the types model's other Identities.
    q = typed_request(values)
    q.model_name = "types_nof16"
    path = repo / "types_nof16" / "1" / "model.onnx"
    if not path.exists():
        identity_model(path, [t for t in TYPES if t[0] != "f16"])
        token = admin_token(repo, server[0])
        tg.InferenceServerClient(f"127.0.0.1:{server[1]}").load_model(
            "types_nof16", headers={"authorization": f"Bearer {token}"})
    r = stub(server).ModelInfer(q)
    outs = {o.name: (o, raw) for o, raw in zip(r.outputs, r.raw_output_contents)}
    for n, v in values.items():
        o, raw = outs[f"out_{n}"]
        assert list(o.shape) == [2, 3] and o.datatype == DATATYPE[n]
        if n == "s":  # 4-byte little-endian lengths, then the bytes
            got, at = [], 0
            while at < len(raw):
                k = int.from_bytes(raw[at:at + 4], "little")
                got.append(raw[at + 4:at + 4 + k])
                at += 4 + k
            assert got == list(v.flatten())
        else:
            np.testing.assert_array_equal(np.frombuffer(raw, v.dtype).reshape(2, 3), v, err_msg=n)
    # A typed value out of its datatype's range is refused, naming it.
    bad = typed_request({"i8": np.array([[1, 2, 300], [0, 0, 0]])})
    bad.model_name = "types_nof16"
    with pytest.raises(grpc.RpcError) as e:
        stub(server).ModelInfer(bad)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "300" in e.value.details()


@pytest.mark.parametrize("case, text", [
    ("shape", "dimension 1 is 255"),
    ("datatype", "expected datatype FP32, got FP64"),
    ("name", "unknown input 'y'"),
    ("missing", "input 'x' is missing"),
    ("raw_size", "raw_input_contents holds 1020 bytes"),
    ("rows", "dimension 0 is 9, expected 1 to 8"),
    ("output", "unknown output 'nope'"),
    ("priority", "priority must be an integer"),
])
def test_bad_requests_are_invalid_argument(server, case, text):
    q = pb.ModelInferRequest(model_name="mlp")
    x = np.zeros((1, 256), np.float32)
    t = q.inputs.add(name="x", datatype="FP32", shape=[1, 256])
    raw = x.tobytes()
    if case == "shape":
        t.shape[1] = 255
        raw = raw[:255 * 4]
    elif case == "datatype":
        t.datatype = "FP64"
    elif case == "name":
        t.name = "y"
    elif case == "missing":
        del q.inputs[:]
        raw = None
    elif case == "raw_size":
        raw = raw[:1020]
    elif case == "rows":
        t.shape[0] = 9
    elif case == "output":
        q.outputs.add(name="nope")
    elif case == "priority":
        q.parameters["priority"].string_param = "high"
    if raw is not None:
        q.raw_input_contents.append(raw)
    with pytest.raises(grpc.RpcError) as e:
        stub(server).ModelInfer(q)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert text in e.value.details()


def test_malformed_messages_and_unknown_methods(server):
    channel = grpc.insecure_channel(f"127.0.0.1:{server[1]}")
    raw = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                              request_serializer=lambda b: b, response_deserializer=lambda b: b)
    for junk in (b"\xff\xff\xff", b"\x0a\xff\xff\xff\xff\x0f", b"\x3a\x05ab"):
        with pytest.raises(grpc.RpcError) as e:
            raw(junk, timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not a valid inference.ModelInferRequest" in e.value.details()
    other = channel.unary_unary("/inference.GRPCInferenceService/CudaSharedMemoryStatus",
                                request_serializer=lambda b: b, response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as e:
        other(b"", timeout=10)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert client(server).is_server_live()  # and the server is still there


def test_async_infer(server, repo):
    c = client(server)
    results = queue.Queue()
    xs = {}
    for k in range(12):
        x, i = mlp_input(1 + k % 4, 10 + k)
        xs[str(k)] = x
        c.async_infer("mlp", [i], request_id=str(k),
                      callback=lambda result, error: results.put((result, error)))
    for _ in range(12):
        result, error = results.get(timeout=30)
        assert error is None
        k = result.get_response().id
        np.testing.assert_allclose(result.as_numpy("probs"),
                                   ort_run(repo, "mlp", {"x": xs[k]})[0], rtol=1e-4, atol=1e-6)


def test_stream_answers_every_request_and_survives_a_bad_one(server, repo):
    c = client(server)
    results = queue.Queue()
    c.start_stream(callback=lambda result, error: results.put((result, error)))
    xs = {}
    try:
        for k in range(150):  # past the stream's window of 64 in flight
            x, i = mlp_input(1 + k % 3, 100 + k)
            xs[str(k)] = x
            c.async_stream_infer("mlp", [i], request_id=str(k))
            if k == 20:
                bad = tg.InferInput("x", [1, 3], "FP32")
                bad.set_data_from_numpy(np.zeros((1, 3), np.float32))
                c.async_stream_infer("mlp", [bad], request_id="bad")
        got = [results.get(timeout=60) for _ in range(151)]
    finally:
        c.stop_stream()
    errors = [e for r, e in got if e is not None]
    assert len(errors) == 1 and "dimension 1 is 3" in str(errors[0])
    seen = set()
    for r, e in got:
        if e is None:
            k = r.get_response().id
            seen.add(k)
            np.testing.assert_allclose(r.as_numpy("probs"), ort_run(repo, "mlp", {"x": xs[k]})[0],
                                       rtol=1e-4, atol=1e-6)
    assert seen == set(xs)


def test_many_concurrent_streams(server):
    failures = []

    def one_stream(n):
        c = client(server)
        results = queue.Queue()
        c.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            for k in range(25):
                px = np.full((1, 64), (n * 25 + k) / 1000, np.float32)
                p = tg.InferInput("pixels", [1, 64], "FP32")
                p.set_data_from_numpy(px)
                c.async_stream_infer("digits", [p], request_id=f"{n}-{k}")
            ids = set()
            for _ in range(25):
                r, e = results.get(timeout=60)
                if e is not None:
                    failures.append(str(e))
                else:
                    ids.add(r.get_response().id)
            if ids != {f"{n}-{k}" for k in range(25)}:
                failures.append(f"stream {n}: {sorted(ids)}")
        finally:
            c.stop_stream()

    threads = [threading.Thread(target=one_stream, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures


def test_a_stream_that_is_not_read_is_read_no_further(tmp_path):
    """The stream's window: a client that sends and does not read has at
    most 64 requests answered or waiting to be sent, besides the replies the
    transports hold (1 MiB each here, so few), and the server reads no more
    of its stream until replies go out; once the client reads, every
    request is answered, in order."""
    root = tmp_path / "models"
    n_values = 1 << 18
    g = H.make_graph([H.make_node("Identity", ["x"], ["y"])], "big",
                     [H.make_tensor_value_info("x", T.FLOAT, [1, n_values])],
                     [H.make_tensor_value_info("y", T.FLOAT, [1, n_values])])
    (root / "big" / "1").mkdir(parents=True)
    onnx.save(H.make_model(g, opset_imports=[H.make_opsetid("", 17)]),
              str(root / "big" / "1" / "model.onnx"))
    proc, port = start(root)
    total = 300
    try:
        limit = [("grpc.max_receive_message_length", 8 << 20),
                 ("grpc.max_send_message_length", 8 << 20)]
        channel = grpc.insecure_channel(f"127.0.0.1:{proc.grpc_port}", options=limit)
        x = np.arange(n_values, dtype=np.float32)

        def requests():
            for k in range(total):
                q = pb.ModelInferRequest(model_name="big", id=str(k))
                q.inputs.add(name="x", datatype="FP32", shape=[1, n_values])
                q.raw_input_contents.append((x + k).tobytes())
                yield q
        it = pb_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(requests())
        answered, still_since = -1, time.time()
        deadline = time.time() + 30
        # Still for 2 s once answers have begun (the first may wait on a busy machine).
        while time.time() < deadline and (answered < 1 or time.time() - still_since < 2):
            now = stats(port, "big")["inference_stats"]["success"]["count"]
            if now != answered:
                answered, still_since = now, time.time()
            time.sleep(0.1)
        assert 64 <= answered <= 64 + 24, answered
        for k in range(total):
            r = next(it)
            assert not r.error_message, r.error_message
            assert r.infer_response.id == str(k)
            y = np.frombuffer(r.infer_response.raw_output_contents[0], np.float32)
            assert y[0] == k and y[-1] == n_values - 1 + k
        channel.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def slow_model(path, n_products=128, n=1024, rows=None):
    """x @ I, n_products times over, for x of n x n (or rows x n, "N" for any):
    about 0.3 TFLOP, a second or more on a 2-core machine; y equals x."""
    names = ["x"] + [f"p{k}" for k in range(1, n_products)] + ["y"]
    nodes = [H.make_node("MatMul", [names[k], "eye"], [names[k + 1]]) for k in range(n_products)]
    eye = onnx.numpy_helper.from_array(np.eye(n, dtype=np.float32), "eye")
    rows = rows or n
    g = H.make_graph(nodes, "slow", [H.make_tensor_value_info("x", T.FLOAT, [rows, n])],
                     [H.make_tensor_value_info("y", T.FLOAT, [rows, n])], [eye])
    path.parent.mkdir(parents=True)
    onnx.save(H.make_model(g, opset_imports=[H.make_opsetid("", 17)]), str(path))


def test_a_slow_model_holds_up_no_other_call(tmp_path):
    """One thread polls gRPC's queue (the default); an inference of a model
    without dynamic batching whose runs are long goes to a worker thread. So
    while a slow model runs, health checks and a small model's inferences
    are answered at once; with every inference on the polling thread
    (--grpc-threads 0) one of them would wait as long as the slow run."""
    root = tmp_path / "models"
    slow_model(root / "slow" / "1" / "model.onnx")
    (root / "simple" / "1").mkdir(parents=True)
    onnx.save(simple_add_sub(), str(root / "simple" / "1" / "model.onnx"))
    proc, port = start(root)
    try:
        c = tg.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
        x = np.random.default_rng(3).standard_normal((1024, 1024)).astype(np.float32)
        slow_in = tg.InferInput("x", [1024, 1024], "FP32")
        slow_in.set_data_from_numpy(x)
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [tg.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for i in inputs:
            i.set_data_from_numpy(a)
        done = queue.Queue()
        t0 = time.time()
        c.async_infer("slow", [slow_in], lambda result, error: done.put((result, error)))
        waits = []  # each quick call's time, until the slow one is answered
        while done.empty() and time.time() - t0 < 120:
            t = time.time()
            assert c.is_server_live()
            assert np.array_equal(c.infer("simple", inputs).as_numpy("OUTPUT0"), a + a)
            waits.append(time.time() - t)
        result, error = done.get(timeout=120)
        slow_s = time.time() - t0
        assert error is None, error
        assert np.array_equal(result.as_numpy("y"), x)
        if slow_s < 0.3:
            pytest.skip(f"the slow model took {slow_s:.2f} s here: too short to tell")
        assert len(waits) >= 3 and max(waits) < slow_s / 2, (slow_s, len(waits), max(waits))
        c.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_a_call_that_ends_while_it_waits_for_a_worker_is_not_run(tmp_path):
    """With one worker thread, a slow call runs while a second waits for the
    worker; the second's client gives up (its deadline, a quarter of a slow
    run, passes) before its turn comes, so the server answers it 503
    without running it. A third call queued behind it runs: with the first
    call timed alone, the model ran three times, not four."""
    root = tmp_path / "models"
    slow_model(root / "slow" / "1" / "model.onnx")
    proc, port = start(root, "--grpc-threads", "1")
    try:
        c = tg.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
        x = np.random.default_rng(4).standard_normal((1024, 1024)).astype(np.float32)
        slow_in = tg.InferInput("x", [1024, 1024], "FP32")
        slow_in.set_data_from_numpy(x)
        t0 = time.time()
        assert np.array_equal(c.infer("slow", [slow_in]).as_numpy("y"), x)
        alone = time.time() - t0
        if alone < 0.4:
            pytest.skip(f"the slow model took {alone:.2f} s here: too short for a call to wait")
        first, third = queue.Queue(), queue.Queue()
        c.async_infer("slow", [slow_in], lambda result, error: first.put((result, error)))
        time.sleep(alone / 8)
        with pytest.raises(InferenceServerException, match="(?i)deadline"):
            c.infer("slow", [slow_in], client_timeout=alone / 4)
        c.async_infer("slow", [slow_in], lambda result, error: third.put((result, error)))
        for done in (first, third):
            result, error = done.get(timeout=240)
            assert error is None, error
            assert np.array_equal(result.as_numpy("y"), x)
        assert stats(port, "slow")["execution_count"] == 3
        c.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def stream_in_order(port, model, xs, name="x"):
    """Sends xs on one stream of ModelStreamInfer; checks that reply k
    answers request k with xs[k]'s values (an Identity-like model)."""
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")

    def requests():
        for k, x in enumerate(xs):
            q = pb.ModelInferRequest(model_name=model, id=str(k))
            q.inputs.add(name=name, datatype="FP32", shape=list(x.shape))
            q.raw_input_contents.append(x.tobytes())
            yield q
    n = 0
    for k, r in enumerate(pb_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(
            requests(), timeout=120)):
        assert not r.error_message, r.error_message
        assert r.infer_response.id == str(k)
        y = np.frombuffer(r.infer_response.raw_output_contents[0], np.float32)
        assert y[0] == xs[k].flat[0]
        n += 1
    assert n == len(xs)
    channel.close()


def test_a_streams_replies_keep_its_requests_order(tmp_path):
    """A stream's requests of a model whose runs are long go to the worker
    threads one at a time, and a short one that may run on the polling
    thread waits for those before it: with two instances that could run
    side by side, and long requests followed by short ones (the model's
    mean run falls from long to short while the stream is read), the
    replies still come in the order of the requests."""
    root = tmp_path / "models"
    slow_model(root / "medium" / "1" / "model.onnx", n_products=4, n=384, rows="N")
    (root / "medium" / "config.json").write_text(json.dumps(
        {"instance_group": [{"count": 2, "kind": "KIND_CPU"}]}))
    (root / "quick" / "1").mkdir(parents=True)
    g = H.make_graph([H.make_node("Identity", ["x"], ["y"])], "quick",
                     [H.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                     [H.make_tensor_value_info("y", T.FLOAT, [1, 4])])
    onnx.save(H.make_model(g, opset_imports=[H.make_opsetid("", 17)]),
              str(root / "quick" / "1" / "model.onnx"))
    proc, port = start(root)
    try:
        stream_in_order(proc.grpc_port, "medium",
                        [np.full((384 if k < 16 else 1, 384), k, np.float32) for k in range(400)])
        stream_in_order(proc.grpc_port, "quick",
                        [np.full((1, 4), k, np.float32) for k in range(300)])
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_a_client_that_leaves_mid_stream(server):
    channel = grpc.insecure_channel(f"127.0.0.1:{server[1]}")
    s = pb_grpc.GRPCInferenceServiceStub(channel)
    x = np.zeros((1, 64), np.float32)

    def requests():
        for _ in range(200):
            q = pb.ModelInferRequest(model_name="digits")
            q.inputs.add(name="pixels", datatype="FP32", shape=[1, 64])
            q.raw_input_contents.append(x.tobytes())
            yield q
    it = s.ModelStreamInfer(requests())
    next(it)
    it.cancel()
    channel.close()
    assert client(server).is_server_live()


# ---- limits, tokens, the repository ---------------------------------------------------------------

def test_message_over_the_limit_is_resource_exhausted(repo):
    proc, port = start(repo, "--max-request-bytes", "64K")
    try:
        c = tg.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
        x, i = mlp_input(8, 1)  # 8 KB: fits
        c.infer("mlp", [i])
        big = tg.InferInput("x", [8, 256 * 9], "FP32")
        big.set_data_from_numpy(np.zeros((8, 256 * 9), np.float32))  # 72 KB
        with pytest.raises(InferenceServerException) as e:
            c.infer("mlp", [big])
        assert grpc_code(e) == "StatusCode.RESOURCE_EXHAUSTED"
        assert c.is_server_live()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def start_needing_tokens(repo, model="mlp"):
    """A server with --auth required (start() polls a route that would need a
    token), up once `model` is ready."""
    port, gport = free_ports(2)
    state = repo.parent / f"state-auth-{port}"
    proc = subprocess.Popen([os.environ.get("GPUSRV_BIN", os.path.join(ROOT, "build", "gpusrv")),
                             "serve", "--model-repository", str(repo), "--http-port", str(port),
                             "--grpc-port", str(gport), "--state-dir", str(state),
                             "--auth", "required"], stderr=subprocess.DEVNULL)
    proc.grpc_port = gport
    c = tg.InferenceServerClient(f"127.0.0.1:{gport}")
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            token = (state / "admin.token").read_text().strip()
            if c.is_model_ready(model, headers={"authorization": f"Bearer {token}"}):
                return proc, c, token
        except (OSError, InferenceServerException):
            pass
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("gpusrv serve --auth required did not come up")


def test_unpacked_messages_are_held_to_the_budget(repo):
    # 20,000 empty strings: 40 KB on the wire, ten times that as protobuf-c's structs.
    proc, port = start(repo, "--max-request-bytes", "64K", "--max-bodies-bytes", "128K")
    try:
        s = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(f"127.0.0.1:{proc.grpc_port}"))
        q = pb.ModelInferRequest(model_name="types")
        t = q.inputs.add(name="in_s", datatype="BYTES", shape=[2, 3])
        t.contents.bytes_contents.extend([b""] * 20000)
        assert q.ByteSize() < 64 * 1024
        with pytest.raises(grpc.RpcError) as e:
            s.ModelInfer(q)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max-bodies-bytes" in e.value.details()
        assert tg.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}").is_server_live()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_grpc_health_service(server, tmp_path):
    """grpc.health.v1 as gRPC's own stubs ask it (grpcio-health-checking): the
    server and the inference service answer as ServerReady does (this
    server is not ready: an entry of its repository is no model), without a
    token where tokens are required, an unknown service is NOT_FOUND to
    Check and SERVICE_UNKNOWN to Watch."""
    from grpc_health.v1 import health_pb2 as hp, health_pb2_grpc as hg
    health = hg.HealthStub(grpc.insecure_channel(f"127.0.0.1:{server[1]}"))
    assert not client(server).is_server_ready()
    for service in ("", "inference.GRPCInferenceService"):
        assert health.Check(hp.HealthCheckRequest(service=service)).status == \
            hp.HealthCheckResponse.NOT_SERVING
    with pytest.raises(grpc.RpcError) as e:
        health.Check(hp.HealthCheckRequest(service="other.Service"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "other.Service" in e.value.details()
    watch = health.Watch(hp.HealthCheckRequest())
    assert next(watch).status == hp.HealthCheckResponse.NOT_SERVING
    watch.cancel()
    unknown = health.Watch(hp.HealthCheckRequest(service="other.Service"))
    assert next(unknown).status == hp.HealthCheckResponse.SERVICE_UNKNOWN
    unknown.cancel()
    # A Watch takes one request: a second on the same stream ends it.
    twice = grpc.insecure_channel(f"127.0.0.1:{server[1]}").stream_stream(
        "/grpc.health.v1.Health/Watch", request_serializer=hp.HealthCheckRequest.SerializeToString,
        response_deserializer=hp.HealthCheckResponse.FromString)
    replies = twice(iter([hp.HealthCheckRequest(), hp.HealthCheckRequest()]), timeout=10)
    with pytest.raises(grpc.RpcError) as e:
        for _ in replies:
            pass
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "one request" in e.value.details()
    ready = tmp_path / "ready"
    shutil.copytree(os.path.join(ROOT, "models", "digits"), ready / "digits")
    proc, c, token = start_needing_tokens(ready, "digits")
    try:
        assert c.is_server_ready()
        health = hg.HealthStub(grpc.insecure_channel(f"127.0.0.1:{proc.grpc_port}"))
        for service in ("", "inference.GRPCInferenceService"):
            assert health.Check(hp.HealthCheckRequest(service=service)).status == \
                hp.HealthCheckResponse.SERVING
        watch_follows_readiness(proc, c, {"authorization": "Bearer " + token}, health, hp)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def watch_follows_readiness(proc, c, admin, health, hp):
    """Watch on a ready server (for the test above): SERVING, then
    NOT_SERVING while a load that fails leaves a model unavailable, SERVING
    again once it loads, and a last NOT_SERVING when the server stops, whose
    stream then ends; watchers that leave do not hold the server up."""
    leavers = [health.Watch(hp.HealthCheckRequest()) for _ in range(20)]
    for w in leavers:
        assert next(w).status == hp.HealthCheckResponse.SERVING
        w.cancel()
    watch = health.Watch(hp.HealthCheckRequest(service="inference.GRPCInferenceService"))
    assert next(watch).status == hp.HealthCheckResponse.SERVING
    with pytest.raises(InferenceServerException):
        c.load_model("digits", headers=admin, config=json.dumps({"max_batch_size": -1}))
    assert next(watch).status == hp.HealthCheckResponse.NOT_SERVING
    c.load_model("digits", headers=admin)
    assert next(watch).status == hp.HealthCheckResponse.SERVING
    t0 = time.time()
    proc.send_signal(signal.SIGTERM)
    assert next(watch).status == hp.HealthCheckResponse.NOT_SERVING
    assert list(watch) == []  # and the stream ends
    assert proc.wait(timeout=30) == 0
    assert time.time() - t0 < 10  # the watch does not hold the drain (30 s)


def test_tokens_in_metadata(repo):
    proc, c, token = start_needing_tokens(repo)
    try:
        assert c.is_server_live()  # health needs none
        x, i = mlp_input(1, 1)
        with pytest.raises(InferenceServerException) as e:
            c.infer("mlp", [i])
        assert grpc_code(e) == "StatusCode.UNAUTHENTICATED" and "needs a token" in str(e.value)
        with pytest.raises(InferenceServerException) as e:
            c.infer("mlp", [i], headers={"authorization": "Bearer wrong"})
        assert grpc_code(e) == "StatusCode.UNAUTHENTICATED" and "token refused" in str(e.value)
        ok = {"authorization": f"Bearer {token}"}
        assert c.infer("mlp", [i], headers=ok).as_numpy("probs").shape == (1, 10)
        with pytest.raises(InferenceServerException) as e:
            c.get_model_metadata("mlp")
        assert grpc_code(e) == "StatusCode.UNAUTHENTICATED"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_load_and_unload(server, repo):
    c = client(server)
    with pytest.raises(InferenceServerException) as e:
        c.unload_model("simple")
    assert grpc_code(e) == "StatusCode.UNAUTHENTICATED"
    admin = {"authorization": f"Bearer {admin_token(repo, server[0])}"}
    c.unload_model("simple", headers=admin)
    index = {m["name"]: m for m in c.get_model_repository_index(as_json=True)["models"]}
    assert index["simple"]["state"] == "UNLOADED"
    assert "simple" not in {m["name"] for m in c.get_model_repository_index(as_json=True)["models"]
                            if m.get("state") == "READY"}
    assert not c.is_model_ready("simple")
    with pytest.raises(InferenceServerException) as e:
        c.get_model_metadata("simple")
    assert grpc_code(e) == "StatusCode.UNAVAILABLE" and "unloaded" in str(e.value)
    c.load_model("simple", headers=admin)
    assert c.is_model_ready("simple")
    with pytest.raises(InferenceServerException) as e:
        c.load_model("ghost", headers=admin)
    assert grpc_code(e) == "StatusCode.NOT_FOUND"
    # A load may bring its config (test_load_parameters.py has the rest).
    c.load_model("simple", headers=admin, config=json.dumps({"max_batch_size": 4}))
    assert c.get_model_config("simple", as_json=True)["config"]["max_batch_size"] == 4
    c.load_model("simple", headers=admin)
    assert c.get_model_config("simple", as_json=True)["config"]["max_batch_size"] != 4


@pytest.mark.skipif(not os.path.exists(PERF_ANALYZER), reason="perf_analyzer is not installed "
                    "(scripts/install-deps.sh extracts it)")
@pytest.mark.parametrize("streaming", [False, True])
def test_perf_analyzer_runs_clean_over_grpc(server, streaming):
    p = subprocess.run([PERF_ANALYZER, "-m", "mlp", "-u", f"127.0.0.1:{server[1]}", "-i", "grpc",
                        *(["--streaming"] if streaming else []),
                        "--concurrency-range", "4:4", "--measurement-interval", "500", "-b", "2",
                        "--stability-percentage", "1000", "--max-trials", "20"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Throughput" in p.stdout and "error" not in p.stdout.lower()
    assert "Avg request latency" in p.stdout or streaming


def test_sigterm_ends_an_open_stream_and_drains(repo):
    proc, port = start(repo, "--drain-seconds", "2")
    c = tg.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
    results = queue.Queue()
    c.start_stream(callback=lambda result, error: results.put((result, error)))
    x, i = mlp_input(1, 1)
    c.async_stream_infer("mlp", [i])
    assert results.get(timeout=30)[1] is None
    t = time.time()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0  # the open stream is cancelled after the drain
    assert time.time() - t < 15
    c.stop_stream()


def test_grpc_port_in_use_is_a_clear_error(repo, tmp_path):
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        p = subprocess.run([os.environ.get("GPUSRV_BIN", os.path.join(ROOT, "build", "gpusrv")),
                            "serve", "--model-repository", str(repo), "--http-port",
                            str(free_port()), "--grpc-port", str(port), "--state-dir",
                            str(tmp_path / "state")], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and f"cannot serve gRPC on 127.0.0.1:{port}" in p.stderr, p.stderr
