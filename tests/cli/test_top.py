"""`gpusrv top` in a real terminal: tmux runs it against a daemon the test
starts, the test reads the screen (capture-pane) and presses keys
(send-keys)."""
import os
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sched"))
from test_frontdesk import GPUSRV, Daemon, free_port  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Terminal:
    """A tmux session of its own (its own server socket) running one command."""

    def __init__(self, command, width=120, height=40):
        self.socket = "gpusrv-top-" + uuid.uuid4().hex[:8]
        subprocess.run(["tmux", "-L", self.socket, "new-session", "-d", "-x", str(width), "-y",
                        str(height), command], check=True)

    def screen(self):
        p = subprocess.run(["tmux", "-L", self.socket, "capture-pane", "-p"],
                           capture_output=True, text=True)
        return p.stdout if p.returncode == 0 else None

    def keys(self, *keys):
        subprocess.run(["tmux", "-L", self.socket, "send-keys", *keys], check=True)

    def wait_for(self, *texts, timeout=20):
        deadline = time.time() + timeout
        screen = ""
        while time.time() < deadline:
            screen = self.screen() or ""
            if all(t in screen for t in texts):
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{texts} not on the screen:\n{screen}")

    def alive(self):
        return subprocess.run(["tmux", "-L", self.socket, "has-session"],
                              capture_output=True).returncode == 0

    def quit(self):
        """Presses q and waits for the program (and so the session) to end."""
        self.keys("q")
        deadline = time.time() + 10
        while self.alive():
            assert time.time() < deadline, "q did not quit"
            time.sleep(0.1)

    def close(self):
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path).start()
    yield d
    d.proc.terminate()
    d.proc.wait(timeout=30)
    shutil.rmtree(d.state, ignore_errors=True)


def top_command(d, *extra):
    return (f"GPUSRV_TOKEN={d.admin} {GPUSRV} top --url http://127.0.0.1:{d.port} "
            f"--interval 0.3 {' '.join(extra)}")


def clock(screen):
    """The clock (HH:MM:SS) in the title line."""
    return re.search(r"\b\d\d:\d\d:\d\d\b", screen.splitlines()[0]).group(0)


def test_top_shows_devices_and_a_running_job_and_updates(daemon):
    job = daemon.submit(["sleep", "60"], name="top-probe")
    term = Terminal(top_command(daemon))
    try:
        screen = term.wait_for("DEVICES", "cpu0", "top-probe", "running")
        row = next(line for line in screen.splitlines() if "top-probe" in line)
        assert row.split()[0] == str(job), row
        assert "GPU MEM" in screen  # 120 columns: the wide job table
        first = clock(screen)
        deadline = time.time() + 10
        while clock(term.screen()) == first:  # refreshed every 0.3 s
            assert time.time() < deadline, f"the screen did not update:\n{term.screen()}"
            time.sleep(0.1)
        term.keys("s")
        term.wait_for("sort: tenant")
        term.keys("d")  # the job books no device: picking one hides it
        assert "top-probe" not in term.wait_for("device: cpu0", "JOBS (0 running)")
        for _ in range(8):  # through the other devices (opencl0 where there is one) to all
            term.keys("d")
            time.sleep(0.2)
            if "device: all" in (term.screen() or ""):
                break
        term.wait_for("device: all", "top-probe")
        term.keys("t")  # the only tenant with jobs
        term.wait_for("tenant: admin", "top-probe")
        term.keys("t")
        term.wait_for("tenant: all")
        term.quit()
    finally:
        term.close()
        daemon.request("POST", f"/api/v1/jobs/{job}/cancel", token=daemon.admin)


@pytest.mark.skipif(not os.environ.get("GPUSRV_TEST_FAKE_PLUGINS"),
                    reason="GPUSRV_TEST_FAKE_PLUGINS is not set (run through ctest)")
def test_top_shows_health_events(tmp_path):
    tele = tmp_path / "telemetry"
    tele.write_text("health 2 Xid 48: double-bit ECC error (test)\n")
    d = Daemon(tmp_path, "--history-interval", "0.1",
               env={"GPUSRV_PLUGIN_PATH": os.environ["GPUSRV_TEST_FAKE_PLUGINS"],
                    "GPUSRV_TEST_TELEMETRY": str(tele)}).start()
    term = Terminal(top_command(d))
    try:
        screen = term.wait_for("HEALTH EVENTS", "Xid 48: double-bit ECC error (test)")
        line = next(l for l in screen.splitlines() if "Xid 48" in l)
        assert "fakegpu0" in line and "healthy -> unhealthy" in line, line
        term.quit()
    finally:
        term.close()
        d.proc.terminate()
        d.proc.wait(timeout=30)
        shutil.rmtree(d.state, ignore_errors=True)


def test_top_fits_80_by_24(daemon):
    term = Terminal(top_command(daemon), width=80, height=24)
    try:
        screen = term.wait_for("DEVICES", "JOBS", "MODELS")
        assert "GPU MEM" not in screen  # the narrow job table
        assert all(len(line) <= 80 for line in screen.splitlines())
    finally:
        term.close()


def test_top_says_when_the_daemon_is_unreachable():
    port = free_port()  # nothing listens there
    term = Terminal(f"{GPUSRV} top --url http://127.0.0.1:{port} --interval 0.3")
    try:
        term.wait_for("daemon unreachable")
        term.quit()
    finally:
        term.close()


def test_top_needs_a_terminal():
    p = subprocess.run([GPUSRV, "top"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 1
    assert "needs a terminal" in p.stderr


def test_devices_route_gives_every_device_with_its_telemetry(daemon):
    status, answer = daemon.request("GET", "/api/v1/devices?all=1")
    assert status == 200, answer
    cpu = next(d for d in answer["devices"] if d["id"] == "cpu0")
    assert cpu["bookable"] is False  # jobs book every device but the CPUs by default
    assert 0 < cpu["telemetry"]["memory_used"] <= cpu["memory_total"]
    assert 0 <= cpu["telemetry"]["utilization"] <= 100
    assert {"temperature_c", "power_w"} <= set(cpu["telemetry"])  # null where not measured
    status, bookable = daemon.request("GET", "/api/v1/devices")
    assert all(d["bookable"] for d in bookable["devices"])
