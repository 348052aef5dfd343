"""bench/slurm_submit: submit-to-running of a 2-node job, through
`gpusrv submit --nodes 2` (the daemon hands it to slurmrestd) beside `sbatch
-N2` straight to slurmctld, in the same run, on the three-node test cluster
of deploy/slurm-cluster.sh (root; it is started and stopped here).

Each job is `srun date +%s%N` (gpusrv's batch script runs the command with
srun too): its first task prints the moment it ran, and the latency is that
moment minus the moment just before the submission. For gpusrv, the time
until `GET /api/v1/jobs/ID` first says RUNNING (or later) is given too: what
a user polling gpusrv sees. Jobs alternate, one at a time, each waited for.
Usage: python bench/slurm_submit.py BUILD_DIR [N]
"""
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
N = int(sys.argv[2]) if len(sys.argv) > 2 else 20
GPUSRV = os.path.abspath(os.path.join(BUILD, "gpusrv"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = os.path.join(ROOT, "deploy", "slurm-cluster.sh")
SLURM_ENV = {**os.environ, "SLURM_CONF": "/etc/gs-cluster/slurm.conf"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def summary(name, lat_ms):
    lat_ms = sorted(lat_ms)
    p50 = statistics.median(lat_ms)
    p90 = lat_ms[int(0.9 * (len(lat_ms) - 1))]
    print(f"{name:<40} p50 {p50:8.1f} ms   p90 {p90:8.1f} ms   (n={len(lat_ms)})")
    return p50


class Desk:
    def __init__(self, state):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [GPUSRV, "serve", "--state-dir", state, "--http-port", str(self.port), "--grpc-port",
             "0", "--model-repository", tempfile.mkdtemp(), "--slurm-rest-url",
             "http://127.0.0.1:6820", "--slurm-jwt-key", "/etc/gs-cluster/jwt_hs256.key",
             "--slurm-create-accounts"],  # the cluster enforces associations
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=SLURM_ENV)
        deadline = time.time() + 30
        while True:
            try:
                if self.request("GET", "/v2/health/live")[0] == 200:
                    break
            except OSError:
                assert time.time() < deadline, "gpusrv serve did not come up"
                time.sleep(0.05)
        with open(os.path.join(state, "admin.token")) as f:
            self.token = f.read().strip()

    def request(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Authorization": f"Bearer {getattr(self, 'token', '')}"}
        c.request(method, path, body=json.dumps(body) if body else None, headers=headers)
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"null")

    def one(self):
        env = {**os.environ, "GPUSRV_URL": f"http://127.0.0.1:{self.port}",
               "GPUSRV_TOKEN": self.token}
        t0 = time.time_ns()
        out = subprocess.run([GPUSRV, "submit", "--nodes", "2", "--", "date", "+%s%N"],
                             capture_output=True, text=True, env=env, check=True)
        job_id = int(out.stdout)
        seen = None
        while True:
            job = self.request("GET", f"/api/v1/jobs/{job_id}")[1]
            if seen is None and job["state"] != "PENDING":
                seen = time.time_ns()
            if job["state"] not in ("PENDING", "RUNNING"):
                break
            time.sleep(0.01)
        assert job["state"] == "COMPLETED", job
        log = subprocess.run([GPUSRV, "logs", str(job_id)], capture_output=True, text=True,
                             env=env, check=True).stdout
        ran = min(int(x) for x in log.split())
        return (ran - t0) / 1e6, (seen - t0) / 1e6

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def sbatch_one(out_dir, i):
    out = os.path.join(out_dir, f"sbatch-{i}.out")
    t0 = time.time_ns()
    p = subprocess.run(["sbatch", "--parsable", "-N2", "-o", out, "--wrap", "srun date +%s%N"],
                       capture_output=True, text=True, env=SLURM_ENV, check=True)
    job_id = p.stdout.strip().split(";")[0]
    while subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True,
                         env=SLURM_ENV).stdout.strip():
        time.sleep(0.01)
    with open(out) as f:
        ran = min(int(x) for x in f.read().split())
    return (ran - t0) / 1e6


def main():
    assert os.geteuid() == 0, "needs root (the test cluster)"
    subprocess.run([CLUSTER, "stop"], capture_output=True)
    subprocess.run([CLUSTER, "start"], check=True, capture_output=True)
    state = tempfile.mkdtemp(prefix="gpusrv-bench-")
    os.chmod(state, 0o711)
    out_dir = tempfile.mkdtemp(prefix="gs-sbatch-")
    desk = Desk(state)
    try:
        desk.one()  # not measured: the first makes the tenant's account (sacctmgr)
        gs_ran, gs_seen, sb_ran = [], [], []
        for i in range(N):
            ran, seen = desk.one()
            gs_ran.append(ran)
            gs_seen.append(seen)
            sb_ran.append(sbatch_one(out_dir, i))
        print(f"2-node job, submit to running, {N} of each, alternating:")
        a = summary("gpusrv submit --nodes 2 (task ran)", gs_ran)
        summary("gpusrv submit --nodes 2 (API says so)", gs_seen)
        b = summary("sbatch -N2 (task ran)", sb_ran)
        print(f"gpusrv / sbatch (task ran, p50): {a / b:.2f}x")
    finally:
        desk.stop()
        subprocess.run([CLUSTER, "stop"], capture_output=True)


if __name__ == "__main__":
    main()
