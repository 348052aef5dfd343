"""The front desk, for real: `gpusrv serve` with its state in a temporary
directory, process jobs submitted over /api/v1 and with the `gpusrv` command,
tokens and tenants, limits (time, memory), cancellation of whole process
trees, and a daemon killed with SIGKILL that loses nothing."""
import contextlib
import http.client
import shutil
import tempfile
import json
import os
import pwd
import signal
import socket
import subprocess
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSRV = os.environ.get("GPUSRV_BIN", os.path.join(ROOT, "build", "gpusrv"))
PLUGINS = os.environ.get("GPUSRV_TEST_PLUGINS", "")
FAKE_PLUGINS = os.environ.get("GPUSRV_TEST_FAKE_PLUGINS", "")
IS_ROOT = os.geteuid() == 0
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "OUT_OF_MEMORY", "LOST"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """A `gpusrv serve` on a free port with its state in `state`."""

    def __init__(self, tmp_path, *extra, env=None):
        # Jobs run as other users, who must be able to reach their work
        # directories: the state lives in a directory they can traverse
        # (pytest's own are 0700).
        self.state = tempfile.mkdtemp(prefix="gpusrv-state-")
        os.chmod(self.state, 0o711)
        self.repo = tmp_path / "models"
        self.repo.mkdir(exist_ok=True)
        self.extra, self.env = extra, env or {}
        self.port = free_port()
        self.log_path = tmp_path / f"serve-{self.port}.log"
        self.proc = None

    def command(self):
        return [GPUSRV, "serve", "--model-repository", str(self.repo), "--state-dir", self.state,
                "--http-port", str(self.port), "--grpc-port", "0", "--kill-grace-seconds", "1",
                *self.extra]

    def start(self):
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=log,
                                     env={**os.environ, **self.env})
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if self.request("GET", "/v2/health/live")[0] == 200:
                    return self
            except OSError:
                time.sleep(0.05)
            assert self.proc.poll() is None, open(self.log_path).read()
        raise AssertionError("gpusrv serve did not come up")

    def wait_ready(self):
        """Until the repository's models have loaded (the daemon answers before)."""
        deadline = time.time() + 60
        while self.request("GET", "/v2/health/ready")[0] != 200:
            assert time.time() < deadline, "the models did not load"
            time.sleep(0.05)
        return self

    @property
    def admin(self):
        with open(os.path.join(self.state, "admin.token")) as f:
            return f.read().strip()

    def request(self, method, path, body=None, token=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Authorization": "Bearer " + token} if token else {}
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw)
        except ValueError:
            return r.status, raw

    def submit(self, command, token=None, **asks):
        status, job = self.request("POST", "/api/v1/jobs", {"command": command, "cpus": 0.1, **asks},
                                   token or self.admin)
        assert status == 201, job
        return job["id"]

    def job(self, job_id, token=None):
        status, job = self.request("GET", f"/api/v1/jobs/{job_id}", token=token or self.admin)
        assert status == 200, job
        return job

    def wait(self, job_id, timeout=30, token=None):
        deadline = time.time() + timeout
        while time.time() < deadline:
            job = self.job(job_id, token)
            if job["state"] in ENDED:
                return job
            time.sleep(0.05)
        raise AssertionError(f"job {job_id} did not end: {self.job(job_id, token)}")

    def log(self, job_id, stream="stdout", token=None):
        status, raw = self.request("GET", f"/api/v1/jobs/{job_id}/logs?stream={stream}",
                                   token=token or self.admin)
        assert status == 200
        return raw.decode() if isinstance(raw, bytes) else json.dumps(raw)

    def cli(self, *args, token=None, check=True):
        p = subprocess.run([GPUSRV, *args], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "GPUSRV_URL": f"http://127.0.0.1:{self.port}",
                                "GPUSRV_TOKEN": token or self.admin})
        if check:
            assert p.returncode == 0, p.stderr
        return p

    def cleanup(self):
        shutil.rmtree(self.state, ignore_errors=True)

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=30)
        if sig == signal.SIGTERM:
            assert code == 0


@contextlib.contextmanager
def daemon(tmp_path, *extra, **kw):
    d = Daemon(tmp_path, *extra, **kw).start()
    try:
        yield d
    finally:
        if d.proc.poll() is None:
            d.stop()
        d.cleanup()


def test_job_runs_with_its_environment_and_complete_logs(tmp_path):
    with daemon(tmp_path) as d:
        script = ("for i in $(seq 1 20000); do echo line $i; done; echo oops >&2; "
                  "echo id=$GPUSRV_JOB_ID tenant=$GPUSRV_TENANT cuda=[$CUDA_VISIBLE_DEVICES] "
                  "user=$(id -un); exit 7")
        p = d.cli("submit", "--cpus", "0.2", "--name", "counter", "--", "sh", "-c", script)
        job_id = int(p.stdout.strip())
        w = d.cli("wait", str(job_id), check=False)
        assert w.returncode == 7 and "FAILED" in w.stderr
        job = d.job(job_id)
        assert job["state"] == "FAILED" and job["exit_code"] == 7 and job["name"] == "counter"
        assert [e["state"] for e in job["events"]] == ["PENDING", "RUNNING", "FAILED"]
        out = d.cli("logs", str(job_id)).stdout.splitlines()
        assert out[:20000] == [f"line {i}" for i in range(1, 20001)]  # nothing lost, in order
        expected_user = "nobody" if IS_ROOT else pwd.getpwuid(os.geteuid()).pw_name
        assert out[20000] == f"id={job_id} tenant=admin cuda=[] user={expected_user}"
        assert d.cli("logs", str(job_id), "--stderr").stdout == "oops\n"
        # Listings: unfinished by default, all with --all.
        assert str(job_id) not in d.cli("jobs").stdout
        listed = json.loads(d.cli("jobs", "--all", "--json").stdout)
        assert [j["id"] for j in listed] == [job_id]


def test_time_limit_ends_an_endless_job_as_timeout(tmp_path):
    with daemon(tmp_path) as d:
        job_id = d.submit(["sleep", "1000"], time_limit="1s")
        job = d.wait(job_id, timeout=20)
        assert job["state"] == "TIMEOUT" and "time limit" in job["reason"]
        assert job["end_time"] - job["start_time"] < 5


@pytest.mark.skipif(not IS_ROOT, reason="memory limits need cgroups, which need root")
def test_memory_hog_is_stopped_as_out_of_memory(tmp_path):
    with daemon(tmp_path) as d:
        hog = ["python3", "-c", "x = bytearray(400 << 20); print('survived')"]
        job_id = d.submit(hog, mem="64M")
        job = d.wait(job_id)
        assert job["state"] == "OUT_OF_MEMORY", job
        assert "survived" not in d.log(job_id)
        # The same program with room enough completes.
        assert d.wait(d.submit(hog, mem="1G"))["state"] == "COMPLETED"


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone as far as we care
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_cancel_kills_the_whole_process_tree(tmp_path):
    with daemon(tmp_path) as d:
        # A child that ignores SIGTERM, and one that left the process group
        # (setsid): both must go.
        script = ("trap '' TERM; sleep 1000 & echo $! > pids; "
                  "setsid sleep 1001 & echo $! >> pids; sleep 1002")
        job_id = d.submit(["sh", "-c", script])
        work = os.path.join(d.state, "jobs", str(job_id), "work", "pids")
        deadline = time.time() + 20
        while time.time() < deadline and not (os.path.exists(work) and
                                              len(open(work).read().split()) == 2):
            time.sleep(0.05)
        pids = [int(p) for p in open(work).read().split()]
        assert all(alive(p) for p in pids)
        d.cli("cancel", str(job_id))
        job = d.wait(job_id)
        assert job["state"] == "CANCELLED"
        deadline = time.time() + 10
        while time.time() < deadline and any(alive(p) for p in pids):
            time.sleep(0.05)
        if IS_ROOT:  # without a cgroup the setsid'd one can escape
            assert not any(alive(p) for p in pids)
        else:
            assert not alive(pids[0])
        # A pending job cancels at once; an ended one cannot be cancelled.
        assert d.request("DELETE", f"/api/v1/jobs/{job_id}", token=d.admin)[0] == 409


def test_queue_waits_for_resources_and_honours_priority(tmp_path):
    with daemon(tmp_path) as d:
        cores = os.cpu_count()
        status, err = d.request("POST", "/api/v1/jobs", {"command": ["true"], "cpus": cores + 1},
                                d.admin)
        assert status == 400 and "can never run" in err["error"] and "CPUs" in err["error"]
        big = d.submit(["sleep", "2"], cpus=cores)
        while d.job(big)["state"] != "RUNNING":
            time.sleep(0.05)
        low = d.submit(["true"], cpus=cores, priority=-5)
        high = d.submit(["true"], cpus=cores, priority=5)
        time.sleep(0.3)
        assert d.job(high)["state"] == "PENDING" and d.job(high)["reason"] == "Resources"
        assert d.job(low)["state"] == "PENDING" and d.job(low)["reason"] == "Priority"
        d.wait(low)
        assert d.job(high)["start_time"] <= d.job(low)["start_time"]


def test_preemption_requeues_lower_priority_work(tmp_path):
    cores = os.cpu_count()
    with daemon(tmp_path, "--preemption", "requeue") as d:
        # Told to stop, it says so and leaves; its second run finishes at once.
        low = d.submit(["sh", "-c", "if [ -e ran ]; then echo second; exit 0; fi; touch ran; "
                        "trap 'echo stopping; exit 143' TERM; while :; do sleep 0.05; done"],
                       cpus=cores, priority=-1)
        while d.job(low)["state"] != "RUNNING":
            time.sleep(0.05)
        time.sleep(0.3)
        high = d.submit(["sh", "-c", "echo high"], cpus=cores, priority=10)
        assert d.wait(high)["state"] == "COMPLETED"
        job = d.wait(low)
        states = [e["state"] for e in job["events"]]
        assert job["state"] == "COMPLETED" and job["runs"] == 2, job
        assert states == ["PENDING", "RUNNING", "PREEMPTED", "PENDING", "RUNNING", "COMPLETED"]
        assert d.log(low) == "stopping\nsecond\n"
        preempted = [e for e in job["events"] if e["state"] == "PREEMPTED"][0]
        assert f"job {high}" in preempted["reason"]
        # Equal priority never preempts.
        a = d.submit(["sleep", "1"], cpus=cores)
        while d.job(a)["state"] != "RUNNING":
            time.sleep(0.05)
        b = d.submit(["true"], cpus=cores)
        assert d.wait(a)["runs"] == 1 and d.wait(b)["state"] == "COMPLETED"
        assert "PREEMPTED" not in [e["state"] for e in d.job(a)["events"]]


def test_gang_booking_of_whole_devices(tmp_path):
    if not PLUGINS:
        pytest.skip("GPUSRV_TEST_PLUGINS not set: no second device to book")
    with daemon(tmp_path, "--job-devices", "all", env={"GPUSRV_PLUGIN_PATH": PLUGINS}) as d:
        both = d.submit(["sh", "-c", "echo $GPUSRV_VISIBLE_DEVICES; sleep 1"], gpus=2)
        while d.job(both)["state"] != "RUNNING":
            time.sleep(0.05)
        bookings = d.request("GET", "/api/v1/bookings")[1]["bookings"]
        mine = [b for b in bookings if b["owner"].startswith(f"job {both} ")]
        assert len(mine) == 1 and {p["device"] for p in mine[0]["devices"]} == {"cpu0", "testcpu0"}
        assert all(p["share"] == 100 for p in mine[0]["devices"])
        one = d.submit(["true"], gpus=1)
        time.sleep(0.3)
        assert d.job(one)["state"] == "PENDING" and d.job(one)["reason"] == "Resources"
        assert d.wait(both)["state"] == "COMPLETED"
        assert d.log(both).strip() == "cpu0,testcpu0"
        assert d.wait(one)["state"] == "COMPLETED"
        status, err = d.request("POST", "/api/v1/jobs", {"command": ["true"], "gpus": 3}, d.admin)
        assert status == 400 and "device" in err["error"]
        # Slices share a device up to 100% of its compute.
        a = d.submit(["sleep", "1"], gpu_mem="1M", gpu_share=60)
        b = d.submit(["sleep", "1"], gpu_mem="1M", gpu_share=60)
        ja, jb = d.wait(a), d.wait(b)
        assert ja["devices"] != jb["devices"] or ja["end_time"] <= jb["start_time"] + 0.01 \
            or jb["end_time"] <= ja["start_time"] + 0.01


def test_job_over_its_device_memory_is_stopped(tmp_path):
    """Per-process device memory as NVML reports it, faked by the fakegpu
    test plugin from a file: a job over its booking is stopped as
    OUT_OF_MEMORY; one within it runs on."""
    if not FAKE_PLUGINS:
        pytest.skip("GPUSRV_TEST_FAKE_PLUGINS not set: no device that reports processes")
    figures = tmp_path / "processes"
    figures.write_text("")
    env = {"GPUSRV_PLUGIN_PATH": FAKE_PLUGINS, "GPUSRV_TEST_PROCESSES": str(figures)}
    with daemon(tmp_path, "--job-devices", "fakegpu0", env=env) as d:
        script = "echo $$ > pid; while :; do sleep 0.05; done"
        hog = d.submit(["sh", "-c", script], gpu_mem="1G", gpu_share=10)
        fine = d.submit(["sh", "-c", script], gpu_mem="1G", gpu_share=10, time_limit="3s")
        pids = {}
        for j in (hog, fine):
            path = os.path.join(d.state, "jobs", str(j), "work", "pid")
            deadline = time.time() + 20
            while time.time() < deadline and not (os.path.exists(path) and open(path).read()):
                time.sleep(0.05)
            pids[j] = int(open(path).read())
        # A process outside the jobs too (this test's own), as a GPU lists any user's.
        figures.write_text(f"{pids[hog]} {3 << 30}\n{pids[fine]} {512 << 20}\n"
                           f"{os.getpid()} {100 << 20}\n")
        # Per process in /metrics, with the job and tenant where it is a job's.
        status, text = d.request("GET", "/metrics")
        text = text.decode()
        assert status == 200
        assert (f'gpusrv_process_device_memory_bytes{{device="fakegpu0",pid="{pids[fine]}",'
                f'process="fake",job="{fine}",tenant="admin"}} {512 << 20}') in text, text
        assert (f'gpusrv_process_device_memory_bytes{{device="fakegpu0",pid="{os.getpid()}",'
                f'process="fake",job="",tenant=""}} {100 << 20}') in text, text
        job = d.wait(hog)
        assert job["state"] == "OUT_OF_MEMORY", job
        assert "3.0 GiB of device memory on fakegpu0" in job["reason"] and "1.0 GiB" in job["reason"]
        assert d.wait(fine)["state"] == "TIMEOUT"  # never stopped for memory


def test_tokens_and_tenant_isolation(tmp_path):
    with daemon(tmp_path) as d:
        me = pwd.getpwuid(os.geteuid()).pw_name
        user = "nobody" if IS_ROOT else me
        alice = d.cli("tenant", "add", "alice", "--user", user).stdout.strip()
        bob = d.cli("tenant", "add", "bob", "--user", user, "--weight", "2").stdout.strip()
        assert alice.startswith("gs_") and alice != bob
        # No token, a wrong one, a made-up one.
        assert d.request("GET", "/api/v1/jobs")[0] == 401
        wrong = alice[:-1] + ("1" if alice[-1] == "0" else "0")
        assert d.request("GET", "/api/v1/jobs", token=wrong)[0] == 401
        assert d.request("GET", "/api/v1/jobs", token="letmein")[0] == 401
        # Health never needs one (a wrong one is ignored there); inference and
        # metadata not on loopback.
        assert d.request("GET", "/v2/health/ready")[0] == 200
        assert d.request("GET", "/v2/health/live", token="garbage")[0] == 200
        # A body sent without a token is refused (and not kept), before its size is judged.
        status, err = d.request("POST", "/api/v1/jobs", b"x" * (4 << 20))
        assert status == 401 and "token" in err["error"]
        status, err = d.request("POST", "/api/v1/jobs", b"x" * (65 << 20))
        assert status == 401 and "token" in err["error"]
        assert d.request("GET", "/v2")[0] == 200
        job = d.submit(["sh", "-c", "echo secret"], token=alice)
        d.wait(job, token=alice)
        for method, path in (("GET", f"/api/v1/jobs/{job}"), ("DELETE", f"/api/v1/jobs/{job}"),
                             ("GET", f"/api/v1/jobs/{job}/logs")):
            status, err = d.request(method, path, token=bob)
            assert status == 403 and "another tenant" in err["error"]
        assert d.request("GET", "/api/v1/jobs?all=1", token=bob)[1]["jobs"] == []
        assert [j["id"] for j in d.request("GET", "/api/v1/jobs?all=1", token=alice)[1]["jobs"]] \
            == [job]
        # The admin sees everyone's; tenants cannot manage tenants.
        assert d.log(job) == "secret\n"
        assert d.request("GET", "/api/v1/tenants", token=alice)[0] == 403
        p = d.cli("tenant", "add", "mallory", "--user", user, token=alice, check=False)
        assert p.returncode == 1 and "admin" in p.stderr
        # A tenant needs a name and a Unix user; empty ones are none (fuzz_http found "").
        for body, why in (({"name": "", "user": user}, "needs a name"),
                          ({"name": "carol", "user": ""}, "needs a Unix user")):
            status, err = d.request("POST", "/api/v1/tenants", json.dumps(body).encode(),
                                    token=d.admin)
            assert status == 400 and why in err["error"], err
        # A further token works; removing the tenant revokes them.
        extra = d.cli("tenant", "token", "bob").stdout.strip()
        assert d.request("GET", "/api/v1/jobs", token=extra)[0] == 200
        d.cli("tenant", "remove", "bob")
        assert d.request("GET", "/api/v1/jobs", token=extra)[0] == 401
        assert d.request("GET", "/api/v1/jobs", token=bob)[0] == 401
        # Accounting per tenant.
        usage = json.loads(d.cli("usage", "--json").stdout)
        assert [u["tenant"] for u in usage] == ["alice"] and usage[0]["jobs"] == 1
        # A tenant with an unfinished job cannot be removed.
        waiting = d.submit(["sleep", "30"], token=alice)
        p = d.cli("tenant", "remove", "alice", check=False)
        assert p.returncode == 1 and "unfinished jobs" in p.stderr
        d.cli("cancel", str(waiting))
        assert d.wait(waiting)["state"] == "CANCELLED"


def test_jobs_get_a_clean_process_state(tmp_path):
    with daemon(tmp_path) as d:
        # The daemon ignores SIGPIPE; its jobs start with every disposition at
        # its default and an empty mask.
        job = d.wait(d.submit(["grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"]))
        assert job["state"] == "COMPLETED"
        assert d.log(job["id"]).split() == ["SigBlk:", "0" * 16, "SigIgn:", "0" * 16]
        # Commands are looked up in the job's PATH.
        tools = tempfile.mkdtemp(prefix="gpusrv-tools-")
        try:
            os.chmod(tools, 0o755)
            with open(os.path.join(tools, "hello-gs"), "w") as f:
                f.write("#!/bin/sh\necho hello from tools; umask\n")
            os.chmod(os.path.join(tools, "hello-gs"), 0o755)
            job = d.wait(d.submit(["hello-gs"], env=[f"PATH={tools}:/usr/bin:/bin"]))
            assert job["state"] == "COMPLETED", d.log(job["id"], "stderr")
            assert d.log(job["id"]).split() == ["hello", "from", "tools", "0022"]
        finally:
            shutil.rmtree(tools)


def test_priority_is_capped_per_tenant(tmp_path):
    with daemon(tmp_path) as d:
        user = "nobody" if IS_ROOT else pwd.getpwuid(os.geteuid()).pw_name
        plain = d.cli("tenant", "add", "plain", "--user", user).stdout.strip()
        vip = d.cli("tenant", "add", "vip", "--user", user, "--max-priority", "50").stdout.strip()
        status, err = d.request("POST", "/api/v1/jobs", {"command": ["true"], "priority": 1}, plain)
        assert status == 403 and "priority 0 at most" in err["error"]
        assert d.request("POST", "/api/v1/jobs", {"command": ["true"], "priority": -3}, plain)[0] == 201
        assert d.request("POST", "/api/v1/jobs", {"command": ["true"], "priority": 50}, vip)[0] == 201
        assert d.request("POST", "/api/v1/jobs", {"command": ["true"], "priority": 51}, vip)[0] == 403
        assert d.request("POST", "/api/v1/jobs", {"command": ["true"], "priority": 900},
                         d.admin)[0] == 201


def test_batch_runs_as_a_job_of_the_daemon(tmp_path):
    """The job runs gpusrv-engine as the tenant's user (nobody, as root),
    who may not reach a checkout in /root: the test gives it a copy of the
    executable and the model in a place it can read, wherever the checkout
    is (hardening item 16)."""
    import numpy as np
    shared = tempfile.mkdtemp(prefix="gpusrv-batch-")
    try:
        os.chmod(shared, 0o777)  # the job's user reads the data and writes the outputs here
        engine = os.path.join(shared, "gpusrv-engine")
        shutil.copy(os.path.join(os.path.dirname(GPUSRV), "gpusrv-engine"), engine)
        model = os.path.join(shared, "model.onnx")
        shutil.copy(os.path.join(ROOT, "models", "digits", "1", "model.onnx"), model)
        os.chmod(engine, 0o755)
        os.chmod(model, 0o644)
        x = (np.random.default_rng(5).random((300, 64), dtype=np.float32) * 16).astype(np.float32)
        np.save(os.path.join(shared, "x.npy"), x)
        os.chmod(os.path.join(shared, "x.npy"), 0o644)
        subprocess.run([GPUSRV, "model", "run", model, "-i", f"pixels={shared}/x.npy", "-o",
                        f"{shared}/ref"], check=True, capture_output=True)
        with daemon(tmp_path) as d:
            url = f"http://127.0.0.1:{d.port}"
            p = subprocess.run([engine, "batch", model, "--input", f"{shared}/x.npy", "--output",
                                f"{shared}/out", "--batch", "64", "--workers", "1", "--url", url],
                               capture_output=True, text=True, timeout=120,
                               env={**os.environ, "GPUSRV_TOKEN": d.admin})
            assert p.returncode == 0, p.stderr
            assert "300 rows in 5 batches" in p.stdout and "job 1 queued" in p.stderr
            # Batches of 64 against one of 300: equal within rounding (test_batch.py).
            np.testing.assert_allclose(np.load(f"{shared}/out/probs.npy"),
                                       np.load(f"{shared}/ref/probs.npy"), rtol=1e-4, atol=1e-7)
            job = d.job(1)
            assert job["state"] == "COMPLETED" and job["name"] == "batch" and job["cpus"] == 1
            # A data set that is not there is refused before anything is queued.
            p = d.cli("batch", model, "-i", f"{shared}/missing.npy", "-o", f"{shared}/o2", "--url",
                      url, check=False)
            assert p.returncode == 1 and "missing.npy" in p.stderr
            if IS_ROOT:  # an executable its user cannot reach: the failure says why
                hidden = os.path.join(shared, "private")
                os.mkdir(hidden, 0o700)
                shutil.copy(engine, hidden)
                p = subprocess.run([os.path.join(hidden, "gpusrv-engine"), "batch", model,
                                    "-i", f"{shared}/x.npy", "-o", f"{shared}/o3", "--url", url],
                                   capture_output=True, text=True, timeout=120,
                                   env={**os.environ, "GPUSRV_TOKEN": d.admin})
                assert p.returncode == 1, p.stderr
                assert f"{hidden} is not open to other users" in p.stderr, p.stderr
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_auth_required_covers_inference(tmp_path):
    with daemon(tmp_path, "--auth", "required") as d:
        assert d.request("GET", "/v2/health/live")[0] == 200
        assert d.request("GET", "/v2")[0] == 401
        assert d.request("GET", "/metrics")[0] == 401
        assert d.request("GET", "/v2", token=d.admin)[0] == 200
    p = subprocess.run([GPUSRV, "serve", "--auth", "sometimes", "--state-dir", str(tmp_path / "s")],
                       capture_output=True, text=True)
    assert p.returncode != 0 and "'auto', 'required' or 'none'" in p.stderr


@pytest.mark.skipif(not IS_ROOT, reason="switching users needs root")
def test_jobs_run_as_their_tenants_user_never_root(tmp_path):
    for name in ("gstest_a", "gstest_b"):
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        name], capture_output=True)
    with daemon(tmp_path) as d:
        a = d.cli("tenant", "add", "ta", "--user", "gstest_a").stdout.strip()
        b = d.cli("tenant", "add", "tb", "--user", "gstest_b").stdout.strip()
        root_t = d.cli("tenant", "add", "tr", "--user", "root").stdout.strip()
        ghost = d.cli("tenant", "add", "tg", "--user", "no_such_user_here").stdout.strip()
        ja = d.submit(["sh", "-c", "echo private > mine.txt; id -un; sleep 2"], token=a)
        while d.job(ja, a)["state"] != "RUNNING":
            time.sleep(0.05)
        time.sleep(0.3)
        work_a = os.path.join(d.state, "jobs", str(ja), "work")
        log_a = os.path.join(d.state, "jobs", str(ja), "stdout.log")
        jb = d.submit(["sh", "-c", f"cat {work_a}/mine.txt; cat {log_a}; ls {work_a}; echo done"],
                      token=b)
        d.wait(jb, token=b)
        out_b, err_b = d.log(jb, token=b), d.log(jb, "stderr", token=b)
        assert "private" not in out_b and out_b.strip().endswith("done")
        assert err_b.count("Permission denied") == 3, err_b
        assert d.wait(ja, token=a)["state"] == "COMPLETED"
        assert d.log(ja, token=a).strip() == "gstest_a"
        # Root only with --allow-root; a user that does not exist: refused with the reason.
        status, err = d.request("POST", "/api/v1/jobs", {"command": ["id"]}, root_t)
        assert status == 403 and "--allow-root" in err["error"]
        status, err = d.request("POST", "/api/v1/jobs", {"command": ["id"]}, ghost)
        assert status == 400 and "does not exist" in err["error"]
        allowed = d.cli("tenant", "add", "tr2", "--user", "root", "--allow-root").stdout.strip()
        jr = d.submit(["id", "-u"], token=allowed)
        d.wait(jr, token=allowed)
        assert d.log(jr, token=allowed).strip() == "0"


def test_bad_requests_get_clear_errors(tmp_path):
    with daemon(tmp_path) as d:
        t = d.admin
        cases = [
            (b"{not json", "not a JSON object"),
            ({"command": "echo hi"}, "needs a command"),
            ({"command": []}, "needs a command"),
            ({"command": ["echo", 3]}, "non-empty strings"),
            ({"command": ["true"], "cpus": -1}, "cpus"),
            ({"command": ["true"], "time_limit": "soon"}, "not a time limit"),
            ({"command": ["true"], "mem": "lots"}, "not a size"),
            ({"command": ["true"], "gpus": 1, "gpu_mem": "1G"}, "not both"),
            ({"command": ["true"], "env": ["NOEQUALS"]}, "NAME=VALUE"),
            ({"command": ["true"], "chdir": "relative"}, "absolute"),
            ({"command": ["true"], "priority": 99999}, "priority"),
            ({"command": ["true"], "env": ["CUDA_VISIBLE_DEVICES=0,1"]}, "CUDA_VISIBLE_DEVICES"),
            ({"command": ["true"], "env": ["GPUSRV_JOB_ID=1"]}, "GPUSRV_JOB_ID"),
            ({"command": ["true"], "time_limit": 2 ** 62}, "time limit"),
            ({"command": ["true"], "time_limit": "99999999999999999999"}, "not a time limit"),
            ({"command": ["true"], "time_limit": "99999999999-00:00:00"}, "not a time limit"),
            ({"command": ["true"], "chdir": "/" + "x" * 600}, "longer than"),
        ]
        for body, needle in cases:
            status, err = d.request("POST", "/api/v1/jobs", body, t)
            assert status == 400 and needle in err["error"], (body, err)
        assert d.request("GET", "/api/v1/jobs/999", token=t)[0] == 404
        assert d.request("GET", "/api/v1/jobs/abc", token=t)[0] == 404
        assert d.request("GET", "/api/v1/jobs/1/logs?stream=stdin", token=t)[0] in (400, 404)
        # A command that does not exist fails with the reason in its log.
        job = d.wait(d.submit(["/no/such/program"]))
        assert job["state"] == "FAILED" and job["exit_code"] == 127
        assert "cannot run '/no/such/program'" in d.log(job["id"], "stderr")
        # The command line: usage errors exit 2.
        for args in (["submit"], ["submit", "--cpus", "x", "--", "true"], ["submit", "--time",
                     "forever", "--", "true"], ["wait"], ["wait", "abc"], ["logs"],
                     ["tenant"], ["tenant", "frob", "x"], ["usage", "--since", "yesterday"]):
            assert d.cli(*args, check=False).returncode == 2, args


def test_pending_jobs_survive_a_restart(tmp_path):
    d = Daemon(tmp_path).start()
    cores = os.cpu_count()
    blocker = d.submit(["sleep", "1.5"], cpus=cores)
    while d.job(blocker)["state"] != "RUNNING":
        time.sleep(0.05)
    waiting = d.submit(["echo", "after"], cpus=cores)
    d.stop()
    d.start()
    try:
        assert d.wait(blocker)["state"] == "COMPLETED"  # adopted across the restart
        assert d.wait(waiting)["state"] == "COMPLETED"
        assert d.log(waiting) == "after\n"
    finally:
        d.stop()
        d.cleanup()


def test_kill_9_of_the_daemon_loses_nothing(tmp_path):
    d = Daemon(tmp_path).start()
    token = d.admin
    acked, errors = [], []
    stop = threading.Event()

    def submitter():
        i = 0
        while not stop.is_set():
            try:
                status, job = d.request("POST", "/api/v1/jobs",
                                        {"command": ["sh", "-c", f"sleep 0.3; echo job{i}"],
                                         "cpus": 0.01}, token)
                if status == 201:
                    acked.append((job["id"], f"job{i}"))
            except OSError:  # the daemon died under us: not acknowledged
                pass
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
            i += 1

    long_job = d.submit(["sh", "-c", "sleep 2; echo survived"])
    threads = [threading.Thread(target=submitter) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    d.stop(signal.SIGKILL)
    stop.set()
    for t in threads:
        t.join()
    assert not errors and len(acked) > 5
    d.start()
    try:
        for job_id, word in acked:
            job = d.wait(job_id, timeout=60)
            assert job["state"] == "COMPLETED", job
            assert d.log(job_id) == word + "\n"
        job = d.wait(long_job)
        assert job["state"] == "COMPLETED" and d.log(long_job) == "survived\n"
    finally:
        d.stop()
        d.cleanup()


def test_lost_jobs_are_requeued_when_asked(tmp_path):
    d = Daemon(tmp_path).start()
    plain = d.submit(["sleep", "30"])
    again = d.submit(["sh", "-c", "test -e marker || { touch marker; sleep 30; }; echo second"],
                     requeue=True)
    for j in (plain, again):
        while d.job(j)["state"] != "RUNNING":
            time.sleep(0.05)
    marker = os.path.join(d.state, "jobs", str(again), "work", "marker")
    while not os.path.exists(marker):  # its first run is under way
        time.sleep(0.05)
    supervisors = [d.job(j) for j in (plain, again)]
    d.stop(signal.SIGKILL)
    # While the daemon is down, the jobs' supervisors and processes vanish.
    for job in supervisors:
        os.killpg(os.getpgid(job_pid(d, job["id"])), signal.SIGKILL)
    d.start()
    try:
        assert d.wait(plain)["state"] == "LOST"
        job = d.wait(again)
        assert job["state"] == "COMPLETED" and job["runs"] == 2
        assert "LOST" in [e["state"] for e in job["events"]]
    finally:
        d.stop()
        d.cleanup()


def set_job_pid(d, job_id, pid):
    import sqlite3
    with contextlib.closing(sqlite3.connect(os.path.join(d.state, "state.db"))) as db:
        db.execute("UPDATE jobs SET pid = ? WHERE id = ?", (pid, job_id))
        db.commit()


def running(d, job_id):
    while d.job(job_id)["state"] != "RUNNING":
        time.sleep(0.05)
    pid_file = os.path.join(d.state, "jobs", str(job_id), "supervisor.pid")
    while not os.path.exists(pid_file):
        time.sleep(0.05)
    return pid_file


def test_adoption_when_the_daemon_died_while_starting_a_job(tmp_path):
    """The daemon stopped before it recorded the supervisor's pid: the next
    one finds it in the supervisor's pid file and adopts the job."""
    d = Daemon(tmp_path).start()
    job = d.submit(["sh", "-c", "sleep 1.5; echo adopted"])
    running(d, job)
    d.stop(signal.SIGKILL)
    set_job_pid(d, job, 0)  # as if it had died between spawning and recording
    d.start()
    try:
        done = d.wait(job)
        assert done["state"] == "COMPLETED" and done["runs"] == 1, done
        assert d.log(job) == "adopted\n"
    finally:
        d.stop()
        d.cleanup()


def test_a_job_that_never_started_runs_again(tmp_path):
    """No recorded pid, no pid file and no exit report: the job never ran, so
    it is queued again (and runs once more), not reported lost."""
    d = Daemon(tmp_path).start()
    job = d.submit(["sh", "-c", "test -e marker || { touch marker; sleep 30; }; echo second"])
    pid_file = running(d, job)
    marker = os.path.join(d.state, "jobs", str(job), "work", "marker")
    while not os.path.exists(marker):
        time.sleep(0.05)
    supervisor = job_pid(d, job)
    d.stop(signal.SIGKILL)
    os.killpg(os.getpgid(supervisor), signal.SIGKILL)
    os.unlink(pid_file)
    set_job_pid(d, job, 0)
    d.start()
    try:
        done = d.wait(job)
        assert done["state"] == "COMPLETED" and d.log(job) == "second\n", done
    finally:
        d.stop()
        d.cleanup()


def test_a_supervisor_of_another_boot_is_not_adopted(tmp_path):
    """A pid file naming another boot: whatever process has that pid now is
    not the job's, so the job is settled (lost), not adopted."""
    d = Daemon(tmp_path).start()
    job = d.submit(["sleep", "30"])
    pid_file = running(d, job)
    supervisor = job_pid(d, job)
    d.stop(signal.SIGKILL)
    pid, start, _ = open(pid_file).read().split()
    with open(pid_file, "w") as f:
        f.write(f"{pid} {start} 00000000-0000-0000-0000-000000000000\n")
    d.start()
    try:
        assert d.wait(job)["state"] == "LOST"
    finally:
        try:  # the real supervisor, alive all along in this staged case
            os.killpg(os.getpgid(supervisor), signal.SIGKILL)
        except ProcessLookupError:
            pass
        d.stop()
        d.cleanup()


def job_pid(d, job_id):
    import sqlite3
    with contextlib.closing(sqlite3.connect(os.path.join(d.state, "state.db"))) as db:
        return db.execute("SELECT pid FROM jobs WHERE id = ?", (job_id,)).fetchone()[0]


def test_a_tenant_added_again_under_its_name_inherits_nothing(tmp_path):
    """Hardening item 6: jobs were keyed by tenant name, so a removed
    tenant's name added again inherited the old jobs, logs and accounting."""
    with daemon(tmp_path) as d:
        user = "nobody" if IS_ROOT else pwd.getpwuid(os.geteuid()).pw_name
        first = d.cli("tenant", "add", "carol", "--user", user).stdout.strip()
        job = d.submit(["sh", "-c", "echo the first carol secret"], token=first)
        d.wait(job, token=first)
        d.cli("tenant", "remove", "carol")
        second = d.cli("tenant", "add", "carol", "--user", user).stdout.strip()
        assert d.request("GET", "/api/v1/jobs?all=1", token=second)[1]["jobs"] == []
        for path in (f"/api/v1/jobs/{job}", f"/api/v1/jobs/{job}/logs"):
            status, err = d.request("GET", path, token=second)
            assert status == 403 and "another tenant" in err["error"], (path, err)
        assert d.request("GET", "/api/v1/usage", token=second)[1]["usage"] == []
        # The admin still sees it, under the name it had.
        assert d.job(job)["tenant"] == "carol" and "secret" in d.log(job)
        mine = d.submit(["true"], token=second)
        assert [j["id"] for j in d.request("GET", "/api/v1/jobs?all=1",
                                           token=second)[1]["jobs"]] == [mine]
