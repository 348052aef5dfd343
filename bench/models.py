"""bench/models: batch-1 latency (p50, p99) and batch-32 throughput of the
generated test models and the digits demo, through gpusrv's CPU engine
(bench/models.c) beside onnxruntime in the same run, both on one thread
(gpusrv's CPU kernels run on their stream's one worker thread; onnxruntime
gets intra_op_num_threads=1 and sequential execution).

Usage: .venv/bin/python bench/models.py BUILD_DIR [--seconds S] [--device ID]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "engine"))
from models import BUILDERS  # noqa: E402


def ort_bench(path, batch, seconds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feeds = {}
    rng = np.random.default_rng(1)
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else batch for d in i.shape]
        feeds[i.name] = (rng.random(shape, dtype=np.float32) - 0.5)
    for _ in range(5):
        sess.run(None, feeds)
    lat, start = [], time.perf_counter()
    while len(lat) < 10 or (time.perf_counter() - start < seconds and len(lat) < 100000):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        lat.append(time.perf_counter() - t0)
    total = time.perf_counter() - start
    lat.sort()
    return {"p50_us": lat[len(lat) // 2] * 1e6, "p99_us": lat[int(len(lat) * 0.99)] * 1e6,
            "samples_per_s": batch * len(lat) / total, "runs": len(lat)}


def ort_floor(seconds):
    """onnxruntime's own cost per call through its Python binding: a model
    that does nothing (Identity of one float). Subtracting it estimates what
    a C caller of onnxruntime would see."""
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "floor",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "floor.onnx")
        onnx.save(m, path)
        return ort_bench(path, 1, seconds)["p50_us"]


def gs_bench(build, path, batch, seconds, device):
    cmd = [os.path.join(build, "bench", "gs-bench-models"), path, "--batch", str(batch),
           "--iters", "100000", "--seconds", str(seconds)]
    if device:
        cmd += ["--device", device]
    p = subprocess.run(cmd, capture_output=True, text=True,
                       env={**os.environ, "GPUSRV_PLUGIN_PATH": build})
    if p.returncode != 0:
        raise SystemExit(f"bench/models: {p.stderr.strip()}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--device", help="a device id such as opencl0 (default: the first, cpu0)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        models = {"digits": os.path.join(ROOT, "models", "digits", "1", "model.onnx")}
        for name, build in BUILDERS.items():
            models[name] = os.path.join(d, name + ".onnx")
            onnx.save(build(), models[name])
        floor = ort_floor(args.seconds)
        print(f"bench/models on {args.device or 'cpu0'}: onnxruntime {ort.__version__}, one thread each, "
              f"{args.seconds:.0f} s per measurement; ratio = gpusrv / onnxruntime (latency: lower "
              f"is better; throughput: higher is better)")
        print(f"onnxruntime's per-call floor through Python: {floor:.1f} us (an Identity model); "
              f"'adj' ratios compare against onnxruntime's time less this floor")
        print(f"{'model':12} {'b1 p50 us':>10} {'ort':>8} {'ratio':>6} {'adj':>6} | {'b1 p99 us':>10} "
              f"{'ort':>8} | {'b32 /s':>10} {'ort':>10} {'ratio':>6} {'adj':>6} | arena vs naive")
        worst, best = 0.0, 1e9
        for name, path in models.items():
            g1 = gs_bench(args.build, path, 1, args.seconds, args.device)
            o1 = ort_bench(path, 1, args.seconds)
            g32 = gs_bench(args.build, path, 32, args.seconds, args.device)
            o32 = ort_bench(path, 32, args.seconds)
            lat_ratio = g1["p50_us"] / o1["p50_us"]
            lat_adj = g1["p50_us"] / max(o1["p50_us"] - floor, 0.1)
            thr_ratio = g32["samples_per_s"] / o32["samples_per_s"]
            o32_us = 32e6 / o32["samples_per_s"]
            thr_adj = g32["samples_per_s"] / (32e6 / max(o32_us - floor, 0.1))
            worst = max(worst, lat_adj, 1 / thr_adj)
            best = min(best, lat_adj, 1 / thr_adj)
            print(f"{name:12} {g1['p50_us']:10.1f} {o1['p50_us']:8.1f} {lat_ratio:6.2f} {lat_adj:6.2f} | "
                  f"{g1['p99_us']:10.1f} {o1['p99_us']:8.1f} | {g32['samples_per_s']:10.0f} "
                  f"{o32['samples_per_s']:10.0f} {thr_ratio:6.2f} {thr_adj:6.2f} | "
                  f"{g32['arena_bytes'] / 1024:.0f} KiB vs {g32['naive_bytes'] / 1024:.0f} KiB")
        print(f"worst slowdown vs onnxruntime (adjusted): {worst:.2f}x (goal <= 1.25x); "
              f"best: {best:.2f}x (goal: ahead, < 1.0, on at least one)")


if __name__ == "__main__":
    main()
