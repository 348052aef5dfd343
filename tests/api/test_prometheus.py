"""/metrics as Prometheus reads it: a real Prometheus (Debian's) scrapes a
daemon the test starts, and PromQL through Prometheus's HTTP API returns
the series the daemon exports; the Grafana dashboard in deploy/ names only
series the daemon exports, and its queries run."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "sched"))
from test_frontdesk import Daemon, free_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
PROMETHEUS = shutil.which("prometheus")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "gpusrv.json")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prom")
    d = Daemon(tmp)
    shutil.copytree(os.path.join(ROOT, "models", "digits"), d.repo / "digits")
    d.start()
    d.wait_ready()
    job = d.submit(["sleep", "120"], name="prom-probe")
    body = json.dumps({"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32",
                                   "data": [0.0] * 64}]})
    status, answer = d.request("POST", "/v2/models/digits/infer", body)
    assert status == 200, answer
    deadline = time.time() + 30
    while d.job(job)["state"] != "RUNNING":
        assert time.time() < deadline, d.job(job)
        time.sleep(0.05)
    yield d
    d.request("POST", f"/api/v1/jobs/{job}/cancel", token=d.admin)
    d.proc.terminate()
    d.proc.wait(timeout=30)
    shutil.rmtree(d.state, ignore_errors=True)


def metrics_text(d):
    status, raw = d.request("GET", "/metrics")
    assert status == 200
    return raw.decode() if isinstance(raw, bytes) else json.dumps(raw)


def test_job_series(daemon):
    text = metrics_text(daemon)
    assert 'gpusrv_jobs{tenant="admin",state="RUNNING"} 1' in text, text
    assert re.search(r'gpusrv_job_device_memory_bytes\{job="\d+",tenant="admin",devices=""\} 0',
                     text), text


def dashboard_exprs():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def test_grafana_dashboard_names_only_exported_series(daemon):
    exported = set(re.findall(r"^# TYPE (\S+) ", metrics_text(daemon), re.M))
    exprs = dashboard_exprs()
    assert len(exprs) >= 10
    for e in exprs:
        for name in re.findall(r"\b((?:nv|gpusrv)_[a-z_]+)", e):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            assert name in exported or base in exported, f"{name} in {e!r} is not exported"


@pytest.fixture(scope="module")
def prometheus(daemon, tmp_path_factory):
    if PROMETHEUS is None:
        pytest.skip("prometheus is not installed (scripts/install-deps.sh)")
    tmp = tmp_path_factory.mktemp("prometheus")
    config = tmp / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                      "scrape_configs:\n  - job_name: gpusrv\n    static_configs:\n"
                      f"      - targets: ['127.0.0.1:{daemon.port}']\n")
    port = free_port()
    log = open(tmp / "prometheus.log", "w")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}",
                             f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)
    yield port
    proc.terminate()
    proc.wait(timeout=30)


def query(port, promql):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as r:
        answer = json.load(r)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def wait_for_series(port, promql, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            result = query(port, promql)
            if result:
                return result
        except OSError:
            pass  # Prometheus still starting
        time.sleep(0.5)
    raise AssertionError(f"no series for {promql}")


def test_prometheus_scrapes_the_daemon(prometheus):
    up = wait_for_series(prometheus, 'up{job="gpusrv"} == 1')
    assert up[0]["value"][1] == "1"
    served = wait_for_series(prometheus, 'nv_inference_request_success{model="digits"}')
    assert float(served[0]["value"][1]) >= 1
    jobs = wait_for_series(prometheus, 'gpusrv_jobs{state="RUNNING"}')
    assert jobs[0]["metric"]["tenant"] == "admin" and jobs[0]["value"][1] == "1"
    memory = wait_for_series(prometheus, 'gpusrv_device_memory_total_bytes{device="cpu0"}')
    assert float(memory[0]["value"][1]) > 0


def test_grafana_queries_run_in_prometheus(prometheus):
    wait_for_series(prometheus, 'up{job="gpusrv"} == 1')
    for e in dashboard_exprs():
        query(prometheus, e)  # parses and evaluates (an empty result is fine: rates need time)
