"""HTTPS (hardening, TLS section): `gpusrv serve --tls-cert/--tls-key`
spoken to by curl, tritonclient and the gpusrv command with a CA this test
makes (openssl); a client trusting another CA, and an expired certificate,
refused; client certificates with --tls-client-ca; SIGHUP reading new files
without a restart; who may listen beyond loopback, and which clients there
need a token (in a network namespace this test makes)."""
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time

import numpy as np
import pytest
import tritonclient.http as triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_serve import GPUSRV, add_model, free_port  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None or shutil.which("curl") is None,
                                reason="openssl and curl make and check the certificates")


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.pem"), "-days", "2",
            "-subj", f"/CN={name}")
    return d / f"{name}.pem"


def make_cert(d, ca, name, days=1, server=True, usage=None):
    """A key and a certificate `name`.pem signed by CA `ca`; days=0 makes one
    whose validity ends the second it starts; `usage` names its only extended
    key usage."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
            str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"), "-subj", f"/CN={name}")
    ext = d / f"{name}.ext"
    ext.write_text(("subjectAltName=DNS:localhost,IP:127.0.0.1\n" if server else "") +
                   (f"extendedKeyUsage={usage}\n" if usage else ""))
    openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / f"{ca}.pem"), "-CAkey",
            str(d / f"{ca}.key"), "-CAcreateserial", "-out", str(d / f"{name}.pem"), "-days",
            str(days), *(["-extfile", str(ext)] if server or usage else []))
    return d / f"{name}.pem", d / f"{name}.key"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    make_ca(d, "ca")
    make_ca(d, "otherca")
    make_cert(d, "ca", "server")
    make_cert(d, "ca", "renewed")
    make_cert(d, "ca", "expired", days=0)
    make_cert(d, "ca", "alice", server=False)
    make_cert(d, "ca", "oldalice", days=0, server=False)
    make_cert(d, "otherca", "mallory", server=False)
    make_cert(d, "ca", "serveronly", server=False, usage="serverAuth")
    time.sleep(1.2)  # the days=0 certificates are now out of date
    return d


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    add_model(root, "mlp", {"max_batch_size": 8})
    return root


def start_tls(repo, pki, cert="server", *extra, cert_path=None, key_path=None, grpc_port=0):
    """gpusrv serve over HTTPS on a free loopback port, with certificate `cert`
    of `pki` (or the files given), and gRPC on `grpc_port` (0: none);
    (process, port, log path)."""
    port = free_port()
    while port == grpc_port:  # the caller's port was chosen apart from this one
        port = free_port()
    log_path = str(repo.parent / f"{repo.name}-serve-{port}.log")
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [GPUSRV, "serve", "--model-repository", str(repo), "--http-port", str(port),
         "--grpc-port", str(grpc_port),
         "--state-dir", str(repo.parent / f"{repo.name}-state-{port}"),
         "--tls-cert", str(cert_path or pki / f"{cert}.pem"),
         "--tls-key", str(key_path or pki / f"{cert}.key"), *extra],
        stdout=log, stderr=log)
    ctx = ssl._create_unverified_context()  # only to see it answer; tests check the chain
    if "--tls-client-ca" in extra:
        ctx.load_cert_chain(str(pki / "alice.pem"), str(pki / "alice.key"))
    deadline = time.time() + 30
    while time.time() < deadline:
        assert proc.poll() is None, open(log_path).read()
        try:
            c = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=ctx)
            c.request("GET", "/v2/models/mlp/ready")
            if c.getresponse().status == 200:
                return proc, port, log_path
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("gpusrv serve over TLS did not come up: " + open(log_path).read())


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def curl(port, pki, path="/v2", ca="ca", cert=None, body=None):
    """curl's exit code, and what it printed (body, or its error)."""
    cmd = ["curl", "-sS", "--max-time", "10", "--cacert", str(pki / f"{ca}.pem")]
    if cert:
        cmd += ["--cert", str(pki / f"{cert}.pem"), "--key", str(pki / f"{cert}.key")]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", body]
    r = subprocess.run(cmd + [f"https://127.0.0.1:{port}{path}"], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def infer_body():
    x = np.linspace(-1, 1, 256, dtype=np.float32)
    return x, json.dumps({"inputs": [{"name": "x", "shape": [1, 256], "datatype": "FP32",
                                      "data": x.tolist()}]})


def test_curl_and_tritonclient_over_https(repo, pki):
    proc, port, _ = start_tls(repo, pki)
    try:
        rc, out = curl(port, pki)
        assert rc == 0 and json.loads(out)["name"] == "gpusrv", out
        x, body = infer_body()
        rc, out = curl(port, pki, "/v2/models/mlp/infer", body=body)
        assert rc == 0, out
        by_curl = np.array(json.loads(out)["outputs"][0]["data"], dtype=np.float32)
        client = triton.InferenceServerClient(f"127.0.0.1:{port}", ssl=True,
                                              ssl_options={"ca_certs": str(pki / "ca.pem")})
        inp = triton.InferInput("x", [1, 256], "FP32")
        inp.set_data_from_numpy(x[None, :], binary_data=True)
        by_triton = client.infer("mlp", [inp]).as_numpy("probs")
        assert by_triton.shape == (1, 10)
        np.testing.assert_allclose(by_triton[0], by_curl, rtol=1e-6)
        client.close()
        # The gpusrv command, through the client library's libcurl transport.
        env = {**os.environ, "GPUSRV_URL": f"https://127.0.0.1:{port}",
               "GPUSRV_CA_FILE": str(pki / "ca.pem")}
        r = subprocess.run([GPUSRV, "models"], env=env, capture_output=True, text=True)
        assert r.returncode == 0 and "mlp" in r.stdout, r.stderr
        # Plain HTTP on the TLS port gets no answer it could mistake for one.
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        with pytest.raises((OSError, http.client.HTTPException)):
            c.request("GET", "/v2")
            c.getresponse().read()
    finally:
        stop(proc)


def test_a_client_trusting_another_ca_refuses_the_server(repo, pki):
    proc, port, _ = start_tls(repo, pki)
    try:
        rc, out = curl(port, pki, ca="otherca")
        assert rc == 60, out  # curl: peer certificate cannot be authenticated
        client = triton.InferenceServerClient(f"127.0.0.1:{port}", ssl=True,
                                              ssl_options={"ca_certs": str(pki / "otherca.pem")})
        with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED|certificate verify"):
            client.is_server_live()
        client.close()
        env = {**os.environ, "GPUSRV_URL": f"https://127.0.0.1:{port}",
               "GPUSRV_CA_FILE": str(pki / "otherca.pem")}
        r = subprocess.run([GPUSRV, "models"], env=env, capture_output=True, text=True)
        assert r.returncode != 0 and "cannot reach the daemon" in r.stderr, r.stderr
    finally:
        stop(proc)


def test_an_expired_server_certificate_is_refused_and_logged(repo, pki):
    proc, port, log = start_tls(repo, pki, "expired")
    try:
        rc, out = curl(port, pki)
        assert rc == 60 and "expired" in out, out
        ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        with pytest.raises(ssl.SSLCertVerificationError, match="expired"):
            http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5).request(
                "GET", "/v2")
    finally:
        stop(proc)
    assert "expired on" in open(log).read()


def test_client_certificates_with_a_client_ca(repo, pki):
    proc, port, _ = start_tls(repo, pki, "server", "--tls-client-ca", str(pki / "ca.pem"))
    try:
        rc, out = curl(port, pki)
        assert rc == 0 and "needs a client certificate" in out, out
        rc, out = curl(port, pki, cert="alice")
        assert rc == 0 and json.loads(out)["name"] == "gpusrv", out
        rc, out = curl(port, pki, cert="oldalice")
        assert rc == 0 and "client certificate refused" in out and "expired" in out, out
        rc, out = curl(port, pki, cert="mallory")
        assert rc == 0 and "client certificate refused" in out, out
        # Signed by the right CA, but for servers only.
        rc, out = curl(port, pki, cert="serveronly")
        assert rc == 0 and "client certificate refused" in out and "purpose" in out, out
        # tritonclient with its certificate.
        client = triton.InferenceServerClient(
            f"127.0.0.1:{port}", ssl=True,
            ssl_options={"ca_certs": str(pki / "ca.pem"), "certfile": str(pki / "alice.pem"),
                         "keyfile": str(pki / "alice.key")})
        assert client.is_model_ready("mlp")
        client.close()
    finally:
        stop(proc)


def peer_subject(port, pki):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
    c.request("GET", "/v2/health/live")
    assert c.getresponse().status == 200
    subject = dict(x[0] for x in c.sock.getpeercert()["subject"])
    c.close()
    return subject["commonName"]


def grpc_peer_subject(port, pki):
    """The common name of the certificate the gRPC port shows a new connection
    (a TLS handshake offering HTTP/2, as gRPC clients do)."""
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            return dict(x[0] for x in tls.getpeercert()["subject"])["commonName"]


def test_sighup_reads_new_files_and_a_bad_one_keeps_the_old(repo, pki, tmp_path):
    """For HTTP and gRPC alike."""
    cert, key = tmp_path / "live.pem", tmp_path / "live.key"
    shutil.copy(pki / "server.pem", cert)
    shutil.copy(pki / "server.key", key)
    gport = free_port()
    proc, port, log = start_tls(repo, pki, cert_path=cert, key_path=key, grpc_port=gport)
    try:
        # A connection opened before the reload keeps working after it.
        ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        kept = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
        kept.request("GET", "/v2/health/live")
        assert kept.getresponse().read() == b""
        assert peer_subject(port, pki) == "server"
        assert grpc_peer_subject(gport, pki) == "server"
        shutil.copy(pki / "renewed.pem", cert)
        shutil.copy(pki / "renewed.key", key)
        proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while peer_subject(port, pki) != "renewed" and time.time() < deadline:
            time.sleep(0.05)
        assert peer_subject(port, pki) == "renewed"
        # gRPC is handed the files after HTTP's reload has checked them
        while grpc_peer_subject(gport, pki) != "renewed" and time.time() < deadline:
            time.sleep(0.05)
        assert grpc_peer_subject(gport, pki) == "renewed"
        kept.request("GET", "/v2/health/live")
        assert kept.getresponse().status == 200
        # A certificate without its key: refused, and the renewed one stays.
        shutil.copy(pki / "server.pem", cert)
        proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while "not reloaded" not in open(log).read() and time.time() < deadline:
            time.sleep(0.05)
        assert "do not match" in open(log).read()
        assert peer_subject(port, pki) == "renewed"
        assert grpc_peer_subject(gport, pki) == "renewed"
        assert proc.poll() is None
    finally:
        stop(proc)


@pytest.mark.parametrize("extra,message", [
    (["--host", "0.0.0.0"], "refusing to listen on 0.0.0.0 without TLS"),
    (["--tls-cert", "CERT"], "--tls-cert and --tls-key go together"),
    (["--tls-cert", "CERT", "--tls-key", "OTHERKEY"], "do not match"),
    (["--tls-cert", "CERT", "--tls-key", "/nonexistent.key"], "/nonexistent.key: cannot read it"),
    (["--tls-client-ca", "CA"], "--tls-client-ca needs --tls-cert"),
    (["--tls-cert", "CERT", "--tls-key", "KEY", "--tls-client-ca", "KEY"],
     "No certificate was found"),
    (["--auth", "sometimes"], "--auth is 'auto', 'required' or 'none'"),
])
def test_listen_settings_that_are_refused(repo, pki, tmp_path, extra, message):
    names = {"CERT": pki / "server.pem", "KEY": pki / "server.key", "OTHERKEY": pki / "alice.key",
             "CA": pki / "ca.pem"}
    args = [str(names.get(a, a)) for a in extra]
    r = subprocess.run([GPUSRV, "serve", "--model-repository", str(repo), "--http-port",
                        str(free_port()), "--grpc-port", "0", "--state-dir", str(tmp_path / "state"), *args],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and message in r.stderr, r.stderr


# ---- beyond loopback: a network namespace with an address of its own -----------------------

NETNS_ADDR = "10.77.0.1"


def can_make_netns():
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    r = subprocess.run(["unshare", "--net", "ip", "link", "set", "lo", "up"], capture_output=True)
    return r.returncode == 0


def statuses_in_netns(repo, *extra):
    """Starts gpusrv serve on 0.0.0.0 inside a new network namespace whose
    loopback also holds NETNS_ADDR; returns the statuses of an inference
    without a token from 127.0.0.1 and from NETNS_ADDR, and with the admin
    token from NETNS_ADDR (this file run as a script, inside)."""
    script = (f"ip link set lo up && ip addr add {NETNS_ADDR}/32 dev lo && "
              f"exec {sys.executable} {os.path.abspath(__file__)} --netns-probe {repo} "
              + " ".join(extra))
    r = subprocess.run(["unshare", "--net", "sh", "-c", script], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "GPUSRV_BIN": GPUSRV})
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def netns_probe(repo, extra):
    port = free_port()
    # Beside the repository, not in it: there it would be an entry that never
    # becomes ready.
    state = repo.parent / f"{repo.name}-state-{port}"
    log = open(repo.parent / f"{repo.name}-serve-{port}.log", "w")
    proc = subprocess.Popen([GPUSRV, "serve", "--model-repository", str(repo), "--http-port",
                             str(port), "--grpc-port", "0", "--state-dir", str(state), "--host",
                             "0.0.0.0", *extra],
                            stdout=log, stderr=log)
    deadline = time.time() + 30
    while time.time() < deadline:  # health needs no token whatever --auth says
        assert proc.poll() is None, open(log.name).read()
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/v2/health/ready")
            if c.getresponse().status == 200:
                break
        except OSError:
            pass
        time.sleep(0.05)
    _, body = infer_body()
    out = {}
    try:
        for label, host, token in (("loopback", "127.0.0.1", None),
                                   ("beyond", NETNS_ADDR, None),
                                   ("beyond_token", NETNS_ADDR,
                                    (state / "admin.token").read_text().strip())):
            c = http.client.HTTPConnection(host, port, timeout=10)
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            c.request("POST", "/v2/models/mlp/infer", body=body, headers=headers)
            out[label] = c.getresponse().status
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    print(json.dumps(out))


@pytest.mark.skipif(not can_make_netns(), reason="needs unshare --net (root or user namespaces)")
def test_listening_beyond_loopback_needs_tokens(repo):
    got = statuses_in_netns(repo, "--insecure-listen")
    # Listening beyond loopback, every client needs a token, a local one too (it may be a
    # proxy for others).
    assert got == {"loopback": 401, "beyond": 401, "beyond_token": 200}, got
    got = statuses_in_netns(repo, "--insecure-listen", "--auth", "none")
    assert got == {"loopback": 200, "beyond": 200, "beyond_token": 200}, got
    got = statuses_in_netns(repo, "--insecure-listen", "--auth", "required")
    assert got == {"loopback": 401, "beyond": 401, "beyond_token": 200}, got


if __name__ == "__main__" and sys.argv[1:2] == ["--netns-probe"]:
    import pathlib
    netns_probe(pathlib.Path(sys.argv[2]), sys.argv[3:])


def test_grpc_over_tls_with_client_certificates(repo, pki):
    import tritonclient.grpc as tg
    from tritonclient.utils import InferenceServerException
    gport = free_port()
    proc, _, _ = start_tls(repo, pki, "server", "--tls-client-ca", str(pki / "ca.pem"),
                           grpc_port=gport)
    try:
        def client(ca="ca", cert="alice"):
            keys = {"private_key": str(pki / f"{cert}.key"),
                    "certificate_chain": str(pki / f"{cert}.pem")} if cert else {}
            return tg.InferenceServerClient(f"localhost:{gport}", ssl=True,
                                            root_certificates=str(pki / f"{ca}.pem"), **keys)
        c = client()
        assert c.is_model_ready("mlp")
        x = tg.InferInput("x", [1, 256], "FP32")
        x.set_data_from_numpy(np.ones((1, 256), np.float32))
        assert c.infer("mlp", [x]).as_numpy("probs").shape == (1, 10)
        # No client certificate, one another CA signed, a client that trusts another CA, and
        # one that does not speak TLS: no call gets through.
        for bad in (client(cert=None), client(cert="mallory"), client(ca="otherca"),
                    tg.InferenceServerClient(f"127.0.0.1:{gport}")):
            with pytest.raises(InferenceServerException) as e:
                bad.is_server_live(client_timeout=10)
            assert "UNAVAILABLE" in str(e.value) or "DEADLINE" in str(e.value)
    finally:
        stop(proc)
