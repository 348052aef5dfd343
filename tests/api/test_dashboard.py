"""The dashboard: the daemon's telemetry history (/api/v1/history) and the
page at /, read by a real browser (headless Chromium) that runs its script
against a daemon the test starts."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "sched"))
from test_frontdesk import Daemon  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dash")
    d = Daemon(tmp, "--history-interval", "0.2")
    shutil.copytree(os.path.join(ROOT, "models", "digits"), d.repo / "digits")
    d.start()
    d.wait_ready()
    yield d
    d.proc.terminate()
    d.proc.wait(timeout=30)
    shutil.rmtree(d.state, ignore_errors=True)


def wait_for_samples(d, count):
    deadline = time.time() + 20
    while time.time() < deadline:
        status, h = d.request("GET", "/api/v1/history")
        assert status == 200, h
        cpu = next(x for x in h["devices"] if x["id"] == "cpu0")
        if len(cpu["samples"]) >= count:
            return h, cpu
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} samples: {h}")


def test_history_keeps_samples_of_every_device(daemon):
    h, cpu = wait_for_samples(daemon, 4)
    assert h["interval"] == pytest.approx(0.2)
    times = [s[0] for s in cpu["samples"]]
    assert times == sorted(times) and times[-1] - times[0] > 0.3
    assert abs(times[-1] - time.time()) < 30  # Unix seconds
    for t, util, used, temp, power in cpu["samples"]:
        assert 0 <= util <= 100
        assert 0 < used <= cpu["memory_total"]
    # a device that does not measure a field says null, never 0
    for d in h["devices"]:
        for s in d["samples"]:
            assert len(s) == 5


def test_history_flag_is_checked(tmp_path):
    d = Daemon(tmp_path, "--history-interval", "0")
    p = subprocess.run(d.command(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "history-interval" in p.stderr, p.stderr


def test_page_is_served_without_a_token(daemon):
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.port}/", timeout=30) as r:
        body = r.read().decode()
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/html")
        assert "default-src 'self'" in r.headers["Content-Security-Policy"]
    assert "/api/v1/history" in body and "textContent" in body


def dump_dom(url, tmp_path, console=None):
    """The page's DOM after its script has run for a few seconds; what the
    page wrote to its console goes into the list `console`."""
    p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                        f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=4000",
                        "--enable-logging=stderr", "--v=0", "--dump-dom", url],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    if console is not None:
        console += [line for line in p.stderr.splitlines() if ":CONSOLE" in line]
    return p.stdout


def screenshot(url, path, tmp_path):
    p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                        f"--user-data-dir={tmp_path / 'chromium-shot'}", "--window-size=1280,1000",
                        "--virtual-time-budget=4000", f"--screenshot={path}", url],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(path) > 10000  # a page drawn, not a blank one


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/install-deps.sh)")
def test_browser_shows_devices_jobs_and_models(daemon, tmp_path):
    wait_for_samples(daemon, 2)
    # a job whose name is markup: the page must show it as text
    job = daemon.submit(["sleep", "60"], name="<img src=x onerror=alert(1)>dash-probe")
    body = json.dumps({"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32",
                                   "data": [0.0] * 64}]})
    status, answer = daemon.request("POST", "/v2/models/digits/infer", body)
    assert status == 200, answer
    try:
        console = []
        url = f"http://127.0.0.1:{daemon.port}/#token={daemon.admin}"
        dom = dump_dom(url, tmp_path, console)
        assert console == [], console  # no errors, no warnings
        assert 'data-device="cpu0"' in dom
        assert "Utilization:" in dom and "Memory used:" in dom
        assert "&lt;img src=x onerror=alert(1)&gt;dash-probe" in dom  # text, not an element
        assert "<img" not in dom
        assert "<td>digits</td>" in dom
        assert "live," in dom
        # The charts follow the samples: a later load draws more points.
        points = lambda d: int(re.search(r'data-device="cpu0".*?data-points="(\d+)"', d, re.S).group(1))
        time.sleep(1.0)
        assert points(dump_dom(url, tmp_path)) > points(dom)
        # The test keeps a picture of the page (pytest's tmp_path, beside the run's other files).
        screenshot(url, tmp_path / "dashboard.png", tmp_path)
    finally:
        daemon.request("POST", f"/api/v1/jobs/{job}/cancel", token=daemon.admin)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/install-deps.sh)")
def test_browser_without_a_token_says_jobs_need_one(daemon, tmp_path):
    dom = dump_dom(f"http://127.0.0.1:{daemon.port}/", tmp_path)
    assert 'data-device="cpu0"' in dom  # reading devices needs no token on loopback
    assert "this route needs a token" in dom


FAKE_PLUGINS = os.environ.get("GPUSRV_TEST_FAKE_PLUGINS")


def wait_for_events(d, count):
    deadline = time.time() + 20
    while time.time() < deadline:
        status, body = d.request("GET", "/api/v1/events")
        assert status == 200, body
        if len(body["events"]) >= count:
            return body["events"]
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} events: {body}")


@pytest.mark.skipif(not FAKE_PLUGINS, reason="GPUSRV_TEST_FAKE_PLUGINS is not set (run through ctest)")
def test_health_changes_are_events_the_page_shows(tmp_path):
    """A device turning degraded, then healthy again (the fakegpu plugin's
    health, as NVML's Xid and link checks would give it): two events with the
    reason, oldest first, in /api/v1/events and on the page."""
    tele = tmp_path / "telemetry"
    tele.write_text("health 0\n")
    d = Daemon(tmp_path, "--history-interval", "0.1",
               env={"GPUSRV_PLUGIN_PATH": FAKE_PLUGINS, "GPUSRV_TEST_TELEMETRY": str(tele)})
    d.start()
    try:
        time.sleep(0.5)
        assert d.request("GET", "/api/v1/events")[1] == {"events": []}  # healthy: nothing
        tele.write_text("health 1 Xid 79: fell off the bus (test)\n")
        first = wait_for_events(d, 1)[0]
        assert first["device"] == "fakegpu0" and first["previous"] == "healthy"
        assert first["health"] == "degraded" and first["reason"] == "Xid 79: fell off the bus (test)"
        assert abs(first["time"] - time.time()) < 30
        tele.write_text("health 0\n")
        events = wait_for_events(d, 2)
        assert [(e["previous"], e["health"]) for e in events] == [("healthy", "degraded"),
                                                                   ("degraded", "healthy")]
        if CHROMIUM:
            dom = dump_dom(f"http://127.0.0.1:{d.port}/", tmp_path)
            assert "<td>Xid 79: fell off the bus (test)</td>" in dom, dom[-3000:]
    finally:
        d.proc.terminate()
        d.proc.wait(timeout=30)
        shutil.rmtree(d.state, ignore_errors=True)
