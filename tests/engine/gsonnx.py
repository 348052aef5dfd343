"""Helpers for the engine tests: build small ONNX models with the onnx
package, run them through `gpusrv model run` and through onnxruntime, and
compare the outputs with per-type tolerances."""
import os
import subprocess
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

GPUSRV = os.environ.get("GPUSRV_BIN", "build/gpusrv")
# ctest runs these tests once per backend: GSTEST_DEVICE names the device.
DEVICE = os.environ.get("GSTEST_DEVICE")
# Devices whose backend has kernels for the engine's ops (op_kernels.h): an
# op case there must run on the device, not through the plan's CPU fallback,
# unless the test says it falls back.
KERNEL_DEVICES = ("opencl0", "cuda0")

NP_TO_ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int16): TensorProto.INT16,
    np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.uint16): TensorProto.UINT16,
    np.dtype(np.uint32): TensorProto.UINT32, np.dtype(np.uint64): TensorProto.UINT64,
}

# (rtol, atol) per output type: float32 is held to 1e-4 as the issue asks.
TOLERANCE = {
    np.dtype(np.float32): (1e-4, 1e-5), np.dtype(np.float64): (1e-9, 1e-12),
    np.dtype(np.float16): (1e-2, 1e-3),
}


def make_model(nodes, inputs, consts=None, outputs=None, opset=17):
    """inputs: name -> array (graph inputs); consts: name -> array
    (initializers); outputs: list of (name, numpy dtype) or names (float32)."""
    consts = consts or {}
    outputs = outputs or [("y", np.float32)]
    g_inputs = [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype], list(a.shape))
                for n, a in inputs.items()]
    g_outputs = []
    for o in outputs:
        name, dt = (o, np.float32) if isinstance(o, str) else o
        g_outputs.append(helper.make_tensor_value_info(name, NP_TO_ONNX[np.dtype(dt)], None))
    inits = [numpy_helper.from_array(a, n) for n, a in consts.items()]
    graph = helper.make_graph(nodes, "test", g_inputs, g_outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def run_gpusrv(model_path, feeds, workdir, extra=(), env=None):
    """`gpusrv model run` on feeds; env: variables added to this process's."""
    args = [GPUSRV, "model", "run", model_path, "-o", os.path.join(workdir, "out")]
    for name, arr in feeds.items():
        path = os.path.join(workdir, f"in_{len(args)}.npy")
        np.save(path, arr)
        args += ["-i", f"{name}={path}"]
    if DEVICE:
        args += ["--device", DEVICE]
    p = subprocess.run(args + list(extra), capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})})
    return p


def refusal(model, feeds):
    """gpusrv's message when it refuses to run `model` on `feeds` (exit 1)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.onnx")
        onnx.save(model, path)
        p = run_gpusrv(path, feeds, d)
    assert p.returncode == 1, (p.returncode, p.stderr)
    return p.stderr


def load_outputs(workdir, names):
    out = {}
    for n in names:
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in n)
        out[n] = np.load(os.path.join(workdir, "out", safe + ".npy"))
    return out


def cpu_fallback_ops(stdout):
    """The ops `gpusrv model run --report` says ran on the CPU instead."""
    for line in stdout.splitlines():
        if "run on the CPU instead" in line:
            return {op.strip() for op in line.rsplit(":", 1)[1].split(",")}
    return set()


def check_model(model, feeds, rtol=None, atol=None, on_device=None, extra=(),
                with_report=False):
    """Runs model through gpusrv and onnxruntime; asserts the outputs agree.
    on_device: ops that must not fall back to the CPU on a kernel device;
    extra: more arguments for `gpusrv model run`. Returns gpusrv's outputs,
    and with_report, also what `--report` printed."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        onnx.save(model, path)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        want = dict(zip(names, sess.run(None, feeds)))
        p = run_gpusrv(path, feeds, d, extra=("--report", *extra))
        assert p.returncode == 0, f"gpusrv failed: {p.stderr}"
        if DEVICE in KERNEL_DEVICES and on_device:
            fell_back = cpu_fallback_ops(p.stdout) & set(on_device)
            assert not fell_back, f"ran on the CPU instead of {DEVICE}: {sorted(fell_back)}"
        got = load_outputs(d, names)
    for n in names:
        w, g = want[n], got[n]
        assert g.dtype == w.dtype, f"{n}: dtype {g.dtype}, expected {w.dtype}"
        assert g.shape == w.shape, f"{n}: shape {g.shape}, expected {w.shape}"
        if w.dtype in TOLERANCE:
            rt, at = TOLERANCE[w.dtype]
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                       rtol=rtol or rt, atol=atol if atol is not None else at,
                                       err_msg=n)
        else:
            np.testing.assert_array_equal(g, w, err_msg=n)
    return (got, p.stdout) if with_report else got


def check_op(op, inputs, attrs=None, consts=None, outputs=None, opset=17, input_names=None,
             on_device=True, **tol):
    """One node of `op` over graph inputs `inputs` and initializers `consts`
    (in that order unless input_names gives it; "" omits an optional one).
    On a kernel device the op must run there unless on_device is False (a
    case its kernel does not cover, said so by the test)."""
    consts = consts or {}
    names = input_names or (list(inputs) + list(consts))
    outputs = outputs or [("y", next(iter(inputs.values())).dtype if inputs else np.float32)]
    out_names = [o if isinstance(o, str) else o[0] for o in outputs]
    node = helper.make_node(op, names, out_names, **(attrs or {}))
    return check_model(make_model([node], inputs, consts, outputs, opset), inputs,
                       on_device=[op] if on_device else None, **tol)
