"""The client library's transports, against servers others wrote (Python's
http.server): http:// URLs go over the library's own HTTP/1.1 transport,
which must read answers with a Content-Length, chunked answers, answers that
end with the connection, and send a request again when a kept connection was
closed by the server meanwhile; other schemes go through libcurl, opened
only then (the `gpusrv` command maps no libcurl otherwise)."""
import http.server
import json
import os
import subprocess
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSRV = os.environ.get("GPUSRV_BIN", os.path.join(ROOT, "build", "gpusrv"))
# Long enough that chunk boundaries fall at every place in the reader's buffer.
MODELS = [{"name": f"m{i}", "version": "1", "state": "READY", "reason": ""} for i in range(600)]
LOG = "".join(f"line {i}\n" for i in range(3000))  # more than one read of the socket


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen = []  # (method, path, authorization, client port) of every request

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.do_GET()

    def do_GET(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Handler.seen.append((self.command, self.path, self.headers.get("Authorization"),
                             self.client_address[1], body))
        if self.path == "/v2/repository/index":  # chunked, in chunks of odd sizes
            data = json.dumps(MODELS).encode()
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            at, size = 0, 5
            while at < len(data):
                part = data[at:at + size]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                at, size = at + len(part), size * 3 % 997 + 1
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/api/v1/usage?since=0":  # no length: ends with the connection
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(json.dumps({"usage": []}).encode())
            self.close_connection = True
        elif self.path.startswith("/api/v1/jobs/1/logs"):
            offset = int(self.path.split("offset=")[1]) if "offset=" in self.path else 0
            data = LOG.encode()[offset:]
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            # Kept-alive as far as the client knows, but closed: as a daemon
            # whose keep-alive timeout ran out does.
            self.close_connection = True
        elif self.path == "/api/v1/jobs/1":
            self.send_response(200)
            job = json.dumps({"id": 1, "state": "COMPLETED", "exit_code": 0}).encode()
            self.send_header("Content-Length", str(len(job)))
            self.end_headers()
            self.wfile.write(job)
            self.close_connection = True
        else:
            self.send_error(404, "no such route here")


@pytest.fixture
def server():
    Handler.seen = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def gpusrv(url, *args):
    env = {**os.environ, "GPUSRV_URL": url, "GPUSRV_TOKEN": "gs_test"}
    return subprocess.run([GPUSRV, *args], capture_output=True, text=True, timeout=60, env=env)


def test_chunked_answers_are_read(server):
    p = gpusrv(server, "models", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == MODELS
    assert Handler.seen[0][:3] == ("POST", "/v2/repository/index", "Bearer gs_test")
    assert Handler.seen[0][4] == b"{}"  # the body, as Content-Length said


def test_an_answer_that_ends_with_the_connection(server):
    p = gpusrv(server, "usage", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == []


def test_a_kept_connection_closed_by_the_server_is_replaced(server):
    # logs -f asks for the log, then the job, then the log again, on one
    # client: each time the server has closed the connection it kept.
    p = gpusrv(server, "logs", "1", "-f")
    assert p.returncode == 0, p.stderr
    assert p.stdout == LOG
    paths = [s[1] for s in Handler.seen]
    assert "/api/v1/jobs/1/logs?stream=stdout&offset=0" in paths, paths
    assert len(paths) >= 3 and len({s[3] for s in Handler.seen}) == len(paths)  # new connections


def test_errors_name_the_route_and_status(server):
    p = gpusrv(server, "job", "7")
    assert p.returncode == 1 and "/api/v1/jobs/7: HTTP 404" in p.stderr, p.stderr


def test_a_url_prefix_is_kept(server):
    p = gpusrv(server + "/", "models", "--json")  # a trailing slash is no prefix
    assert p.returncode == 0, p.stderr
    p = gpusrv(server + "/gpusrv/", "models", "--json")  # behind a proxy's path
    assert p.returncode == 1 and "HTTP 404" in p.stderr, p.stderr  # this server has no prefix
    assert Handler.seen[-1][1] == "/gpusrv/v2/repository/index", Handler.seen[-1]


def test_nothing_listening_is_a_clear_error():
    p = gpusrv("http://127.0.0.1:9", "jobs")
    assert p.returncode == 1 and "cannot reach the daemon at http://127.0.0.1:9" in p.stderr


def test_other_schemes_go_through_libcurl(server):
    # An https:// URL against a plain server: libcurl is opened, and its
    # TLS handshake fails with its own message.
    p = gpusrv(server.replace("http://", "https://"), "models")
    assert p.returncode == 1, p.stderr
    assert "cannot reach the daemon at https://" in p.stderr, p.stderr
    maps = subprocess.run(["ldd", GPUSRV], capture_output=True, text=True).stdout
    assert "libcurl" not in maps
