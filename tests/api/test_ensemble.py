"""Ensembles (issue 24): Triton's platform "ensemble" in config.pbtxt and
config.json runs its steps (an image classifier whose config has a
preprocess recipe, then a softmax and top-k) as one model: tritonclient
over HTTP and gRPC sees one model whose answers equal onnxruntime running
the steps in turn on torchvision's preprocessing; on a device the tensor
between the steps never crosses to the host (the device's copy counters);
each step's model counts the ensemble's requests and its kernels' time in
its own statistics, as Triton counts composing models;
wirings that do not add up are the ensemble's load failure, saying why."""
import io
import json
import os
import re
import signal
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.grpc as tg
import tritonclient.http as triton
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from test_serve import ROOT, admin_token, request, serving, start

sys.path.insert(0, os.path.join(ROOT, "tests", "cli"))
from test_batch_images import IMAGENET, photo, reference  # noqa: E402

RECIPE = f"resize=40,center_crop=32,{IMAGENET}"

PIPELINE_PBTXT = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 3 ] },
         { name: "CLASSES" data_type: TYPE_INT64 dims: [ 3 ] } ]
ensemble_scheduling {
  step [
    { model_name: "classifier" model_version: -1
      input_map { key: "x" value: "IMAGE" }
      output_map { key: "logits" value: "LOGITS" } },
    { model_name: "topk" model_version: 1
      input_map { key: "scores" value: "LOGITS" }
      output_map { key: "values" value: "SCORES" }
      output_map { key: "indices" value: "CLASSES" } }
  ]
}
dynamic_batching { }
"""


def save(repo, name, graph, config):
    (repo / name / "1").mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(repo / name / "1" / "model.onnx"))
    (repo / name / "config.json").write_text(json.dumps(config))


def classifier_graph():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    g = numpy_helper.from_array(rng.standard_normal((8, 10)).astype(np.float32), "g")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "g"], ["logits"])]
    return helper.make_graph(
        nodes, "classifier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], initializer=[w, g])


def topk_graph():
    k = numpy_helper.from_array(np.array([3], np.int64), "k")
    nodes = [helper.make_node("Softmax", ["scores"], ["probs"], axis=1),
             helper.make_node("TopK", ["probs", "k"], ["values", "indices"], axis=1)]
    return helper.make_graph(
        nodes, "topk", [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 10])],
        [helper.make_tensor_value_info("values", TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_value_info("indices", TensorProto.INT64, ["N", 3])], initializer=[k])


def ones_graph():
    """As many ones as the sum of x: a shape computed from the values, so that
    a plan of it is made in stages at run time."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    return helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["sum"], keepdims=1),
         helper.make_node("Cast", ["sum"], ["n"], to=TensorProto.INT64),
         helper.make_node("ConstantOfShape", ["n"], ["ones"], value=one)],
        "ones", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10])],
        [helper.make_tensor_value_info("ones", TensorProto.FLOAT, ["K"])])


def ensemble(steps, inputs=("IMAGE",), outputs=("SCORES", "CLASSES"), **extra):
    return {"platform": "ensemble", "max_batch_size": 8, "dynamic_batching": {},
            "input": [{"name": n} for n in inputs], "output": [{"name": n} for n in outputs],
            "ensemble_scheduling": {"step": steps}, **extra}


CLASSIFY = {"model_name": "classifier", "input_map": {"x": "IMAGE"},
            "output_map": {"logits": "LOGITS"}}
TOPK = {"model_name": "topk", "input_map": {"scores": "LOGITS"},
        "output_map": {"values": "SCORES", "indices": "CLASSES"}}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    save(repo, "classifier", classifier_graph(), {"max_batch_size": 8, "preprocess": RECIPE})
    save(repo, "topk", topk_graph(), {"max_batch_size": 8})
    save(repo, "topk_cpu", topk_graph(),
         {"max_batch_size": 8, "instance_group": [{"count": 1, "kind": "KIND_CPU"}]})
    save(repo, "topk_opencl1", topk_graph(),
         {"max_batch_size": 8, "instance_group": [{"kind": "opencl", "devices": ["opencl1"]}]})
    for device in ("opencl0", "opencl1"):
        save(repo, f"classifier_{device}", classifier_graph(),
             {"max_batch_size": 8, "preprocess": RECIPE,
              "instance_group": [{"count": 1, "kind": "opencl", "devices": [device]}]})
    save(repo, "ones", ones_graph(), {})
    (repo / "pipeline" / "1").mkdir(parents=True)  # Triton's ensembles keep an empty version
    (repo / "pipeline" / "config.pbtxt").write_text(PIPELINE_PBTXT)
    bad = {
        "on_device": ensemble([CLASSIFY, TOPK], instance_group=[{"count": 1, "kind": "opencl"}]),
        "topk_on_cpu": ensemble([CLASSIFY, {**TOPK, "model_name": "topk_cpu"}],
                                instance_group=[{"count": 1, "kind": "opencl"}]),
        # The classifier's model on another device than the ensemble's instance.
        "across": ensemble([{**CLASSIFY, "model_name": "classifier_opencl1"}, TOPK],
                           instance_group=[{"count": 1, "kind": "opencl",
                                            "devices": ["opencl0"]}]),
        "across_unbatched": {k: v for k, v in ensemble(
            [{**CLASSIFY, "model_name": "classifier_opencl1"}, TOPK],
            instance_group=[{"count": 1, "kind": "opencl", "devices": ["opencl0"]}]).items()
            if k != "dynamic_batching"},  # run from host memory on the request's thread
        "across_back": ensemble([CLASSIFY, {**TOPK, "model_name": "topk_opencl1"}],
                                instance_group=[{"count": 1, "kind": "opencl",
                                                 "devices": ["opencl0"]}]),
        "across_cpu": ensemble([{**CLASSIFY, "model_name": "classifier_opencl0"}, TOPK],
                               instance_group=[{"count": 1, "kind": "KIND_CPU"}]),
        "unbatched": {k: v for k, v in ensemble([CLASSIFY, TOPK]).items()
                      if k != "dynamic_batching"},  # run on the request's thread
        "topk_twice": ensemble([{**TOPK, "output_map": {"values": "V1", "indices": "I1"}},
                                {**TOPK, "input_map": {"scores": "V1"}}],
                               inputs=("LOGITS",), outputs=("SCORES", "CLASSES")),
        "staged": {"platform": "ensemble", "input": [{"name": "X"}],
                   "output": [{"name": "ONES"}], "ensemble_scheduling": {"step": [
                       {"model_name": "ones", "input_map": {"x": "X"},
                        "output_map": {"ones": "ONES"}}]}},
        "reversed": ensemble([TOPK, CLASSIFY]),  # steps in any order: data decides
        "ghost": ensemble([CLASSIFY, {**TOPK, "model_name": "nowhere"}]),
        "unwired": ensemble([CLASSIFY, {**TOPK, "input_map": {}}]),
        "twice": ensemble([CLASSIFY, {**TOPK, "output_map": {"values": "SCORES",
                                                             "indices": "SCORES"}}],
                          outputs=("SCORES",)),
        "loop": ensemble([{**CLASSIFY, "input_map": {"x": "BACK"}},
                          {**TOPK, "output_map": {"values": "BACK", "indices": "CLASSES"}}],
                         outputs=("CLASSES",)),
        "nosuch": ensemble([{**CLASSIFY, "output_map": {"probs": "LOGITS"}}, TOPK]),
        "noplatform": {"max_batch_size": 8, "ensemble_scheduling": {"step": [CLASSIFY]}},
        "nosteps": ensemble([]),
    }
    for name, config in bad.items():
        (repo / name).mkdir()
        (repo / name / "config.json").write_text(json.dumps(config))
    proc, port = start(repo, env={"POCL_DEVICES": "pthread pthread"})  # opencl0 and opencl1
    yield repo, port, proc.grpc_port
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def png(pixels):
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


IMAGES = [png(photo(80, 60, 1)), png(photo(45, 70, 2))]


def steps_in_turn(repo, files, tmp_path):
    """onnxruntime, step by step, on torchvision's preprocessing."""
    rows = []
    for i, data in enumerate(files):
        (tmp_path / f"{i}.png").write_bytes(data)
        rows.append(reference(str(tmp_path / f"{i}.png"), 40, 32))
    cls = ort.InferenceSession(str(repo / "classifier" / "1" / "model.onnx"))
    top = ort.InferenceSession(str(repo / "topk" / "1" / "model.onnx"))
    logits = cls.run(None, {"x": np.stack(rows)})[0]
    return top.run(None, {"scores": logits})


def test_one_model_to_clients_equal_to_the_steps_in_turn(served, tmp_path):
    repo, port, grpc_port = served
    values, indices = steps_in_turn(repo, IMAGES, tmp_path)
    images = np.array([[f] for f in IMAGES], dtype=object)
    for name in ("pipeline", "reversed"):
        for client, mod in ((triton.InferenceServerClient(f"127.0.0.1:{port}"), triton),
                            (tg.InferenceServerClient(f"127.0.0.1:{grpc_port}"), tg)):
            x = mod.InferInput("IMAGE", [2, 1], "BYTES")
            x.set_data_from_numpy(images)
            r = client.infer(name, [x])
            np.testing.assert_array_equal(r.as_numpy("CLASSES"), indices)
            np.testing.assert_allclose(r.as_numpy("SCORES"), values, rtol=1e-5, atol=1e-6)
    c = triton.InferenceServerClient(f"127.0.0.1:{port}")
    config = c.get_model_config("pipeline")
    assert config["platform"] == "ensemble" and config["preprocess"] == RECIPE
    assert [s["model_name"] for s in config["ensemble_scheduling"]["step"]] == ["classifier", "topk"]
    meta = c.get_model_metadata("pipeline")
    assert [o["name"] for o in meta["outputs"]] == ["SCORES", "CLASSES"]
    stats = c.get_inference_statistics("pipeline")["model_stats"][0]
    assert stats["inference_count"] == 4 and stats["inference_stats"]["success"]["count"] == 2


def copies(port, device):
    text = request(port, "GET", "/metrics")[1].decode()
    return {d: int(v) for d, v in re.findall(
        r'gpusrv_device_copies_total\{device="%s",direction="(\w+)"\} (\d+)' % device, text)}


def booked_bytes(port, device):
    text = request(port, "GET", "/metrics")[1].decode()
    found = re.search(r'^gpusrv_device_memory_booked_bytes\{device="%s"\} (\d+)$' % device,
                      text, re.M)
    return int(found.group(1))


def infer_counting(port, name, images, devices):
    """`name` on `images` (BYTES [n, 1]) over HTTP: the reply, and the
    copies each of `devices` made for it, by direction."""
    x = triton.InferInput("IMAGE", [len(images), 1], "BYTES")
    x.set_data_from_numpy(np.array([[f] for f in images], dtype=object))
    before = {d: copies(port, d) for d in devices}
    r = triton.InferenceServerClient(f"127.0.0.1:{port}").infer(name, [x])
    after = {d: copies(port, d) for d in devices}
    return r, {d: {k: after[d][k] - before[d][k] for k in before[d]} for d in devices}


def test_on_a_device_the_tensor_between_steps_stays_there(served, tmp_path):
    repo, port, _ = served
    index = {m["name"]: m for m in json.loads(request(port, "POST", "/v2/repository/index",
                                                      b"{}")[1])}
    if index["on_device"]["state"] != "READY":
        pytest.skip(f"no OpenCL device here: {index['on_device'].get('reason')}")
    config = json.loads(request(port, "GET", "/v2/models/on_device/config")[1])
    assert [s["runs_on"] for s in config["ensemble_scheduling"]["step"]] == ["instance"] * 2
    values, indices = steps_in_turn(repo, IMAGES[:1], tmp_path)
    for _ in range(2):
        r, counts = infer_counting(port, "on_device", IMAGES[:1], ["opencl0"])
        # The image's tensor in; SCORES and CLASSES out; LOGITS never: two
        # models called in turn would copy it out and back in.
        assert counts == {"opencl0": {"h2d": 1, "d2h": 2}}
        np.testing.assert_array_equal(r.as_numpy("CLASSES"), indices)
        np.testing.assert_allclose(r.as_numpy("SCORES"), values, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name,counts", [
    # The top-k's model is KIND_CPU, the instance on opencl0: the softmax and
    # top-k run on the host. In: the image's tensor, then SCORES and CLASSES
    # from the host. Out: LOGITS to the host, then SCORES and CLASSES to the
    # client. A copy around each node would add the probabilities both ways.
    ("topk_on_cpu", {"opencl0": {"h2d": 3, "d2h": 3}}),
    # The image's tensor from opencl0 to opencl1 (staged through the host:
    # out of one, into the other), LOGITS back from opencl1 to opencl0; then
    # SCORES and CLASSES to the client. Nothing between the classifier's own
    # nodes or the top-k's crosses.
    ("across", {"opencl0": {"h2d": 2, "d2h": 3}, "opencl1": {"h2d": 1, "d2h": 1}}),
    # Without a batcher the run starts and ends in host memory: the image
    # into opencl1, LOGITS across, SCORES and CLASSES out of opencl0.
    ("across_unbatched", {"opencl0": {"h2d": 1, "d2h": 2}, "opencl1": {"h2d": 1, "d2h": 1}}),
    # The top-k on opencl1: the image read where it is, LOGITS to opencl1,
    # SCORES and CLASSES back to opencl0 (where the batcher reads outputs).
    ("across_back", {"opencl0": {"h2d": 3, "d2h": 3}, "opencl1": {"h2d": 1, "d2h": 2}}),
    # The instance on the CPU, the classifier on opencl0: the image in, LOGITS out.
    ("across_cpu", {"opencl0": {"h2d": 1, "d2h": 1}}),
])
def test_steps_placed_off_the_instance_cross_between_devices_only(served, tmp_path, name,
                                                                  counts):
    repo, port, _ = served
    c = triton.InferenceServerClient(f"127.0.0.1:{port}")
    step = {"topk_on_cpu": "classifier_opencl0", "across": "classifier_opencl1",
            "across_unbatched": "classifier_opencl1", "across_back": "topk_opencl1",
            "across_cpu": "classifier_opencl0"}[name]
    if not c.is_model_ready(step):  # its device is not here: the step runs on the instance's
        pytest.skip(f"{step} is not ready here (no two OpenCL devices?)")
    placed = {"topk_on_cpu": ["instance", "cpu"], "across": ["opencl1", "instance"],
              "across_unbatched": ["opencl1", "instance"],
              "across_back": ["instance", "opencl1"],
              "across_cpu": ["opencl0", "instance"]}[name]
    assert [s["runs_on"] for s in c.get_model_config(name)["ensemble_scheduling"]["step"]] == \
        placed
    values, indices = steps_in_turn(repo, IMAGES, tmp_path)
    for run in range(3):
        r, made = infer_counting(port, name, IMAGES, list(counts))
        if run > 0:  # the first plans for two rows, and uploads their weights
            assert made == counts
        np.testing.assert_array_equal(r.as_numpy("CLASSES"), indices)
        np.testing.assert_allclose(r.as_numpy("SCORES"), values, rtol=1e-4, atol=1e-5)


PLUGINS = os.environ.get("GPUSRV_TEST_PLUGINS", os.path.join(ROOT, "build", "tests", "plugins"))


@pytest.mark.skipif(not os.path.exists(os.path.join(PLUGINS, "gpusrv-testcpu.so")),
                    reason="the test plugins are not built")
def test_steps_across_two_cpu_devices(tmp_path):
    """The same across cpu0 and testcpu0 (the CPU backend as a plugin of its
    own, which the sanitizer build has too): the top-k's model on testcpu0,
    the ensemble's instance on cpu0."""
    save(tmp_path, "classifier", classifier_graph(), {"max_batch_size": 8, "preprocess": RECIPE})
    save(tmp_path, "topk", topk_graph(),
         {"max_batch_size": 8, "instance_group": [{"kind": "testcpu", "devices": ["testcpu0"]}]})
    for name, extra in (("batched", {}), ("unbatched", None)):
        config = ensemble([CLASSIFY, TOPK], instance_group=[{"kind": "cpu", "devices": ["cpu0"]}])
        if extra is None:
            del config["dynamic_batching"]
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    values, indices = steps_in_turn(tmp_path, IMAGES, tmp_path)
    with serving(tmp_path, env={"GPUSRV_PLUGIN_PATH": PLUGINS}) as port:
        c = triton.InferenceServerClient(f"127.0.0.1:{port}")
        for name in ("batched", "unbatched"):
            assert [s["runs_on"] for s in c.get_model_config(name)["ensemble_scheduling"]
                    ["step"]] == ["instance", "testcpu0"]
            for run in range(3):
                booked = booked_bytes(port, "testcpu0")
                r, made = infer_counting(port, name, IMAGES, ["testcpu0"])
                if run == 0:  # a plan for two rows: its part on testcpu0 books memory there
                    assert booked_bytes(port, "testcpu0") > booked
                # Into testcpu0: LOGITS, then SCORES and CLASSES (testcpu0 has no
                # kernels: its softmax and top-k run through the CPU fallback,
                # LOGITS down to it, the probabilities kept there, the two
                # outputs up). Out of it: LOGITS to that fallback, and without
                # a batcher SCORES and CLASSES to the host too.
                if run > 0:  # the first plans, and uploads TopK's k
                    assert made == {"testcpu0": {"h2d": 3,
                                                 "d2h": 1 if name == "batched" else 3}}
                np.testing.assert_array_equal(r.as_numpy("CLASSES"), indices)
                np.testing.assert_allclose(r.as_numpy("SCORES"), values, rtol=1e-5, atol=1e-6)


def step_figures(client, name):
    s = client.get_inference_statistics(name)["model_stats"][0]
    st = s["inference_stats"]
    return {"inferences": int(s.get("inference_count", 0)),
            "executions": int(s.get("execution_count", 0)),
            "successes": int(st["success"].get("count", 0)),
            "infer_ns": int(st["compute_infer"].get("ns", 0)),
            "queue_ns": int(st["queue"].get("ns", 0))}


def infer_images(client, name, n):
    for _ in range(n):
        x = triton.InferInput("IMAGE", [2, 1], "BYTES")
        x.set_data_from_numpy(np.array([[f] for f in IMAGES], dtype=object))
        client.infer(name, [x])


@pytest.mark.parametrize("ensemble_name", ["pipeline", "unbatched", "on_device"])
def test_each_steps_model_counts_the_ensembles_work(served, ensemble_name):
    _, port, _ = served
    c = triton.InferenceServerClient(f"127.0.0.1:{port}")
    if not c.is_model_ready(ensemble_name):
        pytest.skip(f"{ensemble_name} is not ready here (no OpenCL device?)")
    names = ("classifier", "topk", ensemble_name)
    before = {n: step_figures(c, n) for n in names}
    infer_images(c, ensemble_name, 6)
    after = {n: step_figures(c, n) for n in names}
    d = {n: {k: after[n][k] - before[n][k] for k in after[n]} for n in names}
    whole = d[ensemble_name]
    for step in ("classifier", "topk"):
        # Each request's two rows, in as many executions as the ensemble ran.
        assert d[step]["inferences"] == 12, (step, d)
        assert d[step]["successes"] == 6, (step, d)
        assert d[step]["executions"] == whole["executions"], (step, d)
        assert d[step]["queue_ns"] == 0, (step, d)
        assert d[step]["infer_ns"] > 0, (step, d)
    # The steps' kernels run inside the ensemble's compute, and the
    # convolution takes longer than a softmax and top-k of ten values.
    assert d["classifier"]["infer_ns"] + d["topk"]["infer_ns"] <= whole["infer_ns"], d
    assert d["classifier"]["infer_ns"] > d["topk"]["infer_ns"], d


def test_an_ensembles_warm_up_is_not_counted(served):
    """Loading the ensemble again makes and runs its plans (the warm-up);
    its steps' models count requests only."""
    repo, port, _ = served
    c = triton.InferenceServerClient(f"127.0.0.1:{port}")
    before = {n: step_figures(c, n) for n in ("classifier", "topk")}
    c.load_model("pipeline", headers={"Authorization": "Bearer " + admin_token(repo, port)})
    assert c.is_model_ready("pipeline")
    assert {n: step_figures(c, n) for n in ("classifier", "topk")} == before
    infer_images(c, "pipeline", 1)  # and the warmed-up plans count from their first request
    after = step_figures(c, "classifier")
    assert after["inferences"] - before["classifier"]["inferences"] == 2


def test_a_model_twice_in_an_ensemble_counts_both_runs(served):
    _, port, _ = served
    c = triton.InferenceServerClient(f"127.0.0.1:{port}")
    before = step_figures(c, "topk")
    x = triton.InferInput("LOGITS", [1, 10], "FP32")
    x.set_data_from_numpy(np.arange(10, dtype=np.float32)[None])
    r = c.infer("topk_twice", [x])
    # top-3 of the softmax of the top-3 of the softmax of 0..9
    p = np.exp(np.arange(10) - 9.0)
    p = np.sort(p / p.sum())[::-1][:3]
    q = np.exp(p - p.max())
    np.testing.assert_allclose(r.as_numpy("SCORES")[0], q / q.sum(), rtol=1e-5)
    after = step_figures(c, "topk")
    assert after["inferences"] - before["inferences"] == 2
    assert after["successes"] - before["successes"] == 2


def test_an_ensemble_planned_in_stages_keeps_its_own_figures_and_says_so(served):
    """A step whose output's shape depends on values: the ensemble's plan is
    made in stages, which time no steps. The ensemble counts its requests,
    the step's model counts nothing from it, and the log says why once."""
    repo, port, _ = served
    c = triton.InferenceServerClient(f"127.0.0.1:{port}")
    before = step_figures(c, "ones")
    for k in range(3):
        x = triton.InferInput("X", [10], "FP32")
        x.set_data_from_numpy(np.full(10, k, np.float32))
        np.testing.assert_array_equal(c.infer("staged", [x]).as_numpy("ONES"), np.ones(10 * k))
    assert step_figures(c, "ones") == before
    assert step_figures(c, "staged")["successes"] == 3
    logs = "".join(open(f).read() for f in repo.glob(f"serve-{port}.log"))
    said = re.findall(r"ensemble staged: its steps' models get no figures from it: .+", logs)
    assert len(said) == 1, said


def test_wirings_that_do_not_add_up_are_the_load_failure(served):
    _, port, _ = served
    index = {m["name"]: m for m in json.loads(request(port, "POST", "/v2/repository/index",
                                                      b"{}")[1])}
    want = {
        "ghost": "ensemble step nowhere: no model",
        "unwired": "ensemble step topk: input scores is in no input_map",
        "twice": "ensemble step topk writes SCORES twice",
        "loop": "reads a tensor that no ensemble input and no step before it makes",
        "nosuch": "ensemble step classifier: the model has no input or output probs",
        "noplatform": "ensemble_scheduling goes with platform \"ensemble\"",
        "nosteps": "an ensemble needs ensemble_scheduling with 1 to 8 steps",
    }
    for name, needle in want.items():
        assert index[name]["state"] != "READY", name
        assert needle in index[name].get("reason", ""), (name, index[name])
