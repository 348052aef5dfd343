"""The ONNX project's backend node tests (onnx/backend/test/data/node in the
onnx wheel), run through `gpusrv model run`: each case is a one-node model
with its inputs and expected outputs as TensorProto files.

A case ends one of four ways:
  pass     every output matches the expected one (type, shape, values)
  refused  gpusrv exited 1 with an error message (an op, type or attribute
           it does not support)
  wrong    gpusrv ran but an output differs, or is missing
  crash    gpusrv died of a signal, timed out, or exited otherwise

Two sets of cases (GSTEST_NODE_SET): "1.17", those of the onnx wheel in
the test venv, and "1.20", those onnx 1.20.1 added or regenerated (at
opsets up to 25), which scripts/install-deps.sh extracts into
.venv/onnx-node-1.20.1. Each set has its own list of expected failures.

Run as a script it prints the counts, and with --ort also how many of the
cases onnxruntime's CPU provider passes, the denominator of the issue's
goal; --list prints each case's ending; --write-expected rewrites
onnx_node_expected_failures.txt from the run (review the diff)."""
import concurrent.futures
import filecmp
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
# GSTEST_NODE_DIR: the 1.17 cases from elsewhere, where the onnx installed is
# another version (bench/gpu-check.sh on a machine with its own Python).
WHEEL_NODE_DIR = os.environ.get("GSTEST_NODE_DIR") or os.path.join(
    os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
NODE_SETS = {  # name: (the cases' directory, the expected failures)
    "1.17": (WHEEL_NODE_DIR, os.path.join(HERE, "onnx_node_expected_failures.txt")),
    "1.20": (os.path.join(HERE, "..", "..", ".venv", "onnx-node-1.20.1"),
             os.path.join(HERE, "onnx_node_expected_failures_1.20.txt")),
}
NODE_SET = os.environ.get("GSTEST_NODE_SET", "1.17")
NODE_DIR, EXPECTED_FAILURES = NODE_SETS[NODE_SET]
GPUSRV = os.environ.get("GPUSRV_BIN", "build/gpusrv")
DEVICE = os.environ.get("GSTEST_DEVICE", "cpu0")


def _same_tree(a, b):
    """Whether two directories hold the same files, byte for byte."""
    d = filecmp.dircmp(a, b)
    if d.left_only or d.right_only or d.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, d.common_files, shallow=False)
    return not mismatch and not errors and all(
        _same_tree(os.path.join(a, sub), os.path.join(b, sub)) for sub in d.common_dirs)


def _is_new(name):
    """Whether a case of NODE_DIR is not the wheel's own, byte for byte (its
    model or any of its test data)."""
    old = os.path.join(WHEEL_NODE_DIR, name)
    return not os.path.isdir(old) or not _same_tree(old, os.path.join(NODE_DIR, name))


def case_names():
    """The set's cases: for a newer set, only those the wheel's set lacks or
    has in another form (the rest would run twice)."""
    names = sorted(os.path.basename(d) for d in glob.glob(os.path.join(NODE_DIR, "test_*"))
                   if os.path.isdir(d))
    return names if NODE_DIR == WHEEL_NODE_DIR else [n for n in names if _is_new(n)]


def read_expected_failures(path=EXPECTED_FAILURES):
    """name -> reason, from lines `test_name  reason` (# starts a comment)."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                name, _, reason = line.partition(" ")
                out[name] = reason.strip()
    return out


def _load_proto(path):
    """A test data file: a TensorProto, or None for a sequence or optional
    (which gpusrv does not take)."""
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        data = f.read()
    try:
        t.ParseFromString(data)
    except Exception:  # noqa: BLE001 - a SequenceProto/OptionalProto parses as garbage or fails
        return None
    if not t.name and t.data_type == 0:
        return None
    if t.data_type == onnx.TensorProto.BFLOAT16:
        # bfloat16's bits as uint16, as gpusrv reads and writes them (onnx 1.17
        # misreads the newer files' bfloat16)
        bits = (np.frombuffer(t.raw_data, "<u2") if t.raw_data else
                np.array(t.int32_data, np.uint32).astype(np.uint16))
        return bits.reshape(tuple(t.dims)).copy()
    try:
        return numpy_helper.to_array(t)
    except Exception:  # noqa: BLE001
        return None


def _tolerance(dtype):
    if dtype == np.float16:
        return 1e-2, 1e-3
    return 1e-3, 1e-5  # onnx's backend runner asks rtol 1e-3


def _compare(want, got):
    """None when got matches want, else what differs."""
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "fc":
        rt, at = _tolerance(want.dtype)
        bad = ~np.isclose(got.astype(np.float64), want.astype(np.float64), rtol=rt, atol=at,
                          equal_nan=True)
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            return f"{int(bad.sum())} values differ; at {i}: {got[i]!r}, expected {want[i]!r}"
        return None
    if want.dtype.kind in "OSU":
        same = [a == b for a, b in zip(got.astype(object).flat, want.astype(object).flat)]
        return None if all(same) else "strings differ"
    if not np.array_equal(got, want):
        i = tuple(np.argwhere(got != want)[0])
        return f"values differ; at {i}: {got[i]!r}, expected {want[i]!r}"
    return None


def _safe(name):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def _unreadable(gpusrv, case, which):
    """The ending of a case whose data this harness cannot turn into .npy (a
    sequence, an optional, or a type onnx 1.17's numpy helper lacks): gpusrv's
    own refusal of the model when it gives one, so that the list says why in
    gpusrv's words."""
    p = subprocess.run([gpusrv, "model", "inspect", os.path.join(case, "model.onnx")],
                       capture_output=True, text=True, timeout=60)
    if p.returncode == 1 and ("does not support" in p.stderr or "not supported" in p.stderr):
        return "refused", p.stderr.strip().splitlines()[-1]
    return "refused", f"{which} is a sequence or optional (not supported)"


def run_case(name, gpusrv=GPUSRV, device=DEVICE, timeout=60):
    """(ending, detail) of one case through gpusrv."""
    case = os.path.join(NODE_DIR, name)
    model = onnx.load(os.path.join(case, "model.onnx"), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    in_names = [i.name for i in model.graph.input if i.name not in inits]
    out_names = [o.name for o in model.graph.output]
    sets = sorted(glob.glob(os.path.join(case, "test_data_set_*")))
    with tempfile.TemporaryDirectory() as work:
        for s in sets:
            feeds = {}
            for k, n in enumerate(in_names):
                p = os.path.join(s, f"input_{k}.pb")
                if not os.path.exists(p):
                    continue  # an optional input left out
                arr = _load_proto(p)
                if arr is None:
                    return _unreadable(gpusrv, case, "input")
                feeds[n] = arr
            want = []
            for k in range(len(out_names)):
                arr = _load_proto(os.path.join(s, f"output_{k}.pb"))
                if arr is None:
                    return _unreadable(gpusrv, case, "output")
                want.append(arr)
            args = [gpusrv, "model", "run", os.path.join(case, "model.onnx"), "-o",
                    os.path.join(work, "out"), "--device", device]
            for k, (n, arr) in enumerate(feeds.items()):
                p = os.path.join(work, f"in{k}.npy")
                np.save(p, arr)
                args += ["-i", f"{n}={p}"]
            try:
                p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                return "crash", f"timed out after {timeout} s"
            if p.returncode == 1 and p.stderr.strip():
                return "refused", p.stderr.strip().splitlines()[-1]
            if p.returncode != 0:
                return "crash", f"exit {p.returncode}: {p.stderr.strip()[-300:]}"
            for n, w in zip(out_names, want):
                path = os.path.join(work, "out", _safe(n) + ".npy")
                if not os.path.exists(path):
                    return "wrong", f"output {n} not written"
                why = _compare(w, np.load(path, allow_pickle=False))
                if why:
                    return "wrong", f"{os.path.basename(s)} {n}: {why}"
    return "pass", ""


def run_case_ort(name):
    """Whether onnxruntime's CPU provider passes the case."""
    import onnxruntime as ort
    case = os.path.join(NODE_DIR, name)
    try:
        sess = ort.InferenceSession(os.path.join(case, "model.onnx"),
                                    providers=["CPUExecutionProvider"])
        in_names = [i.name for i in sess.get_inputs()]
        for s in sorted(glob.glob(os.path.join(case, "test_data_set_*"))):
            feeds = {}
            for k, n in enumerate(in_names):
                p = os.path.join(s, f"input_{k}.pb")
                if os.path.exists(p):
                    arr = _load_proto(p)
                    if arr is None:
                        return False
                    feeds[n] = arr
            got = sess.run(None, feeds)
            for k, g in enumerate(got):
                w = _load_proto(os.path.join(s, f"output_{k}.pb"))
                if w is None or _compare(w, np.asarray(g)):
                    return False
        return True
    except Exception:  # noqa: BLE001 - any refusal or failure of onnxruntime
        return False


def case_opset(name):
    """The default domain's opset the case's model imports (0: none)."""
    model = onnx.load(os.path.join(NODE_DIR, name, "model.onnx"), load_external_data=False)
    return max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [0])


# The goal counts the cases at these opsets.
GOAL_OPSETS = range(13, 26)


def run_all(names, workers=4, fn=run_case):
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return dict(zip(names, pool.map(fn, names)))


def refusal_reason(detail):
    """A short reason for the list, from a refusal's message."""
    import re
    msg = re.sub(r"^gpusrv: model (?:run|inspect): (/\S+: )?", "", detail)
    m = re.search(r"uses opset (\d+)", msg)
    if m:
        return f"opset {m.group(1)}: gpusrv takes opsets 13-25"
    if "unsupported op" in msg:
        ops = re.findall(r"(?:^unsupported ops?: |; )([A-Za-z0-9_.:]+) \(nodes", msg)
        return "not built: " + ", ".join(ops)
    m = re.search(r"has type (\S+) \(ONNX", msg)
    if m:
        return f"type {m.group(1)} is not supported"
    if "sequence or optional" in msg or "not a tensor" in msg:
        return "sequences and optionals are not supported"
    if "imports no opset of the default" in msg:
        return "another domain (ai.onnx.ml, ai.onnx.preview.training)"
    if "array type '|O'" in msg:
        return "string inputs to a model run (.npy of objects) are not supported"
    return re.sub(r"^node \S+ \((\w+)\): ", r"\1: ", msg)[:160]


def write_expected(res, path=EXPECTED_FAILURES):
    """Rewrites the list from a run: refusals with their reasons; wrong
    results keep the reason a person wrote (new ones must get one)."""
    old = read_expected_failures(path) if os.path.exists(path) else {}
    with open(path) as f:
        head = [line for line in f if line.startswith("#")]
    with open(path, "w") as f:
        f.writelines(head)
        for n, (ending, detail) in sorted(res.items()):
            if ending == "refused":
                f.write(f"{n} refused {refusal_reason(detail)}\n")
            elif ending == "wrong":
                kind, _, reason = old.get(n, "").partition(" ")
                if kind != "wrong":
                    reason = "UNREVIEWED: " + detail[:120]
                f.write(f"{n} wrong {reason}\n")


def main(argv):
    names = case_names()
    if len(argv) > 1 and not argv[1].startswith("--"):
        names = [n for n in names if argv[1] in n]
    if not names:
        print(f"no cases in {NODE_DIR}", file=sys.stderr)
        return 1
    res = run_all(names, workers=int(os.environ.get("GSTEST_NODE_WORKERS", "4")))
    counts = {}
    for n, (ending, detail) in res.items():
        counts[ending] = counts.get(ending, 0) + 1
        if "--list" in argv:
            print(f"{n:60s} {ending:8s} {detail}")
    print("gpusrv:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), f"of {len(res)}")
    if "--write-expected" in argv:
        write_expected(res)
    if "--ort" in argv:
        ok = run_all(names, fn=run_case_ort)
        both = [n for n in names if ok[n] and case_opset(n) in GOAL_OPSETS]
        passed = sum(1 for n in both if res[n][0] == "pass")
        print(f"opsets {GOAL_OPSETS[0]}-{GOAL_OPSETS[-1]}: onnxruntime passes {len(both)}; "
              f"gpusrv passes {passed} of those "
              f"({100.0 * passed / max(1, len(both)):.1f}%)")
        if "--missing" in argv:
            for n in both:
                if res[n][0] != "pass":
                    print(f"missing {n:60s} {res[n][0]:8s} {res[n][1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
