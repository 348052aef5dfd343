"""bench/tls: what HTTPS costs. perf_analyzer at concurrency 1 and 16 against
one `gpusrv serve` over HTTP and another over HTTPS (a P-256 certificate this
script makes with openssl), serving the digits MLP, in the same run; the
HTTPS figures are printed beside the HTTP ones as ratios. perf_analyzer keeps
its connections open, so the handshake is paid once per connection and the
figures are the cost of the record layer on each request.

Usage: .venv/bin/python bench/tls.py BUILD_DIR"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from serve import PERF_ANALYZER, free_port, perf  # noqa: E402


def make_certificate(d):
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem", "-days", "2", "-subj", "/CN=bench-ca")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
            f"{d}/server.key", "-out", f"{d}/server.csr", "-subj", "/CN=localhost")
    with open(f"{d}/san.ext", "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", f"{d}/server.csr", "-CA", f"{d}/ca.pem", "-CAkey",
            f"{d}/ca.key", "-CAcreateserial", "-out", f"{d}/server.pem", "-days", "1",
            "-extfile", f"{d}/san.ext")


def perf_tls(url, concurrency, out_csv, tls_ca=None):
    extra = ["--ssl-https-ca-certificates-file", tls_ca, "--ssl-https-verify-peer", "1",
             "--ssl-https-verify-host", "2"] if tls_ca else []
    ips, p50, _ = perf("digits", None, concurrency, out_csv, url=url, extra=extra)
    return ips, p50


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    if not os.path.exists(PERF_ANALYZER):
        raise SystemExit("perf_analyzer is missing: run scripts/install-deps.sh")
    with tempfile.TemporaryDirectory() as d:
        make_certificate(d)
        repo = os.path.join(d, "models")
        shutil.copytree(os.path.join(ROOT, "models", "digits"), os.path.join(repo, "digits"))
        servers, urls = [], {}
        for scheme in ("http", "https"):
            port = free_port()
            tls = ["--tls-cert", f"{d}/server.pem", "--tls-key", f"{d}/server.key"] \
                if scheme == "https" else []
            servers.append(subprocess.Popen(
                [os.path.join(build, "gpusrv"), "serve", "--model-repository", repo,
                 "--state-dir", os.path.join(d, f"state-{scheme}"), "--http-port", str(port),
                 "--grpc-port", "0", *tls], stderr=subprocess.DEVNULL))
            urls[scheme] = f"{'localhost' if tls else '127.0.0.1'}:{port}"
        time.sleep(1.5)
        print(f"bench/tls: perf_analyzer, digits MLP, batch 1, {os.cpu_count()} cores; "
              "HTTP and HTTPS (TLS 1.3, P-256) servers side by side")
        print(f"{'conc':>4} {'http inf/s':>10} {'https inf/s':>11} {'ratio':>6} "
              f"{'http p50 us':>11} {'https p50 us':>12} {'extra us':>8}")
        try:
            for c in (1, 16):
                ips, p50 = perf_tls(urls["http"], c, os.path.join(d, "pa.csv"))
                tips, tp50 = perf_tls("https://" + urls["https"], c, os.path.join(d, "pa.csv"),
                                  f"{d}/ca.pem")
                print(f"{c:4d} {ips:10.0f} {tips:11.0f} {tips / ips:6.2f} {p50:11.0f} "
                      f"{tp50:12.0f} {tp50 - p50:8.0f}")
        finally:
            for s in servers:
                s.terminate()
                s.wait(timeout=30)


if __name__ == "__main__":
    main()
