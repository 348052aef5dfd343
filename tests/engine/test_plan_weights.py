"""Constant weights packed when planned (src/engine/plan_weights.c, the
layout of src/hal/op/op_packed.h, the CPU's kernel sgemm_packed.c): Gemm
and MatMul with a constant B give onnxruntime's answers at every row count
the kernel treats differently (one row, tiles of six and their remainders,
several blocks of 96 rows), with panels cut short (n not a multiple of 16),
and `--report` says which products were packed. A B that another step reads
too, and the B of a product of more than 256 rows, stay as they are."""
import os
import re
import tempfile

import numpy as np
import onnx
import pytest
from onnx import helper

from gsonnx import DEVICE, check_model, load_outputs, make_model, run_gpusrv

rng = np.random.default_rng(23)
# Devices whose products take B packed (caps.packed_products): the CPU, and
# testcpu0, whose plans run every step on the CPU's kernels.
PACKS = DEVICE in (None, "cpu0", "testcpu0")
K, N = 513, 530  # 271,890 values of B: above the plan's threshold; n = 33 panels + 2


def f32(*shape):
    return rng.uniform(-1, 1, size=shape).astype(np.float32)


def run(model, feeds):
    """Checks gpusrv's outputs against onnxruntime's; returns how many
    products the plan packed."""
    _, report = check_model(model, feeds, rtol=1e-4, atol=1e-4, with_report=True)
    m = re.search(r"plan: (\d+) products read their constant weights packed", report)
    return int(m.group(1)) if m else 0


@pytest.mark.parametrize("rows", [1, 2, 5, 6, 7, 12, 13, 25, 97, 256, 257])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_with_packed_weights(rows, trans_b):
    # Up to 256 rows B is packed; above, oneDNN takes it plain. Tiles are 6 rows
    # (AVX2) or 12 (AVX-512), in blocks of 96, and 12 and 25 fill them otherwise.
    x = f32(rows, K)
    w = f32(N, K) if trans_b else f32(K, N)
    model = make_model([helper.make_node("Gemm", ["x", "w", "c"], ["p"], transB=trans_b,
                                         alpha=0.5, beta=2.0),
                        helper.make_node("Relu", ["p"], ["y"])],
                       {"x": x}, {"w": w, "c": f32(N)})
    assert run(model, {"x": x}) == (1 if PACKS and rows <= 256 else 0)


@pytest.mark.parametrize("shape", [(1, K), (4, K), (2, 3, K), (2, 100, K)])
def test_matmul_with_packed_weights(shape):
    # A of rank 3 against a 2-D B is one product of all its rows; the Add
    # of a vector joins the MatMul as its bias.
    x = f32(*shape)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["m"]),
                        helper.make_node("Add", ["m", "b"], ["y"])],
                       {"x": x}, {"w": f32(K, N), "b": f32(N)})
    assert run(model, {"x": x}) == (1 if PACKS else 0)


def test_weights_read_twice_are_not_packed():
    # The same B for two products: it stays plain (packing it would keep two copies).
    x = f32(3, K)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"]),
                        helper.make_node("Gemm", ["x", "w"], ["z"])],
                       {"x": x}, {"w": f32(K, N)}, ["y", "z"])
    assert run(model, {"x": x}) == 0


def test_small_and_transposed_a_products_stay_plain():
    # Below the threshold B is left as it is, and so is a Gemm with transA.
    x = f32(4, 8)
    small = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x},
                       {"w": f32(8, 16)})
    assert run(small, {"x": x}) == 0
    xt = f32(K, 3)
    trans_a = make_model([helper.make_node("Gemm", ["x", "w"], ["y"], transA=1)], {"x": xt},
                         {"w": f32(K, N)})
    assert run(trans_a, {"x": xt}) == 0


def test_one_row_with_an_odd_number_of_panels():
    # One row takes the panels in pairs; 33 panels leave one alone, whose
    # last has 2 of its 16 columns.
    x = f32(1, K)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x},
                       {"w": f32(K, 514)})
    assert run(model, {"x": x}) == (1 if PACKS else 0)


@pytest.mark.skipif(not PACKS, reason="B is packed on the CPU only")
@pytest.mark.parametrize("rows", [1, 7])
def test_packed_products_give_the_same_bits_on_one_and_two_threads(rows):
    # 33 panels, enough work for two threads: one thread pairs panels 0-1 ... 30-31 and
    # leaves 32 alone; two threads cut them 17 + 16, so that panel 16 runs alone on the
    # first and the second pairs from 17. The sums' order must not depend on that.
    x = f32(rows, 4096)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x},
                       {"w": f32(4096, 514)})
    bits = []
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        onnx.save(model, path)
        for threads in ("1", "2"):
            p = run_gpusrv(path, {"x": x}, d, extra=("--threads", threads, "--report"))
            assert p.returncode == 0, p.stderr
            assert "1 products read their constant weights packed" in p.stdout, p.stdout
            bits.append(load_outputs(d, ["y"])["y"].tobytes())
    assert bits[0] == bits[1]


def has_avx512():
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
    except OSError:
        return False
    return "avx512f" in flags and "avx512vl" in flags


@pytest.mark.skipif(not PACKS, reason="B is packed on the CPU only")
@pytest.mark.skipif(not has_avx512(), reason="without AVX-512 both runs take the AVX2 tiles")
@pytest.mark.parametrize("rows", [8, 24])
def test_avx2_and_avx512_tiles_give_the_same_bits(rows):
    # With AVX-512 the tiles are 12 rows by two panels, else 6 rows by one;
    # ONEDNN_MAX_CPU_ISA=AVX2 holds the kernel (and oneDNN) to the second on
    # any machine. Each value is summed over k in the same order in both
    # (the AVX2 path's lone last row, which sums even and odd k apart, is
    # left out: 8 rows are 6 + 2 there). The sanitizer build is clang's,
    # which has no AVX2 clone of the tiles: they run as plain SSE there,
    # without fused multiply-adds, and round apart from the AVX-512 ones.
    x = f32(rows, K)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x},
                       {"w": f32(K, N)})
    outs = []
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        onnx.save(model, path)
        for isa in ({}, {"ONEDNN_MAX_CPU_ISA": "AVX2"}):
            p = run_gpusrv(path, {"x": x}, d, extra=("--report",), env=isa)
            assert p.returncode == 0, p.stderr
            assert "1 products read their constant weights packed" in p.stdout, p.stdout
            outs.append(load_outputs(d, ["y"])["y"])
    if os.environ.get("GPUSRV_SANITIZED") == "1":
        np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)
    else:
        assert outs[0].tobytes() == outs[1].tobytes()
