"""`make install` staged into a temporary root (DESTDIR): the files land where
they should, the examples build against the installed header and library
through pkg-config, and a daemon started from the installed binary (with the
installed config file) finds its plugins and job supervisor relative to
itself and serves them."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "api"))
from test_serve import ROOT, free_port, request  # noqa: E402

BUILD = os.environ.get("GPUSRV_BUILD_DIR", os.path.join(ROOT, "build"))
PREFIX = "/usr/local"


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    dest = tmp_path_factory.mktemp("root")
    p = subprocess.run(["cmake", "--install", BUILD, "--prefix", PREFIX], capture_output=True,
                       text=True, env={**os.environ, "DESTDIR": str(dest)})
    assert p.returncode == 0, p.stdout + p.stderr
    return dest


def test_files_land_in_place(staged):
    root = f"{staged}{PREFIX}"
    for path in ("bin/gpusrv", "lib/gpusrv/gpusrv-engine", "lib/gpusrv/gpusrv-job-shim",
                 "include/gpusrv/client.h",
                 "include/gpusrv/errors.h", "lib/pkgconfig/gpusrv-client.pc",
                 "lib/systemd/system/gpusrv.service", "share/doc/gpusrv/examples/infer.c"):
        assert os.path.exists(os.path.join(root, path)), path
    assert os.path.islink(f"{root}/lib/libgpusrv-client.so")
    assert os.access(f"{root}/bin/gpusrv", os.X_OK)
    unit = open(f"{root}/lib/systemd/system/gpusrv.service").read()
    assert f"ExecStart={PREFIX}/bin/gpusrv serve --config /etc/gpusrv/gpusrv.conf" in unit
    assert "StateDirectory=gpusrv" in unit
    config = json.load(open(f"{staged}/etc/gpusrv/gpusrv.conf"))
    assert config["state-dir"] == "/var/lib/gpusrv"


def build_example(staged, name, out_dir):
    env = {**os.environ, "PKG_CONFIG_PATH": f"{staged}{PREFIX}/lib/pkgconfig",
           "PKG_CONFIG_SYSROOT_DIR": str(staged)}
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "gpusrv-client"],
                           capture_output=True, text=True, env=env)
    assert flags.returncode == 0, flags.stderr
    assert f"-I{staged}{PREFIX}/include" in flags.stdout
    exe = os.path.join(out_dir, name)
    src = f"{staged}{PREFIX}/share/doc/gpusrv/examples/{name}.c"
    p = subprocess.run(["cc", "-Wall", "-Werror", src, "-o", exe, *flags.stdout.split()],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return exe


def test_installed_daemon_and_examples(staged, tmp_path):
    root = f"{staged}{PREFIX}"
    infer = build_example(staged, "infer", tmp_path)
    submit = build_example(staged, "submit", tmp_path)
    repo = tmp_path / "models"
    repo.mkdir()
    shutil.copytree(os.path.join(ROOT, "models", "digits"), repo / "digits")
    state = tempfile.mkdtemp(prefix="gpusrv-install-state-")
    os.chmod(state, 0o711)  # jobs run as another user, who must reach their directories
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "GPUSRV_PLUGIN_PATH"}
    log = open(tmp_path / "serve.log", "w+")
    # The installed config, with what this test must change on top (flags win).
    proc = subprocess.Popen([f"{root}/bin/gpusrv", "serve", "--config",
                             f"{staged}/etc/gpusrv/gpusrv.conf", "--http-port", str(port), "--grpc-port", "0",
                             "--model-repository", str(repo), "--state-dir", state],
                            stdout=log, stderr=log, env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if request(port, "GET", "/v2/health/ready")[0] == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"the installed gpusrv exited: {log.read()}")
            subprocess.run(["sleep", "0.1"])
        lib_env = {**env, "LD_LIBRARY_PATH": f"{root}/lib"}
        p = subprocess.run([infer, url], capture_output=True, text=True, input="", env=lib_env,
                           timeout=60)
        assert p.returncode == 0 and "digit 0" in p.stdout, p.stdout + p.stderr
        # A job: the installed daemon finds its supervisor in ../lib/gpusrv.
        token = open(os.path.join(state, "admin.token")).read().strip()
        p = subprocess.run([submit, "--url", url, "--", "sh", "-c", "echo installed; exit 3"],
                           capture_output=True, text=True, timeout=120,
                           env={**lib_env, "GPUSRV_TOKEN": token})
        assert p.returncode == 3 and p.stdout == "installed\n", p.stdout + p.stderr
        # Plugins relative to the installed binary: it sees what the build tree sees.
        def devices(exe):
            out = subprocess.run([exe, "smi", "--json"], capture_output=True, text=True, env=env)
            assert out.returncode == 0, out.stderr
            return sorted(d["id"] for d in json.loads(out.stdout)["devices"])
        assert devices(f"{root}/bin/gpusrv") == devices(os.path.join(BUILD, "gpusrv"))
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        shutil.rmtree(state, ignore_errors=True)
