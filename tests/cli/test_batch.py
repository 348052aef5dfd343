"""`gpusrv batch`: outputs equal `gpusrv model run`'s for .npy, directories
of .npy and CSV data sets, preprocessing, the stage summary, and malformed
data sets refused naming the file and the position."""
import json
import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSRV = os.environ.get("GPUSRV_BIN", os.path.join(ROOT, "build", "gpusrv"))
DIGITS = os.path.join(ROOT, "models", "digits")
MODEL = os.path.join(DIGITS, "1", "model.onnx")


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
    np.testing.assert_array_equal(out, ref)  # same plan, same rows: bit for bit
    # The summary: every stage, a bottleneck, and exchange not applicable.
    for stage in ("ingest", "preprocess", "h2d", "compute", "d2h", "write"):
        assert stage in p.stdout
    assert "bottleneck" in p.stdout and "exchange: n/a" in p.stdout
    assert "1000 rows in 16 batches" in p.stdout
    assert p.stderr == ""  # no progress bar when stderr is not a terminal


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
    np.testing.assert_array_equal(np.load(d / "o2" / "probs.npy"), ref)
    header = ",".join(f"c{i}" for i in range(64))
    np.savetxt(d / "x.csv", x, delimiter=",", header=header, comments="", fmt="%.9g")
    run("batch", MODEL, "-i", str(d / "x.csv"), "-o", str(d / "o3"), "-b", "128")
    np.testing.assert_allclose(np.load(d / "o3" / "probs.npy"), ref, rtol=1e-6, atol=1e-7)
    # uint8 pixels converted to float32 on the way.
    x8 = np.round(x).astype(np.uint8)
    np.save(d / "x8.npy", x8)
    np.save(d / "x8f.npy", x8.astype(np.float32))
    run("model", "run", MODEL, "-i", f"pixels={d / 'x8f.npy'}", "-o", str(d / "r8"))
    run("batch", MODEL, "-i", str(d / "x8.npy"), "-o", str(d / "o4"))
    np.testing.assert_array_equal(np.load(d / "o4" / "probs.npy"), np.load(d / "r8" / "probs.npy"))


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
    (lambda d: (d / "bad.txt").write_text("1"), "a data set is a .npy file"),
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
    assert b["exchange"] == "n/a (no other device of this backend)"
    for name in ("synthetic_pipeline", "digits_pipeline"):
        assert 0 < b[name]["fraction"] < 1.5 and b[name]["slowest"], b[name]
    assert set(b["digits_pipeline"]["rows_per_s_alone"]) == {"ingest", "preprocess", "h2d",
                                                            "compute", "d2h", "write"}
    assert b["digits_pipeline"]["rows"] == 262144
    assert list(tmp_path.iterdir()) == []  # its temporary files are gone
    assert run("bench", "--size", "1", check=False).returncode == 2
