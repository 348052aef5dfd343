"""bench/autoscale: instances that follow the load ("count": "auto", issue 25),
beside fixed instance counts, measured with perf_analyzer.

Each model is served three times, by a `gpusrv serve` of its own: one
instance, two instances, and "auto" between one and two. A load step
(concurrency 1, 4, 16) runs against each; after each step the instances
running and the device memory the ledger has booked are read from /metrics,
and again after the load has stopped for longer than scale_down_ms. What
autoscaling is for shows in the last columns: the memory a fixed second
instance keeps while nobody calls.

On this machine's CPU device two instances share its cores (one thread each,
as "max": 2 gives them), while one fixed instance has both: instances pay on
GPUs, where each runs its own streams; here they are measured for what they
cost and free.

Usage: .venv/bin/python bench/autoscale.py BUILD_DIR"""
import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from adaptive import add, serve  # noqa: E402
from serve import ROOT, perf  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "engine"))
from models import cnn, mlp  # noqa: E402

CONCURRENCY = (1, 4, 16)
SCALE_DOWN_MS = 2000


def configs():
    batching = {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 100}}
    return {
        "one": {**batching, "instance_group": [{"count": 1, "kind": "KIND_CPU"}]},
        "two": {**batching, "instance_group": [{"count": 2, "kind": "KIND_CPU"}]},
        "auto": {**batching, "instance_group": [{"count": "auto", "min": 1, "max": 2,
                                                 "kind": "KIND_CPU",
                                                 "scale_down_ms": SCALE_DOWN_MS}]},
    }


def metrics(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    values = dict(l.rsplit(" ", 1) for l in text.splitlines() if l and not l.startswith("#"))
    instances = int(float(values[f'gpusrv_model_instances{{model="{name}"}}']))
    booked = float(values['gpusrv_device_memory_booked_bytes{device="cpu0"}']) / 2**20
    steps = {s: int(float(values.get(f'gpusrv_model_instance_steps_total{{model="{name}",'
                                     f'step="{s}"}}', 0))) for s in ("up", "down")}
    return instances, booked, steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        paths = {"wide_mlp": os.path.join(d, "wide_mlp.onnx"), "cnn": os.path.join(d, "cnn.onnx")}
        onnx.save(mlp(hidden=(4096, 4096)), paths["wide_mlp"])
        onnx.save(cnn(), paths["cnn"])
        print(f"perf_analyzer over HTTP; max_batch_size 8, max_queue_delay 100 us; auto: min 1, "
              f"max 2, scale_down_ms {SCALE_DOWN_MS}, default budget (1.2 ms)\n")
        print("| model | instances | c | infer/s | p50 ms | p99 ms | running after | booked MiB "
              "after |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for base, path in paths.items():
            for kind, config in configs().items():
                repo = os.path.join(d, f"{base}-{kind}")
                name = f"{base}_{kind}"
                add(repo, name, path, config)
                server, port = serve(args.build, repo, d)
                try:
                    for c in CONCURRENCY:
                        ips, p50, p99, _ = perf(name, port, c, os.path.join(d, "perf.csv"))
                        n, mib, _ = metrics(port, name)
                        print(f"| {base} | {kind} | {c} | {ips:,.0f} | {p50 / 1000:.2f} | "
                              f"{p99 / 1000:.2f} | {n} | {mib:.1f} |", flush=True)
                    time.sleep(SCALE_DOWN_MS / 1000 + 1.5)
                    n, mib, steps = metrics(port, name)
                    print(f"| {base} | {kind} | idle {SCALE_DOWN_MS / 1000 + 1.5:.1f} s | | | | "
                          f"{n} | {mib:.1f} |", flush=True)
                    if kind == "auto":
                        print(f"| {base} | auto steps | | | | | {json.dumps(steps)} | |")
                finally:
                    server.terminate()
                    server.wait(timeout=60)


if __name__ == "__main__":
    main()
