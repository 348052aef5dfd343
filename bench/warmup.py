"""bench/warmup: what warming up at load buys the first request. The digits
model is served (max_batch_size 8, preferred batch 8) with and without
"warmup"; each server is timed from start to ready, then the first request
(a batch of 8 rows) beside the median of the 20 after it, measured in the
same run: without warm-up the first request pays for making its plan and
for the device library's first call.

Usage: .venv/bin/python bench/warmup.py BUILD_DIR [DEVICE]"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import free_port  # noqa: E402  (bench/serve.py, beside this one)


def request(port, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                                 method="POST" if body else "GET")
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read()


def measure(build, device, warmup):
    with tempfile.TemporaryDirectory() as repo:
        shutil.copytree(os.path.join(ROOT, "models", "digits"), os.path.join(repo, "digits"))
        config = {"max_batch_size": 8, "warmup": warmup,
                  "dynamic_batching": {"preferred_batch_size": [8]},
                  "instance_group": [{"count": 1, "devices": [device]}]}
        with open(os.path.join(repo, "digits", "config.json"), "w") as f:
            json.dump(config, f)
        port = free_port()
        t0 = time.perf_counter()
        server = subprocess.Popen([os.path.join(build, "gpusrv"), "serve", "--model-repository",
                                   repo, "--http-port", str(port)], stderr=subprocess.DEVNULL)
        try:
            while True:
                try:
                    request(port, "/v2/models/digits/ready")
                    break
                except OSError:
                    time.sleep(0.005)
            ready = time.perf_counter() - t0
            body = json.dumps({"inputs": [{"name": "pixels", "shape": [8, 64],
                                           "datatype": "FP32", "data": [1.0] * 512}]}).encode()
            times = []
            for _ in range(21):
                t = time.perf_counter()
                request(port, "/v2/models/digits/infer", body)
                times.append(time.perf_counter() - t)
        finally:
            server.terminate()
            server.wait(timeout=30)
    return ready, times[0], statistics.median(times[1:])


def main():
    build = sys.argv[1]
    device = sys.argv[2] if len(sys.argv) > 2 else "cpu0"
    print(f"bench/warmup: digits on {device}, batches of 8 rows")
    print(f"{'warmup':8} {'ready ms':>9} {'first ms':>9} {'next p50 ms':>11} {'first/next':>10}")
    for warmup in (False, True):
        ready, first, rest = measure(build, device, warmup)
        print(f"{str(warmup).lower():8} {ready * 1e3:9.1f} {first * 1e3:9.2f} {rest * 1e3:11.2f} "
              f"{first / rest:10.1f}")
    print("goal: with warm-up the first request within 2x of the ones after it")


if __name__ == "__main__":
    main()
