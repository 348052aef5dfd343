"""bench/adaptive: serving that adapts (issue 25), measured with perf_analyzer.

1. A rising load step (concurrency 1, 4, 16, 64) on the digits model and on
   a CNN, each served three times, by a `gpusrv serve` of its own: with a fixed
   dynamic batching config (preferred sizes and a max_queue_delay, as
   Triton's users write them), with the config `gpusrv model tune --write`
   chose, and with adaptive batching under a latency budget. Throughput and
   p99 latency, same run. One model per server: libgomp cuts its threads'
   spinning short once a process holds more OpenMP threads than cores (each
   instance's compute thread leads a team), and a model measured after
   another in the same server ran up to a quarter slower.
2. The first request after an idle unload (idle_unload_seconds), beside the
   same request's warm latency: what a user pays for the memory given back.

Usage: .venv/bin/python bench/adaptive.py BUILD_DIR [--cnn MODEL.onnx] [--budget-us N]
(--cnn: a CNN exported with its batch dimension first, such as a torchvision
export from bench/zoo; default the generated CNN of tests/engine/models.py.)"""
import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from serve import ROOT, free_port, perf, wait_http  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "engine"))
from models import cnn  # noqa: E402

CONCURRENCY = (1, 4, 16, 64)


def add(repo, name, onnx_path, config):
    os.makedirs(os.path.join(repo, name, "1"))
    os.symlink(os.path.abspath(onnx_path), os.path.join(repo, name, "1", "model.onnx"))
    with open(os.path.join(repo, name, "config.json"), "w") as f:
        json.dump(config, f)


def configs(budget_us):
    fixed = {"max_batch_size": 64, "dynamic_batching": {
        "preferred_batch_size": [16, 64], "max_queue_delay_microseconds": 100}}
    adaptive = {"max_batch_size": 64, "dynamic_batching": {
        "adaptive": True, "latency_budget_us": budget_us}}
    return {"fixed": fixed, "tuned": {"max_batch_size": 64}, "adaptive": adaptive}


def tuned(build, repo, name, budget_us):
    """`gpusrv model tune --write` on the entry: its table, and what it chose."""
    p = subprocess.run([os.path.join(build, "gpusrv"), "model", "tune", os.path.join(repo, name),
                        "--seconds", "0.5", "--latency-budget", str(budget_us / 1000), "--write"],
                       capture_output=True, text=True, timeout=1200)
    if p.returncode != 0:
        raise SystemExit(f"model tune failed: {p.stderr}")
    return "\n".join(l for l in p.stdout.splitlines() if l.startswith(("|", "best", "wrote")))


def serve(build, repo, d):
    port = free_port()
    log = open(os.path.join(d, f"serve-{port}.log"), "w")
    server = subprocess.Popen([os.path.join(build, "gpusrv"), "serve", "--model-repository", repo,
                               "--http-port", str(port), "--grpc-port", "0",
                               "--state-dir", os.path.join(d, f"state-{port}")],
                              stdout=log, stderr=log)
    try:
        wait_http(port, "/v2/health/ready", 300)
    except SystemExit:
        server.kill()
        raise
    return server, port


def load_step(build, repo, d, models):
    print("| model | config | c | infer/s | p50 ms | p99 ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for base in models:
        for kind in ("fixed", "tuned", "adaptive"):
            one = os.path.join(d, f"only-{base}-{kind}")
            os.makedirs(one)
            os.symlink(os.path.join(repo, f"{base}_{kind}"), os.path.join(one, f"{base}_{kind}"))
            server, port = serve(build, one, d)
            try:
                for c in CONCURRENCY:
                    ips, p50, p99, _ = perf(f"{base}_{kind}", port, c,
                                            os.path.join(d, "perf.csv"))
                    print(f"| {base} | {kind} | {c} | {ips:,.0f} | {p50 / 1000:.2f} | "
                          f"{p99 / 1000:.2f} |", flush=True)
            finally:
                server.terminate()
                server.wait(timeout=60)


def index_state(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/v2/repository/index", body=b"{}")
    return {m["name"]: m["state"] for m in json.loads(c.getresponse().read())}[name]


def one_request_ms(port, name, request):
    header, body = request
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t = time.perf_counter()
    c.request("POST", f"/v2/models/{name}/infer", body=body,
              headers={"Inference-Header-Content-Length": str(header)})
    r = c.getresponse()
    r.read()
    assert r.status == 200, r.status
    return (time.perf_counter() - t) * 1000


def after_idle(port, name, body, rounds=5):
    """The first request after each idle unload, and the warm p50 between."""
    first, warm = [], []
    for _ in range(rounds):
        deadline = time.time() + 30
        while index_state(port, name) != "UNLOADED_IDLE":
            if time.time() > deadline:
                raise SystemExit(f"{name} was not unloaded while idle")
            time.sleep(0.05)
        first.append(one_request_ms(port, name, body))
        warm += [one_request_ms(port, name, body) for _ in range(20)]
    first.sort()
    warm.sort()
    return first[len(first) // 2], warm[len(warm) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--cnn", help="a CNN (.onnx) with its batch dimension first")
    ap.add_argument("--budget-us", type=int, default=50000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        repo = os.path.join(d, "models")
        os.makedirs(repo)
        cnn_path = args.cnn
        if not cnn_path:
            cnn_path = os.path.join(d, "cnn.onnx")
            onnx.save(cnn(), cnn_path)
        digits = os.path.join(ROOT, "models", "digits", "1", "model.onnx")
        for kind, config in configs(args.budget_us).items():
            add(repo, f"digits_{kind}", digits, config)
            add(repo, f"cnn_{kind}", cnn_path, config)
        print(f"## gpusrv model tune (--latency-budget {args.budget_us / 1000} ms)\n")
        for name in ("digits_tuned", "cnn_tuned"):
            print(f"{name}:\n```\n{tuned(args.build, repo, name, args.budget_us)}\n```\n",
                  flush=True)
        idle = os.path.join(d, "idle")
        add(idle, "digits_idle", digits, {"max_batch_size": 64, "idle_unload_seconds": 1})
        add(idle, "cnn_idle", cnn_path, {"max_batch_size": 64, "idle_unload_seconds": 1})
        print(f"## Load step (perf_analyzer over HTTP; adaptive budget {args.budget_us} us; "
              f"fixed: preferred 16 and 64, max_queue_delay 100 us)\n")
        load_step(args.build, repo, d, ("digits", "cnn"))
        server, port = serve(args.build, idle, d)
        try:
            print("\n## First request after an idle unload (idle_unload_seconds 1), "
                  "median of 5, beside the warm p50 of the same request\n")
            print("| model | first after unload ms | warm p50 ms |")
            print("| --- | ---: | ---: |")
            for name in ("digits_idle", "cnn_idle"):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                c.request("GET", f"/v2/models/{name}")
                meta = json.loads(c.getresponse().read())
                shape = [1] + [abs(x) for x in meta["inputs"][0]["shape"][1:]]
                x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
                # Binary tensors, as clients send images: JSON numbers would
                # time their parsing instead.
                header = json.dumps({"inputs": [{
                    "name": meta["inputs"][0]["name"], "shape": shape, "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes}}]}).encode()
                first, warm = after_idle(port, name, (len(header), header + x.tobytes()))
                print(f"| {name} | {first:.1f} | {warm:.2f} |", flush=True)
        finally:
            server.terminate()
            server.wait(timeout=60)


if __name__ == "__main__":
    main()
