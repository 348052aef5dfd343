"""`gpusrv batch`: outputs equal `gpusrv model run`'s for .npy, directories
of .npy and CSV data sets, preprocessing, the stage summary, and malformed
data sets refused naming the file and the position."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSRV = os.environ.get("GPUSRV_BIN", os.path.join(ROOT, "build", "gpusrv"))
DIGITS = os.path.join(ROOT, "models", "digits")
MODEL = os.path.join(DIGITS, "1", "model.onnx")


# A row's result may differ in the last bits with the number of rows it is
# computed with: OpenBLAS's sgemm handles the edge block of rows in another
# order of additions on some CPUs (seen on AMD EPYC with Debian's 0.3.21).
# Outputs of batches of other sizes than the reference's are compared within
# rounding; the same rows in batches of the same size, bit for bit.
ROUNDING = {"rtol": 1e-4, "atol": 1e-7}


def run(*args, check=True):
    p = subprocess.run([GPUSRV, *args], capture_output=True, text=True, timeout=120)
    if check:
        assert p.returncode == 0, p.stderr
    return p


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("batch")
    x = (np.random.default_rng(1).random((1000, 64), dtype=np.float32) * 16).astype(np.float32)
    np.save(d / "x.npy", x)
    run("model", "run", MODEL, "-i", f"pixels={d / 'x.npy'}", "-o", str(d / "ref"))
    return d, x, np.load(d / "ref" / "probs.npy")


def test_npy_equals_model_run_in_order(data):
    d, x, ref = data
    p = run("batch", DIGITS, "--input", str(d / "x.npy"), "--output", str(d / "o1"), "--batch",
            "64", "--slots", "3")
    out = np.load(d / "o1" / "probs.npy")
    assert out.shape == (1000, 10) and out.dtype == np.float32
    np.testing.assert_allclose(out, ref, **ROUNDING)
    # Three slots in flight or one: the same batches, bit for bit, in order.
    run("batch", DIGITS, "--input", str(d / "x.npy"), "--output", str(d / "o1s"), "--batch",
        "64", "--slots", "1")
    np.testing.assert_array_equal(out, np.load(d / "o1s" / "probs.npy"))
    # The summary: every stage, a bottleneck, and exchange not applicable.
    for stage in ("ingest", "preprocess", "h2d", "compute", "d2h", "write"):
        assert stage in p.stdout
    assert "bottleneck" in p.stdout and "exchange: n/a" in p.stdout
    assert "1000 rows in 16 batches" in p.stdout
    assert p.stderr == ""  # no progress bar when stderr is not a terminal
    # The CPU device's memory is the host's: the rows are written there in
    # place (the slots above then share nothing), and nothing is copied.
    assert "to the device: nothing copied" in p.stdout


def test_bytes_copied_to_a_device_of_its_own(data):
    d, x, ref = data
    need_devices("opencl0")
    p = run("batch", DIGITS, "--input", str(d / "x.npy"), "--output", str(d / "ocl"), "--batch",
            "64", "-d", "opencl0", "--json")
    np.testing.assert_allclose(np.load(d / "ocl" / "probs.npy"), ref, rtol=1e-4, atol=1e-5)
    assert json.loads(p.stdout)["h2d_bytes"] == 16 * 64 * 64 * 4  # whole batches, float32
    p = run("batch", DIGITS, "--input", str(d / "x.npy"), "--output", str(d / "cpu"), "--batch",
            "64", "-d", "cpu0", "--json")
    assert json.loads(p.stdout)["h2d_bytes"] == 0


def test_directory_and_csv_and_uint8(data):
    d, x, ref = data
    (d / "parts").mkdir()
    for i in range(10):  # files of several rows, and single rows, in name order
        if i == 3:
            for k in range(100):
                np.save(d / "parts" / f"p03_{k:03d}.npy", x[300 + k])
        else:
            np.save(d / "parts" / f"p{i:02d}.npy", x[i * 100:(i + 1) * 100])
    run("batch", DIGITS, "-i", str(d / "parts"), "-o", str(d / "o2"), "-b", "37")
    np.testing.assert_allclose(np.load(d / "o2" / "probs.npy"), ref, **ROUNDING)
    header = ",".join(f"c{i}" for i in range(64))
    np.savetxt(d / "x.csv", x, delimiter=",", header=header, comments="", fmt="%.9g")
    run("batch", MODEL, "-i", str(d / "x.csv"), "-o", str(d / "o3"), "-b", "128")
    np.testing.assert_allclose(np.load(d / "o3" / "probs.npy"), ref, **ROUNDING)
    # uint8 pixels converted to float32 on the way.
    x8 = np.round(x).astype(np.uint8)
    np.save(d / "x8.npy", x8)
    np.save(d / "x8f.npy", x8.astype(np.float32))
    run("model", "run", MODEL, "-i", f"pixels={d / 'x8f.npy'}", "-o", str(d / "r8"))
    run("batch", MODEL, "-i", str(d / "x8.npy"), "-o", str(d / "o4"))
    np.testing.assert_allclose(np.load(d / "o4" / "probs.npy"), np.load(d / "r8" / "probs.npy"),
                               **ROUNDING)


def test_preprocess_and_json(data):
    d, x, _ = data
    np.save(d / "scaled.npy", ((x * 2 - 1) / 0.5).astype(np.float32))
    run("model", "run", MODEL, "-i", f"pixels={d / 'scaled.npy'}", "-o", str(d / "rs"))
    p = run("batch", MODEL, "-i", str(d / "x.npy"), "-o", str(d / "o5"), "--preprocess",
            "scale=2,mean=1,std=1/2", "--json", "--workers", "3", "--readers", "1")
    np.testing.assert_allclose(np.load(d / "o5" / "probs.npy"), np.load(d / "rs" / "probs.npy"),
                               rtol=1e-5, atol=1e-6)
    summary = json.loads(p.stdout)
    assert summary["rows"] == 1000 and summary["bottleneck"] in [s["stage"] for s in summary["stages"]]
    threads = {s["stage"]: s["threads"] for s in summary["stages"]}
    assert threads["preprocess"] == 3 and threads["ingest"] == 1
    assert all(0 <= s["busy_fraction"] <= 1.05 for s in summary["stages"])


def truncated_npy(path):
    np.save(path, np.zeros((10, 64), np.float32))
    with open(path, "r+b") as f:
        f.truncate(128 + 100)  # the header, then 100 of 2,560 bytes


def huge_npy(path):
    """A header that claims 2**61 float64 rows of 64 (its byte count wraps 64 bits)."""
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952, 64), }"
    header += " " * (117 - len(header)) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode())


@pytest.mark.parametrize("make,needle", [
    (lambda d: (d / "bad.csv").write_text("1,2\n" + ",".join(["1"] * 64) + "\n"),
     "bad.csv:1: 2 values; the model's rows have 64"),
    (lambda d: (d / "bad.csv").write_text("\n".join(",".join(["1"] * 64) for _ in range(2)) +
                                          "\n" + ",".join(["1"] * 63 + ["x7"]) + "\n"),
     "bad.csv:3: value 64 ('x7') is not a number"),
    (lambda d: np.save(d / "bad.npy", np.zeros((5, 63), np.float32)),
     "bad.npy: an array of 315 elements"),
    (lambda d: truncated_npy(d / "bad.npy"),
     "bad.npy: holds 100 bytes of data"),
    (lambda d: (d / "empty").mkdir(), "holds no .npy files"),
    (lambda d: (d / "bad.csv").write_bytes((",".join(["1"] * 64) + "\n").encode() +
                                           b"1\x00," + b",".join([b"1"] * 63) + b"\n"),
     "bad.csv:2: holds a NUL byte"),
    (lambda d: huge_npy(d / "bad.npy"), "bad.npy: holds 0 bytes of data"),
    (lambda d: (d / "bad.dat").write_text("1"), "a data set is a .npy file"),
])
def test_malformed_data_sets_name_file_and_position(tmp_path, make, needle):
    make(tmp_path)
    target = next(p for p in tmp_path.iterdir())
    p = run("batch", MODEL, "-i", str(target), "-o", str(tmp_path / "out"), check=False)
    assert p.returncode == 1 and needle in p.stderr, p.stderr


def test_usage_errors(tmp_path):
    for args in (["batch"], ["batch", MODEL], ["batch", MODEL, "-i", "x.npy"],
                 ["batch", MODEL, "-i", "x", "-o", "y", "--batch", "0"],
                 ["batch", MODEL, "-i", "x", "-o", "y", "--precision", "fp8"],
                 ["batch", MODEL, "-i", "x", "-o", "y", "--preprocess", "gamma=2"],
                 ["batch", MODEL, "-i", "x", "-o", "y", "--preprocess", "std=0"]):
        assert run(*args, check=False).returncode == 2, args
    p = run("batch", str(tmp_path), "-i", "x", "-o", "y", check=False)
    assert p.returncode == 1 and "neither a .onnx file" in p.stderr
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((2, 64), np.float32))
    p = run("batch", MODEL, "-i", str(x), "-o", "y", "--url", "http://127.0.0.1:1", check=False)
    assert p.returncode == 1 and "cannot reach" in p.stderr


def test_bench_measures_every_stage(tmp_path):
    p = run("bench", "--json", "--size", "8", "--dir", str(tmp_path))
    b = json.loads(p.stdout)
    assert b["device"] == "cpu0" and b["storage_read"]["method"] in ("O_DIRECT", "page cache dropped")
    for key in ("h2d_pinned_GBps", "h2d_pageable_GBps", "d2h_pinned_GBps", "d2h_pageable_GBps",
                "gemm_gflops", "digits_rows_per_s"):
        assert b[key] > 0, key
    assert b["exchange"] == b["split_pipeline"] == "n/a (no other device of this backend)"
    for name in ("synthetic_pipeline", "digits_pipeline"):
        assert 0 < b[name]["fraction"] < 1.5 and b[name]["slowest"], b[name]
    assert set(b["digits_pipeline"]["rows_per_s_alone"]) == {"ingest", "preprocess", "h2d",
                                                            "compute", "d2h", "write"}
    assert b["digits_pipeline"]["rows"] == 262144
    assert list(tmp_path.iterdir()) == []  # its temporary files are gone
    assert run("bench", "--size", "1", check=False).returncode == 2


# ---- one model across several devices: parts, and the exchange between them ----

sys.path.insert(0, os.path.join(ROOT, "tests", "engine"))
import models  # noqa: E402  (the test models, beside the engine tests)
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def device_ids():
    return [d["id"] for d in json.loads(run("smi", "--json").stdout)["devices"]]


def need_devices(*ids):
    """testcpu0 (the test plugin: the CPU backend under another name) is
    always there when the plugin path is the test's; opencl ones where an
    OpenCL driver is, and then required (GSTEST_REQUIRE_DEVICE)."""
    have = device_ids()
    missing = [i for i in ids if i not in have]
    if missing:
        why = f"{missing} not on this machine (devices: {have})"
        if os.environ.get("GSTEST_REQUIRE_DEVICE") == "1" or "testcpu0" in missing:
            pytest.fail(why)
        pytest.skip(why)


def stage_names(stdout):
    return [s["stage"] for s in json.loads(stdout)["stages"]]


@pytest.fixture(scope="module")
def cnn_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("split")
    (d / "cnn.onnx").write_bytes(models.cnn().SerializeToString())
    np.save(d / "x.npy", models.example_input("cnn", 100))
    run("batch", str(d / "cnn.onnx"), "-i", str(d / "x.npy"), "-o", str(d / "ref"), "-b", "16",
        "-d", "cpu0")
    return d, np.load(d / "ref" / "logits.npy")


def test_split_across_two_backends_equals_one_device(data, cnn_data):
    need_devices("testcpu0")
    d, x, ref = data
    p = run("batch", DIGITS, "-i", str(d / "x.npy"), "-o", str(d / "split"), "-b", "64",
            "-d", "cpu0,testcpu0", "--json")
    # Same kernels on both, the exchange staged through host memory: bit for
    # bit against one device at the same batch size.
    run("batch", DIGITS, "-i", str(d / "x.npy"), "-o", str(d / "one"), "-b", "64", "-d", "cpu0")
    np.testing.assert_array_equal(np.load(d / "split" / "probs.npy"),
                                  np.load(d / "one" / "probs.npy"))
    assert stage_names(p.stdout) == ["ingest", "preprocess", "h2d", "compute@cpu0",
                                     "exchange>testcpu0", "compute@testcpu0", "d2h", "write"]
    assert "2 parts" in json.loads(p.stdout)["exchange"]
    c, cref = cnn_data
    run("batch", str(c / "cnn.onnx"), "-i", str(c / "x.npy"), "-o", str(c / "split"), "-b", "16",
        "-d", "testcpu0,cpu0")
    # A cut can part nodes that one plan fuses (rounding moves a little).
    np.testing.assert_allclose(np.load(c / "split" / "logits.npy"), cref, rtol=1e-5, atol=1e-5)


def test_split_on_opencl_devices(cnn_data):
    need_devices("opencl0", "opencl1")
    c, cref = cnn_data
    for devices in ("opencl0,opencl1", "cpu0,opencl0,opencl1"):
        out = c / devices.replace(",", "_")
        p = run("batch", str(c / "cnn.onnx"), "-i", str(c / "x.npy"), "-o", str(out), "-b",
                "16", "-d", devices, "--json")
        ids = devices.split(",")
        assert [s for s in stage_names(p.stdout) if "@" in s or ">" in s] == \
            [f"compute@{ids[0]}"] + sum(([f"exchange>{i}", f"compute@{i}"] for i in ids[1:]), [])
        np.testing.assert_allclose(np.load(out / "logits.npy"), cref, rtol=1e-4, atol=1e-4)
    # float16: what crosses is float16 too, within the precision's reach.
    run("batch", str(c / "cnn.onnx"), "-i", str(c / "x.npy"), "-o", str(c / "h"), "-b", "16",
        "-d", "opencl0,opencl1", "--precision", "fp16")
    half = np.load(c / "h" / "logits.npy")
    assert np.abs(half - cref).max() < 2e-2 * np.abs(cref).max()
    # bench runs the digits model split over opencl0 and opencl1 as well.
    b = json.loads(run("bench", "--device", "opencl0", "--json", "--size", "8", "--dir",
                       str(c)).stdout)
    split = b["split_pipeline"]
    assert split["devices"] == ["opencl0", "opencl1"] and split["rows_per_s"] > 0, split
    assert 0 < split["fraction"] < 1.5 and split["exchange_rows_per_s_alone"] > 0, split
    assert split["slowest"] in ("ingest", "preprocess", "h2d", "compute@opencl0",
                                "exchange>opencl1", "compute@opencl1", "d2h", "write")


def small_model(path, nodes, width=4, inits=(), outputs=("y",)):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", width])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path.write_bytes(m.SerializeToString())


def test_split_refusals(tmp_path):
    need_devices("testcpu0")
    x = tmp_path / "x.npy"
    np.save(x, np.ones((8, 4), np.float32))
    # The input is read again by the last node: no cut where only the first part's values cross.
    small_model(tmp_path / "skip.onnx", [helper.make_node("Relu", ["x"], ["r"]),
                                         helper.make_node("Add", ["r", "x"], ["y"])])
    p = run("batch", str(tmp_path / "skip.onnx"), "-i", str(x), "-o", str(tmp_path / "o"),
            "-d", "cpu0,testcpu0", check=False)
    assert p.returncode == 1 and "cannot be split into 2 parts" in p.stderr, p.stderr
    small_model(tmp_path / "one.onnx", [helper.make_node("Relu", ["x"], ["y"])])
    p = run("batch", str(tmp_path / "one.onnx"), "-i", str(x), "-o", str(tmp_path / "o"),
            "-d", "cpu0,testcpu0", check=False)
    assert p.returncode == 1 and "1 nodes: too few for 2 parts" in p.stderr, p.stderr
    # A chain splits; the output equals one device's.
    small_model(tmp_path / "chain.onnx", [helper.make_node("Relu", ["x"], ["r"]),
                                          helper.make_node("Neg", ["r"], ["y"])])
    run("batch", str(tmp_path / "chain.onnx"), "-i", str(x), "-o", str(tmp_path / "c"),
        "-d", "cpu0,testcpu0")
    np.testing.assert_array_equal(np.load(tmp_path / "c" / "y.npy"), -np.ones((8, 4), np.float32))
    for devices, needle in (("cpu0,,testcpu0", "separated by commas"),
                            ("cpu0,nosuch9", "no device 'nosuch9'"),
                            ("cpu0,cpu0", "names cpu0 twice"),
                            (",".join(["cpu0"] * 7), "at most 6 devices")):
        p = run("batch", DIGITS, "-i", str(x), "-o", str(tmp_path / "o"), "-d", devices,
                check=False)
        assert p.returncode == 1 and needle in p.stderr, (devices, p.stderr)


def test_split_constants_and_shapes(tmp_path):
    """What a part's plan must know while planning reaches it: a Constant
    made before the cut (the loader orders Constant nodes first) is made again
    by the part that reads it; a shape the part before computes from shapes
    becomes a weight of the next part; a graph output that is a weight is the
    last part's."""
    need_devices("testcpu0")
    rng = np.random.default_rng(3)
    w1, w2 = (rng.standard_normal((4, 4)).astype(np.float32) for _ in range(2))
    x = rng.standard_normal((8, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    cases = {
        "constant": ([helper.make_node("Constant", [], ["shp"], value=numpy_helper.from_array(
                          np.array([-1, 2, 2], np.int64))),
                      helper.make_node("MatMul", ["x", "w1"], ["a"]),
                      helper.make_node("MatMul", ["a", "w2"], ["b"]),
                      helper.make_node("Reshape", ["b", "shp"], ["y"])],
                     ("y",), lambda: (x @ w1 @ w2).reshape(8, 2, 2)),
        "shape": ([helper.make_node("Shape", ["x"], ["s"]),
                   helper.make_node("MatMul", ["x", "w1"], ["a"]),
                   helper.make_node("Relu", ["a"], ["r"]),
                   helper.make_node("MatMul", ["r", "w2"], ["b"]),
                   helper.make_node("Reshape", ["b", "s"], ["y"])],
                  ("y",), lambda: np.maximum(x @ w1, 0) @ w2),
        "weight_output": ([helper.make_node("Relu", ["x"], ["r"]),
                           helper.make_node("Neg", ["r"], ["y"])],
                          ("y", "w1x"), lambda: -np.maximum(x, 0)),
    }
    for name, (nodes, outputs, want) in cases.items():
        inits = [("w1", w1), ("w2", w2)] if name != "weight_output" else [
            ("w1x", np.tile(w1, (2, 1)))]
        small_model(tmp_path / f"{name}.onnx", nodes, inits=inits, outputs=outputs)
        for devices in ("cpu0", "cpu0,testcpu0"):
            out = tmp_path / f"{name}_{devices.replace(',', '_')}"
            p = run("batch", str(tmp_path / f"{name}.onnx"), "-i", str(tmp_path / "x.npy"), "-o",
                    str(out), "-b", "8", "-d", devices, "--json")
            np.testing.assert_allclose(np.load(out / "y.npy"), want(), rtol=1e-5, atol=1e-5)
            if name == "weight_output":
                np.testing.assert_array_equal(np.load(out / "w1x.npy"), np.tile(w1, (2, 1)))
            if "," in devices:
                assert "exchange>testcpu0" in stage_names(p.stdout), (name, p.stdout)
