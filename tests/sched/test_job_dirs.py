"""A job's directory (hardening item 14): each log holds at most
--job-log-max bytes, the rest of the job's output dropped with a line that
says so, and the job itself goes on; an ended job's directory is removed
after --job-retention, while its record and the accounting stay."""
import json
import os
import shutil
import tempfile
import time

import pytest

from test_frontdesk import IS_ROOT, Daemon, daemon


def test_a_log_holds_at_most_its_limit(tmp_path):
    with daemon(tmp_path, "--job-log-max", "64K") as d:
        job = d.submit(["sh", "-c", "yes 0123456789abcdef | head -c 1000000; echo err >&2; "
                                    "echo after >&2"])
        assert d.wait(job)["state"] == "COMPLETED"  # the job was not stopped for it
        out = d.log(job)
        assert len(out) < 64 * 1024 + 300, len(out)
        assert out.startswith("0123456789abcdef\n")
        assert "reached its limit of 65536 bytes (--job-log-max)" in out
        assert d.log(job, "stderr") == "err\nafter\n"  # the other log has its own room


def test_logs_hold_everything_under_the_limit(tmp_path):
    with daemon(tmp_path) as d:
        job = d.submit(["sh", "-c", "for i in $(seq 1 5000); do echo line $i; done"])
        d.wait(job)
        assert d.log(job).splitlines() == [f"line {i}" for i in range(1, 5001)]


def test_ended_jobs_directories_are_removed_after_retention(tmp_path):
    with daemon(tmp_path, "--job-retention", "2s") as d:
        job = d.submit(["sh", "-c", "echo hello; echo data > file"])
        d.wait(job)
        jobdir = os.path.join(d.state, "jobs", str(job))
        assert os.path.isdir(jobdir)
        deadline = time.time() + 30
        while os.path.exists(jobdir) and time.time() < deadline:
            time.sleep(0.2)
        assert not os.path.exists(jobdir)
        status, err = d.request("GET", f"/api/v1/jobs/{job}/logs", token=d.admin)
        assert status == 404 and "removed" in err["error"], err
        assert d.job(job)["state"] == "COMPLETED"  # the record stays
        usage = json.loads(d.cli("usage", "--json").stdout)
        assert usage[0]["jobs"] == 1  # and so does the accounting
        # A running job's directory is never touched.
        running = d.submit(["sleep", "30"])
        time.sleep(4)
        assert os.path.isdir(os.path.join(d.state, "jobs", str(running)))
        d.cli("cancel", str(running))


def test_removal_never_follows_a_link_out_of_the_job(tmp_path):
    outside = tempfile.mkdtemp(prefix="gpusrv-outside-")
    os.chmod(outside, 0o777)
    keep = os.path.join(outside, "keep.txt")
    with open(keep, "w") as f:
        f.write("mine")
    try:
        with daemon(tmp_path, "--job-retention", "2s") as d:
            job = d.submit(["sh", "-c", f"mkdir -p a/b && echo x > a/b/f && ln -s {outside} a/out"])
            assert d.wait(job)["state"] == "COMPLETED"
            jobdir = os.path.join(d.state, "jobs", str(job))
            deadline = time.time() + 30
            while os.path.exists(jobdir) and time.time() < deadline:
                time.sleep(0.2)
            assert not os.path.exists(jobdir)
            assert open(keep).read() == "mine"
    finally:
        shutil.rmtree(outside, ignore_errors=True)


@pytest.mark.skipif(not IS_ROOT, reason="the job runs as another user only as root")
def test_a_job_cannot_write_its_log_file(tmp_path):
    with daemon(tmp_path, "--job-log-max", "1K") as d:
        job = d.submit(["sh", "-c", "head -c 100000 /dev/zero >> ../stdout.log; echo tried"])
        d.wait(job)
        log = os.path.join(d.state, "jobs", str(job), "stdout.log")
        assert os.path.getsize(log) < 2048  # the limit held
        assert "Permission denied" in d.log(job, "stderr")


def test_a_bad_retention_is_refused(tmp_path):
    d = Daemon(tmp_path, "--job-retention", "soon")
    import subprocess
    p = subprocess.run(d.command(), capture_output=True, text=True, timeout=30)
    d.cleanup()
    assert p.returncode == 1 and "--job-retention" in p.stderr, p.stderr
