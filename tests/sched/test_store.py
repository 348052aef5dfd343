"""The daemon's state files are its own: state.db, its -wal and -shm hold
every tenant's job commands and environment, so they are mode 0600 whatever
the umask the daemon was started with, and an older, readable copy is made
private again at start (hardening item 1)."""
import contextlib
import os
import pathlib
import shutil
import sqlite3
import stat
import subprocess
import tempfile
import time

import pytest

from test_frontdesk import IS_ROOT, Daemon, daemon

STATE_FILES = ("state.db", "state.db-wal", "state.db-shm")


def modes(state):
    out = {}
    for name in STATE_FILES + ("admin.token",):
        path = os.path.join(state, name)
        if os.path.exists(path):
            out[name] = stat.S_IMODE(os.stat(path).st_mode)
    return out


@pytest.fixture
def loose_umask():
    old = os.umask(0o022)  # what a shell or a careless unit starts it with
    yield
    os.umask(old)


def test_state_files_are_private_under_a_loose_umask(tmp_path, loose_umask):
    with daemon(tmp_path) as d:
        d.submit(["sh", "-c", "true"], env=["SECRET=hunter2"])
        found = modes(d.state)
        assert set(STATE_FILES) <= set(found), found  # WAL mode: all three while it runs
        assert all(m & 0o077 == 0 for m in found.values()), found


def test_readable_state_files_are_closed_at_start(tmp_path, loose_umask):
    d = Daemon(tmp_path).start()
    try:
        d.submit(["true"])
        d.proc.kill()  # kill -9: the -wal and -shm stay behind
        d.proc.wait()
        for name in STATE_FILES:
            path = os.path.join(d.state, name)
            if os.path.exists(path):
                os.chmod(path, 0o644)
        assert modes(d.state)["state.db"] == 0o644
        d.start()
        found = modes(d.state)
        assert all(found[n] == 0o600 for n in STATE_FILES if n in found), found
    finally:
        if d.proc.poll() is None:
            d.stop()
        d.cleanup()


def test_a_state_database_that_is_a_symlink_is_refused(tmp_path):
    d = Daemon(tmp_path)
    target = tmp_path / "elsewhere.db"
    target.write_bytes(b"")
    os.symlink(target, os.path.join(d.state, "state.db"))
    p = subprocess.run([*d.command()], capture_output=True, text=True, timeout=30)
    d.cleanup()
    assert p.returncode == 1 and "state database" in p.stderr, p.stderr


@pytest.mark.skipif(not IS_ROOT, reason="running a job as another user needs root")
def test_a_job_cannot_read_the_state_database(tmp_path, loose_umask):
    with daemon(tmp_path) as d:
        secret = d.submit(["true"], env=["SECRET=hunter2"])
        d.wait(secret)
        db = os.path.join(d.state, "state.db")
        spy = d.wait(d.submit(["sh", "-c", f"cat {db} {db}-wal >/dev/null && echo READ"]))
        assert spy["state"] == "FAILED"
        assert "READ" not in d.log(spy["id"])
        assert "Permission denied" in d.log(spy["id"], "stderr")


def start_fails(d, *extra):
    p = subprocess.run([*d.command(), *extra], capture_output=True, text=True, timeout=30)
    assert p.returncode == 1, p.stderr
    return p.stderr


def test_an_emptied_database_is_not_a_silent_first_start(tmp_path):
    """Hardening item 12: an empty state.db beside a previous daemon's files
    would drop every tenant and job and replace admin.token without a word."""
    d = Daemon(tmp_path).start()
    try:
        old_token = d.admin
        d.wait(d.submit(["true"]))
        d.stop()
        for name in STATE_FILES:
            path = os.path.join(d.state, name)
            if os.path.exists(path):
                os.truncate(path, 0) if name == "state.db" else os.unlink(path)
        assert "was emptied or replaced" in start_fails(d)
        assert d.admin == old_token  # nothing was touched
        d.extra = (*d.extra, "--reset-state")
        d.start()
        assert d.admin != old_token
        job = d.submit(["true"])
        assert job > 1  # past jobs/1, which the lost database had handed out
    finally:
        if d.proc.poll() is None:
            d.stop()
        d.cleanup()


def test_job_directories_are_never_reused_after_a_restore(tmp_path):
    """Hardening item 3: a database restored from an older copy would hand
    out job ids again, and the daemon would chown an older job's files to
    the new job's user."""
    d = Daemon(tmp_path).start()
    try:
        d.wait(d.submit(["true"]))
        d.stop()
        saved = (tmp_path / "state.db.saved")
        shutil.copy(os.path.join(d.state, "state.db"), saved)  # knows job 1
        d.start()
        d.wait(d.submit(["true"]))
        d.wait(d.submit(["true"]))
        d.stop()
        for name in STATE_FILES:
            if os.path.exists(os.path.join(d.state, name)):
                os.unlink(os.path.join(d.state, name))
        shutil.copy(saved, os.path.join(d.state, "state.db"))
        err = start_fails(d)
        assert "jobs/3 exists but the newest job state.db knows is 1" in err, err
        d.extra = (*d.extra, "--reset-state")
        d.start()
        assert d.submit(["true"]) == 4
    finally:
        if d.proc.poll() is None:
            d.stop()
        d.cleanup()


@contextlib.contextmanager
def database_locked(state):
    """The state database locked against writes, as a full disk or a
    failing device would make them fail: every write of the daemon gives up
    after its busy timeout (5 s)."""
    con = sqlite3.connect(os.path.join(state, "state.db"), isolation_level=None, timeout=30)
    con.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        con.execute("ROLLBACK")
        con.close()


def wait_for(d, job_id, pred, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = d.job(job_id)
        if pred(job):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id}: {d.job(job_id)}")


def test_a_job_whose_start_cannot_be_written_does_not_start(tmp_path):
    """Hardening item 9: a job whose RUNNING state did not reach the disk ran
    anyway, and a restart (the store still saying PENDING) ran it again."""
    shared = tempfile.mkdtemp(prefix="gpusrv-runs-")  # the job's user writes here
    os.chmod(shared, 0o777)
    marker = pathlib.Path(shared) / "runs.txt"
    marker.touch()
    os.chmod(marker, 0o666)
    with daemon(tmp_path) as d:
        cores = os.cpu_count()
        blocker = d.submit(["sleep", "600"], cpus=cores)
        wait_for(d, blocker, lambda j: j["state"] == "RUNNING")
        job = d.submit(["sh", "-c", f"echo ran >> {marker}"], cpus=1)
        assert d.job(job)["state"] == "PENDING"
        with database_locked(d.state):
            # A cancel that cannot be written is refused: a restart would run the job.
            status, err = d.request("DELETE", f"/api/v1/jobs/{job}", token=d.admin)
            assert status >= 500 and "could not be cancelled" in err["error"], err
            assert d.job(job)["state"] == "PENDING"
            d.request("DELETE", f"/api/v1/jobs/{blocker}", token=d.admin)
            waiting = wait_for(d, job, lambda j: "cannot be written" in j["reason"])
            assert waiting["state"] == "PENDING" and marker.read_text() == "", waiting
        assert d.wait(job)["state"] == "COMPLETED"
        assert marker.read_text() == "ran\n"
        d.stop()
        d.start()
        assert d.job(job)["state"] == "COMPLETED" and d.job(blocker)["state"] == "CANCELLED"
        time.sleep(1)
        assert marker.read_text() == "ran\n"  # once, whatever the restarts
    shutil.rmtree(shared, ignore_errors=True)


def test_an_ended_job_stays_listed_until_its_state_is_written(tmp_path):
    """Hardening item 10: jobs that ended while the disk was full vanished
    from every listing, and after a restart became LOST though they had
    completed."""
    d = Daemon(tmp_path).start()
    try:
        job = d.submit(["sh", "-c", "sleep 1; echo done"])
        wait_for(d, job, lambda j: j["state"] == "RUNNING")
        with database_locked(d.state):
            listed = wait_for(d, job, lambda j: j["state"] != "RUNNING")
            assert listed["state"] == "COMPLETED" and listed.get("unsaved") is True, listed
            status, jobs = d.request("GET", "/api/v1/jobs?all=1", token=d.admin)
            assert [j["state"] for j in jobs["jobs"] if j["id"] == job] == ["COMPLETED"]
            d.proc.kill()  # and the daemon dies before it could write it
            d.proc.wait()
        d.start()
        assert d.job(job)["state"] == "COMPLETED"  # settled from its supervisor's report
        assert d.log(job) == "done\n"
    finally:
        if d.proc.poll() is None:
            d.stop()
        d.cleanup()
