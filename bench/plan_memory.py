"""bench/plan_memory: the device memory a served model takes when dynamic
batching makes a plan for every batch size it forms. Each model is served
(one instance) and asked with batches of 1, 2, 4, 8, 16 and 32 rows, one
plan each; the memory the server books for them (/metrics) is printed beside
the same six plans each made alone by `gpusrv model run --report` (weights
and arena per plan: the memory without shared weights), measured in the
same run, and beside the floor: the weights once plus every plan's arena.
The server's resident host memory after the six plans is printed too (on
cpu0 the device memory is host memory as well).

Usage: .venv/bin/python bench/plan_memory.py BUILD_DIR [DEVICE] [PRECISION]"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "engine"))
import models  # noqa: E402
from serve import free_port  # noqa: E402  (bench/serve.py, beside this one)

SIZES = (1, 2, 4, 8, 16, 32)


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as r:
        return r.read()


def booked(port, device):
    for line in get(port, "/metrics").decode().splitlines():
        if line.startswith(f'gpusrv_device_memory_booked_bytes{{device="{device}"}}'):
            return int(line.split()[-1])
    raise RuntimeError("no booked figure in /metrics")


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def plan_alone(build, path, x, device, precision):
    """weights, arena of the plan `model run` makes for input x (no sharing)."""
    with tempfile.TemporaryDirectory() as d:
        np.save(os.path.join(d, "x.npy"), x)
        out = subprocess.run([os.path.join(build, "gpusrv"), "model", "run", path, "-i",
                              f"x={d}/x.npy", "-o", os.path.join(d, "out"), "--report",
                              "--device", device, "--precision", precision],
                             capture_output=True, text=True, check=True)
    m = re.search(r"arena (\d+) bytes .*; weights (\d+) bytes", out.stdout)
    return int(m.group(2)), int(m.group(1))


def main():
    build = sys.argv[1]
    device = sys.argv[2] if len(sys.argv) > 2 else "cpu0"
    precision = sys.argv[3] if len(sys.argv) > 3 else "fp32"
    print(f"bench/plan_memory: a plan per batch size {SIZES} of one instance on {device}, "
          f"{precision}")
    print(f"{'model':12} {'weights MiB':>11} {'served MiB':>10} {'alone MiB':>10} "
          f"{'floor MiB':>10} {'served/alone':>12} {'server RSS MiB':>14}")
    for name in ("mlp", "cnn", "transformer"):
        with tempfile.TemporaryDirectory() as repo:
            os.makedirs(os.path.join(repo, name, "1"))
            path = os.path.join(repo, name, "1", "model.onnx")
            onnx.save(models.BUILDERS[name](), path)
            config = {"max_batch_size": max(SIZES), "precision": precision, "warmup": False,
                      "instance_group": [{"count": 1, "kind": "KIND_AUTO", "devices": [device]}]}
            with open(os.path.join(repo, name, "config.json"), "w") as f:
                json.dump(config, f)
            alone = [plan_alone(build, path, models.example_input(name, n), device, precision)
                     for n in SIZES]
            port = free_port()
            server = subprocess.Popen([os.path.join(build, "gpusrv"), "serve", "--model-repository",
                                       repo, "--http-port", str(port)], stderr=subprocess.DEVNULL)
            try:
                for _ in range(200):
                    try:
                        get(port, f"/v2/models/{name}/ready")
                        break
                    except OSError:
                        time.sleep(0.05)
                for n in SIZES:
                    x = models.example_input(name, n)
                    body = json.dumps({"inputs": [{"name": "x", "shape": list(x.shape),
                                                   "datatype": "FP32",
                                                   "data": x.ravel().tolist()}]}).encode()
                    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{name}/infer",
                                                 data=body, method="POST")
                    urllib.request.urlopen(req, timeout=60).read()
                served = booked(port, device)
                rss = rss_mib(server.pid)
            finally:
                server.terminate()
                server.wait(timeout=30)
        weights = max(w for w, _ in alone)
        separate = sum(w + a for w, a in alone)
        floor = weights + sum(a for _, a in alone)
        mib = 1 << 20
        print(f"{name:12} {weights / mib:11.2f} {served / mib:10.2f} {separate / mib:10.2f} "
              f"{floor / mib:10.2f} {served / separate:12.2f} {rss:14.1f}")
    print("goal: served within 5% of the floor (the weights held once); alone is the memory "
          "with a copy of the weights per plan")


if __name__ == "__main__":
    main()
