"""Dynamic batching in `gpusrv serve`: requests gathered into batches and split
back, queue limits and timeouts (REJECT, DELAY), a client that leaves while
queued, and the statistics the batches add up to."""
import json
import socket
import threading
import time

import numpy as np
import tritonclient.http as triton

from test_serve import add_model, serving, repo, server, request, ort_run, stats, metric_values  # noqa: E402,F401 (fixtures)


def test_queue_full_is_503(tmp_path):
    """max_queue_size 1: while a batch of 7 rows waits its queue delay, the
    2-row requests cannot join it (8 rows at most); one queues, and those
    that find the queue full get 503 saying so."""
    add_model(tmp_path, "q", {"max_batch_size": 8, "dynamic_batching": {
        "preferred_batch_size": [8], "max_queue_delay_microseconds": 500000,
        "default_queue_policy": {"max_queue_size": 1}}})

    def body(rows):
        return json.dumps({"inputs": [{"name": "x", "shape": [rows, 256], "datatype": "FP32",
                                       "data": [0.1] * (256 * rows)}]}).encode()
    with serving(tmp_path) as port:
        results = []
        threads = [threading.Thread(target=lambda rows=rows: results.append(
            request(port, "POST", "/v2/models/q/infer", body(rows))[:2])) for rows in (7, 2, 2, 2)]
        for t in threads:
            t.start()
            time.sleep(0.05)
        for t in threads:
            t.join()
        statuses = sorted(status for status, _ in results)
        assert statuses == [200, 200, 503, 503], statuses
        for status, raw in results:
            if status == 503:
                assert "the queue is full (max_queue_size 1)" in json.loads(raw)["error"]


def test_concurrent_requests_are_batched_and_stats_add_up(server):
    config = json.loads(request(server, "GET", "/v2/models/mlp/config")[1])
    assert config["dynamic_batching"]["preferred_batch_size"] == [8]
    before = stats(server, "mlp")
    x = np.random.default_rng(5).standard_normal((1, 256)).astype(np.float32)
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 256], "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()
    results = []

    def one():
        results.append(request(server, "POST", "/v2/models/mlp/infer", body)[0])

    threads = [threading.Thread(target=one) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 16
    after = stats(server, "mlp")
    new = after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
    assert new == 16
    assert after["inference_count"] - before["inference_count"] == 16
    # 16 one-row requests arriving together ran as fewer, larger batches.
    assert after["execution_count"] - before["execution_count"] < 16
    assert any(b["batch_size"] > 1 for b in after["batch_stats"])
    # The parts of a request's time add up to no more than the whole.
    s = after["inference_stats"]
    parts = sum(s[k]["ns"] for k in ("queue", "compute_input", "compute_infer", "compute_output"))
    assert 0 < parts <= s["success"]["ns"]
    assert s["queue"]["count"] == s["compute_infer"]["count"] == s["success"]["count"]


def test_batches_in_flight_keep_each_requests_rows(server, repo):
    """Requests of 1 to 3 rows each, 48 at once, through the batcher's
    pipeline (several batches in flight): each reply holds exactly its own
    rows' results, and every stage of the pipeline saw every batch."""
    path = str(repo / "mlp" / "1" / "model.onnx")
    rng = np.random.default_rng(11)
    inputs = [rng.standard_normal((1 + i % 3, 256)).astype(np.float32) for i in range(48)]
    got = [None] * len(inputs)
    before = stats(server, "mlp")

    def one(i):
        client = triton.InferenceServerClient(f"127.0.0.1:{server}")
        inp = triton.InferInput("x", list(inputs[i].shape), "FP32")
        inp.set_data_from_numpy(inputs[i], binary_data=i % 2 == 0)
        got[i] = client.infer("mlp", [inp]).as_numpy("probs")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(inputs):
        assert got[i] is not None and got[i].shape == (x.shape[0], 10)
        np.testing.assert_allclose(got[i], ort_run(path, {"x": x}), rtol=1e-4, atol=1e-6)
    after = stats(server, "mlp")
    assert after["inference_count"] - before["inference_count"] == sum(len(x) for x in inputs)
    values = metric_values(server)
    # On the CPU device the host addresses device memory: no copy stages.
    for stage in ("gather", "compute", "encode"):
        key = f'gpusrv_batch_stage_batches_total{{model="mlp",instance="0",stage="{stage}"}}'
        assert values[key] == after["execution_count"], stage
    assert values['gpusrv_batch_stage_busy_seconds_total{model="mlp",instance="0",stage="compute"}'] > 0


def test_request_timeout_in_queue(server):
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 256], "datatype": "FP32",
                                   "data": [0.0] * 256}], "parameters": {"timeout": 1}}).encode()
    status, raw, _ = request(server, "POST", "/v2/models/mlp/infer", body)
    assert status == 503 and "timed out" in json.loads(raw)["error"]
    assert stats(server, "mlp")["inference_stats"]["fail"]["count"] >= 1


def test_client_vanishes_while_queued(tmp_path):
    repo = tmp_path / "models"
    add_model(repo, "slow", {
        "max_batch_size": 8,
        "dynamic_batching": {"preferred_batch_size": [8], "max_queue_delay_microseconds": 300000}})
    with serving(repo) as port:
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 256], "datatype": "FP32",
                                       "data": [0.1] * 256}]}).encode()
        for _ in range(5):  # each queued for 0.3 s; each client gone before its answer
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                      % len(body) + body)
            s.close()
        time.sleep(0.8)
        assert request(port, "POST", "/v2/models/slow/infer", body)[0] == 200
        assert stats(port, "slow")["inference_stats"]["success"]["count"] >= 6


def test_timeout_action(tmp_path):
    """A request past its queue timeout is rejected (503) under REJECT, and
    still answered, behind the others, under DELAY."""
    def entry(name, action):
        add_model(tmp_path, name, {
            "max_batch_size": 8, "dynamic_batching": {
                "max_queue_delay_microseconds": 2000,
                "default_queue_policy": {"default_timeout_microseconds": 1,
                                         "timeout_action": action}}})
    entry("delay", "DELAY")
    entry("reject", "REJECT")
    entry("drop", "DROP")
    with serving(tmp_path) as port:
        index = {m["name"]: m for m in json.loads(
            request(port, "POST", "/v2/repository/index", b"{}")[1])}
        assert "timeout_action must be REJECT or DELAY" in index["drop"]["reason"]
        config = json.loads(request(port, "GET", "/v2/models/delay/config")[1])
        assert config["dynamic_batching"]["default_queue_policy"]["timeout_action"] == "DELAY"
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 256], "datatype": "FP32",
                                       "data": [0.3] * 256}]}).encode()
        for model, want in (("delay", 200), ("reject", 503)):
            results = []
            threads = [threading.Thread(target=lambda: results.append(
                request(port, "POST", f"/v2/models/{model}/infer", body)[0])) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert results == [want] * 8, (model, results)


def test_slices_of_inputs_and_outputs_the_batcher_binds(tmp_path):
    """Through the batcher, a plan reads its inputs from, and writes its
    outputs to, the batch's own buffers, not its arena. A Slice of an input
    or of an output is then copied, never made a view of the arena's place,
    which those buffers stand in for (a view would read bytes never
    written). At one row a batch each Slice is one contiguous run; the
    outputs equal onnxruntime's."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    consts = [numpy_helper.from_array(np.array([v], np.int64), n)
              for n, v in (("zero", 0), ("half", 16), ("end", 32), ("one", 1))]
    nodes = [helper.make_node("Slice", ["x", "zero", "half", "one"], ["a"]),
             helper.make_node("Relu", ["a"], ["y1"]),
             helper.make_node("Abs", ["x"], ["o"]),
             helper.make_node("Slice", ["o", "half", "end", "one"], ["s"]),
             helper.make_node("Neg", ["s"], ["y2"])]
    graph = helper.make_graph(
        nodes, "slices", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", w])
         for n, w in (("o", 32), ("y1", 16), ("y2", 16))], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (tmp_path / "sl" / "1").mkdir(parents=True)
    path = str(tmp_path / "sl" / "1" / "model.onnx")
    onnx.save(model, path)
    (tmp_path / "sl" / "config.json").write_text(json.dumps(
        {"max_batch_size": 1, "dynamic_batching": {"max_queue_delay_microseconds": 0}}))
    x = np.random.default_rng(8).standard_normal((1, 32)).astype(np.float32)
    import onnxruntime as ort
    want = dict(zip(["o", "y1", "y2"], ort.InferenceSession(path).run(None, {"x": x})))
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 32], "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()
    with serving(tmp_path) as port:
        for _ in range(3):  # the first run plans; the later ones reuse the plan
            status, raw, _ = request(port, "POST", "/v2/models/sl/infer", body)
            assert status == 200, raw
            got = {o["name"]: np.array(o["data"], np.float32).reshape(o["shape"])
                   for o in json.loads(raw)["outputs"]}
            for name, w in want.items():
                np.testing.assert_allclose(got[name], w, rtol=1e-6, err_msg=name)
