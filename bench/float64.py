"""bench/float64.py BUILD [--seconds S]: float64 speed (issue 22). In one
run, for 1 thread and all cores:

- a 1024 x 1024 x 1024 float64 MatMul in GFLOP/s: gpusrv's model run on
  cpu0 (OpenBLAS's dgemm, k_nn_f64.c) against onnxruntime on the same
  model and thread count, numpy's matmul (its own OpenBLAS, threads set
  through OPENBLAS_NUM_THREADS), and gpusrv's own float32 MatMul;
- a small float64 CNN (`cnn_model` below, batch 32) in images/s:
  gpusrv on cpu0 against the same model run by gpusrv with --precision fp64
  from float32 (the widening's cost), and gpusrv's float32; onnxruntime has
  no float64 Conv, so it is not a peer there;
- both on opencl0 (PoCL, the same cores) where it is, for the device's
  float64 program.

gpusrv's figures are gs-bench-models' p50 of whole runs (inputs copied in,
outputs out)."""
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
from onnx import TensorProto, helper, numpy_helper

N = 1024


def matmul_model(path, dtype):
    t = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((N, N)).astype(dtype), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", t, ["b", N])],
                          [helper.make_tensor_value_info("y", t, ["b", N])], [w])
    save(g, path)


def cnn_model(path, dtype):
    """Conv 3->32, Relu, MaxPool, Conv 32->64, Relu, GlobalAveragePool, Gemm 64->10, Softmax."""
    t = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    r = np.random.default_rng(2)
    init = {"w1": r.standard_normal((32, 3, 3, 3)) * 0.2, "b1": r.standard_normal(32),
            "w2": r.standard_normal((64, 32, 3, 3)) * 0.05, "b2": r.standard_normal(64),
            "wf": r.standard_normal((10, 64)), "bf": r.standard_normal(10)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["l"], transB=1),
             helper.make_node("Softmax", ["l"], ["y"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", t, ["b", 3, 32, 32])],
                          [helper.make_tensor_value_info("y", t, ["b", 10])],
                          [numpy_helper.from_array(v.astype(dtype), k) for k, v in init.items()])
    save(g, path)


def save(graph, path):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def gpusrv(build, path, batch, threads, seconds, device="cpu0", extra=()):
    p = subprocess.run([os.path.join(build, "bench", "gs-bench-models"), path, "--batch",
                        str(batch), "--iters", "100000", "--seconds", str(seconds), "--threads",
                        str(threads), "--device", device, *extra], capture_output=True, text=True,
                       env=plugins(build))
    if p.returncode != 0:
        return None, p.stderr.strip()
    return json.loads(p.stdout)["p50_us"] * 1e-6, ""


def plugins(build):
    """The environment that finds the OpenCL plugin in the build directory."""
    return {**os.environ, "GPUSRV_PLUGIN_PATH": os.environ.get("GPUSRV_PLUGIN_PATH", build)}


def median_time(fn, seconds):
    times, start = [], time.perf_counter()
    while len(times) < 5 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def onnxruntime(path, x, threads, seconds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return median_time(lambda: sess.run(None, {"x": x}), seconds)


def numpy_matmul(threads, seconds):
    """numpy in a child, so that its OpenBLAS starts with the thread count asked."""
    code = ("import numpy as np, time, statistics as s\n"
            f"a = np.random.default_rng(0).standard_normal(({N}, {N}))\n"
            "b = a.copy(); t = []; start = time.perf_counter()\n"
            f"while len(t) < 5 or time.perf_counter() - start < {seconds}:\n"
            "    t0 = time.perf_counter(); a @ b; t.append(time.perf_counter() - t0)\n"
            "print(s.median(t))\n")
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    return float(p.stdout)


def fmt(v, unit=""):
    return "-" if v is None else f"{v:.2f}{unit}"


def required(result):
    """gs-bench-models' seconds for gpusrv on cpu0, which the tables cannot do without."""
    seconds, why = result
    if seconds is None:
        raise SystemExit(f"bench/float64: {why}")
    return seconds


def matmul_table(args, d, cores, has_opencl):
    mm64, mm32 = os.path.join(d, "mm64.onnx"), os.path.join(d, "mm32.onnx")
    matmul_model(mm64, np.float64)
    matmul_model(mm32, np.float32)
    x = np.random.default_rng(3).standard_normal((N, N))
    flop = 2.0 * N ** 3
    print(f"float64 MatMul {N}^3, GFLOP/s, {cores} core(s)")
    print("| threads | gpusrv cpu0 f64 | onnxruntime f64 | gpusrv / onnxruntime | numpy f64 |"
          " gpusrv cpu0 f32 | gpusrv opencl0 f64 |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for threads in sorted({1, cores}):
        ours = required(gpusrv(args.build, mm64, N, threads, args.seconds))
        peer = onnxruntime(mm64, x, threads, args.seconds)
        f32, _ = gpusrv(args.build, mm32, N, threads, args.seconds)
        cl = gpusrv(args.build, mm64, N, threads, args.seconds, "opencl0")[0] if has_opencl else None
        print(f"| {threads} | {flop / ours * 1e-9:.2f} | {flop / peer * 1e-9:.2f} | "
              f"{peer / ours:.2f}x | {flop / numpy_matmul(threads, args.seconds) * 1e-9:.2f} | "
              f"{fmt(f32 and flop / f32 * 1e-9)} | {fmt(cl and flop / cl * 1e-9)} |")


def cnn_table(args, d, cores, has_opencl, batch=32):
    cnn64, cnn32 = os.path.join(d, "cnn64.onnx"), os.path.join(d, "cnn32.onnx")
    cnn_model(cnn64, np.float64)
    cnn_model(cnn32, np.float32)
    print(f"\nCNN (3x32x32 images, two Conv layers, batch {batch}), images/s")
    print("| threads | gpusrv cpu0 f64 | gpusrv cpu0 f32 model, --precision fp64 |"
          " gpusrv cpu0 f32 | f64 / f32 time | gpusrv opencl0 f64 |")
    print("|---:|---:|---:|---:|---:|---:|")
    for threads in sorted({1, cores}):
        t64 = required(gpusrv(args.build, cnn64, batch, threads, args.seconds))
        wide, _ = gpusrv(args.build, cnn32, batch, threads, args.seconds,
                         extra=("--precision", "fp64"))
        t32 = required(gpusrv(args.build, cnn32, batch, threads, args.seconds))
        cl = gpusrv(args.build, cnn64, batch, threads, args.seconds, "opencl0")[0] if has_opencl else None
        print(f"| {threads} | {batch / t64:.0f} | {fmt(wide and batch / wide)} | "
              f"{batch / t32:.0f} | {t64 / t32:.2f}x | {fmt(cl and batch / cl)} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    smi = subprocess.run([os.path.join(args.build, "gpusrv"), "smi", "--json"], capture_output=True,
                         text=True, env=plugins(args.build))
    has_opencl = '"opencl0"' in smi.stdout
    with tempfile.TemporaryDirectory() as d:
        matmul_table(args, d, cores, has_opencl)
        cnn_table(args, d, cores, has_opencl)


if __name__ == "__main__":
    main()
