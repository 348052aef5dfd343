"""Where a served model runs: instance groups on chosen devices, the ledger's
bookings of plans and shared weights under a memory limit, weights shared by
plans, instances and versions, and warm-up at load."""
import json
import os
import threading

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import pytest

from test_serve import ROOT, add_model, serving, request, ort_run, stats, mlp  # noqa: E402,F401 (fixtures)


def test_instance_groups(tmp_path):
    """Two instances serve side by side with the right answers; groups that
    ask for devices this machine lacks leave the model unavailable, saying
    why."""
    def entry(name, groups):
        add_model(tmp_path, name, {"max_batch_size": 8, "instance_group": groups})
    entry("two", [{"count": 2, "kind": "KIND_CPU"}])
    entry("onethread", [{"count": 1, "kind": "KIND_CPU", "threads": 1}])
    entry("nothreads", [{"count": 1, "kind": "KIND_CPU", "threads": 0}])
    entry("gpuonly", [{"count": 1, "kind": "KIND_GPU"}])
    entry("nodevice", [{"count": 1, "kind": "KIND_CPU", "devices": ["cpu7"]}])
    entry("zero", [{"count": 0, "kind": "KIND_CPU"}])
    entry("many", [{"count": 8, "kind": "KIND_CPU"}, {"count": 1, "kind": "KIND_CPU"}])
    entry("groups", [{"count": 1}] * 5)
    entry("bigcount", [{"count": 4294967297, "kind": "KIND_CPU"}])
    with serving(tmp_path) as port:
        config = json.loads(request(port, "GET", "/v2/models/two/config")[1])
        assert config["instance_group"] == [
            {"name": "two_cpu0", "kind": "KIND_CPU", "count": 2, "devices": ["cpu0"]}]
        index = {m["name"]: m for m in json.loads(
            request(port, "POST", "/v2/repository/index", b"{}")[1])}
        assert index["two"]["state"] == "READY"
        assert index["gpuonly"]["state"] == "UNAVAILABLE"
        assert "KIND_GPU" in index["gpuonly"]["reason"] and "no such device" in index["gpuonly"]["reason"]
        assert "cpu7" in index["nodevice"]["reason"]
        assert "count must be 1 to 8" in index["zero"]["reason"]
        assert "count must be 1 to 8" in index["bigcount"]["reason"]  # not wrapped to 1
        assert "more than 8 instances" in index["many"]["reason"]
        assert "at most 4 instance groups" in index["groups"]["reason"]
        assert index["onethread"]["state"] == "READY"
        assert "threads must be 1 to 4096" in index["nothreads"]["reason"]
        assert request(port, "GET", "/v2/models/gpuonly/ready")[0] == 503
        x = {"inputs": [{"name": "x", "shape": [1, 256], "datatype": "FP32", "data": [0.0] * 256}]}
        status, raw, _ = request(port, "POST", "/v2/models/gpuonly/infer", json.dumps(x).encode())
        assert status == 503 and "no such device" in json.loads(raw)["error"]

        rng = np.random.default_rng(9)
        xs = [rng.standard_normal((1 + i % 3, 256)).astype(np.float32) for i in range(24)]
        want = [ort_run(str(tmp_path / "two" / "1" / "model.onnx"), {"x": x}) for x in xs]
        got = [None] * len(xs)

        def one(i):
            body = json.dumps({"inputs": [{"name": "x", "shape": list(xs[i].shape),
                                           "datatype": "FP32", "data": xs[i].ravel().tolist()}]})
            status, raw, _ = request(port, "POST", "/v2/models/two/infer", body.encode())
            assert status == 200, raw
            out = json.loads(raw)["outputs"][0]
            got[i] = np.array(out["data"], dtype=np.float32).reshape(out["shape"])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(xs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        assert stats(port, "two")["inference_stats"]["success"]["count"] == len(xs)
        body = json.dumps({"inputs": [{"name": "x", "shape": list(xs[0].shape), "datatype": "FP32",
                                       "data": xs[0].ravel().tolist()}]})
        status, raw, _ = request(port, "POST", "/v2/models/onethread/infer", body.encode())
        out = json.loads(raw)["outputs"][0]
        np.testing.assert_allclose(np.array(out["data"], np.float32).reshape(out["shape"]),
                                   ort_run(str(tmp_path / "onethread" / "1" / "model.onnx"),
                                           {"x": xs[0]}), rtol=1e-4, atol=1e-5)


def booked_bytes(port):
    text = request(port, "GET", "/metrics")[1].decode()
    line = next(l for l in text.splitlines()
                if l.startswith('gpusrv_device_memory_booked_bytes{device="cpu0"}'))
    return int(line.split()[-1])


def test_model_memory_limit_books_and_evicts(tmp_path):
    """Every plan books its memory, and the weights its instance's plans
    share are booked once: a plan that cannot fit is refused saying what was
    asked and what is free (and nothing stays booked); when two plans do not
    fit together, the least recently used gives its booking back."""
    add_model(tmp_path, "m", {"max_batch_size": 8, "warmup": False})
    weights = sum(numpy_helper.to_array(t).nbytes for t in
                  onnx.load(str(tmp_path / "m" / "1" / "model.onnx")).graph.initializer)

    def infer(port, rows):
        x = {"inputs": [{"name": "x", "shape": [rows, 256], "datatype": "FP32",
                         "data": [0.1] * (256 * rows)}]}
        status, raw, _ = request(port, "POST", "/v2/models/m/infer", json.dumps(x).encode())
        return status, json.loads(raw)

    with serving(tmp_path, "--model-memory-limit", "4096") as port:
        status, body = infer(port, 1)
        assert status == 500
        assert "cpu0: model m weights on cpu0 asked for 1.0 MiB" in body["error"], body
        assert "of 4.0 KiB is free" in body["error"]
        assert booked_bytes(port) == 0

    with serving(tmp_path) as port:
        assert booked_bytes(port) == 0
        assert infer(port, 1)[0] == 200
        one = booked_bytes(port)
        assert one > weights
        assert infer(port, 8)[0] == 200
        two = booked_bytes(port)
        assert two > one  # both plans cached and booked
        assert two - one < weights // 2  # the second plan added its arena, not the weights again
        for rows in (2, 3, 4, 5):
            assert infer(port, rows)[0] == 200
        # Six plans, one copy of the weights: each plan adds its arena only.
        six = booked_bytes(port)
        assert six < weights + 6 * (two - one), (six, weights, one, two)

    # Room for the weights and the larger plan but not both plans: each
    # request evicts the other.
    with serving(tmp_path, "--model-memory-limit", str(two - 1)) as port:
        for rows in (1, 8, 1, 8):
            status, body = infer(port, rows)
            assert status == 200, body
            assert booked_bytes(port) <= two - 1


def test_weights_folded_from_weights_are_shared(tmp_path):
    """A Transpose of a weight is computed while planning; every plan makes
    the same, so the plans of an instance share it like the weight itself."""
    w = np.random.default_rng(2).standard_normal((512, 256)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["w"], ["wt"]), helper.make_node("MatMul", ["x", "wt"], ["y"])],
        "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 512])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (tmp_path / "t" / "1").mkdir(parents=True)
    onnx.save(model, str(tmp_path / "t" / "1" / "model.onnx"))
    (tmp_path / "t" / "config.json").write_text(json.dumps({"max_batch_size": 8, "warmup": False}))
    booked = []
    with serving(tmp_path) as port:
        for rows in (1, 8):
            x = {"inputs": [{"name": "x", "shape": [rows, 256], "datatype": "FP32",
                             "data": [0.5] * (256 * rows)}]}
            status, raw, _ = request(port, "POST", "/v2/models/t/infer", json.dumps(x).encode())
            assert status == 200, raw
            np.testing.assert_allclose(json.loads(raw)["outputs"][0]["data"][:512],
                                       (np.full(256, 0.5, np.float32) @ w.T), rtol=1e-4, atol=1e-4)
            booked.append(booked_bytes(port))
    assert booked[0] > w.nbytes and booked[1] - booked[0] < w.nbytes // 2, booked


def test_instances_on_one_device_share_the_weights(tmp_path):
    """Two instances on cpu0, each warmed up with its plan for 8 rows: one
    copy of the weights between them, and their results alike."""
    add_model(tmp_path, "m", {"max_batch_size": 8,
                              "instance_group": [{"count": 2, "kind": "KIND_CPU"}]})
    weights = sum(numpy_helper.to_array(t).nbytes for t in
                  onnx.load(str(tmp_path / "m" / "1" / "model.onnx")).graph.initializer)
    x = {"inputs": [{"name": "x", "shape": [8, 256], "datatype": "FP32", "data": [0.1] * 2048}]}
    with serving(tmp_path) as port:
        booked = booked_bytes(port)
        assert weights < booked < weights * 3 // 2, (booked, weights)
        answers = [request(port, "POST", "/v2/models/m/infer", json.dumps(x).encode())
                   for _ in range(4)]  # round robin over the two instances
        assert all(a[0] == 200 for a in answers)
        assert len({a[1] for a in answers}) == 1
        assert booked_bytes(port) == booked


def test_versions_take_turns_with_their_weights(tmp_path):
    """Each version's plans share that version's weights, which go with its
    last cached plan: under a limit that holds one version's weights and
    plan but not two, requests to the two versions take turns."""
    add_model(tmp_path, "m", {"max_batch_size": 8, "warmup": False})
    (tmp_path / "m" / "2").mkdir()
    onnx.save(mlp(seed=1), str(tmp_path / "m" / "2" / "model.onnx"))
    x = {"inputs": [{"name": "x", "shape": [1, 256], "datatype": "FP32", "data": [0.1] * 256}]}
    body = json.dumps(x).encode()
    with serving(tmp_path) as port:
        assert request(port, "POST", "/v2/models/m/versions/1/infer", body)[0] == 200
        one = booked_bytes(port)
        assert request(port, "POST", "/v2/models/m/versions/2/infer", body)[0] == 200
        assert booked_bytes(port) >= 2 * one - 4096  # both versions' weights, while both cached
    with serving(tmp_path, "--model-memory-limit", str(one + one // 2)) as port:
        outputs = {}
        for version in ("1", "2", "1", "2"):
            status, raw, _ = request(port, "POST", f"/v2/models/m/versions/{version}/infer", body)
            assert status == 200, raw
            outputs.setdefault(version, []).append(json.loads(raw)["outputs"][0]["data"])
            assert booked_bytes(port) <= one + one // 2
        assert outputs["1"][0] == outputs["1"][1] and outputs["2"][0] == outputs["2"][1]
        assert outputs["1"][0] != outputs["2"][0]  # each version its own weights


def test_warmup_makes_the_plans_at_load(tmp_path):
    """At load, the newest version's plans for the preferred batch sizes and
    the maximum are made (and run once) on every instance: booked before any
    request; "warmup": false leaves it to the requests; anything else is a
    configuration error."""
    configs = {"warm": ({"max_batch_size": 8, "dynamic_batching": {"preferred_batch_size": [4]}},
                        None),
               "cold": ({"max_batch_size": 8, "warmup": False}, None),
               "text": (None, "max_batch_size: 8\nwarmup: false\n"),
               # 300,000 rows of 256 float32 (293 MiB): left to requests
               "huge": ({"max_batch_size": 300000}, None),
               "bad": ({"max_batch_size": 8, "warmup": "maybe"}, None)}
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 256], "datatype": "FP32",
                                   "data": [0.1] * 256}]}).encode()
    booked = {}
    for name, (config, text) in configs.items():
        repo = tmp_path / name
        add_model(repo, name, config, text=text)
        weights = sum(numpy_helper.to_array(t).nbytes for t in
                      onnx.load(str(repo / name / "1" / "model.onnx")).graph.initializer)
        with serving(repo) as port:
            booked[name] = booked_bytes(port)
            if name == "bad":
                status, raw, _ = request(port, "POST", "/v2/repository/index", b"{}")
                # The index lists the server's state directory too (it lies in
                # the repository here), in directory order: find "bad" by name.
                entry = next(e for e in json.loads(raw) if e["name"] == "bad")
                assert "warmup must be true or false" in entry["reason"], entry
                continue
            assert request(port, "POST", f"/v2/models/{name}/infer", body)[0] == 200
            booked[name + " after"] = booked_bytes(port)
    assert booked["warm"] > weights  # the weights once, and two plans' arenas
    # A warm-up that cannot book its plans is logged; the model loads all the same.
    with serving(tmp_path / "warm", "--model-memory-limit", "4096") as port:
        assert request(port, "GET", "/v2/models/warm/ready")[0] == 200
        assert booked_bytes(port) == 0
        status, raw, _ = request(port, "POST", "/v2/models/warm/infer", body)
        assert status == 500 and b"asked for" in raw, raw
    assert booked["warm after"] > booked["warm"]  # a batch of 1 is a third plan
    for name in ("cold", "text", "huge"):
        assert booked[name] == 0 and weights < booked[name + " after"] < booked["warm"], booked


PLUGINS = os.environ.get("GPUSRV_TEST_PLUGINS", os.path.join(ROOT, "build", "tests", "plugins"))


@pytest.mark.skipif(not os.path.exists(os.path.join(PLUGINS, "gpusrv-testcpu.so")),
                    reason="the test plugins are not built")
def test_instances_across_devices(tmp_path):
    """With a second CPU-kind device (the testcpu plugin), a group of two
    goes one instance to each device, a backend's name places an instance
    on its device, and the answers match onnxruntime from either."""
    def entry(name, groups):
        add_model(tmp_path, name, {"max_batch_size": 8, "instance_group": groups})
    entry("spread", [{"count": 2, "kind": "KIND_CPU"}])
    entry("pinned", [{"count": 1, "kind": "testcpu"}])
    model = str(tmp_path / "spread" / "1" / "model.onnx")
    with serving(tmp_path, env={"GPUSRV_PLUGIN_PATH": PLUGINS}) as port:
        config = json.loads(request(port, "GET", "/v2/models/spread/config")[1])
        assert config["instance_group"] == [
            {"name": "spread_cpu0", "kind": "KIND_CPU", "count": 1, "devices": ["cpu0"]},
            {"name": "spread_testcpu0", "kind": "KIND_CPU", "count": 1, "devices": ["testcpu0"]}]
        config = json.loads(request(port, "GET", "/v2/models/pinned/config")[1])
        assert [g["devices"] for g in config["instance_group"]] == [["testcpu0"]]

        x = np.random.default_rng(3).standard_normal((2, 256)).astype(np.float32)
        body = json.dumps({"inputs": [{"name": "x", "shape": [2, 256], "datatype": "FP32",
                                       "data": x.ravel().tolist()}]}).encode()
        want = ort_run(model, {"x": x})
        results = []

        def one(name):
            status, raw, _ = request(port, "POST", f"/v2/models/{name}/infer", body)
            out = json.loads(raw)["outputs"][0] if status == 200 else None
            results.append((status, out))

        threads = [threading.Thread(target=one, args=(n,)) for n in ["spread"] * 12 + ["pinned"]]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for status, out in results:
            assert status == 200
            np.testing.assert_allclose(np.array(out["data"], np.float32).reshape(out["shape"]),
                                       want, rtol=1e-4, atol=1e-5)
        text = request(port, "GET", "/metrics")[1].decode()
        booked = [l for l in text.splitlines()
                  if l.startswith('gpusrv_device_memory_booked_bytes{device="testcpu0"}')]
        assert booked and int(booked[0].split()[-1]) > 0
