"""A load that brings its own configuration and files (issue 23; Triton's
repository extension): tritonclient's load_model(config=...) over HTTP and
gRPC replaces the repository's configuration; files (base64 in HTTP's JSON,
bytes over gRPC) make a whole model directory, for a model the repository
does not hold, whose answers equal onnxruntime's; what was brought survives
an idle unload and goes with an admin unload; parameters that would leave
the model's directory, or do not add up, are refused with the reason."""
import base64
import json
import os
import time

import grpc
import numpy as np
import onnx
import pytest
import tritonclient.grpc as tg
import tritonclient.http as triton
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from test_serve import add_model, admin_token, ort_run, request, start
from test_idle_unload import index_of, infer, output_of, stop, wait_state

from models import mlp


def config_of(port, model):
    status, raw, _ = request(port, "GET", f"/v2/models/{model}/config")
    assert status == 200, raw
    return json.loads(raw)


def load(port, token, model, parameters):
    body = json.dumps({"parameters": parameters}).encode() if parameters is not None else b""
    status, raw, _ = request(port, "POST", f"/v2/repository/models/{model}/load", body,
                             {"Authorization": "Bearer " + token})
    return status, (json.loads(raw) if raw else {})


@pytest.fixture
def served(tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    add_model(repo, "mlp", {"max_batch_size": 8})
    stage = tmp_path / "stage"  # where the server writes what loads bring
    stage.mkdir()
    proc, port = start(repo, env={"TMPDIR": str(stage)})
    yield repo, stage, proc, port, admin_token(repo, port)
    if proc.poll() is None:
        stop(proc)


def test_a_config_brought_by_the_load_replaces_the_repositorys(served):
    repo, _, proc, port, token = served
    assert config_of(port, "mlp")["max_batch_size"] == 8
    headers = {"Authorization": "Bearer " + token}
    client = triton.InferenceServerClient(f"127.0.0.1:{port}")
    client.load_model("mlp", headers=headers,
                      config=json.dumps({"max_batch_size": 4, "dynamic_batching": {}}))
    cfg = config_of(port, "mlp")
    assert cfg["max_batch_size"] == 4 and "dynamic_batching" in cfg
    x = np.random.default_rng(1).standard_normal((3, 256)).astype(np.float32)
    status, reply, _ = infer(port, "mlp", x)
    assert status == 200
    np.testing.assert_allclose(output_of(reply), ort_run(str(repo / "mlp" / "1" / "model.onnx"),
                                                         {"x": x}), rtol=1e-4, atol=1e-6)
    # Over gRPC as well; then a load without parameters reads the repository again.
    g = tg.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
    headers = {"authorization": "Bearer " + token}  # gRPC's metadata keys are lower case
    g.load_model("mlp", headers=headers, config=json.dumps({"max_batch_size": 2}))
    assert config_of(port, "mlp")["max_batch_size"] == 2
    g.load_model("mlp", headers=headers)
    assert config_of(port, "mlp")["max_batch_size"] == 8
    # A configuration the model cannot take: the load fails with the reason,
    # and the repository's own brings it back.
    status, reply = load(port, token, "mlp", {"config": json.dumps({"max_batch_size": -3})})
    assert status == 400 and "max_batch_size" in reply["error"], reply
    assert index_of(port)["mlp"]["state"] == "UNAVAILABLE"
    status, reply = load(port, token, "mlp", {"config": "{not json"})
    assert status == 400 and "load request's config" in reply["error"], reply
    assert load(port, token, "mlp", None)[0] == 200
    assert index_of(port)["mlp"]["state"] == "READY"


def test_files_brought_by_the_load_make_a_model_the_repository_lacks(served, tmp_path):
    repo, stage, proc, port, token = served
    onnx.save(mlp(seed=7), str(tmp_path / "seven.onnx"))
    model_bytes = (tmp_path / "seven.onnx").read_bytes()
    x = np.random.default_rng(2).standard_normal((2, 256)).astype(np.float32)
    want = ort_run(str(tmp_path / "seven.onnx"), {"x": x})
    # HTTP: the file in base64 (tritonclient.http's load_model cannot send
    # files: it hands bytes to json.dumps), with an idle limit in the config.
    config = json.dumps({"max_batch_size": 8, "idle_unload_seconds": 1})
    status, reply = load(port, token, "uploaded", {
        "config": config, "file:1/model.onnx": base64.b64encode(model_bytes).decode()})
    assert status == 200, reply
    assert "uploaded" not in os.listdir(repo)  # the repository is not written to
    assert len(os.listdir(stage)) == 1
    status, reply, _ = infer(port, "uploaded", x)
    assert status == 200, reply
    np.testing.assert_allclose(output_of(reply), want, rtol=1e-4, atol=1e-6)
    # Unloaded while idle, it loads on demand from the same files.
    assert wait_state(port, "uploaded", "UNLOADED_IDLE")
    status, reply, _ = infer(port, "uploaded", x)
    assert status == 200, reply
    np.testing.assert_allclose(output_of(reply), want, rtol=1e-4, atol=1e-6)
    # gRPC: tritonclient sends the file as bytes; two versions this time.
    g = tg.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
    headers = {"authorization": "Bearer " + token}
    g.load_model("uploaded", headers=headers, config=json.dumps({"max_batch_size": 8}),
                 files={"file:1/model.onnx": model_bytes,
                        "file:3/model.onnx": mlp(seed=3).SerializeToString()})
    assert len(os.listdir(stage)) == 1  # the first load's directory went
    versions = sorted(json.loads(request(port, "GET", "/v2/models/uploaded")[1])["versions"])
    assert versions == ["1", "3"]
    inp = tg.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    got = g.infer("uploaded", [inp], model_version="1").as_numpy("probs")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    # An admin unload drops the files: a later load has no directory to read.
    g.unload_model("uploaded", headers=headers)
    assert wait_state(port, "uploaded", "UNLOADED")
    assert os.listdir(stage) == []
    status, reply = load(port, token, "uploaded", None)
    assert status == 404 and "no model directory" in reply["error"], reply
    # A server that stops leaves none behind.
    assert load(port, token, "uploaded", {"config": config,
                                          "file:1/model.onnx": base64.b64encode(
                                              model_bytes).decode()})[0] == 200
    stop(proc)
    assert os.listdir(stage) == []


BAD_HTTP = [
    ({"file:1/model.onnx": "AAAA"}, "needs the 'config' parameter"),
    ({"config": "{}", "file:../escape.onnx": "AAAA"}, "inside the model's directory"),
    ({"config": "{}", "file:/etc/escape": "AAAA"}, "inside the model's directory"),
    ({"config": "{}", "file:1//model.onnx": "AAAA"}, "inside the model's directory"),
    ({"config": "{}", "file:1/": "AAAA"}, "names a directory"),
    ({"config": "{}", "file:config.pbtxt": "AAAA"}, "comes from the 'config' parameter"),
    ({"config": "{}", "file:1/model.onnx": "not base64!"}, "not base64"),
    ({"config": "{}", "file:1/model.onnx": "AA==AAAA"}, "not base64"),
    ({"config": "{}", "file:1/model.onnx": " AAA"}, "not base64"),
    ({"config": "{}", "file:1/model.onnx": 12}, "must be a string"),
    ({"config": 5}, "must be a string"),
    ({"version": "2"}, "unknown load parameter 'version'"),
]


@pytest.mark.parametrize("parameters,why", BAD_HTTP)
def test_bad_load_parameters_over_http_are_refused_with_the_reason(served, parameters, why):
    repo, stage, _, port, token = served
    status, reply = load(port, token, "mlp", parameters)
    assert status == 400 and why in reply["error"], reply
    assert os.listdir(stage) == []
    assert index_of(port)["mlp"]["state"] == "READY"  # untouched
    assert not os.path.exists(os.path.join(str(repo), "escape.onnx"))


def test_bad_load_bodies_and_tokens(served):
    _, _, _, port, token = served
    admin = {"Authorization": "Bearer " + token}
    for body in (b"{not json", b"[1]", b'{"parameters": [1]}'):
        status, raw, _ = request(port, "POST", "/v2/repository/models/mlp/load", body, admin)
        assert status == 400, raw
    # Loading with parameters needs an admin's token, as any load does.
    status, _, _ = request(port, "POST", "/v2/repository/models/mlp/load",
                           json.dumps({"parameters": {"config": "{}"}}).encode())
    assert status in (401, 403)
    # A body without parameters is a plain load.
    assert request(port, "POST", "/v2/repository/models/mlp/load", b'{"parameters": {}}',
                   admin)[0] == 200


def test_bad_load_parameters_over_grpc_are_invalid_arguments(served):
    _, stage, proc, port, token = served
    g = tg.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
    headers = {"authorization": "Bearer " + token}
    for config, files, why in [
            (None, {"file:1/model.onnx": b"x"}, "needs the 'config' parameter"),
            ("{}", {"file:../x": b"x"}, "inside the model's directory")]:
        with pytest.raises(InferenceServerException) as e:
            g.load_model("mlp", headers=headers, config=config, files=files)
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and why in str(e.value), e.value
    # A file as a string_param: tritonclient will not send it, the stub will.
    q = service_pb2.RepositoryModelLoadRequest(model_name="mlp")
    q.parameters["config"].string_param = "{}"
    q.parameters["file:1/model.onnx"].string_param = "text, not bytes"
    with grpc.insecure_channel(f"127.0.0.1:{proc.grpc_port}") as channel:
        with pytest.raises(grpc.RpcError) as e:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).RepositoryModelLoad(
                q, metadata=[("authorization", "Bearer " + token)])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "must be a bytes_param" in e.value.details()
    # Files that are not a model: the load fails saying why, and the
    # directory made for them goes.
    with pytest.raises(InferenceServerException) as e:
        g.load_model("mlp", headers=headers, config="{}", files={"file:1/model.onnx": b"junk"})
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT", e.value
    assert index_of(port)["mlp"]["state"] == "UNAVAILABLE"
    g.load_model("mlp", headers=headers)
    assert index_of(port)["mlp"]["state"] == "READY"
    time.sleep(0.1)
    assert os.listdir(stage) == []
