"""bench/quant: quantised models on the CPU (issue 28). For each generated
model (a wide MLP, a 64-channel CNN, the transformer block), quantised by
onnxruntime's own tool in three forms (dynamic, static QDQ per channel,
static QOperator) and by `gpusrv model quantize --per-channel`, the batch-32 throughput and batch-1 latency of gpusrv
(bench/models.c) beside its float32 throughput, and beside onnxruntime
running the same quantised file, in the same run, with the same threads.

Goals (issue 28): int8 at least 1.8x float32's throughput at batch 32 on
a CPU with VNNI or AVX-512; within 1.25x of onnxruntime on the same
quantised models.

Usage: .venv/bin/python bench/quant.py BUILD_DIR [--seconds S] [--threads 1,all]"""
import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "engine"))
import models  # noqa: E402  (tests/engine/models.py: the generated models)

# bench/models.py's measuring functions, under another name than the test models'.
_spec = importlib.util.spec_from_file_location("bench_models", os.path.join(HERE, "models.py"))
bench_models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_models)
geomean, gs_bench, ort_bench = bench_models.geomean, bench_models.gs_bench, bench_models.ort_bench

MODELS = {
    "mlp-wide": (lambda: models.mlp(d_in=1024, hidden=(2048, 1024)), (1024,)),
    "cnn64": (lambda: models.cnn(channels=64, size=32), (3, 32, 32)),
    "transformer": (models.transformer, (32, 64)),
}


class Feeds(CalibrationDataReader):
    def __init__(self, batches):
        self.it = iter([{"x": b} for b in batches])

    def get_next(self):
        return next(self.it, None)


def quantised_files(d, build_dir, name, build, shape):
    src = os.path.join(d, f"{name}.onnx")
    onnx.save(build(), src)
    rng = np.random.default_rng(0)
    calib = [rng.standard_normal((4, *shape)).astype(np.float32) for _ in range(4)]
    out = {"float32": src}
    dyn = os.path.join(d, f"{name}.dynamic.onnx")
    # onnxruntime's ConvInteger takes uint8 weights only.
    quantize_dynamic(src, dyn, weight_type=QuantType.QUInt8 if "cnn" in name else QuantType.QInt8)
    out["dynamic"] = dyn
    for form, fmt in (("qdq", QuantFormat.QDQ), ("qoperator", QuantFormat.QOperator)):
        path = os.path.join(d, f"{name}.{form}.onnx")
        quantize_static(src, path, Feeds(calib), quant_format=fmt, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        out[form] = path
    # gpusrv's own quantiser, on the same calibration samples.
    np.save(os.path.join(d, f"{name}.calib.npy"), np.concatenate(calib))
    path = os.path.join(d, f"{name}.gpusrv-qdq.onnx")
    subprocess.run([os.path.join(build_dir, "gpusrv"), "model", "quantize", src, "-o", path,
                    "--calibrate", os.path.join(d, f"{name}.calib.npy"), "--per-channel"],
                   check=True, capture_output=True)
    out["gpusrv-qdq"] = path
    return out


def cpu_has(flag):
    with open("/proc/cpuinfo") as f:
        return any(flag in line.split() for line in f if line.startswith("flags"))


def run(args, files, threads):
    print(f"\n--- {threads} thread(s) each; batch {args.batch} throughput (samples/s), "
          f"batch-1 p50 latency (us) ---")
    print(f"{'model':12} {'form':11} {'gpusrv /s':>10} {'vs fp32':>8} {'ort /s':>9} {'ratio':>6} | "
          f"{'gpusrv p50':>10} {'ort p50':>9} {'ratio':>6}")
    speedups, thr, lat = [], [], []
    for name, forms in files.items():
        base = None
        for form, path in forms.items():
            g32 = gs_bench(args.build, path, args.batch, args.seconds, None, threads)
            o32 = ort_bench(path, args.batch, args.seconds, threads)
            g1 = gs_bench(args.build, path, 1, args.seconds, None, threads)
            o1 = ort_bench(path, 1, args.seconds, threads)
            if form == "float32":
                base = g32["samples_per_s"]
            vs_fp32 = g32["samples_per_s"] / base
            t_ratio = g32["samples_per_s"] / o32["samples_per_s"]
            l_ratio = g1["p50_us"] / o1["p50_us"]
            if form != "float32":
                speedups.append(vs_fp32)
                thr.append(t_ratio)
                lat.append(l_ratio)
            print(f"{name:12} {form:11} {g32['samples_per_s']:10.1f} {vs_fp32:7.2f}x "
                  f"{o32['samples_per_s']:9.1f} {t_ratio:6.2f} | {g1['p50_us']:10.1f} "
                  f"{o1['p50_us']:9.1f} {l_ratio:6.2f}", flush=True)
    print(f"int8 forms, geometric mean: {geomean(speedups):.2f}x gpusrv's float32 throughput "
          f"(goal >= 1.8x with VNNI); throughput {geomean(thr):.2f}x onnxruntime's (goal >= "
          f"0.8x), batch-1 latency {geomean(lat):.2f}x onnxruntime's (goal <= 1.25x; worst "
          f"{max(lat):.2f}x)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--threads", default="1,all")
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    counts = [cores if t == "all" else int(t) for t in args.threads.split(",")]
    vnni = "avx512_vnni" if cpu_has("avx512_vnni") else "avx_vnni" if cpu_has("avx_vnni") else None
    print(f"bench/quant ({cores} cores; VNNI: {vnni or 'none'}): onnxruntime {ort.__version__}, "
          f"{args.seconds:.0f} s per measurement; ratios are gpusrv / onnxruntime on the same file")
    with tempfile.TemporaryDirectory() as d:
        files = {name: quantised_files(d, args.build, name, build, shape)
                 for name, (build, shape) in MODELS.items()}
        for t in counts:
            run(args, files, t)


if __name__ == "__main__":
    main()
