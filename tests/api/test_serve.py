"""`gpusrv serve` started for real on a free loopback port, spoken to with
tritonclient (JSON and binary tensors), raw HTTP, and misbehaving clients."""
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.http as triton
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSRV = os.environ.get("GPUSRV_BIN", os.path.join(ROOT, "build", "gpusrv"))
sys.path.insert(0, os.path.join(ROOT, "tests", "engine"))
from models import mlp  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n):
    """n distinct free ports: their sockets are held together while chosen
    (two free_port() calls can return the same port)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def start(repo, *extra, env=None):
    port, grpc_port = free_ports(2)
    # The server's output goes to a file: a pipe nobody reads would fill up
    # and block it.
    log = open(os.path.join(str(repo), f"serve-{port}.log"), "w+")
    # Each server keeps its own state (jobs, tenants, the admin token).
    state = ["--state-dir", os.path.join(str(repo), f"state-{port}")]
    if "--state-dir" in extra:  # the caller's, outside the repository
        state = []
    proc = subprocess.Popen([GPUSRV, "serve", "--model-repository", str(repo), "--http-port",
                             str(port), "--grpc-port", str(grpc_port), *state, *extra],
                            stdout=log, stderr=log, text=True, env={**os.environ, **(env or {})})
    proc.grpc_port = grpc_port  # for the gRPC tests
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            # Up, and done loading (models load in the background).
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("POST", "/v2/repository/index", body=b"{}")
            r = c.getresponse()
            if r.status == 200 and all(m["state"] != "LOADING" for m in json.loads(r.read())):
                return proc, port
        except OSError:
            pass
        time.sleep(0.05)
        if proc.poll() is not None:
            log.seek(0)
            raise AssertionError(f"gpusrv serve exited: {log.read()}")
    proc.kill()
    raise AssertionError("gpusrv serve did not come up")


def admin_token(repo, port):
    with open(os.path.join(str(repo), f"state-{port}", "admin.token")) as f:
        return f.read().strip()


def add_model(root, name, config, text=None):
    """An entry of repository `root`: version 1 of the test MLP, and its
    configuration as config.json (a dict) or as config.pbtxt (`text`)."""
    (root / name / "1").mkdir(parents=True)
    onnx.save(mlp(), str(root / name / "1" / "model.onnx"))
    if text is not None:
        (root / name / "config.pbtxt").write_text(text)
    else:
        (root / name / "config.json").write_text(json.dumps(config))


@contextlib.contextmanager
def serving(repo, *extra, env=None):
    """A server for the block: stopped with SIGTERM after, and it must exit 0."""
    proc, port = start(repo, *extra, env=env)
    try:
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    shutil.copytree(os.path.join(ROOT, "models", "digits"), root / "digits")
    add_model(root, "mlp", {
        "max_batch_size": 8,
        "dynamic_batching": {"preferred_batch_size": [8], "max_queue_delay_microseconds": 50000}})
    # A Triton repository entry: config.pbtxt in the text format.
    add_model(root, "tpb", None, text='''
name: "tpb"   # comments are allowed
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 256 ] } ]
output [ { name: "probs", data_type: TYPE_FP32, dims: [ 10 ] } ]
dynamic_batching {
  preferred_batch_size: 4
  max_queue_delay_microseconds: 100
  default_queue_policy { max_queue_size: 64 timeout_action: REJECT }
}
instance_group [ { count: 1 kind: KIND_CPU } ]
''')
    add_model(root, "badtext", None, text="max_batch_size: 8\ndynamic_batching { : }\n")
    # A model whose output shape is an input's values (a Reshape's shape).
    (root / "reshaper" / "1").mkdir(parents=True)
    g = onnx.helper.make_graph(
        [onnx.helper.make_node("Reshape", ["x", "shape"], ["r"]),
         onnx.helper.make_node("Add", ["r", "r"], ["y"])], "reshaper",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [6]),
         onnx.helper.make_tensor_value_info("shape", onnx.TensorProto.INT64, [2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    onnx.save(onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)]),
              str(root / "reshaper" / "1" / "model.onnx"))
    # A model that takes bfloat16 (a .npy holds it as its bits, <u2).
    (root / "bf16" / "1").mkdir(parents=True)
    g = onnx.helper.make_graph(
        [onnx.helper.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.FLOAT)], "bf16",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.BFLOAT16, [4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])])
    onnx.save(onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)]),
              str(root / "bf16" / "1" / "model.onnx"))
    (root / "broken" / "1").mkdir(parents=True)
    (root / "broken" / "1" / "model.onnx").write_bytes(b"not a model")
    return root


@pytest.fixture(scope="module")
def server(repo):
    with serving(repo) as port:
        yield port


def request(port, method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    return r.status, r.read(), dict(r.getheaders())


def ort_run(path, x):
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, x)[0]


def stats(port, model):
    status, raw, _ = request(port, "GET", f"/v2/models/{model}/stats")
    assert status == 200
    return json.loads(raw)["model_stats"][0]


def test_health_and_server_metadata(server):
    assert request(server, "GET", "/v2/health/live")[0] == 200
    # One broken model: the server is up but not everything is ready.
    assert request(server, "GET", "/v2/health/ready")[0] == 503
    status, body, _ = request(server, "GET", "/v2")
    meta = json.loads(body)
    assert status == 200 and meta["name"] == "gpusrv"
    assert set(meta["extensions"]) == {"binary_tensor_data", "model_configuration", "statistics",
                                       "model_repository"}


def test_broken_model_is_listed_with_its_reason(server):
    status, body, _ = request(server, "GET", "/v2/models/broken")
    assert status == 503
    assert "not ready" in json.loads(body)["error"]
    assert request(server, "GET", "/v2/models/broken/ready")[0] == 503
    assert request(server, "GET", "/v2/models/digits/ready")[0] == 200


def test_shapes_from_input_values_are_planned_per_value(server):
    x = list(range(6))
    for shape in ([2, 3], [3, 2], [2, 3], [6, 1]):
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [6], "data": x},
                           {"name": "shape", "datatype": "INT64", "shape": [2], "data": shape}]}
        status, raw, _ = request(server, "POST", "/v2/models/reshaper/infer", json.dumps(body))
        assert status == 200, raw
        out = json.loads(raw)["outputs"][0]
        assert out["shape"] == shape and out["data"] == [2.0 * v for v in x]
    bad = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [6], "data": x},
                      {"name": "shape", "datatype": "INT64", "shape": [2], "data": [4, 2]}]}
    status, raw, _ = request(server, "POST", "/v2/models/reshaper/infer", json.dumps(bad))
    assert status == 400 and b"Reshape" in raw, raw


def test_metadata_and_config_with_tritonclient(server):
    client = triton.InferenceServerClient(f"127.0.0.1:{server}")
    assert client.is_server_live()
    meta = client.get_model_metadata("digits")
    assert meta["inputs"] == [{"name": "pixels", "datatype": "FP32", "shape": [-1, 64]}]
    config = client.get_model_config("digits")
    assert config["max_batch_size"] == 64
    assert config["input"][0]["dims"] == [64] and config["output"][0]["name"] == "probs"


@pytest.mark.parametrize("binary", [False, True])
def test_infer_matches_onnxruntime(server, repo, binary):
    client = triton.InferenceServerClient(f"127.0.0.1:{server}")
    x = np.random.default_rng(3).standard_normal((5, 256)).astype(np.float32)
    inp = triton.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    out = triton.InferRequestedOutput("probs", binary_data=binary)
    res = client.infer("mlp", [inp], outputs=[out], request_id="r-7")
    got = res.as_numpy("probs")
    want = ort_run(str(repo / "mlp" / "1" / "model.onnx"), {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert res.get_response()["id"] == "r-7"


def test_digits_example_request_as_printed_by_make_run(server):
    body = open(os.path.join(ROOT, "models", "digits", "example-request.json"), "rb").read()
    status, raw, _ = request(server, "POST", "/v2/models/digits/infer", body)
    assert status == 200, raw
    probs = np.array(json.loads(raw)["outputs"][0]["data"]).reshape(2, 10)
    assert list(probs.argmax(axis=1)) == [2, 8]  # the held-out labels of those two images


def test_raw_binary_request(server, repo):
    x = np.random.default_rng(4).standard_normal((2, 256)).astype(np.float32)
    header = json.dumps({"inputs": [{"name": "x", "shape": [2, 256], "datatype": "FP32",
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "probs", "parameters": {"binary_data": True}}]}).encode()
    status, raw, headers = request(server, "POST", "/v2/models/mlp/infer", header + x.tobytes(),
                                   {"Inference-Header-Content-Length": str(len(header))})
    assert status == 200, raw
    hl = int(headers["Inference-Header-Content-Length"])
    meta = json.loads(raw[:hl])
    assert meta["outputs"][0]["parameters"]["binary_data_size"] == 2 * 10 * 4
    got = np.frombuffer(raw[hl:], np.float32).reshape(2, 10)
    np.testing.assert_allclose(got, ort_run(str(repo / "mlp" / "1" / "model.onnx"), {"x": x}),
                               rtol=1e-4, atol=1e-6)


BAD = [
    ("/v2/models/digits/infer", b"{not json", 400, "malformed JSON"),
    ("/v2/models/digits/infer", b'{"inputs": 3}', 400, "inputs"),
    ("/v2/models/digits/infer", b'{"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", '
                                b'"data": [1]}]}', 400, "unknown input 'x'"),
    ("/v2/models/digits/infer", b'{"inputs": [{"name": "pixels", "shape": [1, 64], '
                                b'"datatype": "FP64", "data": [1]}]}', 400, "expected datatype FP32"),
    ("/v2/models/digits/infer", b'{"inputs": [{"name": "pixels", "shape": [1, 64], '
                                b'"datatype": "FP32", "data": [1, 2]}]}', 400, "wrong number of values"),
    ("/v2/models/digits/infer", b'{"inputs": [{"name": "pixels", "shape": [100, 64], '
                                b'"datatype": "FP32", "data": [1]}]}', 400, "expected 1 to 64"),
    ("/v2/models/digits/infer", b'{"inputs": [{"name": "pixels", "shape": [1, 64], '
                                b'"datatype": "FP32", "data": ["a"]}]}', 400, "other than numbers"),
    ("/v2/models/digits/infer", b'{"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": '
                                b'"FP32", "parameters": {"binary_data_size": 256}}]}', 400,
     "binary data are left"),
    ("/v2/models/digits/infer", b'{"inputs": [], "parameters": {"priority": "high"}}', 400,
     "priority must be an integer"),
    ("/v2/models/digits/infer", b'{"inputs": [], "parameters": {"timeout": -1}}', 400,
     "timeout must be a number of microseconds"),
    ("/v2/models/nope/infer", b"{}", 404, "unknown model 'nope'"),
    ("/v2/models/digits/versions/9/infer", b"{}", 404, "no version '9'"),
    ("/v2/nothing", b"", 404, "no such route"),
]


@pytest.mark.parametrize("path,body,status,text", BAD)
def test_bad_requests_get_clear_errors(server, path, body, status, text):
    got, raw, _ = request(server, "POST" if body else "GET", path, body)
    assert got == status, raw
    assert text in json.loads(raw)["error"]
    # The server answers the next request.
    assert request(server, "GET", "/v2/health/live")[0] == 200


@pytest.mark.parametrize("value,text", [("abc", "is not a number"),
                                        ("99999", "is larger than the body")])
def test_bad_inference_header_length(server, value, text):
    got, raw, _ = request(server, "POST", "/v2/models/digits/infer", b"{}",
                          {"Inference-Header-Content-Length": value})
    assert got == 400 and text in json.loads(raw)["error"]


def test_oversized_body_is_413(repo):
    proc, port = start(repo, "--max-request-bytes", "2048")
    try:
        status, raw, _ = request(port, "POST", "/v2/models/digits/infer", b"x" * 4096)
        assert status == 413 and "larger than the limit" in json.loads(raw)["error"]
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0


def test_client_cut_off_mid_body(server):
    s = socket.create_connection(("127.0.0.1", server))
    s.sendall(b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
              + b'{"inputs": [')
    s.close()
    time.sleep(0.2)
    assert request(server, "GET", "/v2/health/live")[0] == 200


def test_concurrent_clients(server):
    body = open(os.path.join(ROOT, "models", "digits", "example-request.json"), "rb").read()
    errors = []

    def worker():
        for _ in range(10):
            try:
                status, _, _ = request(server, "POST", "/v2/models/digits/infer", body)
                if status != 200:
                    errors.append(status)
            except OSError as e:
                errors.append(str(e))

    threads = [threading.Thread(target=worker) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_settings_table_errors(repo, tmp_path):
    p = subprocess.run([GPUSRV, "serve", "--http-port", "70000"], capture_output=True, text=True)
    assert p.returncode == 2 and "http-port: 70000 is outside [1, 65535]" in p.stderr
    p = subprocess.run([GPUSRV, "serve", "--colour", "blue"], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown setting 'colour'" in p.stderr
    (tmp_path / "c.json").write_text('{"http-port": "eighty"}')
    p = subprocess.run([GPUSRV, "serve", "--config", str(tmp_path / "c.json")], capture_output=True,
                       text=True)
    assert p.returncode == 2 and "must be an integer" in p.stderr
    help_text = subprocess.run([GPUSRV, "serve", "--help"], capture_output=True, text=True).stdout
    for name in ("--host", "--http-port", "--model-repository", "--max-request-bytes"):
        assert name in help_text
    assert subprocess.run([GPUSRV, "help", "serve"], capture_output=True, text=True).stdout == help_text


def test_config_file_then_flags(repo, tmp_path):
    port = free_port()
    (tmp_path / "c.json").write_text(json.dumps({"http-port": 1, "model-repository": str(repo),
                                                  "state-dir": str(tmp_path / "state")}))
    proc = subprocess.Popen([GPUSRV, "serve", "--config", str(tmp_path / "c.json"), "--http-port",
                             str(port), "--grpc-port", "0"], stderr=subprocess.DEVNULL)
    try:
        # Ready, not just live: the repository's models load after the port opens
        # (live alone made this fail under load, the model still loading: 503).
        for _ in range(400):
            try:
                if request(port, "GET", "/v2/health/ready")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        assert request(port, "GET", "/v2/models/digits")[0] == 200  # repository from the file
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def metric_values(port):
    values = {}
    for line in request(port, "GET", "/metrics")[1].decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_all_model_stats(server):
    status, raw, _ = request(server, "GET", "/v2/models/stats")
    names = {m["name"] for m in json.loads(raw)["model_stats"]}
    assert status == 200 and names == {"digits", "mlp", "tpb", "reshaper", "bf16"}


def test_metrics(server):
    body = open(os.path.join(ROOT, "models", "digits", "example-request.json"), "rb").read()
    assert request(server, "POST", "/v2/models/digits/infer", body)[0] == 200
    status, raw, headers = request(server, "GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    values = {}
    for line in raw.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    digits = stats(server, "digits")
    assert values['nv_inference_request_success{model="digits",version="1"}'] == \
        digits["inference_stats"]["success"]["count"]
    assert values['nv_inference_count{model="digits",version="1"}'] == digits["inference_count"]
    assert values['gpusrv_batch_size_count{model="digits"}'] == digits["execution_count"]
    assert values['gpusrv_device_memory_total_bytes{device="cpu0",backend="cpu"}'] > 0
    assert 'gpusrv_pool_reserved_bytes{device="cpu0",pool="device"}' in values
    assert not any("broken" in k for k in values)  # a model that did not load has no series


def test_cli_models_and_infer(server, repo, tmp_path):
    url = f"http://127.0.0.1:{server}"
    p = subprocess.run([GPUSRV, "models", "--url", url, "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    states = {m["name"]: m for m in json.loads(p.stdout)}
    assert states["digits"]["state"] == "READY" and states["mlp"]["state"] == "READY"
    assert states["broken"]["state"] == "UNAVAILABLE" and states["broken"]["reason"]
    assert states["badtext"]["state"] == "UNAVAILABLE" and "line 2" in states["badtext"]["reason"]
    table = subprocess.run([GPUSRV, "models", "--url", url], capture_output=True, text=True).stdout
    assert "UNAVAILABLE" in table and "digits" in table
    x = np.random.default_rng(6).standard_normal((3, 256)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    p = subprocess.run([GPUSRV, "infer", "mlp", "-i", f"x={tmp_path}/x.npy", "-o",
                        str(tmp_path / "out" / "nested"), "--url", url],  # parents made too
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out" / "nested" / "probs.npy"),
                               ort_run(str(repo / "mlp" / "1" / "model.onnx"), {"x": x}),
                               rtol=1e-4, atol=1e-6)
    printed = subprocess.run([GPUSRV, "infer", "mlp", "-i", f"x={tmp_path}/x.npy", "--url", url],
                             capture_output=True, text=True)
    assert printed.returncode == 0 and json.loads(printed.stdout)[0]["shape"] == [3, 10]
    p = subprocess.run([GPUSRV, "infer", "nope", "-i", f"x={tmp_path}/x.npy", "--url", url],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "unknown model 'nope'" in p.stderr and p.stdout == ""
    p = subprocess.run([GPUSRV, "models", "--url", f"http://127.0.0.1:{free_port()}"],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "cannot reach" in p.stderr
    p = subprocess.run([GPUSRV, "infer", "mlp", "--url", url], capture_output=True, text=True)
    assert p.returncode == 2
    # bfloat16 from a .npy of its bits: sent as BF16 where the model takes BF16.
    bits = (np.array([1, 2, 3, -4], np.float32).view(np.uint32) >> 16).astype(np.uint16)
    np.save(tmp_path / "b.npy", bits)
    p = subprocess.run([GPUSRV, "infer", "bf16", "-i", f"x={tmp_path}/b.npy", "-o",
                        str(tmp_path / "bout"), "--url", url], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "bout" / "y.npy"), [1, 2, 3, -4])


PERF_ANALYZER = os.path.join(ROOT, ".venv", "bin", "perf_analyzer")


@pytest.mark.skipif(not os.path.exists(PERF_ANALYZER), reason="perf_analyzer is not installed "
                    "(scripts/install-deps.sh extracts it)")
def test_perf_analyzer_runs_clean(server):
    # The protocol is what is tested here, not how steady this shared machine's
    # timing is: any spread of throughput and latency is accepted as stable.
    p = subprocess.run([PERF_ANALYZER, "-m", "digits", "-u", f"127.0.0.1:{server}",
                        "--concurrency-range", "4:4", "--measurement-interval", "500", "-b", "2",
                        "--stability-percentage", "1000", "--max-trials", "20"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Throughput" in p.stdout and "error" not in p.stdout.lower()
    # perf_analyzer's server-side breakdown comes from the statistics extension.
    assert "Avg request latency" in p.stdout


def test_unload_and_load_while_another_model_serves(repo):
    with serving(repo) as port:
        body = open(os.path.join(ROOT, "models", "digits", "example-request.json"), "rb").read()
        stop = threading.Event()
        digits_status = []

        def keep_inferring():
            while not stop.is_set():
                digits_status.append(request(port, "POST", "/v2/models/digits/infer", body)[0])

        # Loading and unloading need an admin's token.
        status, raw, _ = request(port, "POST", "/v2/repository/models/mlp/unload", b"{}")
        assert status == 401 and "token" in json.loads(raw)["error"]
        admin = {"Authorization": "Bearer " + admin_token(repo, port)}
        t = threading.Thread(target=keep_inferring)
        t.start()
        try:
            assert request(port, "POST", "/v2/repository/models/mlp/unload", b"{}", admin)[0] == 200
            index = {m["name"]: m for m in json.loads(request(port, "POST", "/v2/repository/index", b"{}")[1])}
            assert index["mlp"]["state"] == "UNLOADED"
            status, raw, _ = request(port, "GET", "/v2/models/mlp")
            assert status == 503 and "unloaded" in json.loads(raw)["error"]
            for _ in range(3):  # reload, again and again
                assert request(port, "POST", "/v2/repository/models/mlp/load", b"{}", admin)[0] == 200
            assert request(port, "GET", "/v2/models/mlp/ready")[0] == 200
            x = {"inputs": [{"name": "x", "shape": [1, 256], "datatype": "FP32", "data": [0.5] * 256}]}
            assert request(port, "POST", "/v2/models/mlp/infer", json.dumps(x).encode())[0] == 200
            status, raw, _ = request(port, "POST", "/v2/repository/models/broken/load", b"{}", admin)
            assert status == 400 and "cannot load model 'broken'" in json.loads(raw)["error"]
            status, raw, _ = request(port, "POST", "/v2/repository/models/ghost/load", b"{}", admin)
            assert status == 404
        finally:
            stop.set()
            t.join()
        assert digits_status and set(digits_status) == {200}  # never stalled or failed


def test_sigterm_drains_requests_in_flight(tmp_path):
    repo = tmp_path / "models"
    add_model(repo, "slow", {
        "max_batch_size": 8,
        "dynamic_batching": {"preferred_batch_size": [8], "max_queue_delay_microseconds": 1500000}})
    proc, port = start(repo)
    result = {}

    def one():
        x = {"inputs": [{"name": "x", "shape": [1, 256], "datatype": "FP32", "data": [0.1] * 256}]}
        result["status"] = request(port, "POST", "/v2/models/slow/infer", json.dumps(x).encode())[0]

    t = threading.Thread(target=one)
    t.start()
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    t.join(timeout=30)
    assert result.get("status") == 200  # answered, not dropped
    assert proc.wait(timeout=30) == 0


def test_latency_histogram_and_queue_length(repo, server):
    """The successes' latency histogram (statistics JSON and /metrics) counts
    every request once, and its median lies within what the client measured;
    the queue length is there, 0 when idle."""
    body = open(os.path.join(ROOT, "models", "digits", "example-request.json"), "rb").read()
    before = json.loads(request(server, "GET", "/v2/models/digits/stats")[1])["model_stats"][0]
    took = []
    for _ in range(20):
        t0 = time.perf_counter()
        assert request(server, "POST", "/v2/models/digits/infer", body)[0] == 200
        took.append(time.perf_counter() - t0)
    after = json.loads(request(server, "GET", "/v2/models/digits/stats")[1])["model_stats"][0]
    h0, h1 = before["latency_histogram"], after["latency_histogram"]
    assert len(h1["counts"]) == len(h1["bounds_us"]) + 1
    recent = [b - a for a, b in zip(h0["counts"], h1["counts"])]
    assert sum(recent) == 20
    assert sum(h1["counts"]) == after["inference_stats"]["success"]["count"]
    # the bucket holding the median starts below the slowest request the client saw
    cum, k = 0, 0
    while cum + recent[k] < 10:
        cum += recent[k]
        k += 1
    lower = h1["bounds_us"][k - 1] if k else 0
    assert lower <= max(took) * 1e6, (recent, took)
    assert after["queue_length"] == 0
    text = request(server, "GET", "/metrics")[1].decode()
    line = next(l for l in text.splitlines()
                if l.startswith('gpusrv_request_duration_seconds_count{model="digits"}'))
    assert int(line.split()[-1]) == after["inference_stats"]["success"]["count"]
    assert 'gpusrv_request_duration_seconds_bucket{model="digits",le="+Inf"}' in text
    assert 'nv_inference_pending_request_count{model="digits",version="1"} 0' in text


def test_a_thousand_concurrent_connections(repo):
    """1,000 clients connect at once, each sends one request; every one is
    answered, and the server answers the next request afterwards. A server of
    its own: the shared one may still be closing earlier tests' connections
    (perf_analyzer's), which count against the 1,024 one address may hold, so
    that some of the thousand were turned away in the sanitizer build. And a
    per-client limit above the thousand: connections closed just before (the
    start's readiness probes) count against it until libmicrohttpd cleans
    them up, and past it a connection is accepted and closed unanswered."""
    with serving(repo, "--max-connections-per-client", "4096") as server:
        thousand_connections(server, os.path.join(str(repo), f"serve-{server}.log"))


def thousand_connections(server, log_path):
    import selectors
    body = open(os.path.join(ROOT, "models", "digits", "example-request.json"), "rb").read()
    req = (b"POST /v2/models/digits/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body)) + body
    socks = []
    for _ in range(1000):
        s = socket.create_connection(("127.0.0.1", server))
        socks.append(s)
    for s in socks:
        s.sendall(req)
    sel = selectors.DefaultSelector()
    replies = {}
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        replies[s] = b""
    open_count, deadline = len(socks), time.time() + 120
    while open_count and time.time() < deadline:
        for key, _ in sel.select(timeout=1):
            chunk = key.fileobj.recv(65536)
            if chunk:
                replies[key.fileobj] += chunk
            else:
                sel.unregister(key.fileobj)
                key.fileobj.close()
                open_count -= 1
    # Should it fail, the server's own log says more (pytest deletes it later).
    log_tail = open(log_path, errors="replace").read()[-4000:]
    assert open_count == 0, log_tail
    bad = [r[:300] for r in replies.values() if not r.startswith(b"HTTP/1.1 200")]
    assert not bad, (len(bad), bad[:3], log_tail)
    assert request(server, "GET", "/v2/health/live")[0] == 200


def test_triton_config_pbtxt(server):
    config = json.loads(request(server, "GET", "/v2/models/tpb/config")[1])
    assert config["max_batch_size"] == 8
    assert config["dynamic_batching"]["preferred_batch_size"] == [4]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert config["dynamic_batching"]["default_queue_policy"]["max_queue_size"] == 64
    assert config["dynamic_batching"]["default_queue_policy"]["timeout_action"] == "REJECT"
    x = {"inputs": [{"name": "x", "shape": [2, 256], "datatype": "FP32", "data": [0.2] * 512}]}
    status, raw, _ = request(server, "POST", "/v2/models/tpb/infer", json.dumps(x).encode())
    assert status == 200 and json.loads(raw)["outputs"][0]["shape"] == [2, 10]
