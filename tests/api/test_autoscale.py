"""Instances that follow the load (issue 25): an instance_group with
"count": "auto" runs between min and max instances, adding one while
requests keep waiting in the queue past the budget, taking one away once the
load has been light for scale_down_ms, and never booking past the ledger."""
import json
import os
import sys
import threading
import time

import numpy as np
import onnx

from test_serve import ROOT, add_model, metric_values, ort_run, request, serving

sys.path.insert(0, os.path.join(ROOT, "tests", "engine"))
from models import mlp  # noqa: E402


def auto_model(root, name, group, warmup=False):
    """A model slow enough per request (wide layers, one row a batch) for
    four clients to queue behind one instance."""
    add_model(root, name, {"max_batch_size": 1, "warmup": warmup,
                           "dynamic_batching": {"max_queue_delay_microseconds": 0},
                           "instance_group": [{"count": "auto", "kind": "KIND_CPU", **group}]})
    onnx.save(mlp(hidden=(4096, 4096)), str(root / name / "1" / "model.onnx"))


def instances(port, model):
    return int(metric_values(port)[f'gpusrv_model_instances{{model="{model}"}}'])


def steps(port, model):
    values = metric_values(port)
    return {s: int(values[f'gpusrv_model_instance_steps_total{{model="{model}",step="{s}"}}'])
            for s in ("up", "down", "refused")}


def booked(port):
    return int(metric_values(port)['gpusrv_device_memory_booked_bytes{device="cpu0"}'])


def wait_for(what, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if what():
            return True
        time.sleep(0.05)
    return what()


class Load:
    """Clients that each send their next request on the reply, checking
    every answer, until stopped; meanwhile the highest instance count and
    the highest booking seen."""

    def __init__(self, port, model, x, want, clients=4):
        self.port, self.model, self.stop = port, model, threading.Event()
        self.body = json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                            "data": x.ravel().tolist()}]}).encode()
        self.want, self.wrong, self.answered = want, [], 0
        self.most_instances, self.most_booked = 0, 0
        self.threads = [threading.Thread(target=self.client) for _ in range(clients)]

    def client(self):
        while not self.stop.is_set():
            status, raw, _ = request(self.port, "POST", f"/v2/models/{self.model}/infer", self.body)
            out = json.loads(raw)["outputs"][0] if status == 200 else None
            if out is None or not np.allclose(np.array(out["data"], np.float32), self.want.ravel(),
                                              rtol=1e-4, atol=1e-5):
                self.wrong.append((status, raw[:300]))
            self.answered += 1

    def run(self, seconds, until=None):
        """Loads the model for `seconds`, or until until() holds."""
        for t in self.threads:
            t.start()
        end = time.time() + seconds
        while time.time() < end:
            self.most_instances = max(self.most_instances, instances(self.port, self.model))
            self.most_booked = max(self.most_booked, booked(self.port))
            if until and until():
                break
            time.sleep(0.1)
        self.stop.set()
        for t in self.threads:
            t.join()
        assert not self.wrong, self.wrong[:3]
        assert self.answered > 0


def one_request(tmp_path, model):
    x = np.random.default_rng(4).standard_normal((1, 256)).astype(np.float32)
    return x, ort_run(str(tmp_path / model / "1" / "model.onnx"), {"x": x})


def test_instances_grow_under_load_and_shrink_after(tmp_path):
    auto_model(tmp_path, "auto", {"min": 1, "max": 2, "queue_delay_budget_us": 2000,
                                  "scale_down_ms": 1000})
    x, want = one_request(tmp_path, "auto")
    with serving(tmp_path) as port:
        config = json.loads(request(port, "GET", "/v2/models/auto/config")[1])
        assert config["instance_group"][0]["count"] == 1
        assert config["instance_group"][0]["autoscale"] == {
            "min": 1, "max": 2, "queue_delay_budget_us": 2000}
        assert instances(port, "auto") == 1
        load = Load(port, "auto", x, want, clients=1)
        load.run(0.3)  # one instance's plan made and booked; one client never queues
        one = booked(port)
        assert one > 0 and load.most_instances == 1

        # Four clients behind one instance: each request waits for the three
        # before it, far past 2 ms, and a second instance comes; never a third.
        # Loaded until the second instance's plan is booked (at most 20 s: a
        # sanitized build takes seconds to warm up and tick twice over budget).
        load = Load(port, "auto", x, want)
        load.run(20, until=lambda: load.most_instances == 2 and load.most_booked > one)
        assert load.most_instances == 2
        assert steps(port, "auto")["up"] == 1
        assert load.most_booked > one  # the second instance's plan, booked

        # The load stops: after a second of nothing the second instance goes,
        # and its plan's booking with it.
        assert wait_for(lambda: instances(port, "auto") == 1, 10)
        assert steps(port, "auto")["down"] == 1
        assert booked(port) == one
        time.sleep(1.5)
        assert instances(port, "auto") == 1  # min 1: the last one stays


def test_scaled_to_none_the_next_request_starts_one(tmp_path):
    auto_model(tmp_path, "zero", {"min": 0, "max": 1, "scale_down_ms": 300}, warmup=True)
    x, want = one_request(tmp_path, "zero")
    with serving(tmp_path) as port:
        assert booked(port) > 0  # warmed up at load: the plan for batch 1
        Load(port, "zero", x, want, clients=1).run(0.3)
        # Idle: the last instance goes, and every byte it booked (its plan and
        # the weights no plan shares any more).
        assert wait_for(lambda: instances(port, "zero") == 0, 10)
        assert booked(port) == 0
        load = Load(port, "zero", x, want, clients=2)
        load.run(0.5)  # answered: the first request brought an instance back
        assert instances(port, "zero") == 1
        assert steps(port, "zero") == {"up": 1, "down": 1, "refused": 0}


def test_an_instance_the_ledger_has_no_room_for_is_refused(tmp_path):
    """With room for one instance's plan and weights and not for a second
    plan, the step up is refused, saying why, and the one instance serves
    every request."""
    auto_model(tmp_path, "tight", {"min": 1, "max": 2, "queue_delay_budget_us": 2000})
    x, want = one_request(tmp_path, "tight")
    with serving(tmp_path) as port:  # no limit: what one and two instances book
        load = Load(port, "tight", x, want, clients=1)
        load.run(0.3)
        one = booked(port)
        load = Load(port, "tight", x, want)
        load.run(20, until=lambda: load.most_instances == 2 and load.most_booked > one)
        assert load.most_instances == 2
        two = load.most_booked
    limit = one + (two - one) // 2
    with serving(tmp_path, "--model-memory-limit", str(limit)) as port:
        # Until the scaler has tried: after warm-up and two ticks over budget, which took
        # most of 3 s in a sanitized build (a refusal logged after the count was read).
        load = Load(port, "tight", x, want)
        load.run(15, until=lambda: steps(port, "tight")["refused"] >= 1)
        assert load.most_instances == 1
        assert load.most_booked <= limit
        assert steps(port, "tight")["refused"] >= 1
        assert steps(port, "tight")["up"] == 0
    log = "".join(p.read_text() for p in tmp_path.glob("serve-*.log"))
    assert "model tight: no instance added (1 running)" in log
    assert "is free" in log  # the ledger's reason


def test_auto_groups_in_both_formats_and_bad_ones_refused_saying_why(tmp_path):
    def entry(name, config):
        add_model(tmp_path, name, config)
    batching = {"max_batch_size": 4, "dynamic_batching": {}}
    add_model(tmp_path, "text", None, text="""
max_batch_size: 4
dynamic_batching { max_queue_delay_microseconds: 100 }
instance_group [ { count: auto, min: 0, max: 2, kind: KIND_CPU, queue_delay_budget_us: 5000 } ]
""")
    entry("lowbudget", {"max_batch_size": 4,
                        "dynamic_batching": {"max_queue_delay_microseconds": 500},
                        "instance_group": [{"count": "auto", "queue_delay_budget_us": 400}]})
    entry("realmin", {**batching, "instance_group": [{"count": "auto", "min": 1.5}]})
    entry("nobatcher", {"max_batch_size": 4, "instance_group": [{"count": "auto"}]})
    entry("twogroups", {**batching, "instance_group": [{"count": "auto"}, {"count": 1}]})
    entry("minabove", {**batching, "instance_group": [{"count": "auto", "min": 3, "max": 2}]})
    entry("maxbig", {**batching, "instance_group": [{"count": "auto", "max": 9}]})
    entry("minfixed", {**batching, "instance_group": [{"count": 2, "min": 1}]})
    entry("badword", {**batching, "instance_group": [{"count": "many"}]})
    entry("downsoon", {**batching, "instance_group": [{"count": "auto", "scale_down_ms": 5}]})
    with serving(tmp_path) as port:
        index = {m["name"]: m for m in json.loads(
            request(port, "POST", "/v2/repository/index", b"{}")[1])}
        reasons = {name: index[name].get("reason", "") for name in index}
        # config.pbtxt's word `auto` is the same count; min 0 starts one.
        assert index.pop("text")["state"] == "READY"
        config = json.loads(request(port, "GET", "/v2/models/text/config")[1])
        assert config["instance_group"][0]["count"] == 1
        assert config["instance_group"][0]["autoscale"] == {
            "min": 0, "max": 2, "queue_delay_budget_us": 5000}
        assert all(index[n]["state"] == "UNAVAILABLE" for n in index), index
        assert "needs dynamic_batching" in reasons["nobatcher"]
        assert 'count "auto" goes in the only instance group' in reasons["twogroups"]
        assert "queue_delay_budget_us (400) must be above max_queue_delay_microseconds (500)" \
            in reasons["lowbudget"]
        assert "min must be 0 to 8" in reasons["realmin"]
        assert "min (3) is above max (2)" in reasons["minabove"]
        assert "max must be 1 to 8" in reasons["maxbig"]
        assert 'min goes with "count": "auto"' in reasons["minfixed"]
        assert 'count must be 1 to 8, or "auto"' in reasons["badword"]
        assert "scale_down_ms must be 100 to 86400000" in reasons["downsoon"]
