"""Error in ULPs of gpusrv's elementwise math against mpmath, for
tests/engine/test_ulp.py and as a tool:

    GPUSRV_BIN=build/gpusrv .venv/bin/python tests/engine/ulp.py [--device opencl0]

prints the largest error of each function, float32 and float64, over a grid
that holds ±0, subnormals, the extremes, ±inf and NaN besides a spread of
ordinary values. The reference is mpmath at 50 digits, rounded once to the
type: 0.5 ULP is the best a function can do. CumSum, Einsum and Det are
sums that can cancel: their error is counted in ULPs of the sum of the
terms' magnitudes (see SUM_OPS)."""
import math
import os
import sys
import tempfile

import mpmath
import numpy as np
import onnx
from onnx import helper

from gsonnx import load_outputs, make_model, run_gpusrv

mpmath.mp.dps = 50

# ONNX op -> (mpmath function, domain: values outside give NaN in IEEE terms)
UNARY = {
    "Sin": mpmath.sin, "Cos": mpmath.cos, "Tan": mpmath.tan,
    "Asin": mpmath.asin, "Acos": mpmath.acos, "Atan": mpmath.atan,
    "Sinh": mpmath.sinh, "Cosh": mpmath.cosh, "Asinh": mpmath.asinh,
    "Acosh": mpmath.acosh, "Atanh": mpmath.atanh,
    "Erf": mpmath.erf, "Exp": mpmath.exp, "Log": mpmath.log,
}


def grid(dtype):
    """Special values, then ordinary ones spread over many magnitudes."""
    fi = np.finfo(dtype)
    tiny_sub = np.nextafter(dtype(0), dtype(1))
    special = [0.0, -0.0, tiny_sub, -tiny_sub, fi.tiny / 2, fi.tiny, -fi.tiny, fi.max, -fi.max,
               np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, math.pi / 2, math.pi,
               np.nextafter(dtype(1), dtype(0)), np.nextafter(dtype(1), dtype(2)),
               np.nextafter(dtype(-1), dtype(0))]
    rng = np.random.default_rng(7)
    mags = 10.0 ** rng.uniform(np.log10(float(fi.tiny)), np.log10(float(fi.max)) * 0.999, 600)
    small = rng.uniform(-4, 4, 600)
    unit = rng.uniform(-1, 1, 300)
    big = rng.uniform(-100, 100, 300)
    values = np.concatenate([np.array(special, np.float64), mags, -mags, small, unit, big])
    return values.astype(dtype)


def reference(fn, x, dtype):
    """fn(x) to 50 digits, rounded to dtype; NaN outside the real domain."""
    out = np.empty(len(x), np.float64)
    for i, v in enumerate(x.astype(np.float64)):
        if math.isnan(v):
            out[i] = math.nan
            continue
        try:
            r = fn(mpmath.mpf(v) if math.isfinite(v) else (mpmath.inf if v > 0 else -mpmath.inf))
        except (ValueError, ZeroDivisionError):
            out[i] = math.nan
            continue
        if isinstance(r, mpmath.mpc):
            out[i] = math.nan if r.imag != 0 else float(r.real)
        else:
            out[i] = float(r) if not mpmath.isinf(r) else (math.inf if r > 0 else -math.inf)
    with np.errstate(over="ignore"):
        return out.astype(dtype)


def ulp_error(got, want, dtype):
    """|got - want| in units of the last place at want; 0 where both are the
    same NaN or infinity, infinite where one is NaN or infinite and the
    other is not."""
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    err = np.zeros(len(got))
    both_nan = np.isnan(got64) & np.isnan(want64)
    same_inf = np.isinf(want64) & (got64 == want64)
    bad = ~both_nan & ~same_inf & (np.isnan(got64) | np.isnan(want64) | np.isinf(got64) | np.isinf(want64))
    ok = ~both_nan & ~same_inf & ~bad
    spacing = np.abs(np.spacing(want[ok].astype(dtype))).astype(np.float64)
    err[ok] = np.abs(got64[ok] - want64[ok]) / spacing
    err[bad] = np.inf
    return err


def pow_grid(dtype):
    """Pairs (x, y): positive x over many magnitudes with fractional y, and
    negative x with whole y, plus the special cases."""
    rng = np.random.default_rng(11)
    x = np.concatenate([10.0 ** rng.uniform(-8, 8, 800), -(10.0 ** rng.uniform(-3, 3, 200)),
                        [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.0, 0.5]])
    y = np.concatenate([rng.uniform(-4, 4, 800), rng.integers(-6, 7, 200).astype(np.float64),
                        [0.5, 3.0, -1.0, 2.0, 0.5, 3.0, 1.0, 0.0, np.nan]])
    return x.astype(dtype), y.astype(dtype)


def pow_reference(x, y, dtype):
    out = np.empty(len(x), np.float64)
    for i, (a, b) in enumerate(zip(x.astype(np.float64), y.astype(np.float64))):
        if math.isnan(a) or math.isnan(b):
            out[i] = 1.0 if b == 0 or a == 1 else math.nan  # IEEE pow(x, 0) = pow(1, y) = 1
        elif math.isinf(a) or (a == 0 and b < 0):
            out[i] = math.pow(a, b) if not (a == 0 and b < 0) else math.copysign(
                math.inf, a if float(b).is_integer() and int(b) % 2 else 1.0)
        elif a < 0 and not float(b).is_integer():
            out[i] = math.nan
        else:
            r = mpmath.power(mpmath.mpf(a), mpmath.mpf(b))
            out[i] = float(r)
    with np.errstate(over="ignore"):
        return out.astype(dtype)


def run_op(op, feeds, device=None):
    """y of one node of `op` over the graph inputs `feeds` (name -> array)."""
    dtype = next(iter(feeds.values())).dtype
    return run_node(helper.make_node(op, list(feeds), ["y"]), feeds, {}, dtype, device)


OPS = list(UNARY) + ["Pow"]

# ---- sums of products ---------------------------------------------------------------------
# CumSum, Einsum and Det add terms that may cancel, so their error is set
# against what summation's rounding scales with, the sum of the terms'
# magnitudes: |got - exact| in ULPs of sum |terms| (for Det, the terms of
# the Leibniz expansion: the permanent of |A|). The exact value is mpmath's
# at 50 digits, which holds these sums of float64 products exactly.
SUM_OPS = ["CumSum", "Einsum", "Det"]


def scaled_ulps(got, exact, scale, dtype):
    """|got - exact| / spacing(scale), elementwise (the grids hold finite values only)."""
    spacing = np.abs(np.spacing(np.maximum(scale, np.finfo(dtype).tiny).astype(dtype)))
    return np.abs(got.astype(np.float64) - exact) / spacing.astype(np.float64)


def run_node(node, feeds, consts, dtype, device):
    model = make_model([node], feeds, consts, outputs=[("y", dtype)])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        onnx.save(model, path)
        p = run_gpusrv(path, feeds, d, extra=("--device", device) if device else ())
        assert p.returncode == 0, p.stderr
        return load_outputs(d, ["y"])["y"]


def magnitudes(rng, shape):
    """Values of both signs over six decades, so that sums cancel."""
    return rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 3, shape)


def measure_cumsum(dtype, device=None):
    x = magnitudes(np.random.default_rng(21), (8, 2048)).astype(dtype)
    node = helper.make_node("CumSum", ["x", "axis"], ["y"])
    got = run_node(node, {"x": x}, {"axis": np.array(1, np.int64)}, dtype, device)
    exact = np.empty(x.shape)
    for r in range(x.shape[0]):
        acc = mpmath.mpf(0)
        for j, v in enumerate(x[r].astype(np.float64)):
            acc += mpmath.mpf(v)
            exact[r, j] = float(acc)
    scale = np.cumsum(np.abs(x.astype(np.float64)), axis=1)
    return float(scaled_ulps(got, exact, scale, dtype).max())


def measure_einsum(dtype, device=None):
    rng = np.random.default_rng(22)
    a, b = magnitudes(rng, (12, 256)).astype(dtype), magnitudes(rng, (256, 10)).astype(dtype)
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik")
    got = run_node(node, {"a": a, "b": b}, {}, dtype, device)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = np.array([[float(mpmath.fsum(mpmath.mpf(u) * mpmath.mpf(v) for u, v in
                                         zip(a64[i], b64[:, k]))) for k in range(b.shape[1])]
                      for i in range(a.shape[0])])
    return float(scaled_ulps(got, exact, np.abs(a64) @ np.abs(b64), dtype).max())


def permanent(m):
    """Sum over permutations of the products of m's entries (small n only)."""
    import itertools
    n = m.shape[0]
    return sum(np.prod([m[i, p[i]] for i in range(n)]) for p in itertools.permutations(range(n)))


def measure_det(dtype, device=None):
    """Random matrices of 2 to 5 rows, and nearly singular ones (a row close
    to a combination of the others), where the determinant cancels most."""
    rng = np.random.default_rng(23)
    worst = 0.0
    for n in range(2, 6):
        mats = magnitudes(rng, (40, n, n))
        for m in mats[20:]:
            m[-1] = m[:-1].T @ rng.standard_normal(n - 1) + 1e-6 * m[-1]
        mats = mats.astype(dtype)
        got = run_node(helper.make_node("Det", ["x"], ["y"]), {"x": mats}, {}, dtype, device)
        m64 = mats.astype(np.float64)
        exact = np.array([float(mpmath.det(mpmath.matrix(m.tolist()))) for m in m64])
        scale = np.array([permanent(np.abs(m)) for m in m64])
        worst = max(worst, float(scaled_ulps(got, exact, scale, dtype).max()))
    return worst


SUM_MEASURES = {"CumSum": measure_cumsum, "Einsum": measure_einsum, "Det": measure_det}


def measure(op, dtype, device=None):
    """(largest error in ULPs from the correctly rounded result, the input
    where it is)."""
    if op == "Pow":
        x, y = pow_grid(dtype)
        got, want = run_op("Pow", {"x": x, "p": y}, device), pow_reference(x, y, dtype)
    else:
        x = grid(dtype)
        got, want = run_op(op, {"x": x}, device), reference(UNARY[op], x, dtype)
    err = ulp_error(got, want, dtype)
    k = int(np.argmax(err))
    return float(err[k]), float(x[k])


def main(argv):
    device = argv[argv.index("--device") + 1] if "--device" in argv else None
    for op in OPS:
        row = []
        for dtype in (np.float32, np.float64):
            e, at = measure(op, dtype, device)
            row.append(f"{np.dtype(dtype).name} {e:10.3g} ULP (at {at:.6g})")
        print(f"{op:6s} " + "   ".join(row))
    for op in SUM_OPS:
        row = [f"{np.dtype(t).name} {SUM_MEASURES[op](t, device):10.3g} ULP of sum |terms|"
               for t in (np.float32, np.float64)]
        print(f"{op:6s} " + "   ".join(row))


if __name__ == "__main__":
    main(sys.argv)
