"""The signal ops: DFT and STFT against numpy.fft on sizes that include
primes and large powers of two, in float32 and float64, forward and inverse,
real and complex, onesided, cut and zero-padded, along any axis (opsets 17
and 20); MelWeightMatrix against the ONNX reference; and the refusals.
Under GSTEST_DEVICE=opencl0 the same cases run through VkFFT on the device.
onnxruntime checks the same ops in test_ops.py's way where it has them."""
import os
import tempfile

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from gsonnx import (DEVICE, KERNEL_DEVICES, check_op, cpu_fallback_ops, load_outputs, make_model,
                    refusal, run_gpusrv)

rng = np.random.default_rng(2026)


def run(model, feeds, cpu_on_opencl=False):
    """gpusrv's outputs of `model` on `feeds`, by output name. cpu_on_opencl:
    the transforms are over 512 KiB, which OpenCL's CPU devices (PoCL, as
    opencl0 is here) leave to the CPU (opencl_internal.h)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        onnx.save(model, path)
        p = run_gpusrv(path, feeds, d, extra=("--report",))
        assert p.returncode == 0, p.stderr
        # Both kernel backends have an FFT library (VkFFT on OpenCL, cuFFT
        # on CUDA): there DFT and STFT must not fall back to the CPU.
        if DEVICE in KERNEL_DEVICES and not (cpu_on_opencl and DEVICE == "opencl0"):
            fell_back = cpu_fallback_ops(p.stdout) & {"DFT", "STFT"}
            assert not fell_back, f"{fell_back} ran on the CPU on {DEVICE}: {p.stdout}"
        return load_outputs(d, [o.name for o in model.graph.output])


def as_pairs(z, dtype):
    """A complex array as ONNX's trailing (real, imaginary) axis."""
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


def close(got, want, dtype):
    """Within FFT rounding, relative to the largest value (elementwise
    relative error means nothing near zeros of a spectrum)."""
    scale = max(1.0, float(np.abs(want).max()))
    bound = 2e-5 if dtype == np.float32 else 1e-12
    err = float(np.abs(got.astype(np.float64) - want).max()) / scale
    assert err <= bound, f"largest error {err:.3g} of the largest value, bound {bound:g}"


def dft_model(x, opset, axis=None, length=None, inverse=0, onesided=0):
    inputs = {"x": x}
    names = ["x", "", ""]
    consts = {}
    if length is not None:
        consts["n"] = np.array(length, np.int64)
        names[1] = "n"
    attrs = {"inverse": inverse, "onesided": onesided}
    if axis is not None:
        if opset >= 20:
            consts["axis"] = np.array(axis, np.int64)
            names[2] = "axis"
        else:
            attrs["axis"] = axis
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node("DFT", names, ["y"], **attrs)
    return make_model([node], inputs, consts, [("y", x.dtype)], opset=opset)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 2, 7, 97, 1009, 4096, 65536])
def test_dft_matches_numpy(dtype, n):
    batch = 2 if n <= 4096 else 1
    x = rng.standard_normal((batch, n, 1)).astype(dtype)
    want = np.fft.fft(x[..., 0].astype(np.float64), axis=1)
    big = n * 2 * np.dtype(dtype).itemsize > 512 << 10  # 65536 float64 points: 1 MiB
    close(run(dft_model(x, 17), {"x": x}, cpu_on_opencl=big)["y"], as_pairs(want, np.float64),
          dtype)


def test_a_length_that_bluestein_pads_past_the_device_limit_runs_on_the_cpu():
    """VkFFT runs a length that is not a power of two by Bluestein's
    algorithm, over a power of two of at least 2n - 1 points. 40,000 float32
    points take 320 KB, but their transform 131,072 points, 1 MiB: over what
    OpenCL's CPU devices take (opencl_internal.h), so on opencl0 the DFT runs
    on the CPU instead. The values are numpy's either way."""
    x = rng.standard_normal((1, 40000, 1)).astype(np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        onnx.save(dft_model(x, 17), path)
        p = run_gpusrv(path, {"x": x}, d, extra=("--report",))
        assert p.returncode == 0, p.stderr
        got = load_outputs(d, ["y"])["y"]
    if DEVICE == "opencl0":
        assert "DFT" in cpu_fallback_ops(p.stdout), p.stdout
    close(got, as_pairs(np.fft.fft(x[..., 0].astype(np.float64), axis=1), np.float64),
          np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [5, 64, 257])
def test_inverse_dft_of_complex_input(dtype, n):
    z = rng.standard_normal((3, n)) + 1j * rng.standard_normal((3, n))
    x = as_pairs(z, dtype)
    got = run(dft_model(x, 20, inverse=1), {"x": x})["y"]
    close(got, as_pairs(np.fft.ifft(z, axis=1), np.float64), dtype)


@pytest.mark.parametrize("opset", [17, 20])
def test_onesided_cut_padded_and_axes(opset):
    x = rng.standard_normal((2, 6, 10, 1)).astype(np.float32)
    real = x[..., 0].astype(np.float64)
    cases = [  # (axis, length, onesided, numpy's answer)
        (1, None, 1, np.fft.fft(real, axis=1)[:, :4]),
        (2, 16, 0, np.fft.fft(real, n=16, axis=2)),        # zero-padded
        (-2, 7, 1, np.fft.fft(real, n=7, axis=2)[:, :, :4]),  # cut, onesided
        (0, None, 0, np.fft.fft(real, axis=0)),
    ]
    for axis, length, onesided, want in cases:
        got = run(dft_model(x, opset, axis=axis, length=length, onesided=onesided), {"x": x})["y"]
        close(got, as_pairs(want, np.float64), np.float32)


def test_many_sizes_in_one_model():
    # Ten sizes, more than a device keeps plans for, then the first again:
    # on opencl0 its plan was replaced, and the scratch buffer it first ran
    # on has grown into another since.
    sizes = [8, 12, 16, 20, 24, 30, 32, 36, 40, 4096, 8]
    inputs, nodes, outputs = {}, [], []
    for i, n in enumerate(sizes):
        inputs[f"x{i}"] = rng.standard_normal((2, n, 1)).astype(np.float32)
        nodes.append(helper.make_node("DFT", [f"x{i}"], [f"y{i}"], axis=1))
        outputs.append((f"y{i}", np.float32))
    got = run(make_model(nodes, inputs, {}, outputs, opset=17), inputs)
    for i in range(len(sizes)):
        want = np.fft.fft(inputs[f"x{i}"][..., 0].astype(np.float64), axis=1)
        close(got[f"y{i}"], as_pairs(want, np.float64), np.float32)


def test_default_axis_differs_between_opsets():
    # Opset 17's default axis is 1, opset 20's is -2: the same rank-4 input
    # is transformed along different dims.
    x = rng.standard_normal((2, 3, 5, 1)).astype(np.float32)
    real = x[..., 0].astype(np.float64)
    close(run(dft_model(x, 17), {"x": x})["y"], as_pairs(np.fft.fft(real, axis=1), np.float64),
          np.float32)
    close(run(dft_model(x, 20), {"x": x})["y"], as_pairs(np.fft.fft(real, axis=2), np.float64),
          np.float32)


def test_dft_against_onnxruntime():
    # atol: onnxruntime's float32 DFT leaves some 3e-5 where the exact value is 0
    x = rng.standard_normal((2, 12, 2)).astype(np.float32)
    check_op("DFT", {"x": x}, {"onesided": 0, "inverse": 1}, opset=17, on_device=False, atol=1e-4)
    x = rng.standard_normal((3, 20, 1)).astype(np.float32)
    check_op("DFT", {"x": x}, {"onesided": 1}, opset=17, on_device=False, atol=1e-4)


def stft_numpy(signal, step, window, length, onesided):
    frames = 1 + (signal.shape[1] - length) // step
    out = []
    for f in range(frames):
        seg = np.zeros((signal.shape[0], len(window)), complex)
        piece = signal[:, f * step:f * step + len(window)]
        seg[:, :piece.shape[1]] = piece
        spec = np.fft.fft(seg * window, n=length, axis=1)
        out.append(spec[:, :length // 2 + 1] if onesided else spec)
    return np.stack(out, axis=1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("length,step,onesided,with_window", [
    (16, 4, 1, True), (31, 7, 0, True), (64, 64, 1, False), (512, 128, 1, True)])
def test_stft_matches_numpy(dtype, length, step, onesided, with_window):
    signal = rng.standard_normal((2, 2048)).astype(dtype)
    window = (np.hanning(length + 1)[:-1] if with_window else np.ones(length)).astype(dtype)
    consts = {"step": np.array(step, np.int64), "len": np.array(length, np.int64)}
    names = ["x", "step", "w" if with_window else "", "len"]
    inputs = {"x": signal[..., None]}
    if with_window:
        consts["w"] = window
    node = helper.make_node("STFT", names, ["y"], onesided=onesided)
    m = make_model([node], inputs, consts, [("y", dtype)], opset=17)
    got = run(m, inputs)["y"]
    want = stft_numpy(signal.astype(np.float64), step, window.astype(np.float64), length, onesided)
    close(got, as_pairs(want, np.float64), dtype)


def test_stft_of_a_complex_signal():
    z = rng.standard_normal((2, 300)) + 1j * rng.standard_normal((2, 300))
    window = np.hamming(40)
    x = as_pairs(z, np.float32)
    node = helper.make_node("STFT", ["x", "step", "w"], ["y"], onesided=0)
    m = make_model([node], {"x": x}, {"step": np.array(13, np.int64),
                                      "w": window.astype(np.float32)}, [("y", np.float32)], opset=17)
    got = run(m, {"x": x})["y"]
    close(got, as_pairs(stft_numpy(z, 13, window, 40, 0), np.float64), np.float32)


def test_stft_against_onnxruntime():
    signal = rng.standard_normal((1, 128, 1)).astype(np.float32)
    check_op("STFT", {"x": signal}, {"onesided": 1},
             consts={"step": np.array(8, np.int64), "w": np.hamming(32).astype(np.float32)},
             opset=17, on_device=False, atol=1e-4)


@pytest.mark.parametrize("bins,length,rate,lo,hi", [
    (8, 16, 8192, 0.0, 4096.0), (40, 512, 16000, 20.0, 8000.0), (3, 1024, 44100, 100.0, 12000.0)])
def test_mel_weight_matrix_as_the_reference(bins, length, rate, lo, hi):
    names = ["bins", "len", "rate", "lo", "hi"]
    values = [np.array(bins, np.int64), np.array(length, np.int64), np.array(rate, np.int64),
              np.array(lo, np.float32), np.array(hi, np.float32)]
    node = helper.make_node("MelWeightMatrix", names, ["y"])
    m = make_model([node], {}, dict(zip(names, values)), [("y", np.float32)], opset=17)
    want = ReferenceEvaluator(m).run(None, {})[0]
    np.testing.assert_allclose(run(m, {})["y"], want, rtol=1e-6, atol=1e-7)


def test_refusals():
    x = np.zeros((2, 8, 3), np.float32)
    assert "end in a dimension of 1 (real) or 2" in refusal(dft_model(x, 17), {"x": x})
    x = np.zeros((2, 8, 1), np.float32)
    assert "axis 2 is out of range" in refusal(dft_model(x, 20, axis=2), {"x": x})
    assert "dft_length 0 is out of range" in refusal(dft_model(x, 17, length=0), {"x": x})
    x2 = np.zeros((2, 8, 2), np.float32)
    assert "onesided=1 is for the forward transform of a real signal" in refusal(
        dft_model(x2, 17, onesided=1), {"x": x2})
    x16 = x.astype(np.float16)
    assert "float16" in refusal(dft_model(x16, 17), {"x": x16})
    node = helper.make_node("STFT", ["x", "step", "", "len"], ["y"])
    m = make_model([node], {"x": x}, {"step": np.array(2, np.int64), "len": np.array(9, np.int64)},
                   opset=17)
    assert "no longer than the signal" in refusal(m, {"x": x})
    node = helper.make_node("STFT", ["x", "step", "w", "len"], ["y"])
    m = make_model([node], {"x": x}, {"step": np.array(2, np.int64), "w": np.ones(4, np.float32),
                                      "len": np.array(6, np.int64)}, opset=17)
    assert "the window has 4 values and frame_length is 6" in refusal(m, {"x": x})
    names = ["bins", "len", "rate", "lo", "hi"]
    values = [np.array(8, np.int64), np.array(16, np.int64), np.array(8000, np.int64),
              np.array(0, np.float32), np.array(16000, np.float32)]
    node = helper.make_node("MelWeightMatrix", names, ["y"])
    m = make_model([node], {}, dict(zip(names, values)), [("y", np.float32)], opset=17)
    assert "past the 9 bins" in refusal(m, {})
