"""The C client library against a real daemon: client_check.c walks every
family of calls, then the two examples (examples/infer.c, examples/submit.c)
run as a user would run them."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "api"))
from test_serve import ROOT, start  # noqa: E402

CHECK = os.environ.get("GPUSRV_CLIENT_CHECK", os.path.join(ROOT, "build", "tests", "client_check"))
EXAMPLES = os.environ.get("GPUSRV_EXAMPLES", os.path.join(ROOT, "build", "examples"))
DIGITS = os.path.join(ROOT, "models", "digits")
ZERO = [0, 0, 5, 13, 9, 1, 0, 0, 0, 0, 13, 15, 10, 15, 5, 0, 0, 3, 15, 2, 0, 11, 8, 0,
        0, 4, 12, 0, 0, 8, 8, 0, 0, 5, 8, 0, 0, 9, 8, 0, 0, 4, 11, 0, 1, 12, 7, 0,
        0, 2, 14, 5, 10, 12, 0, 0, 0, 0, 6, 13, 10, 0, 0, 0]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    repo = tmp_path_factory.mktemp("models")
    shutil.copytree(DIGITS, repo / "digits")
    # Jobs run as another user (nobody), who must reach their work
    # directories: the state lives where others can traverse (pytest's own
    # directories are 0700), outside the repository.
    state = tempfile.mkdtemp(prefix="gpusrv-client-state-")
    os.chmod(state, 0o711)
    proc, port = start(repo, "--state-dir", state)
    try:
        with open(os.path.join(state, "admin.token")) as f:
            yield f"http://127.0.0.1:{port}", f.read().strip()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        shutil.rmtree(state, ignore_errors=True)


def reference(pixels):
    sess = ort.InferenceSession(os.path.join(DIGITS, "1", "model.onnx"),
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {"pixels": np.array([pixels], dtype=np.float32)})[0][0]


def test_every_call(daemon):
    url, token = daemon
    p = subprocess.run([CHECK, url, token], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    for part in ("unreachable", "health_and_models", "inference", "threads_share_a_client",
                 "jobs", "tenants_and_the_rest"):
        assert f"ok {part}" in p.stdout, p.stdout + p.stderr


def probabilities(stdout):
    return np.array([float(line.split()[1]) for line in stdout.splitlines()[:10]])


def test_infer_example(daemon):
    url, _ = daemon
    infer = os.path.join(EXAMPLES, "infer")
    p = subprocess.run([infer, url], capture_output=True, text=True, input="", timeout=60)
    assert p.returncode == 0, p.stderr
    want = reference(ZERO)
    np.testing.assert_allclose(probabilities(p.stdout), want, rtol=1e-4, atol=1e-6)
    assert re.search(r"^digit 0 \(output probs, FP32 \[1, 10\]\)$", p.stdout, re.M), p.stdout
    pixels = [(i * 7) % 17 for i in range(64)]
    p = subprocess.run([infer, url, "digits"], capture_output=True, text=True, timeout=60,
                       input=" ".join(map(str, pixels)))
    assert p.returncode == 0, p.stderr
    np.testing.assert_allclose(probabilities(p.stdout), reference(pixels), rtol=1e-4, atol=1e-6)
    p = subprocess.run([infer, url, "nope"], capture_output=True, text=True, input="", timeout=60)
    assert p.returncode == 1 and "unknown model 'nope'" in p.stderr


def test_submit_example(daemon):
    url, token = daemon
    submit = os.path.join(EXAMPLES, "submit")
    env = {**os.environ, "GPUSRV_TOKEN": token}
    p = subprocess.run([submit, "--url", url, "--", "sh", "-c", "echo one; sleep 0.3; echo two; exit 5"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 5, p.stderr
    assert p.stdout == "one\ntwo\n"
    assert re.search(r"job \d+ FAILED, exit code 5", p.stderr), p.stderr
    # A token file named but unreadable is an error, never a fall back to another token.
    env.pop("GPUSRV_TOKEN")
    env["GPUSRV_TOKEN_FILE"] = "/nonexistent"
    p = subprocess.run([submit, "--url", url, "--", "true"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 1 and "cannot read a token from GPUSRV_TOKEN_FILE" in p.stderr, p.stderr
    # With a wrong token the daemon refuses, and the example says why.
    env.pop("GPUSRV_TOKEN_FILE")
    env["GPUSRV_TOKEN"] = "gs_1_00"
    p = subprocess.run([submit, "--url", url, "--", "true"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 1 and "401" in p.stderr, p.stderr
