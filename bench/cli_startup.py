"""bench/cli_startup: how long the `gpusrv` command takes to start and end,
and its peak memory, for `--version` and for `jobs` against a running
daemon; beside the same commands of a reference build (by default
gpusrv-engine, which links the engine and the HAL as the single `gpusrv`
of earlier versions did; or any older gpusrv given as REFERENCE), measured
in the same run, alternating, N runs each. Usage:
    python bench/cli_startup.py BUILD_DIR [N] [REFERENCE]
"""
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve import free_port  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
N = int(sys.argv[2]) if len(sys.argv) > 2 else 50
GPUSRV = os.path.join(BUILD, "gpusrv")
REFERENCE = sys.argv[3] if len(sys.argv) > 3 else os.path.join(BUILD, "gpusrv-engine")


def one(argv, env):
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=[
        (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0)])
    _, status, usage = os.wait4(pid, 0)
    took = time.perf_counter() - t0
    assert os.waitstatus_to_exitcode(status) == 0, argv
    return took * 1000, usage.ru_maxrss / 1024


def compare(name, args, env):
    runs = {GPUSRV: [], REFERENCE: []}
    for binary in runs:  # one warm-up each
        one([binary, *args], env)
    for _ in range(N):
        for binary in runs:
            runs[binary].append(one([binary, *args], env))
    ms = {b: statistics.median(r[0] for r in v) for b, v in runs.items()}
    mib = {b: statistics.median(r[1] for r in v) for b, v in runs.items()}
    print(f"{name:<18} gpusrv {ms[GPUSRV]:6.2f} ms {mib[GPUSRV]:6.1f} MiB   "
          f"reference {ms[REFERENCE]:6.2f} ms {mib[REFERENCE]:6.1f} MiB   "
          f"ratio {ms[GPUSRV] / ms[REFERENCE]:.2f} (goal <= 0.50)")


def main():
    env = dict(os.environ)
    print(f"gpusrv: {GPUSRV}; reference: {REFERENCE}; {N} runs each, alternating, medians")
    compare("--version", ["--version"], env)
    if os.path.basename(REFERENCE) == "gpusrv-engine":
        print("jobs: needs an older gpusrv as REFERENCE (gpusrv-engine hands jobs to gpusrv)")
        return
    import tempfile
    state, repo = tempfile.mkdtemp(), tempfile.mkdtemp()
    port = free_port()
    serve = subprocess.Popen([os.path.join(BUILD, "gpusrv-engine"), "serve", "--state-dir", state,
                              "--model-repository", repo, "--http-port", str(port)],
                             stderr=subprocess.DEVNULL)
    try:
        token_path = os.path.join(state, "admin.token")
        for _ in range(200):
            if os.path.exists(token_path) and os.path.getsize(token_path):
                break
            time.sleep(0.05)
        env.update(GPUSRV_URL=f"http://127.0.0.1:{port}",
                   GPUSRV_TOKEN=open(token_path).read().strip())
        time.sleep(0.5)
        compare("jobs", ["jobs"], env)
    finally:
        serve.terminate()
        serve.wait()


main()
