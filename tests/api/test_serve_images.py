"""Served models that take images (issue 24): a config's "preprocess" recipe
lets the model's image input take encoded JPEG and PNG files (BYTES) or RGB
pixels (UINT8 [n, h, w, 3]) from tritonclient over HTTP and gRPC, made the
model's tensor exactly as `gpusrv batch` and torchvision's recipe make it;
bad images and forms are refused saying why, and so are recipes a model
cannot take."""
import io
import json
import os
import re
import signal
import sys

import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as triton
import onnx
from onnx import TensorProto, helper
from PIL import Image

from test_serve import ROOT, admin_token, request, start

sys.path.insert(0, os.path.join(ROOT, "tests", "cli"))
from test_batch_images import IMAGENET, identity_model, photo, reference  # noqa: E402

RECIPE = f"resize=40,center_crop=32,{IMAGENET}"


def encoded(pixels, fmt):
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt)
    return out.getvalue()


def want(data):
    """What the recipe makes of an image file's bytes: torchvision's values."""
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"gs-ref-{os.getpid()}")
    with open(path, "wb") as f:
        f.write(data)
    try:
        return reference(path, 40, 32)
    finally:
        os.unlink(path)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    for name, config in {
        "classify": {"max_batch_size": 8, "preprocess": RECIPE},
        "badrecipe": {"max_batch_size": 8, "preprocess": "resize=40,crop=32"},
        "notimages": {"max_batch_size": 8, "preprocess": RECIPE},
        "nobatch": {"max_batch_size": 0, "preprocess": RECIPE},
    }.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.json").write_text(json.dumps(config))
        shape = ["N", 64] if name == "notimages" else ["N", 3, 32, 32]
        identity_model(repo / name / "1" / "model.onnx", shape if name != "nobatch" else
                       [1, 3, 32, 32])
    (repo / "text" / "1").mkdir(parents=True)
    identity_model(repo / "text" / "1" / "model.onnx", ["N", 32, 32, 3])
    (repo / "text" / "config.pbtxt").write_text(
        f'max_batch_size: 4\npreprocess: "resize=40,center_crop=32,scale=1/255"\n')
    proc, port = start(repo)
    yield port, proc.grpc_port
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


FILES = [encoded(photo(500, 375, 1), "JPEG"), encoded(photo(201, 260, 2), "PNG")]


def files_over_both(port, grpc_port, model):
    """FILES sent to `model` as BYTES [2, 1] by tritonclient over HTTP, then
    gRPC: the two replies' "y"."""
    images = np.array([[f] for f in FILES], dtype=object)
    got = []
    for client, mod in ((triton.InferenceServerClient(f"127.0.0.1:{port}"), triton),
                        (tg.InferenceServerClient(f"127.0.0.1:{grpc_port}"), tg)):
        x = mod.InferInput("x", [2, 1], "BYTES")
        x.set_data_from_numpy(images)
        got.append(client.infer(model, [x]).as_numpy("y"))
    return got


def test_encoded_images_over_http_and_grpc_equal_torchvision_s_recipe(served):
    port, grpc_port = served
    expect = np.stack([want(f) for f in FILES])
    images = np.array([[f] for f in FILES], dtype=object)
    for got in files_over_both(port, grpc_port, "classify"):
        assert got.shape == (2, 3, 32, 32)
        np.testing.assert_allclose(got, expect, rtol=0, atol=2e-6)
    # [n] as well as [n, 1].
    x = triton.InferInput("x", [2], "BYTES")
    x.set_data_from_numpy(images.reshape(2))
    got = triton.InferenceServerClient(f"127.0.0.1:{port}").infer("classify", [x]).as_numpy("y")
    np.testing.assert_allclose(got, expect, rtol=0, atol=2e-6)


def test_rgb_pixels_and_the_model_s_own_tensor(served):
    port, grpc_port = served
    pixels = photo(70, 50, 3)
    expect = want(encoded(pixels, "PNG"))[None]
    c = triton.InferenceServerClient(f"127.0.0.1:{port}")
    x = triton.InferInput("x", [1, 50, 70, 3], "UINT8")
    x.set_data_from_numpy(pixels[None])
    np.testing.assert_allclose(c.infer("classify", [x]).as_numpy("y"), expect, rtol=0, atol=2e-6)
    g = tg.InferInput("x", [1, 50, 70, 3], "UINT8")
    g.set_data_from_numpy(pixels[None])
    got = tg.InferenceServerClient(f"127.0.0.1:{grpc_port}").infer("classify", [g])
    np.testing.assert_allclose(got.as_numpy("y"), expect, rtol=0, atol=2e-6)
    x = triton.InferInput("x", [1, 3, 32, 32], "FP32")
    x.set_data_from_numpy(expect)
    np.testing.assert_array_equal(c.infer("classify", [x]).as_numpy("y"), expect)
    # config.pbtxt's recipe, into an NHWC model of float32 0..1 values.
    x = triton.InferInput("x", [1, 1], "BYTES")
    x.set_data_from_numpy(np.array([[FILES[0]]], dtype=object))
    got = c.infer("text", [x]).as_numpy("y")
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "gs-ref-text.jpg")
    with open(path, "wb") as f:
        f.write(FILES[0])
    np.testing.assert_allclose(got[0], reference(path, 40, 32, normalise=False) / 255,
                               rtol=0, atol=2e-7)
    os.unlink(path)


def test_bad_images_and_forms_are_400_saying_why(served):
    port, _ = served

    def infer(inputs):
        status, raw, _ = request(port, "POST", "/v2/models/classify/infer",
                                 json.dumps({"inputs": inputs}).encode())
        return status, json.loads(raw).get("error", "")

    status, error = infer([{"name": "x", "shape": [2], "datatype": "BYTES",
                            "data": ["not an image", "\u00ff\u00d8\u00ffbroken"]}])
    assert status == 400 and "input 'x': image 0: neither a JPEG nor a PNG" in error, error
    status, error = infer([{"name": "x", "shape": [1, 2], "datatype": "BYTES", "data": ["a", "b"]}])
    assert status == 400 and "or images: BYTES [n] of JPEG or PNG files" in error, error
    status, error = infer([{"name": "x", "shape": [1, 4, 4, 4], "datatype": "UINT8",
                            "data": [0] * 64}])
    assert status == 400 and "expected datatype FP32 (or images" in error, error
    status, error = infer([{"name": "x", "shape": [9], "datatype": "BYTES", "data": ["a"] * 9}])
    assert status == 400 and "dimension 0 is 9, expected 1 to 8" in error, error
    status, error = infer([{"name": "x", "shape": [1, 1, 1, 3], "datatype": "UINT8",
                            "data": [1, 2, 3]}])  # a 1x1 image: resize=40 makes 40x40
    assert status == 200, error
    status, error = infer([{"name": "x", "shape": [1, 1, 2000, 3], "datatype": "UINT8",
                            "data": [7] * 6000}])  # a line: resize=40 makes it 80000 long
    assert status == 400 and "would be resized to over 65536 pixels a side" in error, error


def test_recipes_a_model_cannot_take_are_its_load_failure(served):
    port, _ = served
    index = {m["name"]: m for m in json.loads(
        request(port, "POST", "/v2/repository/index", b"{}")[1])}
    assert index["classify"]["state"] == "READY" and index["text"]["state"] == "READY"
    assert "unknown preprocess key 'crop'" in index["badrecipe"]["reason"]
    assert "an input of [N, 3, H, W] or [N, H, W, 3]" in index["notimages"]["reason"]
    assert "preprocess needs max_batch_size above 0" in index["nobatch"]["reason"]
    config = json.loads(request(port, "GET", "/v2/models/classify/config")[1])
    assert config["preprocess"] == RECIPE


def test_a_reload_without_the_recipe_takes_only_the_model_s_tensor(tmp_path):
    """What a configuration set goes with it: reloaded without "preprocess",
    the model refuses images again."""
    (tmp_path / "m" / "1").mkdir(parents=True)
    identity_model(tmp_path / "m" / "1" / "model.onnx", ["N", 3, 32, 32])
    config = tmp_path / "m" / "config.json"
    config.write_text(json.dumps({"max_batch_size": 4, "preprocess": RECIPE}))
    proc, port = start(tmp_path)
    try:
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 1, 1, 3], "datatype": "UINT8",
                                       "data": [1, 2, 3]}]}).encode()
        assert request(port, "POST", "/v2/models/m/infer", body)[0] == 200
        config.write_text(json.dumps({"max_batch_size": 4}))
        auth = {"Authorization": "Bearer " + admin_token(tmp_path, port)}
        assert request(port, "POST", "/v2/repository/models/m/load", b"{}", auth)[0] == 200
        status, raw, _ = request(port, "POST", "/v2/models/m/infer", body)
        assert status == 400 and "expected datatype FP32, got UINT8" in json.loads(raw)["error"]
        assert "preprocess" not in json.loads(request(port, "GET", "/v2/models/m/config")[1])
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def copied_bytes(port, device):
    text = request(port, "GET", "/metrics")[1].decode()
    return {d: int(v) for d, v in re.findall(
        r'gpusrv_device_copy_bytes_total\{device="%s",direction="(\w+)"\} (\d+)' % device, text)}


def if_model(path):
    """The identity through an If whose branches both pass x on: a model the
    recipe cannot join yet."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 32, 32])
    branch = lambda name: helper.make_graph(  # noqa: E731
        [helper.make_node("Identity", ["x"], [name])], name, [],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Constant", [], ["c"], value=helper.make_tensor("t", TensorProto.BOOL, [], [True])),
             helper.make_node("If", ["c"], ["y"], then_branch=branch("a"), else_branch=branch("b"))]
    onnx.save(helper.make_model(helper.make_graph(nodes, "if", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 17)]), str(path))


def outputs_model(path, names):
    """x passed on to each output of `names`."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 3, 32, 32]) for n in names]
    nodes = [helper.make_node("Identity", ["x"], [n]) for n in names]
    onnx.save(helper.make_model(helper.make_graph(nodes, "outs", [x], outs),
                                opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.fixture(scope="module")
def finishes(tmp_path_factory):
    """The recipe's finish on served models: the same recipe and model on
    opencl0 with finish=device and finish=auto (which leaves an OpenCL CPU
    device to the CPU), on cpu0 with finish=device (no memory of its own:
    the CPU's); "batched", as on opencl0 with a batcher, whose device also
    resizes; a recipe that only crops; and finish=device for a float16
    input, for a model with an If, one with 9 outputs and one with an output
    named as the recipe's own tensor (refused). "gpu" tells whether this
    machine has a GPU, which auto would finish on."""
    repo = tmp_path_factory.mktemp("finish")
    opencl = [{"count": 1, "kind": "opencl"}]
    crop = f"center_crop=32,{IMAGENET}"
    for name, recipe, group, dtype in (
            ("device", f"{RECIPE},finish=device", opencl, TensorProto.FLOAT),
            ("batched", f"{RECIPE},finish=device", opencl, TensorProto.FLOAT),
            ("auto", f"{RECIPE},finish=auto", opencl, TensorProto.FLOAT),
            ("cpu", f"{RECIPE},finish=device", None, TensorProto.FLOAT),
            ("cropped", f"{crop},finish=device", opencl, TensorProto.FLOAT),
            ("half", f"{RECIPE},finish=device", opencl, TensorProto.FLOAT16),
            ("branches", f"{RECIPE},finish=device", opencl, None),
            ("wide", f"{RECIPE},finish=device", opencl, [f"y{i}" for i in range(9)]),
            ("named", f"{RECIPE},finish=device", opencl, ["gs_normalised"]),
            ("gpu", None, [{"count": 1, "kind": "KIND_GPU"}], TensorProto.FLOAT)):
        (repo / name / "1").mkdir(parents=True)
        config = {"max_batch_size": 8, "instance_group": group or []}
        if name == "batched":
            config["dynamic_batching"] = {"max_queue_delay_microseconds": 20000}
        if recipe:
            config["preprocess"] = recipe
        if not group:
            del config["instance_group"]
        (repo / name / "config.json").write_text(json.dumps(config))
        if dtype is None:
            if_model(repo / name / "1" / "model.onnx")
        elif isinstance(dtype, list):
            outputs_model(repo / name / "1" / "model.onnx", dtype)
        else:
            identity_model(repo / name / "1" / "model.onnx", ["N", 3, 32, 32], dtype)
    proc, port = start(repo)
    index = {m["name"]: m for m in json.loads(request(port, "POST", "/v2/repository/index",
                                                      b"{}")[1])}
    yield port, proc.grpc_port, index
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def needs_opencl(index):
    if index["auto"]["state"] != "READY":
        pytest.skip(f"no OpenCL device here: {index['auto'].get('reason')}")


def auto_finish(index):
    """Where finish=auto finishes on opencl0: on it where it is a GPU."""
    return "device" if index["gpu"]["state"] == "READY" else "cpu"


def test_finished_on_the_device_a_model_takes_pixels_and_answers_as_the_cpu(finishes):
    port, grpc_port, index = finishes
    needs_opencl(index)
    inputs = {name: json.loads(request(port, "GET", f"/v2/models/{name}")[1])["inputs"][0]
              for name in ("device", "auto", "cpu")}
    assert inputs["device"] == {"name": "x", "datatype": "UINT8", "shape": [-1, 32, 32, 3]}
    assert inputs["cpu"]["datatype"] == "FP32"
    assert inputs["auto"]["datatype"] == {"device": "UINT8", "cpu": "FP32"}[auto_finish(index)]
    finish = {name: json.loads(request(port, "GET", f"/v2/models/{name}/config")[1])
              ["preprocess_finish"] for name in ("device", "auto", "cpu")}
    assert finish == {"device": "device", "auto": auto_finish(index), "cpu": "cpu"}
    expect = np.stack([want(f) for f in FILES])
    for name in ("device", "auto", "cpu"):
        for got in files_over_both(port, grpc_port, name):
            np.testing.assert_allclose(got, expect, rtol=0, atol=2e-6, err_msg=name)
    c = triton.InferenceServerClient(f"127.0.0.1:{port}")
    # Pixels go through the recipe as they do on the CPU, also pixels of the
    # model's own size where the recipe would change them (resize=40 makes
    # 32x32 40x40, then crops).
    for w, h, seed in ((70, 50, 3), (32, 32, 4)):
        pixels = photo(w, h, seed)
        x = triton.InferInput("x", [1, h, w, 3], "UINT8")
        x.set_data_from_numpy(pixels[None])
        np.testing.assert_allclose(c.infer("device", [x]).as_numpy("y"),
                                   want(encoded(pixels, "PNG"))[None], rtol=0, atol=2e-6)
    # Floats are not what it takes now.
    x = triton.InferInput("x", [1, 3, 32, 32], "FP32")
    x.set_data_from_numpy(np.zeros((1, 3, 32, 32), np.float32))
    with pytest.raises(Exception, match="expected datatype UINT8"):
        c.infer("device", [x])


def test_pixels_a_recipe_leaves_as_they_are_are_the_model_s_tensor(finishes):
    port, _, index = finishes
    needs_opencl(index)
    c = triton.InferenceServerClient(f"127.0.0.1:{port}")
    own = photo(32, 32, 4)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    normalised = ((own / 255 - mean) / std).transpose(2, 0, 1)[None]
    for rows in (own[None], np.stack([own, own])):
        x = triton.InferInput("x", list(rows.shape), "UINT8")
        x.set_data_from_numpy(rows)
        got = c.infer("cropped", [x]).as_numpy("y")
        np.testing.assert_allclose(got, np.concatenate([normalised] * len(rows)), rtol=0, atol=2e-6)


def test_finished_on_the_device_a_quarter_of_the_bytes_cross(finishes):
    port, _, index = finishes
    needs_opencl(index)
    c = triton.InferenceServerClient(f"127.0.0.1:{port}")
    moved = {}
    for name in ("device", "auto"):
        x = triton.InferInput("x", [2, 1], "BYTES")
        x.set_data_from_numpy(np.array([[f] for f in FILES], dtype=object))
        before = copied_bytes(port, "opencl0")
        c.infer(name, [x])
        moved[name] = copied_bytes(port, "opencl0")["h2d"] - before["h2d"]
    pixels, floats = 2 * 32 * 32 * 3, 2 * 3 * 32 * 32 * 4
    assert moved == {"device": pixels, "auto": pixels if auto_finish(index) == "device" else floats}


def test_finish_device_a_model_cannot_take_is_its_load_failure(finishes):
    _, _, index = finishes
    needs_opencl(index)
    assert index["half"]["state"] == "UNAVAILABLE"
    assert "finish=device needs a float32 image input" in index["half"]["reason"]
    assert index["branches"]["state"] == "UNAVAILABLE"
    assert "cannot join a model with If, Loop or Scan yet" in index["branches"]["reason"]
    assert index["wide"]["state"] == "UNAVAILABLE"
    assert "at most 8 inputs and outputs; this one has 1 and 9" in index["wide"]["reason"]
    assert index["named"]["state"] == "UNAVAILABLE"
    assert "a tensor named gs_normalised" in index["named"]["reason"]


def resized_on_device(port, model):
    text = request(port, "GET", "/metrics")[1].decode()
    found = re.search(r'^gpusrv_model_images_resized_on_device_total\{model="%s"\} (\d+)$' % model,
                      text, re.M)
    return int(found.group(1)) if found else None


def test_with_a_batcher_the_device_resizes_too(finishes):
    """A model whose device finishes the recipe and which has a batcher:
    the request's thread only decodes, and the batcher packs the images for
    the device, which resizes, crops and normalises them (engine/
    image_pack.h) with the CPU's bytes. Files over both protocols, pixels of
    another size, and the model's own pixels as its tensor, also in one
    batch of concurrent requests; the metric counts the images resized
    there. Without a batcher ("device") the CPU resizes."""
    port, grpc_port, index = finishes
    needs_opencl(index)
    config = {name: json.loads(request(port, "GET", f"/v2/models/{name}/config")[1])
              for name in ("batched", "device")}
    assert config["batched"]["preprocess_resize"] == "device"
    assert config["device"]["preprocess_resize"] == "cpu"
    assert resized_on_device(port, "device") is None
    before = resized_on_device(port, "batched")
    expect = np.stack([want(f) for f in FILES])
    for got in files_over_both(port, grpc_port, "batched"):
        np.testing.assert_allclose(got, expect, rtol=0, atol=2e-6)
    assert resized_on_device(port, "batched") - before == 4
    # Pixels through the recipe, and pixels of the model's own size that a
    # recipe of resize=40 also changes, in requests the batcher may join.
    c = triton.InferenceServerClient(f"127.0.0.1:{port}", concurrency=4)
    sent = [photo(70, 50, 3), photo(32, 32, 4), photo(640, 480, 5), photo(33, 90, 6)]
    pending = []
    for pixels in sent:
        x = triton.InferInput("x", [1, *pixels.shape], "UINT8")
        x.set_data_from_numpy(pixels[None])
        pending.append(c.async_infer("batched", [x]))
    for pixels, p in zip(sent, pending):
        np.testing.assert_allclose(p.get_result().as_numpy("y"),
                                   want(encoded(pixels, "PNG"))[None], rtol=0, atol=2e-6)
    assert resized_on_device(port, "batched") - before == 8
    # An image whose decoded part is over 1 MiB is made its row on the
    # request's thread (not held while it waits), and crosses as it is.
    big = encoded(photo(1000, 800, 7), "PNG")
    x = triton.InferInput("x", [1, 1], "BYTES")
    x.set_data_from_numpy(np.array([[big]], dtype=object))
    np.testing.assert_allclose(c.infer("batched", [x]).as_numpy("y"), want(big)[None], rtol=0,
                               atol=2e-6)
    assert resized_on_device(port, "batched") - before == 8
    # A broken file is its request's 400, as where the CPU resizes.
    x = triton.InferInput("x", [1, 1], "BYTES")
    x.set_data_from_numpy(np.array([[FILES[0][:200]]], dtype=object))
    with pytest.raises(Exception, match="image 0: .*not a readable JPEG"):
        c.infer("batched", [x])



def test_short_of_device_memory_the_batcher_resizes_on_the_cpu(tmp_path):
    """A batcher of 300 images whose device cannot hold their packs (PoCL
    held to 1 GiB: 300 MiB of staging asked in one allocation) resizes on
    the CPU in its gather stage: the same answers, and no image counted as
    resized on the device."""
    (tmp_path / "big" / "1").mkdir(parents=True)
    identity_model(tmp_path / "big" / "1" / "model.onnx", ["N", 3, 32, 32], TensorProto.FLOAT)
    (tmp_path / "big" / "config.json").write_text(json.dumps({
        "max_batch_size": 300, "dynamic_batching": {}, "preprocess": f"{RECIPE},finish=device",
        "instance_group": [{"count": 1, "kind": "opencl"}]}))
    proc, port = start(tmp_path, env={"POCL_MEMORY_LIMIT": "1"})
    try:
        index = {m["name"]: m for m in json.loads(request(port, "POST", "/v2/repository/index",
                                                          b"{}")[1])}
        if index["big"]["state"] != "READY":
            pytest.skip(f"no OpenCL device here: {index['big'].get('reason')}")
        config = json.loads(request(port, "GET", "/v2/models/big/config")[1])
        assert config["preprocess_resize"] == "device"  # as configured; memory decides per batch
        expect = np.stack([want(f) for f in FILES])
        for got in files_over_both(port, proc.grpc_port, "big"):
            np.testing.assert_allclose(got, expect, rtol=0, atol=2e-6)
        assert resized_on_device(port, "big") == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_with_a_batcher_repeated_headers_raw_requests_and_grpc_pixels(finishes):
    """Pixels of one size sent again and again repeat their JSON header: each
    request still goes through the recipe with its own pixels (a kept header
    must not stand for a decoded image). A raw request (Inference-Header-
    Content-Length: 0) is the model's own uint8 tensor, which goes to the
    device as it is, not through the recipe; so do own-size pixels where the
    recipe would leave them. Pixels over gRPC too."""
    port, grpc_port, index = finishes
    needs_opencl(index)
    c = triton.InferenceServerClient(f"127.0.0.1:{port}")
    for seed in range(24):  # several per HTTP thread
        pixels = photo(70, 50, 100 + seed)
        x = triton.InferInput("x", [1, 50, 70, 3], "UINT8")
        x.set_data_from_numpy(pixels[None])
        np.testing.assert_allclose(c.infer("batched", [x]).as_numpy("y"),
                                   want(encoded(pixels, "PNG"))[None], rtol=0, atol=2e-6)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    own = photo(32, 32, 9)
    normalised = ((own / 255 - mean) / std).transpose(2, 0, 1)[None]
    before = resized_on_device(port, "batched")
    status, raw, headers = request(port, "POST", "/v2/models/batched/infer", own.tobytes(),
                                   {"Inference-Header-Content-Length": "0"})
    assert status == 200, raw
    got = np.frombuffer(raw[int(headers["Inference-Header-Content-Length"]):], np.float32)
    np.testing.assert_allclose(got.reshape(1, 3, 32, 32), normalised, rtol=0, atol=2e-6)
    assert resized_on_device(port, "batched") == before  # copied as it is
    g = tg.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    pixels = photo(90, 33, 11)
    x = tg.InferInput("x", [1, 33, 90, 3], "UINT8")
    x.set_data_from_numpy(pixels[None])
    np.testing.assert_allclose(g.infer("batched", [x]).as_numpy("y"),
                               want(encoded(pixels, "PNG"))[None], rtol=0, atol=2e-6)
