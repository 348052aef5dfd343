"""bench/sched: submit-to-running latency with an idle queue.

gpusrv (`gpusrv submit` and a raw HTTP POST) beside task-spooler (`ts`) doing
the same submissions in the same run: each job is `date +%s%N`, which prints
the moment it runs; the latency is that moment minus the moment just before
the submission. One job at a time, each waited for, so the queue is idle.
Slurm is measured too when a local one answers (bench/slurm-local.sh starts
one): `sbatch --wrap` with its output file. Usage:
    python bench/sched.py BUILD_DIR [N]
"""
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
N = int(sys.argv[2]) if len(sys.argv) > 2 else 50
GPUSRV = os.path.join(BUILD, "gpusrv")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def summary(name, lat_ms):
    lat_ms.sort()
    p50 = statistics.median(lat_ms)
    p90 = lat_ms[int(0.9 * (len(lat_ms) - 1))]
    print(f"{name:<28} p50 {p50:8.2f} ms   p90 {p90:8.2f} ms   (n={len(lat_ms)})")
    return p50


def bench_gpusrv():
    state = tempfile.mkdtemp(prefix="gpusrv-bench-")
    os.chmod(state, 0o711)
    repo = tempfile.mkdtemp(prefix="gpusrv-bench-models-")
    port = free_port()
    proc = subprocess.Popen([GPUSRV, "serve", "--state-dir", state, "--model-repository", repo,
                             "--http-port", str(port)], stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/v2/health/live")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.05)
        token = open(os.path.join(state, "admin.token")).read().strip()
        auth = {"Authorization": "Bearer " + token}
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

        def call(method, path, body=None):
            conn.request(method, path, body=body, headers=auth)
            r = conn.getresponse()
            return r.status, r.read()

        def finish(job_id):
            while True:
                job = json.loads(call("GET", f"/api/v1/jobs/{job_id}")[1])
                if job["state"] not in ("PENDING", "RUNNING"):
                    assert job["state"] == "COMPLETED", job
                    return int(call("GET", f"/api/v1/jobs/{job_id}/logs")[1])
                time.sleep(0.002)

        env = {**os.environ, "GPUSRV_URL": f"http://127.0.0.1:{port}", "GPUSRV_TOKEN": token}
        cli, raw = [], []
        for i in range(N + 3):  # the first few warm up
            t0 = time.time_ns()
            out = subprocess.run([GPUSRV, "submit", "--cpus", "0.1", "--", "date", "+%s%N"],
                                 capture_output=True, text=True, env=env, check=True).stdout
            ran = finish(int(out))
            if i >= 3:
                cli.append((ran - t0) / 1e6)
            body = json.dumps({"command": ["date", "+%s%N"], "cpus": 0.1})
            t0 = time.time_ns()
            status, reply = call("POST", "/api/v1/jobs", body)
            assert status == 201, reply
            ran = finish(json.loads(reply)["id"])
            if i >= 3:
                raw.append((ran - t0) / 1e6)
        return cli, raw
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(repo, ignore_errors=True)


def bench_ts():
    ts = shutil.which("tsp") or shutil.which("ts")
    if not ts:
        return None
    sock_dir = tempfile.mkdtemp(prefix="ts-bench-")
    env = {**os.environ, "TS_SOCKET": os.path.join(sock_dir, "socket"), "TMPDIR": sock_dir,
           "TS_SLOTS": "1"}
    lat = []
    try:
        for i in range(N + 3):
            t0 = time.time_ns()
            job = subprocess.run([ts, "date", "+%s%N"], capture_output=True, text=True, env=env,
                                 check=True).stdout.strip()
            subprocess.run([ts, "-w", job], env=env, check=False, capture_output=True)
            out = subprocess.run([ts, "-o", job], capture_output=True, text=True, env=env,
                                 check=True).stdout.strip()
            ran = int(open(out).read().split()[0])
            if i >= 3:
                lat.append((ran - t0) / 1e6)
    finally:
        subprocess.run([ts, "-K"], env=env, capture_output=True)
        shutil.rmtree(sock_dir, ignore_errors=True)
    return lat


def bench_slurm(n):
    if not shutil.which("sbatch") or subprocess.run(["sinfo", "-h"], capture_output=True,
                                                     timeout=10).returncode != 0:
        return None
    out_dir = tempfile.mkdtemp(prefix="slurm-bench-")
    lat = []
    try:
        for i in range(n):
            out = os.path.join(out_dir, f"out.{i}")
            t0 = time.time_ns()
            subprocess.run(["sbatch", "--parsable", "-o", out, "--wrap", "date +%s%N"],
                           capture_output=True, check=True)
            while not (os.path.exists(out) and os.path.getsize(out) > 0):
                time.sleep(0.005)
            lat.append((int(open(out).read().split()[0]) - t0) / 1e6)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    return lat


def main():
    print(f"bench/sched: submit-to-running latency, idle queue, {N} jobs each (`date +%s%N`)")
    cli, raw = bench_gpusrv()
    p50_cli = summary("gpusrv submit (CLI)", cli)
    summary("gpusrv POST /api/v1/jobs", raw)
    lat_ts = bench_ts()
    if lat_ts is None:
        print("task-spooler: not installed (apt-get install task-spooler)")
    else:
        p50_ts = summary("task-spooler (ts CLI)", lat_ts)
        print(f"gpusrv CLI / ts: {p50_cli / p50_ts:.2f}x")
    lat_slurm = bench_slurm(min(N, 10))
    if lat_slurm is None:
        print("Slurm: no local slurmctld answers (bench/slurm-local.sh starts one)")
    else:
        summary("Slurm (sbatch --wrap)", lat_slurm)
    print(f"goal: p50 <= 10 ms and ahead of the peers; gpusrv CLI p50 {p50_cli:.2f} ms")


if __name__ == "__main__":
    main()
