"""Jobs on several nodes handed to Slurm: `gpusrv submit --nodes` against a
stand-in slurmrestd (an HTTP server in this test that speaks the v0.0.38
calls gpusrv makes, checks each call's JWT against the key as slurmrestd's
rest_auth/jwt does, and reports the job states the test sets). The batch
script gpusrv writes is also run under stand-ins for srun and scontrol, to
check the rendezvous variables and the command's quoting. The same flow
against a real Slurm is test_slurm_cluster.py."""
import base64
import hashlib
import hmac
import json
import os
import pwd
import re
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from test_frontdesk import GPUSRV, IS_ROOT, daemon, free_port

API = "/slurm/v0.0.38"
KEY = os.urandom(32)


def b64url_decode(part):
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


class FakeSlurm:
    """What the stand-in slurmrestd was asked, and the states it reports."""

    def __init__(self, key):
        self.key = key
        self.submitted = []   # (user, body)
        self.jobs = {}        # id -> v0.0.38 job object
        self.cancelled = []
        self.refusal = None   # errors list for the next submit
        self.queue_refused = False  # ... given with a job queued all the same
        self.next_id = 100
        self.down = False     # answers 503 without JSON, as a proxy before a dead slurmrestd
        self.lock = threading.Lock()

    def user_of(self, headers):
        """The user a valid token names, else None (slurmrestd answers 401)."""
        name, token = headers.get("X-SLURM-USER-NAME"), headers.get("X-SLURM-USER-TOKEN", "")
        parts = token.split(".")
        if len(parts) != 3:
            return None
        signed = hmac.new(self.key, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
        if not hmac.compare_digest(signed, b64url_decode(parts[2])):
            return None
        header, claims = json.loads(b64url_decode(parts[0])), json.loads(b64url_decode(parts[1]))
        if header.get("alg") != "HS256" or claims.get("sun") != name:
            return None
        if not claims["iat"] <= time.time() + 5 < claims["exp"] + 5:
            return None
        return name

    def set_state(self, job_id, state, **fields):
        with self.lock:
            self.jobs[job_id].update({"job_state": state, **fields})


def serve_fake(fake):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def reply(self, status, body):
            raw = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            self.send_header("Content-Length", str(len(raw)))
            if body is not None:
                self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(raw)

        def handle_call(self, method):
            if fake.down:
                return self.reply(503, None)
            if "X-SLURM-USER-TOKEN" not in self.headers:
                return self.reply(401, None)
            user = fake.user_of(self.headers)
            if user is None:  # slurmctld refuses it; slurmrestd reports the dropped connection
                return self.reply(500, {"errors": [{"error_code": 5005, "error": "Zero Bytes "
                                                    "were transmitted or received"}]})
            m = re.fullmatch(API + r"/job/(\d+)", self.path)
            with fake.lock:
                if method == "POST" and self.path == API + "/job/submit":
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    if fake.refusal and not fake.queue_refused:
                        errors, fake.refusal = fake.refusal, None
                        return self.reply(500, {"errors": errors})
                    job_id = fake.next_id
                    fake.next_id += 1
                    fake.submitted.append((user, body))
                    errors, fake.refusal = fake.refusal or [], None
                    fake.jobs[job_id] = {"job_id": job_id, "job_state": "PENDING",
                                         "state_reason": "Priority", "nodes": "",
                                         "exit_code": 0, "start_time": 0, "end_time": 0,
                                         "restart_cnt": 0}
                    # Some objections come with a job queued all the same (200).
                    return self.reply(200, {"job_id": job_id, "step_id": "BATCH",
                                            "errors": errors})
                if m and int(m.group(1)) in fake.jobs:
                    job_id = int(m.group(1))
                    if method == "GET":
                        return self.reply(200, {"errors": [], "jobs": [dict(fake.jobs[job_id])]})
                    if method == "DELETE":
                        fake.cancelled.append(job_id)
                        job, now = fake.jobs[job_id], int(time.time())
                        if job["job_state"] == "PENDING":  # Slurm's times for one that never ran
                            job.update(start_time=now, exit_code=0)
                        job.update(job_state="CANCELLED", end_time=now)
                        return self.reply(200, {"errors": []})
                if m:
                    return self.reply(500, {"errors": [{"error": "Invalid job id specified",
                                                        "error_number": 2017}], "jobs": []})
            return self.reply(404, {"errors": [{"error": "Unable find requested URL"}]})

        def do_GET(self):
            self.handle_call("GET")

        def do_POST(self):
            self.handle_call("POST")

        def do_DELETE(self):
            self.handle_call("DELETE")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def slurm(tmp_path):
    key = tmp_path / "jwt_hs256.key"
    key.write_bytes(KEY)
    key.chmod(0o600)
    fake = FakeSlurm(KEY)
    server = serve_fake(fake)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    fake.key_path = str(key)
    yield fake
    server.shutdown()


def slurm_daemon(tmp_path, fake, *extra):
    return daemon(tmp_path, "--slurm-rest-url", fake.url, "--slurm-jwt-key", fake.key_path,
                  *extra)


def wait_for(d, job_id, state, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = d.job(job_id)
        if job["state"] == state:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never became {state}: {d.job(job_id)}")


def add_tenant(d, name):
    user = "nobody" if IS_ROOT else pwd.getpwuid(os.geteuid()).pw_name
    return d.cli("tenant", "add", name, "--user", user).stdout.strip(), user


def submit(d, command, **asks):
    status, job = d.request("POST", "/api/v1/jobs", {"command": command, **asks}, d.admin)
    assert status == 201, job
    return job["id"]


def test_a_job_on_two_nodes_runs_in_slurm_as_the_tenants_user(tmp_path, slurm):
    with slurm_daemon(tmp_path, slurm, "--slurm-accounts", "bob=physics") as d:
        token, user = add_tenant(d, "bob")
        p = d.cli("submit", "--nodes", "2", "--ntasks-per-node", "2", "--gpus-per-node", "1",
                  "--partition", "gpu", "--mpi", "--requeue", "--time", "90m", "--env", "SEED=7",
                  "--", "python3", "train.py", "a b", "it's", token=token)
        job_id = int(p.stdout.strip())
        (asked_as, body), = slurm.submitted
        assert asked_as == user  # the tenant's Unix user, in a token signed with the key
        props = body["job"]
        assert (props["nodes"], props["tasks_per_node"], props["tasks"]) == (2, 2, 4)
        assert props["gpus_per_node"] == "1" and props["partition"] == "gpu"
        assert props["account"] == "physics" and props["requeue"] is True
        assert props["time_limit"] == 90
        assert props["environment"]["SEED"] == "7" and "PATH" in props["environment"]
        out_dir = os.path.dirname(props["standard_output"])
        assert out_dir.startswith(d.state) and props["standard_output"].endswith("%j.out")
        if IS_ROOT:  # the tenant's user writes its logs there, and no one else reads them
            st = os.stat(out_dir)
            assert (st.st_uid, st.st_mode & 0o777) == (pwd.getpwnam(user).pw_uid, 0o700)
        assert "srun --mpi=pmix" in body["script"]

        job = d.job(job_id, token)
        assert job["state"] == "PENDING" and job["slurm_job_id"] == 100
        assert (job["nodes"], job["ntasks_per_node"], job["partition"]) == (2, 2, "gpu")
        # Slurm's reason for waiting shows, as the local queue's does.
        deadline = time.time() + 10
        while d.job(job_id)["reason"] != "Priority":
            assert time.time() < deadline, d.job(job_id)
            time.sleep(0.1)

        started = int(time.time()) - 3
        slurm.set_state(100, "RUNNING", nodes="gsn[1-2]", start_time=started, state_reason="None")
        job = wait_for(d, job_id, "RUNNING")
        assert job["node_list"] == "gsn[1-2]" and int(job["start_time"]) == started
        listed = json.loads(d.cli("jobs", "--json", token=token).stdout)
        assert [(j["id"], j["state"]) for j in listed] == [(job_id, "RUNNING")]
        shown = d.cli("job", str(job_id), token=token).stdout
        assert "Slurm:     job 100, 2 nodes x 2 tasks, 1 GPUs per node, partition gpu" in shown
        assert "Nodes:     gsn[1-2]" in shown

        log = props["standard_output"].replace("%j", "100")
        with open(log, "w") as f:
            f.write("step 1 loss 0.5\n")
        assert d.cli("logs", str(job_id), token=token).stdout == "step 1 loss 0.5\n"
        other, _ = add_tenant(d, "eve")
        status, _ = d.request("GET", f"/api/v1/jobs/{job_id}/logs", token=other)
        assert status == 403
        # The log directory is the job's user's: a FIFO (or a second name) there is not read.
        err_log = props["standard_error"].replace("%j", "100")
        os.mkfifo(err_log)
        p = d.cli("logs", str(job_id), "--stderr", token=token, check=False)
        assert p.returncode != 0 and "not a plain file" in p.stderr
        os.unlink(err_log)

        slurm.set_state(100, "COMPLETED", end_time=int(time.time()), exit_code=0)
        w = d.cli("wait", str(job_id), token=token, check=False)
        assert w.returncode == 0, w.stderr
        job = d.job(job_id)
        assert job["state"] == "COMPLETED" and job["exit_code"] == 0
        assert [e["state"] for e in job["events"]] == ["PENDING", "RUNNING", "COMPLETED"]


def test_an_exit_code_node_failure_and_a_requeue_come_back_from_slurm(tmp_path, slurm):
    with slurm_daemon(tmp_path, slurm) as d:
        failed = submit(d, ["false"], nodes=2)
        lost_node = submit(d, ["sleep", "100"], nodes=2, requeue=True)
        # Slurm 22.05 makes a job requeueable whenever the key is there, even false.
        assert "requeue" not in slurm.submitted[0][1]["job"]
        slurm.set_state(100, "FAILED", nodes="gsn[1-2]", start_time=int(time.time()) - 1,
                        end_time=int(time.time()), exit_code=3 << 8)
        job = wait_for(d, failed, "FAILED")
        assert job["exit_code"] == 3
        # A node lost mid-job: Slurm requeues a --requeue job (PENDING, its restart count up)...
        slurm.set_state(101, "RUNNING", nodes="gsn[1-2]", start_time=int(time.time()))
        wait_for(d, lost_node, "RUNNING")
        slurm.set_state(101, "PENDING", restart_cnt=1, state_reason="BeginTime")
        job = wait_for(d, lost_node, "PENDING")
        assert "requeued by Slurm" in job["reason"]
        # ... and a job it does not requeue ends as NODE_FAIL.
        slurm.set_state(101, "NODE_FAIL", end_time=int(time.time()))
        job = wait_for(d, lost_node, "NODE_FAIL")
        assert [e["state"] for e in job["events"]] == ["PENDING", "RUNNING", "PENDING",
                                                       "NODE_FAIL"]


def test_cancel_is_scancel_and_a_restart_keeps_following_the_job(tmp_path, slurm):
    with slurm_daemon(tmp_path, slurm) as d:
        kept = submit(d, ["sleep", "100"], nodes=3)
        cancelled = submit(d, ["sleep", "100"], nodes=2)
        d.cli("cancel", str(cancelled))
        assert slurm.cancelled == [101]
        wait_for(d, cancelled, "CANCELLED")
        d.stop()
        slurm.set_state(100, "RUNNING", nodes="gsn[1-3]", start_time=int(time.time()))
        d.start()
        wait_for(d, kept, "RUNNING")
        # A job Slurm has forgotten (purged after MinJobAge) is LOST, not left running.
        with slurm.lock:
            del slurm.jobs[100]
        job = wait_for(d, kept, "LOST")
        assert "no longer knows" in job["reason"]


def test_what_slurm_refuses_and_what_cannot_go_to_slurm_gets_a_clear_error(tmp_path, slurm):
    with slurm_daemon(tmp_path, slurm) as d:
        slurm.refusal = [{"error": "Invalid partition name specified", "error_code": 2000}]
        p = d.cli("submit", "--nodes", "2", "--partition", "nope", "--", "true", check=False)
        assert p.returncode != 0 and "Invalid partition name specified" in p.stderr
        # More nodes than the partition has: Slurm queues the job, to wait for ever, and
        # objects; gpusrv refuses it and cancels what Slurm queued.
        slurm.refusal = [{"error": "Requested partition configuration not available now",
                          "error_code": 2015}]
        slurm.queue_refused = True
        p = d.cli("submit", "--nodes", "5", "--", "true", check=False)
        assert p.returncode != 0 and "partition configuration not available" in p.stderr
        assert slurm.cancelled == [100]
        assert d.request("GET", "/api/v1/jobs?all=1", token=d.admin)[1]["jobs"] == []
        slurm.submitted.clear()
        for asks, says in [({"nodes": 2, "gpus": 1}, "gpus_per_node"),
                           ({"partition": "gpu"}, "name its nodes"),
                           ({"nodes": 2, "partition": "a b"}, "partition"),
                           ({"nodes": -1}, "nodes"),
                           ({"nodes": 2, "mpi": "yes"}, "mpi must be true or false")]:
            status, body = d.request("POST", "/api/v1/jobs", {"command": ["true"], **asks},
                                     d.admin)
            assert status == 400 and says in body["error"], (asks, body)
        assert slurm.submitted == []
    # A daemon whose key is not Slurm's: slurmrestd's refusal is named.
    wrong = tmp_path / "wrong.key"
    wrong.write_bytes(os.urandom(32))
    wrong.chmod(0o600)
    with daemon(tmp_path, "--slurm-rest-url", slurm.url, "--slurm-jwt-key", str(wrong)) as d:
        p = d.cli("submit", "--nodes", "2", "--", "true", check=False)
        assert p.returncode != 0 and "slurmctld refused the token" in p.stderr
    # A daemon with no Slurm set up says so.
    with daemon(tmp_path) as d:
        p = d.cli("submit", "--nodes", "2", "--", "true", check=False)
        assert p.returncode != 0 and "hands no jobs to Slurm" in p.stderr


def test_a_key_others_can_read_is_refused_at_start(tmp_path, slurm):
    os.chmod(slurm.key_path, 0o644)
    p = subprocess.run([GPUSRV, "serve", "--state-dir", str(tmp_path / "state"), "--http-port",
                        str(free_port()), "--grpc-port", "0", "--slurm-rest-url", slurm.url,
                        "--slurm-jwt-key", slurm.key_path], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0 and "readable by others" in p.stderr


def test_the_batch_script_gives_each_task_its_rank_and_the_command_intact(tmp_path, slurm):
    with slurm_daemon(tmp_path, slurm) as d:
        submit(d, ["sh", "-c", 'echo "$MASTER_ADDR $MASTER_PORT $WORLD_SIZE $RANK $LOCAL_RANK '
                  '$LOCAL_WORLD_SIZE $NODE_RANK"; printf "[%s]" "$@"; echo', "x", "a b", "it's",
                  "$HOME"], nodes=2, ntasks_per_node=2)
        script = slurm.submitted[0][1]["script"]
    # Stand-ins: scontrol expands the node list; srun starts the command once
    # per task with the variables Slurm gives each (2 nodes x 2 tasks).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text('#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && '
                                      'printf "gsn1\\ngsn2\\n"\n')
    (bin_dir / "srun").write_text(
        "#!/bin/sh\n"
        'while [ "${1#-}" != "$1" ]; do shift; done\n'
        "for t in 0 1 2 3; do\n"
        '  SLURM_PROCID=$t SLURM_LOCALID=$((t % 2)) SLURM_NODEID=$((t / 2)) "$@"\n'
        "done\n")
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "20123",
           "SLURM_JOB_NODELIST": "gsn[1-2]", "SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2",
           "HOME": "/home/x"}
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0::2] == [f"gsn1 20123 4 {t} {t % 2} 2 {t // 2}" for t in range(4)]
    assert set(lines[1::2]) == {"[a b][it's][$HOME]"}  # nothing expanded or split


def test_a_daemon_without_slurm_keeps_slurms_jobs_and_says_why(tmp_path, slurm):
    with slurm_daemon(tmp_path, slurm) as d:
        job_id = submit(d, ["sleep", "100"], nodes=2)
        d.stop()
        d.extra = ()  # the same state, without --slurm-rest-url
        d.start()
        job = d.job(job_id)
        assert job["state"] == "PENDING" and "no --slurm-rest-url" in job["reason"]
        p = d.cli("cancel", str(job_id), check=False)
        assert p.returncode != 0 and "scancel it there" in p.stderr
        assert d.proc.poll() is None


def test_slurmrestd_down_keeps_the_states_and_a_pending_cancel_is_no_success(tmp_path, slurm):
    with slurm_daemon(tmp_path, slurm) as d:
        running = submit(d, ["sleep", "100"], nodes=2)
        pending = submit(d, ["sleep", "100"], nodes=2)
        slurm.set_state(100, "RUNNING", nodes="gsn[1-2]", start_time=int(time.time()))
        wait_for(d, running, "RUNNING")
        slurm.down = True
        slurm.set_state(100, "COMPLETED", end_time=int(time.time()), exit_code=0)
        time.sleep(3)  # passes that reach nothing change nothing
        assert d.job(running)["state"] == "RUNNING"
        p = d.cli("cancel", str(pending), check=False)
        assert p.returncode != 0 and "slurmrestd" in p.stderr
        slurm.down = False
        wait_for(d, running, "COMPLETED")
        d.cli("cancel", str(pending))
        w = d.cli("wait", str(pending), check=False)
        assert w.returncode != 0 and "CANCELLED" in w.stderr
        job = d.job(pending)
        assert job["exit_code"] is None and job["runs"] == 0 and job["start_time"] is None


FAKE_SACCTMGR = """#!/bin/sh
echo "$*" >> CALLS
FAIL
case "$*" in
*" add "*)
  if grep -qxF -e "$*" SEEN 2>/dev/null; then echo " Nothing new added."; exit 1; fi
  echo "$*" >> SEEN
  case "$3" in account) echo "${4#name=} ${5#fairshare=}" >> SHARES;; esac;;
*" modify "*)
  if grep -qxF -e "${5#name=} ${7#fairshare=}" SHARES 2>/dev/null; then
    echo " Nothing modified"; exit 1
  fi
  echo "${5#name=} ${7#fairshare=}" >> SHARES;;
esac
echo " Done"
"""


def fake_sacctmgr(tmp_path, fail=""):
    """A sacctmgr on PATH that logs its arguments and answers as Slurm's
    does: "Nothing new added." (exit 1) to what exists already, and "Nothing
    modified" (exit 1) to shares set to what they are (sacctmgr-shares holds
    "ACCOUNT SHARES" lines). With `fail`, it fails with those words."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls, seen = tmp_path / "sacctmgr-calls", tmp_path / "sacctmgr-seen"
    tool = bin_dir / "sacctmgr"
    tool.write_text(FAKE_SACCTMGR.replace("CALLS", f'"{calls}"').replace("SEEN", f'"{seen}"')
                    .replace("SHARES", f'"{tmp_path / "sacctmgr-shares"}"')
                    .replace("FAIL", f'echo "{fail}"; exit 1' if fail else ""))
    tool.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}, calls


def test_accounts_are_made_once_per_tenant_with_their_weight_as_shares(tmp_path, slurm):
    env, calls = fake_sacctmgr(tmp_path)
    with daemon(tmp_path, "--slurm-rest-url", slurm.url, "--slurm-jwt-key", slurm.key_path,
                "--slurm-create-accounts", "--slurm-accounts", "Bob=Physics", env=env) as d:
        user = "nobody" if IS_ROOT else pwd.getpwuid(os.geteuid()).pw_name
        token = d.cli("tenant", "add", "Bob", "--user", user, "--weight", "0.5").stdout.strip()
        ids = [int(d.cli("submit", "--nodes", "2", "--", "true", token=token).stdout)
               for _ in range(2)]
        # Slurm keeps names in lower case: the account is sent so.
        assert [body["job"]["account"] for _, body in slurm.submitted] == ["physics"] * 2
        # An account made now has its shares: no modify.
        assert calls.read_text().splitlines() == [
            "-i add account name=physics fairshare=50 description=gpusrv tenant account "
            "organization=gpusrv",
            f"-i add user name={user} account=physics"]
        # The same tenant with another weight: the shares are set again.
        for job_id in ids:
            d.cli("cancel", str(job_id))
            wait_for(d, job_id, "CANCELLED")
        d.cli("tenant", "remove", "Bob")
        token = d.cli("tenant", "add", "Bob", "--user", user, "--weight", "3").stdout.strip()
        d.cli("submit", "--nodes", "2", "--", "true", token=token)
        assert calls.read_text().splitlines()[2:] == [
            "-i modify account where name=physics set fairshare=300"]


def test_an_account_slurm_has_already_gets_the_tenants_shares(tmp_path, slurm):
    """An account made before (by an admin, or by this daemon before a
    restart): sacctmgr says "Nothing new added", and the shares are set; they
    are already 100, so it says "Nothing modified", which is no failure."""
    env, calls = fake_sacctmgr(tmp_path)
    (tmp_path / "sacctmgr-seen").write_text(
        "-i add account name=dana fairshare=100 description=gpusrv tenant account "
        "organization=gpusrv\n")
    (tmp_path / "sacctmgr-shares").write_text("dana 100\n")
    with daemon(tmp_path, "--slurm-rest-url", slurm.url, "--slurm-jwt-key", slurm.key_path,
                "--slurm-create-accounts", env=env) as d:
        user = "nobody" if IS_ROOT else pwd.getpwuid(os.geteuid()).pw_name
        token = d.cli("tenant", "add", "dana", "--user", user).stdout.strip()
        d.cli("submit", "--nodes", "2", "--", "true", token=token)
        assert calls.read_text().splitlines() == [
            "-i add account name=dana fairshare=100 description=gpusrv tenant account "
            "organization=gpusrv",
            "-i modify account where name=dana set fairshare=100",
            f"-i add user name={user} account=dana"]


@pytest.mark.parametrize("args, fail, status, message", [
    ((), "sacctmgr: error: Problem talking to the database: Connection refused", 500,
     "sacctmgr could not create account carol (exit 1): sacctmgr: error: Problem talking to "
     "the database: Connection refused"),
    (("--slurm-accounts", "carol=a b"), "", 400,
     "tenant 'carol''s Slurm account 'a b' is not letters, digits, '_', '-' and '.'"),
    (("--slurm-accounts", "carol=" + "x" * 64), "", 400,
     "tenant 'carol''s Slurm account is 64 bytes; at most 63"),
])
def test_an_account_that_cannot_be_made_stops_the_job(tmp_path, slurm, args, fail, status,
                                                       message):
    env, _ = fake_sacctmgr(tmp_path, fail)
    with daemon(tmp_path, "--slurm-rest-url", slurm.url, "--slurm-jwt-key", slurm.key_path,
                "--slurm-create-accounts", *args, env=env) as d:
        token, _ = add_tenant(d, "carol")
        got, body = d.request("POST", "/api/v1/jobs", {"command": ["true"], "nodes": 2}, token)
        assert (got, body["error"]) == (status, message)
        assert slurm.submitted == []


def test_slurm_logs_go_with_the_job_retention(tmp_path, slurm):
    """--job-retention removes a Slurm job's log files as it removes a local
    job's directory; `gpusrv logs` then says why they are gone."""
    with slurm_daemon(tmp_path, slurm, "--job-retention", "2s") as d:
        job_id = submit(d, ["echo", "hi"], nodes=2)
        props = slurm.submitted[0][1]["job"]
        out, err = (props[k].replace("%j", "100") for k in ("standard_output", "standard_error"))
        for path in (out, err):  # what Slurm's first node would write
            with open(path, "w") as f:
                f.write("hi\n" if path == out else "")
        slurm.set_state(100, "COMPLETED", nodes="gsn[1-2]", start_time=int(time.time()) - 1,
                        end_time=int(time.time()), exit_code=0)
        wait_for(d, job_id, "COMPLETED")
        assert d.cli("logs", str(job_id)).stdout == "hi\n"
        deadline = time.time() + 30
        while os.path.exists(out) and time.time() < deadline:
            time.sleep(0.2)
        assert not os.path.exists(out) and not os.path.exists(err)
        status, body = d.request("GET", f"/api/v1/jobs/{job_id}/logs", token=d.admin)
        assert status == 404 and "removed" in body["error"], body
        assert d.job(job_id)["state"] == "COMPLETED"  # the record stays
