"""gpusrv on a real Slurm 22.05 cluster: deploy/slurm-cluster.sh starts
slurmctld, slurmrestd (JWT) and three slurmd nodes, each in a network and UTS
namespace of its own (gsn1..gsn3 on a bridge), all on this machine. Each node
runs a gpusrv daemon of its own (two fake GPUs) that slurmd's Prolog and
Epilog call (`gpusrv slurm prolog|epilog`); slurm.conf's node lines and
gres.conf are what `gpusrv slurm node|gres` write. A front-desk daemon on the
host hands jobs to Slurm through slurmrestd (`gpusrv submit --nodes`).

Root only (namespaces, slurmd); skipped elsewhere with the reason."""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from test_frontdesk import FAKE_PLUGINS, Daemon, GPUSRV as GIVEN_GPUSRV
from test_slurm_bookings import relu_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSRV = os.path.abspath(GIVEN_GPUSRV)  # slurmd runs the hooks from elsewhere
CLUSTER = os.path.join(ROOT, "deploy", "slurm-cluster.sh")
CONF = "/etc/gs-cluster/slurm.conf"
NODES = ["gsn1", "gsn2", "gsn3"]
NODE_PORT = 8000  # each node's daemon, on the loopback of its own namespace
DESK_ARGS = ("--slurm-rest-url", "http://127.0.0.1:6820", "--slurm-jwt-key",
             "/etc/gs-cluster/jwt_hs256.key")

MISSING = [t for t in ("slurmctld", "slurmd", "slurmrestd", "mpicc", "ip", "nsenter")
           if not shutil.which(t)]
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces, slurmd)"),
    pytest.mark.skipif(bool(MISSING), reason=f"not installed: {' '.join(MISSING)}"),
    pytest.mark.skipif(not FAKE_PLUGINS, reason="GPUSRV_TEST_FAKE_PLUGINS is not set (run "
                       "through ctest): no fake GPUs"),
]


def slurm_env():
    return {**os.environ, "SLURM_CONF": CONF}


def run(*cmd, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
    assert not check or p.returncode == 0, f"{cmd}: {p.stdout}{p.stderr}"
    return p


def fake_gpu_env(devs):
    return {"GPUSRV_PLUGIN_PATH": FAKE_PLUGINS, "GPUSRV_BACKENDS": "cpu,fakegpu",
            "GPUSRV_TEST_FAKE_GPUS": str(len(devs)), "GPUSRV_TEST_FAKE_GPU_TYPE": "1",
            "GPUSRV_TEST_FAKE_DEV_NODES": ",".join(devs)}


class Cluster:
    def __init__(self, tmp):
        self.tmp = tmp
        self.devs = {n: [os.path.join(tmp, f"{n}g{i}") for i in range(2)] for n in NODES}
        self.node_state = {n: os.path.join(tmp, "state", n) for n in NODES}
        self.node_daemons = {}

    def write_node_config(self):
        """slurm.conf's node lines and gres.conf, as gpusrv writes them."""
        node_lines, gres = [], []
        for i, n in enumerate(NODES, 1):
            for dev in self.devs[n]:
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # slurmd wants a char device
            env = {**os.environ, **fake_gpu_env(self.devs[n])}
            out = run(GPUSRV, "slurm", "node", "--node-name", n, env=env).stdout.splitlines()
            types = [x for x in out if x.startswith("GresTypes=")]
            if i == 1:
                node_lines += types
            node_lines += [x + f" NodeAddr=10.77.0.1{i}" for x in out if x.startswith("NodeName=")]
            gres += [x for x in run(GPUSRV, "slurm", "gres", "--node-name", n,
                                    env=env).stdout.splitlines() if not x.startswith("#")]
        for name, lines in (("nodes.conf", node_lines), ("gres.conf", gres)):
            with open(os.path.join(self.tmp, name), "w") as f:
                f.write("\n".join(lines) + "\n")

    def write_hooks(self):
        for hook in ("prolog", "epilog"):
            path = os.path.join(self.tmp, hook)
            with open(path, "w") as f:
                f.write(f"#!/bin/sh\nexec {GPUSRV} slurm {hook} --url "
                        f"http://127.0.0.1:{NODE_PORT} --token-file "
                        f"{self.tmp}/state/$(hostname)/admin.token\n")
            os.chmod(path, 0o755)

    def start(self):
        self.write_node_config()
        self.write_hooks()
        env = {**os.environ, "GS_CLUSTER_NODE_LINES": os.path.join(self.tmp, "nodes.conf"),
               "GS_CLUSTER_GRES_CONF": os.path.join(self.tmp, "gres.conf"),
               "GS_CLUSTER_PROLOG": os.path.join(self.tmp, "prolog"),
               "GS_CLUSTER_EPILOG": os.path.join(self.tmp, "epilog")}
        run(CLUSTER, "stop", check=False)
        self.started = run(CLUSTER, "start", env=env, check=False)
        for n in NODES:
            self.start_node_daemon(n)

    def start_node_daemon(self, n):
        os.makedirs(self.node_state[n], exist_ok=True)
        log = open(os.path.join(self.tmp, f"gpusrv-{n}.log"), "a")
        self.node_daemons[n] = subprocess.Popen(
            [CLUSTER, "exec", n, GPUSRV, "serve", "--state-dir", self.node_state[n],
             "--http-port", str(NODE_PORT), "--grpc-port", "0", "--model-repository",
             os.path.join(self.tmp, "empty")], stdout=log, stderr=log,
            env={**os.environ, **fake_gpu_env(self.devs[n])})
        deadline = time.time() + 30
        while run("ip", "netns", "exec", n, "curl", "-sf",
                  f"http://127.0.0.1:{NODE_PORT}/v2/health/live", check=False).returncode:
            assert time.time() < deadline, f"gpusrv on {n} did not come up"
            time.sleep(0.2)

    def node_call(self, n, method, path, check=True):
        """A call to node n's gpusrv as its admin: (HTTP status, JSON body)."""
        with open(os.path.join(self.node_state[n], "admin.token")) as f:
            token = f.read().strip()
        out = run("ip", "netns", "exec", n, "curl", "-s", "-X", method, "-w", "\n%{http_code}",
                  "-H", f"Authorization: Bearer {token}", "--data-binary", "{}" if method == "POST"
                  else "", f"http://127.0.0.1:{NODE_PORT}{path}").stdout
        body, status = out.rsplit("\n", 1)
        assert not check or status == "200", (path, status, body)
        return int(status), json.loads(body) if body else None

    def node_bookings(self, n):
        out = self.node_call(n, "GET", "/api/v1/bookings")[1]
        return {b["owner"]: [part["device"] for part in b["devices"]]
                for b in out["bookings"] if b["owner"].startswith("slurm")}

    def stop(self):
        for p in self.node_daemons.values():
            p.send_signal(signal.SIGTERM)
        for p in self.node_daemons.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        run(CLUSTER, "stop", check=False)


@pytest.fixture(scope="module")
def cluster():
    tmp = tempfile.mkdtemp(prefix="gsc")  # short: device node paths must fit 63 bytes
    os.chmod(tmp, 0o755)
    os.makedirs(os.path.join(tmp, "empty"))
    c = Cluster(tmp)
    try:
        c.start()
        # An MPI program every task's user can run.
        c.allreduce = os.path.join(tmp, "allreduce")
        run("mpicc", "-O2", "-o", c.allreduce, os.path.join(ROOT, "deploy", "slurm-allreduce.c"))
        yield c
    finally:
        c.stop()
        if not os.environ.get("GS_TEST_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def desk(cluster, tmp_path_factory):
    """The front desk on the host, handing jobs to slurmrestd, and making
    tenants' Slurm accounts (the cluster enforces associations)."""
    d = Daemon(tmp_path_factory.mktemp("desk"), *DESK_ARGS, "--slurm-create-accounts",
               env={"SLURM_CONF": CONF}).start()  # for sacctmgr
    yield d
    if d.proc.poll() is None:
        d.stop()
    d.cleanup()


def wait_state(d, job_id, states, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = d.job(job_id)
        if job["state"] in states:
            return job
        time.sleep(0.25)
    raise AssertionError(f"job {job_id} never reached {states}: {d.job(job_id)}")


def submit(d, *args, token=None):
    p = d.cli("submit", *args, token=token, check=False)
    assert p.returncode == 0, p.stderr
    return int(p.stdout.strip())


def test_slurmd_takes_the_node_and_gres_lines_gpusrv_writes(cluster):
    assert cluster.started.returncode == 0, cluster.started.stdout + cluster.started.stderr
    out = run("sinfo", "-h", "-N", "-o", "%N %t %G", env=slurm_env()).stdout.split("\n")
    rows = sorted({line for line in out if line})
    assert [r.split()[0] for r in rows] == NODES and all(" idle " in r for r in rows), rows
    assert all("gpu:" in r and ":2" in r for r in rows), rows


def test_an_mpi_allreduce_on_two_nodes_through_gpusrv_submit(cluster, desk):
    job_id = submit(desk, "--nodes", "2", "--ntasks-per-node", "2", "--mpi", "--",
                    cluster.allreduce)
    job = wait_state(desk, job_id, {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"})
    log = desk.cli("logs", str(job_id)).stdout
    if job["state"] != "COMPLETED":  # whole, not a repr cut short: which rank failed first, and how
        err = desk.cli("logs", str(job_id), "--stderr").stdout
        pytest.fail(f"job {job_id} {job['state']}, exit {job.get('exit_code')}\n--- stdout\n{log}"
                    f"\n--- stderr\n{err}")
    assert "allreduce ok: sum 10, expected 10" in log
    assert len({line.split()[-3] for line in log.splitlines() if line.startswith("rank ")}) == 2


def test_each_task_gets_the_rendezvous_variables(cluster, desk):
    job_id = submit(desk, "--nodes", "2", "--ntasks-per-node", "2", "--", "sh", "-c",
                    'echo "$RANK $LOCAL_RANK $WORLD_SIZE $NODE_RANK $MASTER_ADDR $(hostname)"')
    job = wait_state(desk, job_id, {"COMPLETED", "FAILED"})
    assert job["state"] == "COMPLETED", desk.cli("logs", str(job_id), "--stderr").stdout
    rows = sorted(line.split() for line in desk.cli("logs", str(job_id)).stdout.splitlines())
    first = rows[0][5]
    assert [r[:4] for r in rows] == [["0", "0", "4", "0"], ["1", "1", "4", "0"],
                                     ["2", "0", "4", "1"], ["3", "1", "4", "1"]]
    assert {r[4] for r in rows} == {first}  # every task meets at the first node
    assert rows[0][5] == rows[1][5] != rows[2][5] == rows[3][5]


def test_a_slurm_jobs_gpus_are_booked_on_its_nodes_while_it_runs(cluster, desk):
    job_id = submit(desk, "--nodes", "2", "--gpus-per-node", "1", "--partition", "pair", "--",
                    "sleep", "300")
    job = wait_state(desk, job_id, {"RUNNING"})
    slurm_id = job["slurm_job_id"]
    owner = f"slurm job {slurm_id} (nobody)"
    for n in ("gsn1", "gsn2"):
        assert cluster.node_bookings(n) == {owner: ["fakegpu0"]}, n
    assert cluster.node_bookings("gsn3") == {}
    # A model asking for that GPU on gsn1 is refused, naming the Slurm job;
    # on gsn3, where Slurm holds nothing, it loads. (The nodes share the
    # repository, which was empty when their daemons started.)
    relu_model(pathlib.Path(cluster.tmp, "empty"), "pinned", {
        "max_batch_size": 4, "instance_group": [{"kind": "KIND_GPU", "devices": ["fakegpu0"]}]})
    status, body = cluster.node_call("gsn1", "POST", "/v2/repository/models/pinned/load",
                                     check=False)
    assert status == 400 and f"fakegpu0 is held whole by {owner}" in body["error"], body
    cluster.node_call("gsn3", "POST", "/v2/repository/models/pinned/load")
    desk.cli("cancel", str(job_id))
    wait_state(desk, job_id, {"CANCELLED"})
    deadline = time.time() + 30
    while any(cluster.node_bookings(n) for n in ("gsn1", "gsn2")):  # the epilog releases them
        assert time.time() < deadline, [cluster.node_bookings(n) for n in ("gsn1", "gsn2")]
        time.sleep(0.5)


def test_what_slurm_cannot_run_is_refused_with_its_reason(cluster, desk):
    p = desk.cli("submit", "--nodes", "2", "--partition", "nope", "--", "true", check=False)
    assert p.returncode != 0 and "Invalid partition name" in p.stderr, p.stderr
    p = desk.cli("submit", "--nodes", "5", "--", "true", check=False)
    assert p.returncode != 0 and "Slurm refused the job" in p.stderr, p.stderr
    # The job Slurm queued before objecting was cancelled, not left to wait for ever.
    left = run("squeue", "-h", "-t", "PD", "-o", "%i %r", env=slurm_env()).stdout
    assert "PartitionConfig" not in left, left


def associations():
    """Slurm's accounting: {(account, user): fair-share shares}."""
    out = run("sacctmgr", "-n", "-P", "show", "assoc", "format=account,user,fairshare",
              env=slurm_env()).stdout
    return {tuple(line.split("|")[:2]): line.split("|")[2] for line in out.splitlines()}


def test_tenants_get_accounts_with_their_weight_as_fair_share(cluster, desk):
    token = desk.cli("tenant", "add", "lab", "--user", "nobody", "--weight", "2.5").stdout.strip()
    job_id = submit(desk, "--nodes", "2", "--", "true", token=token)
    job = wait_state(desk, job_id, {"COMPLETED", "FAILED"})
    assert job["state"] == "COMPLETED", job
    assoc = associations()
    assert assoc[("lab", "")] == "250" and ("lab", "nobody") in assoc, assoc
    charged = run("sacct", "-n", "-P", "-X", "-j", str(job["slurm_job_id"]), "-o", "account,user",
                  env=slurm_env()).stdout.split()
    assert charged == ["lab|nobody"], charged
    # The tenant again with another weight: its account's shares follow.
    desk.cli("tenant", "remove", "lab")
    token = desk.cli("tenant", "add", "lab", "--user", "nobody", "--weight", "4").stdout.strip()
    job_id = submit(desk, "--nodes", "1", "--", "true", token=token)
    assert wait_state(desk, job_id, {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
    assert associations()[("lab", "")] == "400"


def test_a_tenant_without_a_slurm_account_is_refused(cluster, tmp_path):
    """Where the daemon does not make accounts, Slurm's refusal says what to do."""
    d = Daemon(tmp_path, *DESK_ARGS).start()
    try:
        token = d.cli("tenant", "add", "stray", "--user", "nobody").stdout.strip()
        p = d.cli("submit", "--nodes", "2", "--", "true", token=token, check=False)
        assert p.returncode != 0 and "Invalid account" in p.stderr, p.stderr
        assert "user nobody has no association with account 'stray'" in p.stderr, p.stderr
        assert d.request("GET", "/api/v1/jobs", token=d.admin)[1]["jobs"] == []
        assert ("stray", "nobody") not in associations()
    finally:
        d.stop()
        d.cleanup()


def test_slurmctld_restarted_mid_job_loses_nothing(cluster, desk):
    job_id = submit(desk, "--nodes", "2", "--", "sh", "-c", "sleep 6; echo done")
    wait_state(desk, job_id, {"RUNNING"})
    with open("/run/gs-cluster/slurmctld.pid") as f:
        pid = int(f.read())
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + 30
    while os.path.exists(f"/proc/{pid}"):
        assert time.time() < deadline
        time.sleep(0.1)
    run("slurmctld", "-f", CONF, env=slurm_env())
    job = wait_state(desk, job_id, {"COMPLETED", "FAILED", "LOST", "NODE_FAIL"}, timeout=90)
    assert job["state"] == "COMPLETED", job
    assert desk.cli("logs", str(job_id)).stdout == "done\ndone\n"
    assert [e["state"] for e in job["events"]] == ["PENDING", "RUNNING", "COMPLETED"]


def kill_slurmd(node, keep):
    """slurmd of `node` and its jobs' processes, killed; the node's gpusrv kept."""
    pids = run("ip", "netns", "pids", node).stdout.split()
    for pid in pids:
        if int(pid) not in keep:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def wait_all_idle(timeout=60):
    """Until every node is idle: after slurmctld's restart, a node is UNKNOWN
    until its slurmd registers again, and Slurm refuses a job that needs it."""
    deadline = time.time() + timeout
    while True:
        states = set(run("sinfo", "-h", "-N", "-o", "%N %t", env=slurm_env()).stdout.split("\n"))
        if sorted(x for x in states if x) == [f"{n} idle" for n in NODES]:
            return
        assert time.time() < deadline, states
        time.sleep(0.5)


def test_a_node_killed_mid_job_fails_the_job_and_requeue_runs_it_again(cluster, desk):
    wait_all_idle()
    plain = submit(desk, "--nodes", "2", "--partition", "pair", "--", "sleep", "300")
    again = submit(desk, "--nodes", "3", "--requeue", "--", "sh", "-c",
                   'echo run; [ "$SLURM_RESTART_COUNT" = 1 ] || sleep 300')
    wait_state(desk, plain, {"RUNNING"})
    wait_state(desk, again, {"RUNNING"})
    daemon_pids = {int(x) for x in run("pgrep", "-f", "state/gsn2 ").stdout.split()}
    kill_slurmd("gsn2", daemon_pids)
    job = wait_state(desk, plain, {"NODE_FAIL", "FAILED", "COMPLETED"}, timeout=120)
    assert job["state"] == "NODE_FAIL", job
    job = wait_state(desk, again, {"PENDING"}, timeout=60)
    assert "requeued by Slurm" in job["reason"], job
    run(CLUSTER, "exec", "gsn2", "env", f"SLURM_CONF={CONF}", "slurmd", "-f", CONF, "-N", "gsn2")
    job = wait_state(desk, again, {"COMPLETED", "FAILED", "NODE_FAIL"}, timeout=180)
    assert job["state"] == "COMPLETED", job
    assert job["runs"] == 2 and desk.cli("logs", str(again)).stdout.count("run") >= 2
