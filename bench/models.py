"""bench/models: batch-1 latency (p50, p99) and batch-32 throughput of the
generated test models, the digits demo and any ONNX files named with
--model (torchvision exports, say), through gpusrv's CPU engine
(bench/models.c) beside onnxruntime in the same run, both given the same
threads: one, and every core this process may use (gpusrv's kernels get
--threads; onnxruntime intra_op_num_threads, sequential execution).

Usage: .venv/bin/python bench/models.py BUILD_DIR [--seconds S] [--device ID]
           [--threads 1,all] [--model FILE.onnx ...] [--no-generated]"""
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


def ort_bench(path, batch, seconds, threads=1):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
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


def gs_bench(build, path, batch, seconds, device, threads=1, bound=False):
    """bound: operands kept in the device's buffers, the kernels timed alone."""
    cmd = [os.path.join(build, "bench", "gs-bench-models"), path, "--batch", str(batch),
           "--iters", "100000", "--seconds", str(seconds), "--threads", str(threads)]
    if bound:
        cmd.append("--bound")
    if device:
        cmd += ["--device", device]
    p = subprocess.run(cmd, capture_output=True, text=True,
                       env={**os.environ, "GPUSRV_PLUGIN_PATH": build})
    if p.returncode != 0:
        raise SystemExit(f"bench/models: {p.stderr.strip()}")
    return json.loads(p.stdout)


def geomean(xs):
    return float(np.exp(np.mean(np.log(xs)))) if xs else float("nan")


def bench_threads(args, models, floor, threads):
    print(f"\n--- {threads} thread(s) each ---")
    print(f"{'model':20} {'b1 p50 us':>10} {'ort':>9} {'ratio':>6} {'adj':>6} | {'b1 p99 us':>10} "
          f"{'ort':>9} | {'b32 /s':>9} {'ort':>9} {'ratio':>6} | arena vs naive")
    lat_ratios, thr_ratios, p50s = [], [], {}
    for name, path in models.items():
        g1 = gs_bench(args.build, path, 1, args.seconds, args.device, threads)
        o1 = ort_bench(path, 1, args.seconds, threads)
        g32 = gs_bench(args.build, path, args.big_batch, args.seconds, args.device, threads)
        o32 = ort_bench(path, args.big_batch, args.seconds, threads)
        lat_ratio = g1["p50_us"] / o1["p50_us"]
        lat_adj = g1["p50_us"] / max(o1["p50_us"] - floor, 0.1)
        thr_ratio = g32["samples_per_s"] / o32["samples_per_s"]
        lat_ratios.append(lat_ratio)
        thr_ratios.append(thr_ratio)
        p50s[name] = g1["p50_us"]
        print(f"{name:20} {g1['p50_us']:10.1f} {o1['p50_us']:9.1f} {lat_ratio:6.2f} {lat_adj:6.2f} | "
              f"{g1['p99_us']:10.1f} {o1['p99_us']:9.1f} | {g32['samples_per_s']:9.1f} "
              f"{o32['samples_per_s']:9.1f} {thr_ratio:6.2f} | "
              f"{g32['arena_bytes'] / 1024:.0f} KiB vs {g32['naive_bytes'] / 1024:.0f} KiB", flush=True)
    print(f"geometric mean, gpusrv / onnxruntime: batch-1 latency {geomean(lat_ratios):.2f}x "
          f"(goal <= 1.0x, none over 1.25x: worst {max(lat_ratios):.2f}x); batch-{args.big_batch} "
          f"throughput {geomean(thr_ratios):.2f}x (goal >= 1.0x)")
    return p50s


def gemm_against_onednn(args, d, threads, n=1024):
    """gpusrv's fp32 MatMul beside oneDNN's matmul primitive called
    directly, same size and threads: both with their operands in place (the
    plan runs on bound buffers), and gpusrv's whole run (the inputs copied
    in, the output out) for what a caller of gs_plan_run sees."""
    from onnx import TensorProto, helper
    ins = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, n]) for x in ("a", "b")]
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "gemm", ins,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = os.path.join(d, "gemm.onnx")
    onnx.save(m, path)
    flop = 2.0 * n ** 3
    ours = flop / (gs_bench(args.build, path, 1, args.seconds, args.device, threads,
                            bound=True)["p50_us"] * 1e3)
    whole = flop / (gs_bench(args.build, path, 1, args.seconds, args.device, threads)["p50_us"] * 1e3)
    p = subprocess.run([os.path.join(args.build, "bench", "gs-bench-dnnl-matmul"), str(n),
                        str(threads), str(args.seconds)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench/models: {p.stderr.strip()}")
    peer = json.loads(p.stdout)["gflops"]
    print(f"fp32 GEMM {n}^3 on {threads} thread(s): gpusrv MatMul {ours:.1f} GFLOP/s (operands in "
          f"place; {whole:.1f} as a whole run with the copies), oneDNN matmul called directly "
          f"{peer:.1f}: {ours / peer:.2f}x (goal >= 0.95x)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--device", help="a device id such as opencl0 (default: the first, cpu0)")
    ap.add_argument("--threads", default="1,all",
                    help="thread counts to compare at, comma-separated; 'all': every core")
    ap.add_argument("--model", action="append", default=[], help="an ONNX file to add")
    ap.add_argument("--no-generated", action="store_true",
                    help="only the --model files, not the generated models and digits")
    ap.add_argument("--big-batch", type=int, default=32)
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    counts = [cores if t == "all" else int(t) for t in args.threads.split(",")]
    with tempfile.TemporaryDirectory() as d:
        models = {}
        if not args.no_generated:
            models["digits"] = os.path.join(ROOT, "models", "digits", "1", "model.onnx")
            for name, build in BUILDERS.items():
                models[name] = os.path.join(d, name + ".onnx")
                onnx.save(build(), models[name])
        for path in args.model:
            models[os.path.splitext(os.path.basename(path))[0]] = path
        floor = ort_floor(args.seconds)
        print(f"bench/models on {args.device or 'cpu0'} ({cores} cores): onnxruntime "
              f"{ort.__version__}, {args.seconds:.0f} s per measurement; ratio = gpusrv / "
              f"onnxruntime at the same thread count (latency: lower is better; throughput: "
              f"higher is better)")
        print(f"onnxruntime's per-call floor through Python: {floor:.1f} us (an Identity model); "
              f"'adj' compares against onnxruntime's time less this floor")
        p50 = {t: bench_threads(args, models, floor, t) for t in counts}
        print()
        for t in counts:
            gemm_against_onednn(args, d, t)
        if len(counts) > 1:
            lo, hi = min(counts), max(counts)
            scaling = [p50[lo][n] / p50[hi][n] for n in models]
            print(f"\nscaling: {hi} threads are {geomean(scaling):.2f}x faster than {lo} at batch 1 "
                  f"(geometric mean; goal for 2 against 1: >= 1.8x)")


if __name__ == "__main__":
    main()
