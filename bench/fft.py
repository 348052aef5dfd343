"""bench/fft.py BUILD [--seconds S] [--device ID]: FFT speed, GFLOP/s counting
5 N log2 N per complex transform of N points. In the same run, for each
size and thread count: gpusrv's DFT on the CPU (a model of one DFT node run
by gs-bench-models: a whole run, the input copied in and the output out, one
FFTW_ESTIMATE plan made per run), FFTW called directly (gs-bench-fftw:
FFTW_MEASURE plans made once, no copies) and numpy.fft (one thread); then
real input beside complex input of the same size.
--device: a second table, the same model on that device (opencl0: VkFFT,
its plan made once per size; the copies to and from the device counted)
beside gpusrv on the CPU with all cores; on a CUDA device, where torch with
CUDA is installed, beside cuFFT called through torch.fft, with the same
copies and alone."""
import argparse
import json
import math
import os
import subprocess
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

# (points, transforms per run): about a million complex values each, and a prime.
SIZES = [(256, 4096), (1009, 1024), (4096, 256), (65536, 16)]


def gflops(n, batch, seconds):
    return 5.0 * n * math.log2(n) * batch / seconds * 1e-9


def dft_model(path, n, parts=2):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", n, parts])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", n, 2])
    g = helper.make_graph([helper.make_node("DFT", ["x"], ["y"], axis=1)], "dft", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def gpusrv(build, path, batch, threads, seconds, device="cpu0"):
    p = subprocess.run([os.path.join(build, "bench", "gs-bench-models"), path, "--batch",
                        str(batch), "--iters", "100000", "--seconds", str(seconds), "--threads",
                        str(threads), "--device", device], capture_output=True, text=True,
                       env={"GPUSRV_PLUGIN_PATH": os.path.abspath(build), **os.environ})
    if p.returncode != 0:
        raise SystemExit(f"bench/fft: {p.stderr.strip()}")
    return json.loads(p.stdout)["p50_us"] * 1e-6


def fftw(build, n, batch, threads, seconds):
    p = subprocess.run([os.path.join(build, "bench", "gs-bench-fftw"), str(n), str(batch),
                        str(threads), str(seconds)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench/fft: {p.stderr.strip()}")
    return json.loads(p.stdout)["median_us"] * 1e-6


def numpy_fft(n, batch, seconds):
    rng = np.random.default_rng(1)
    z = (rng.standard_normal((batch, n)) + 1j * rng.standard_normal((batch, n))).astype(np.complex64)
    times = []
    start = time.perf_counter()
    while len(times) < 5 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        np.fft.fft(z, axis=1)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--device", help="also time the DFT on this device (opencl0, cuda0)")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    print(f"complex float32 FFTs, GFLOP/s (5 N log2 N per transform), {cores} core(s)")
    print("| N | transforms | threads | gpusrv DFT | FFTW direct | gpusrv / FFTW | numpy.fft (1 thread) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as d:
        for n, batch in SIZES:
            path = os.path.join(d, f"dft{n}.onnx")
            dft_model(path, n)
            np_t = numpy_fft(n, batch, args.seconds)
            for threads in sorted({1, cores}):
                ours = gflops(n, batch, gpusrv(args.build, path, batch, threads, args.seconds))
                peer = gflops(n, batch, fftw(args.build, n, batch, threads, args.seconds))
                print(f"| {n} | {batch} | {threads} | {ours:.2f} | {peer:.2f} | "
                      f"{ours / peer:.2f}x | {gflops(n, batch, np_t):.2f} |")
        real_table(args, d, cores)
        if args.device:
            device_table(args, d, cores)


def real_table(args, d, cores):
    """Real input ([b, N, 1]) against complex input of the same size, both
    counted as 5 N log2 N: gpusrv transforms real lines with FFTW's r2c
    plans (half the work) and mirrors the other bins."""
    print(f"\nreal input against complex input, gpusrv DFT, {cores} thread(s), GFLOP/s")
    print("| N | transforms | real input | complex input | real / complex |")
    print("|---:|---:|---:|---:|---:|")
    for n, batch in SIZES:
        real, cplx = os.path.join(d, f"dft{n}r.onnx"), os.path.join(d, f"dft{n}.onnx")
        dft_model(real, n, parts=1)
        r = gflops(n, batch, gpusrv(args.build, real, batch, cores, args.seconds))
        c = gflops(n, batch, gpusrv(args.build, cplx, batch, cores, args.seconds))
        print(f"| {n} | {batch} | {r:.2f} | {c:.2f} | {r / c:.2f}x |")


def runs_on(build, path, n, device, d):
    """Whether `gpusrv model run --report` keeps the DFT on the device (a
    fallback would time the CPU under the device's name)."""
    x = os.path.join(d, "x.npy")
    np.save(x, np.zeros((1, n, 2), np.float32))
    p = subprocess.run([os.path.join(build, "gpusrv"), "model", "run", path, "-i", f"x={x}",
                        "-o", os.path.join(d, "out"), "--device", device, "--report"],
                       capture_output=True, text=True,
                       env={"GPUSRV_PLUGIN_PATH": os.path.abspath(build), **os.environ})
    return p.returncode == 0 and "run on the CPU instead" not in p.stdout


def torch_fft(n, batch, seconds, device):
    """torch.fft.fft on `device` (on "cuda" it is cuFFT), the seconds of
    one transform of the batch: with the copies to and from host memory, as
    gpusrv's whole runs make them, and of the transform alone."""
    import torch
    z = torch.randn(batch, n, dtype=torch.complex64)
    whole, alone = [], []
    start = time.perf_counter()
    while len(whole) < 5 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        on = z.to(device)
        t1 = time.perf_counter()
        out = torch.fft.fft(on, dim=1)
        if device != "cpu":
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        out.cpu()
        whole.append(time.perf_counter() - t0)
        alone.append(t2 - t1)
    return float(np.median(whole)), float(np.median(alone))


def torch_device(device):
    """torch's name for gpusrv's device where torch can reach it (cuda0 is
    "cuda:0"), else None: the peer column is left out."""
    try:
        import torch
    except ImportError:
        return None
    if device.startswith("cuda") and torch.cuda.is_available():
        return "cuda:" + device[4:]
    return None


def device_table(args, d, cores):
    peer = torch_device(args.device)
    print(f"\nthe same DFT on {args.device}, GFLOP/s of whole runs (copies in and out counted)")
    head = f"| N | transforms | gpusrv on {args.device} | gpusrv on cpu0 ({cores} threads) | " \
           f"{args.device} / cpu0 |"
    if peer:
        head += " cuFFT via torch, whole | gpusrv / it | cuFFT alone |"
    print(head)
    print("|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if peer else ""))
    for n, batch in SIZES:
        path = os.path.join(d, f"dft{n}.onnx")
        if not runs_on(args.build, path, n, args.device, d):
            print(f"| {n} | {batch} | not on {args.device} (see gpusrv model run --report) | | |")
            continue
        dev = gflops(n, batch, gpusrv(args.build, path, batch, cores, args.seconds, args.device))
        cpu = gflops(n, batch, gpusrv(args.build, path, batch, cores, args.seconds))
        line = f"| {n} | {batch} | {dev:.2f} | {cpu:.2f} | {dev / cpu:.2f}x |"
        if peer:
            whole, alone = (gflops(n, batch, t) for t in torch_fft(n, batch, args.seconds, peer))
            line += f" {whole:.2f} | {dev / whole:.2f}x | {alone:.2f} |"
        print(line)


if __name__ == "__main__":
    main()
