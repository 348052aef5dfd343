"""Slurm's jobs booked in the ledger: `gpusrv slurm prolog` and `epilog` run as
slurmd runs them (SLURM_JOB_ID, SLURM_JOB_USER and SLURM_JOB_GPUS in the
environment) against a daemon whose GPUs are the fakegpu test plugin's. A
booked GPU is not given to a local job; the bookings survive a restart and
are then reconciled with Slurm's list of jobs (squeue, here a stand-in on
PATH that prints what the test wrote, as `squeue --noheader --format=%A`
does)."""
import json
import os
import signal
import stat
import subprocess
import tempfile
import time

import pytest

from test_frontdesk import FAKE_PLUGINS, GPUSRV, daemon

pytestmark = pytest.mark.skipif(not FAKE_PLUGINS, reason="GPUSRV_TEST_FAKE_PLUGINS is not set "
                                "(run through ctest): no fake GPUs")


@pytest.fixture
def fake_slurm(tmp_path):
    """A squeue on PATH that prints the job ids in `jobs` (or fails when it
    holds "fail"), and the environment of a daemon with two fake GPUs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    jobs = tmp_path / "squeue-jobs"
    jobs.write_text("")
    squeue = bin_dir / "squeue"
    squeue.write_text("#!/bin/sh\n"
                      f'[ "$*" = "--all --noheader --format=%A" ] || exit 2\n'
                      f'grep -qx fail "{jobs}" && exit 1\n'
                      f'cat "{jobs}"\n')
    squeue.chmod(0o755)
    short = tempfile.mkdtemp(prefix="gsn")  # a node's path fits in 63 bytes
    nodes = [os.path.join(short, f"fakegpu{i}") for i in range(2)]  # slurmd wants a File per GPU
    for node in nodes:  # character devices, as /dev/null (slurmd checks), where root
        try:
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            open(node, "w").close()
    env = {"GPUSRV_PLUGIN_PATH": FAKE_PLUGINS, "GPUSRV_TEST_FAKE_GPU_TYPE": "1",
           "GPUSRV_TEST_FAKE_DEV_NODES": ",".join(nodes),
           "GPUSRV_BACKENDS": "cpu,fakegpu", "GPUSRV_TEST_FAKE_GPUS": "2",
           "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return jobs, env


def hook(d, action, job=None, user="alice", gpus=None, token=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update({"GPUSRV_URL": f"http://127.0.0.1:{d.port}", "GPUSRV_TOKEN": token or d.admin})
    if job is not None:
        env["SLURM_JOB_ID"] = str(job)
    if user is not None:
        env["SLURM_JOB_USER"] = user
    if gpus is not None:
        env["SLURM_JOB_GPUS"] = gpus
    return subprocess.run([GPUSRV, "slurm", action], capture_output=True, text=True, timeout=60,
                          env=env)


def slurm_bookings(d):
    status, body = d.request("GET", "/api/v1/bookings", token=d.admin)
    assert status == 200
    return {b["owner"]: b["devices"] for b in body["bookings"] if b["owner"].startswith("slurm")}


def gpus_of(env):
    """The daemon's GPUs in Slurm's order, as `gpusrv slurm gres` numbers them."""
    out = subprocess.run([GPUSRV, "slurm", "gres", "--node-name", "n1"], capture_output=True,
                         text=True, env={**os.environ, **env}, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if " Name=gpu " in line]
    assert [line.split("File=")[1] for line in lines] == \
        env["GPUSRV_TEST_FAKE_DEV_NODES"].split(","), out.stdout
    return ["fakegpu0", "fakegpu1"]


def test_prolog_books_the_jobs_gpus_and_epilog_releases_them(tmp_path, fake_slurm):
    _, env = fake_slurm
    gpus = gpus_of(env)
    with daemon(tmp_path, "--job-devices", "fakegpu0,fakegpu1", env=env) as d:
        p = hook(d, "prolog", job=101, gpus="1")
        assert p.returncode == 0, p.stderr
        booked = slurm_bookings(d)
        assert list(booked) == ["slurm job 101 (alice)"]
        (part,) = booked["slurm job 101 (alice)"]
        assert part["device"] == gpus[1] and part["share"] == 100 and part["memory"] > 0
        # /metrics shows it under the same owner, as Prometheus reads it.
        status, metrics = d.request("GET", "/metrics")
        assert status == 200
        metrics = metrics.decode()
        labels = f'device="{gpus[1]}",owner="slurm job 101 (alice)"'
        assert f"gpusrv_booking_compute_share_percent{{{labels}}} 100\n" in metrics
        assert f"gpusrv_booking_memory_bytes{{{labels}}} {part['memory']}\n" in metrics
        # ... and gpusrv smi --bookings, a row per device of each booking.
        smi = subprocess.run([GPUSRV, "smi", "--bookings", "--url", f"http://127.0.0.1:{d.port}",
                              "--token", d.admin], capture_output=True, text=True, timeout=60,
                             env={**os.environ, **env})
        assert smi.returncode == 0, smi.stderr
        rows = smi.stdout.split("Bookings:\n")[1].splitlines()
        row = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows
               if "slurm job 101 (alice)" in r]
        assert len(row) == 1 and row[0][0] == gpus[1] and row[0][-1] == "100%", smi.stdout
        # A local job that needs both GPUs waits while Slurm holds one ...
        job = d.submit(["true"], gpus=2)
        time.sleep(1.0)
        assert d.job(job)["state"] == "PENDING"
        # ... and runs once the epilog gives it back.
        assert hook(d, "epilog", job=101).returncode == 0
        assert slurm_bookings(d) == {}
        assert d.wait(job)["state"] == "COMPLETED"
        # The prolog again for the same job changes nothing; an epilog for
        # a job without a booking (no GPUs, or run twice) is fine.
        assert hook(d, "prolog", job=102, gpus="0-1").returncode == 0
        assert hook(d, "prolog", job=102, gpus="0-1").returncode == 0
        assert [p["device"] for p in slurm_bookings(d)["slurm job 102 (alice)"]] == gpus
        assert hook(d, "epilog", job=102).returncode == 0
        assert hook(d, "epilog", job=102).returncode == 0
        # No GPUs: nothing to book.
        assert hook(d, "prolog", job=103, gpus="").returncode == 0
        assert slurm_bookings(d) == {}


def relu_model(repo, name, config):
    """A model entry with no weights (Relu over [N, 4]) and its config."""
    from onnx import TensorProto, helper, save
    (repo / name / "1").mkdir(parents=True)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], name,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
         str(repo / name / "1" / "model.onnx"))
    (repo / name / "config.json").write_text(json.dumps(config))


def test_a_model_instance_is_not_given_a_gpu_slurm_holds(tmp_path, fake_slurm):
    """A model pinned to a GPU that a Slurm job holds is refused, naming the
    job; a group that lists no GPUs goes round the others."""
    _, env = fake_slurm
    with daemon(tmp_path, env=env) as d:
        assert hook(d, "prolog", job=301, gpus="1").returncode == 0
        relu_model(d.repo, "pinned", {"max_batch_size": 4, "instance_group": [
            {"kind": "KIND_GPU", "devices": ["fakegpu1"]}]})
        relu_model(d.repo, "anygpu", {"max_batch_size": 4, "instance_group": [
            {"count": 2, "kind": "KIND_GPU"}]})
        status, body = d.request("POST", "/v2/repository/models/pinned/load", {}, d.admin)
        assert status == 400, (status, body)
        assert "model pinned: fakegpu1 is held whole by slurm job 301 (alice)" in body["error"]
        status, body = d.request("POST", "/v2/repository/models/anygpu/load", {}, d.admin)
        assert status == 200, body
        status, body = d.request("GET", "/api/v1/bookings", token=d.admin)
        models = {b["owner"]: [p["device"] for p in b["devices"]] for b in body["bookings"]
                  if b["owner"].startswith("model anygpu")}
        assert models and all(devs == ["fakegpu0"] for devs in models.values()), models
        # Once Slurm's job has ended, the pinned model loads.
        assert hook(d, "epilog", job=301).returncode == 0
        status, body = d.request("POST", "/v2/repository/models/pinned/load", {}, d.admin)
        assert status == 200, body


def test_an_ensemble_step_is_not_run_on_a_gpu_slurm_holds(tmp_path, fake_slurm):
    """An ensemble on fakegpu0 whose second step's model is pinned to
    fakegpu1: its plan spans both GPUs, booking each. While a Slurm job holds
    fakegpu1 the ensemble is refused there, naming the job; once the job
    has ended it runs, and its booking holds memory on both."""
    _, env = fake_slurm
    with daemon(tmp_path, env=env) as d:
        relu_model(d.repo, "first", {"max_batch_size": 4})
        relu_model(d.repo, "second", {"max_batch_size": 4, "instance_group": [
            {"kind": "KIND_GPU", "devices": ["fakegpu1"]}]})
        (d.repo / "both").mkdir()
        (d.repo / "both" / "config.json").write_text(json.dumps({
            "platform": "ensemble", "max_batch_size": 4,
            "instance_group": [{"kind": "KIND_GPU", "devices": ["fakegpu0"]}],
            "input": [{"name": "X"}], "output": [{"name": "Y"}],
            "ensemble_scheduling": {"step": [
                {"model_name": "first", "input_map": {"x": "X"}, "output_map": {"y": "H"}},
                {"model_name": "second", "input_map": {"x": "H"}, "output_map": {"y": "Y"}}]}}))
        body = {"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32",
                            "data": [-1, 2, -3, 4]}]}
        assert hook(d, "prolog", job=401, gpus="1").returncode == 0
        status, reply = d.request("POST", "/v2/repository/models/both/load", {}, d.admin)
        assert status == 200, reply  # its plans are made as requests come
        status, reply = d.request("POST", "/v2/models/both/infer", body)
        assert status == 503, (status, reply)  # held for now: unavailable
        assert "model both: fakegpu1 is held whole by slurm job 401 (alice)" in reply["error"]
        assert hook(d, "epilog", job=401).returncode == 0
        status, reply = d.request("POST", "/v2/repository/models/both/load", {}, d.admin)
        assert status == 200, reply
        status, reply = d.request("POST", "/v2/models/both/infer", body)
        assert status == 200 and reply["outputs"][0]["data"] == [0, 2, 0, 4], reply
        status, reply = d.request("GET", "/api/v1/bookings", token=d.admin)
        held = {p["device"] for b in reply["bookings"] if b["owner"].startswith("model both")
                for p in b["devices"]}
        assert held == {"fakegpu0", "fakegpu1"}, reply


def test_a_model_is_refused_when_slurm_holds_every_gpu_of_its_kind(tmp_path, fake_slurm):
    _, env = fake_slurm
    with daemon(tmp_path, env=env) as d:
        assert hook(d, "prolog", job=302, gpus="0,1").returncode == 0
        relu_model(d.repo, "anygpu", {"max_batch_size": 4, "instance_group": [
            {"count": 1, "kind": "KIND_GPU"}]})
        status, body = d.request("POST", "/v2/repository/models/anygpu/load", {}, d.admin)
        assert status == 400, (status, body)
        assert "model anygpu: fakegpu1 is held whole by slurm job 302 (alice)" in body["error"]


def test_bookings_survive_a_restart_and_follow_slurms_list(tmp_path, fake_slurm):
    jobs, env = fake_slurm
    with daemon(tmp_path, env=env) as d:
        assert hook(d, "prolog", job=201, user="bob", gpus="0").returncode == 0
        assert hook(d, "prolog", job=202, user="carol", gpus="1").returncode == 0
        # squeue cannot answer (controller down): both are kept.
        jobs.write_text("fail\n")
        d.stop()
        d.start()
        assert set(slurm_bookings(d)) == {"slurm job 201 (bob)", "slurm job 202 (carol)"}
        # Slurm lists 201 (and jobs of other nodes): 202 has ended meanwhile.
        jobs.write_text("7\n201\n9000\n")
        d.stop(signal.SIGKILL)  # no orderly stop: the file is what is left
        d.start()
        assert set(slurm_bookings(d)) == {"slurm job 201 (bob)"}
        assert slurm_bookings(d)["slurm job 201 (bob)"][0]["device"] == "fakegpu0"
        # The epilog while the daemon is down warns and succeeds (a failed
        # epilog drains the node); the next start drops the ended job.
        d.stop(signal.SIGKILL)
        p = hook(d, "epilog", job=201)
        assert p.returncode == 0 and "the booking goes when the daemon next starts" in p.stderr
        jobs.write_text("7\n")
        d.start()
        assert slurm_bookings(d) == {}
        # A refused token is not taken lightly.
        p = hook(d, "epilog", job=201, token="gs_wrong")
        assert p.returncode == 1 and "token" in p.stderr, p.stderr


def test_indices_follow_the_device_nodes_as_slurm_numbers_them(tmp_path, fake_slurm):
    """Slurm numbers GPUs by their File: fakegpu0 on node nv7 and fakegpu1 on
    nv2 make index 0 fakegpu1, in gres.conf and in the prolog alike; a GPU
    without a node is no Slurm GPU, and the indices skip it."""
    _, env = fake_slurm
    short = tempfile.mkdtemp(prefix="gsn")
    nv7, nv2 = os.path.join(short, "nv7"), os.path.join(short, "nv2")
    for node in (nv7, nv2):
        open(node, "w").close()
    env = {**env, "GPUSRV_TEST_FAKE_DEV_NODES": f"{nv7},{nv2}"}
    out = subprocess.run([GPUSRV, "slurm", "gres"], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=60).stdout
    assert [line.split("File=")[1] for line in out.splitlines() if "Name=gpu" in line] == \
        [nv2, nv7], out
    with daemon(tmp_path, env=env) as d:
        assert hook(d, "prolog", job=501, gpus="0").returncode == 0
        assert slurm_bookings(d)["slurm job 501 (alice)"][0]["device"] == "fakegpu1"
    env["GPUSRV_TEST_FAKE_DEV_NODES"] = f",{nv2}"  # fakegpu0 has no node
    with daemon(tmp_path, env=env) as d:
        assert hook(d, "prolog", job=502, gpus="0").returncode == 0
        assert slurm_bookings(d)["slurm job 502 (alice)"][0]["device"] == "fakegpu1"
        p = hook(d, "prolog", job=503, gpus="1")
        assert p.returncode == 1 and "no GPU 1 (it has 1)" in p.stderr, p.stderr


def test_a_hostile_state_file_books_only_what_is_valid(tmp_path, fake_slurm):
    jobs, env = fake_slurm
    with daemon(tmp_path, env=env) as d:
        jobs.write_text("fail\n")  # no reconciling: what the file says stands
        d.stop()
        # An older daemon's file (slurm-jobs.json: integer jobs, Slurm's).
        with open(os.path.join(d.state, "slurm-jobs.json"), "w") as f:
            f.write('[{"job": 601, "user": "u", "gpus": [1]},'
                    ' {"job": 601, "user": "twice", "gpus": [0]},'
                    ' {"job": 602, "user": "u", "gpus": ["x"]},'
                    ' {"job": 603, "user": "u", "gpus": [-1]},'
                    ' {"job": 604, "user": "u", "gpus": [4294967296]},'
                    ' {"job": 0, "user": "u", "gpus": [0]}, 7, null]')
        d.start()
        assert list(slurm_bookings(d)) == ["slurm job 601 (u)"]
        with open(os.path.join(d.state, "holds.json"), "w") as f:
            f.write("{not json")
        d.stop()
        d.start()  # a broken file books nothing and stops nothing
        assert d.request("GET", "/v2/health/live")[0] == 200
        assert slurm_bookings(d) == {}


@pytest.mark.parametrize("job,gpus,message", [
    (None, "0", "SLURM_JOB_ID is not a job id"),
    ("12x", "0", "SLURM_JOB_ID is not a job id"),
    ("301", "x", "is not a list of GPU indices"),
    ("301", "1-0", "is not a list of GPU indices"),
    ("301", "5", "no GPU 5"),
    ("301", "0,0", "names GPU 0 twice"),
    ("301", "4294967296", "is not a list of GPU indices"),
    ("301", "0,", "is not a list of GPU indices"),
    ("301", "0-99999999999999999999", "is not a list of GPU indices"),
])
def test_prolog_refusals(tmp_path, fake_slurm, job, gpus, message):
    _, env = fake_slurm
    with daemon(tmp_path, env=env) as d:
        p = hook(d, "prolog", job=job, gpus=gpus)
        assert p.returncode == 1 and message in p.stderr, p.stderr
        assert slurm_bookings(d) == {}


def test_only_an_admin_books_for_slurm(tmp_path, fake_slurm):
    _, env = fake_slurm
    with daemon(tmp_path, env=env) as d:
        status, body = d.request("POST", "/api/v1/tenants", {"name": "dana", "user": "nobody"},
                                 token=d.admin)
        assert status == 201 and body["token"], body
        p = hook(d, "prolog", job=401, gpus="0", token=body["token"])
        assert p.returncode == 1 and "needs an admin token" in p.stderr, p.stderr
        status, _ = d.request("POST", "/api/v1/holds", {"scheduler": "slurm", "job": 1,
                                                        "user": "x", "gpus": "0"}, token=d.admin)
        assert status == 400
        status, _ = d.request("DELETE", "/api/v1/holds/slurm/401", token=body["token"])
        assert status == 403


def holds(d):
    status, body = d.request("GET", "/api/v1/bookings", token=d.admin)
    assert status == 200
    return {b["owner"]: [p["device"] for p in b["devices"]] for b in body["bookings"]
            if " job " in b["owner"]}


def test_another_scheduler_holds_with_the_same_calls(tmp_path, fake_slurm):
    """The calls Slurm's hooks make serve any scheduler (a Kubernetes device
    plugin: pods by uid, released by a reconcile with the pods that still
    hold devices); each scheduler's reconcile drops only its own."""
    jobs, env = fake_slurm
    jobs.write_text("701\n")  # squeue at the restart below
    pod = "f81d4fae-7dec-11d0-a765-00a0c91e6bf6"
    with daemon(tmp_path, env=env) as d:
        assert hook(d, "prolog", job=701, gpus="0").returncode == 0
        status, body = d.request("POST", "/api/v1/holds", {
            "scheduler": "kubernetes", "job": pod, "user": "ns-a", "gpus": [1]}, token=d.admin)
        assert status == 200, body
        assert holds(d) == {"slurm job 701 (alice)": ["fakegpu0"],
                            f"kubernetes job {pod} (ns-a)": ["fakegpu1"]}
        # Kept across a restart, under the scheduler's own name.
        d.stop()
        d.start()
        assert len(holds(d)) == 2
        # A list that does not say when it was taken keeps holds younger
        # than 30 s (it may be older than they are); one that says so, not.
        status, body = d.request("PUT", "/api/v1/holds/kubernetes", {"jobs": ["other-pod"]},
                                 token=d.admin)
        assert status == 200 and body["dropped"] == 0, body
        status, body = d.request("PUT", "/api/v1/holds/kubernetes",
                                 {"jobs": ["other-pod"], "as_of": time.time()}, token=d.admin)
        assert status == 200 and body["dropped"] == 1, body
        assert list(holds(d)) == ["slurm job 701 (alice)"]
        status, body = d.request("PUT", "/api/v1/holds/slurm", {"jobs": [701]}, token=d.admin)
        assert status == 200 and body["dropped"] == 0, body
        status, _ = d.request("DELETE", f"/api/v1/holds/kubernetes/{pod}", token=d.admin)
        assert status == 404
        for bad, message in [
                ({"scheduler": "Kube", "job": "p", "user": "u", "gpus": [0]}, "scheduler"),
                ({"scheduler": "k8s", "job": "a/b", "user": "u", "gpus": [0]}, "job"),
                ({"scheduler": "k8s", "job": 0, "user": "u", "gpus": [0]}, "a hold needs"),
                ({"scheduler": "k8s", "job": "p", "user": "u", "gpus": [1, 1]}, "twice")]:
            status, body = d.request("POST", "/api/v1/holds", bad, token=d.admin)
            assert status == 400 and message in body["error"], (bad, body)
        status, body = d.request("PUT", "/api/v1/holds/k8s", {"jobs": "p"}, token=d.admin)
        assert status == 400 and "jobs" in body["error"], body
        status, body = d.request("DELETE", "/api/v1/holds/k8s/" + "p" * 200, token=d.admin)
        assert status == 400, body
        assert list(holds(d)) == ["slurm job 701 (alice)"]


def test_an_older_daemons_holds_and_hooks_still_work(tmp_path, fake_slurm):
    """slurm-jobs.json (an older daemon's file) is read and, at the next
    change, written anew as holds.json; an older gpusrv's prolog and epilog
    (POST /api/v1/slurm/jobs, DELETE /api/v1/slurm/jobs/N) still book."""
    jobs, env = fake_slurm
    jobs.write_text("801\n")
    with daemon(tmp_path, env=env) as d:
        d.stop()
        legacy, current = (os.path.join(d.state, f) for f in ("slurm-jobs.json", "holds.json"))
        if os.path.exists(current):
            os.remove(current)
        with open(legacy, "w") as f:
            f.write('[{"job": 801, "user": "old", "gpus": [0]}]')
        d.start()
        assert list(slurm_bookings(d)) == ["slurm job 801 (old)"]
        status, body = d.request("POST", "/api/v1/slurm/jobs",
                                 {"job": 802, "user": "old", "gpus": [1]}, token=d.admin)
        assert status == 200, body
        assert os.path.exists(current) and not os.path.exists(legacy)
        assert set(slurm_bookings(d)) == {"slurm job 801 (old)", "slurm job 802 (old)"}
        for job in (801, 802):
            status, body = d.request("DELETE", f"/api/v1/slurm/jobs/{job}", token=d.admin)
            assert status == 200, body
        assert slurm_bookings(d) == {}
