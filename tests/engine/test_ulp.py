"""Each elementwise math op within its documented error (docs/precision.md),
in ULPs from the correctly rounded result, against mpmath over a grid with
±0, subnormals, the extremes, ±inf and NaN (tests/engine/ulp.py)."""
import numpy as np
import pytest

import ulp
from gsonnx import DEVICE

# The bounds docs/precision.md states, per backend: (float32, float64).
CPU = {op: (1, 1) for op in ulp.OPS}
CPU.update({"Erf": (6, 1), "Sinh": (1, 2)})
# PoCL's built-ins, in the device's float32 and float64 programs.
OPENCL = {op: (1, 1) for op in ulp.OPS}
OPENCL.update({"Tan": (3, 2), "Sinh": (2, 1), "Cosh": (2, 1)})
BOUNDS = {"cpu0": CPU, "opencl0": OPENCL}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", ulp.OPS)
def test_within_the_documented_ulps(op, dtype):
    device = DEVICE or "cpu0"
    if device not in BOUNDS:
        pytest.skip(f"no bounds stated for {device} (docs/precision.md)")
    bound = BOUNDS[device][op][0 if dtype == np.float32 else 1]
    err, at = ulp.measure(op, dtype, device)
    assert err <= bound, f"{op} {np.dtype(dtype).name}: {err:.3g} ULP at {at!r}, stated {bound}"


# CumSum, Einsum and Det in ULPs of the sum of their terms' magnitudes
# (tests/engine/ulp.py's SUM_OPS), (float32, float64); the same on opencl0,
# whose CumSum compensates its sums as the CPU's does (Einsum and Det run
# on the CPU there).
SUM_BOUNDS = {"CumSum": (1, 1), "Einsum": (1, 1), "Det": (1, 4)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", ulp.SUM_OPS)
def test_sums_within_the_documented_ulps(op, dtype):
    device = DEVICE or "cpu0"
    if device not in BOUNDS:
        pytest.skip(f"no bounds stated for {device} (docs/precision.md)")
    bound = SUM_BOUNDS[op][0 if dtype == np.float32 else 1]
    err = ulp.SUM_MEASURES[op](dtype, device)
    assert err <= bound, f"{op} {np.dtype(dtype).name}: {err:.3g} ULP of sum |terms|, stated {bound}"
