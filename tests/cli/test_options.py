"""Every subcommand's flags come from one table, parsed by one function, with
--help written from it: this walks each command's table as its help shows it,
and checks that every option listed is accepted in both forms (--name VALUE
and --name=VALUE), that unknown options and bad values are usage errors
(exit 2) naming the option, that the daemon-facing commands all take --url,
--token and --token-file, and that a --token given on the command line is
blanked in /proc/PID/cmdline at once."""
import os
import re
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPUSRV = os.environ.get("GPUSRV_BIN", os.path.join(ROOT, "build", "gpusrv"))
# Nothing listens here: a command that gets past its options fails (exit 1)
# reaching the daemon, never with a usage error.
NOWHERE = "http://127.0.0.1:9"
DAEMON_FACING = ["models", "infer", "submit", "images", "jobs", "job", "cancel", "logs", "wait", "usage",
                 "tenant"]
ENGINE = ["serve", "smi", "model", "batch", "bench", "cdi", "slurm"]
# Words each command needs besides options, and a value each metavar accepts.
WORDS = {"infer": ["digits", "-i", "x=/nonexistent.npy"], "job": ["1"], "cancel": ["1"], "logs": ["1"], "wait": ["1"],
         "tenant": ["add", "alice"], "model": ["inspect", "/nonexistent.onnx"],
         "batch": ["/nonexistent"], "cdi": ["generate"], "slurm": ["node"]}
AFTER = {"submit": ["--", "true"]}
VALUES = {"N": "1", "PCT": "5", "SIZE": "1G", "LIMIT": "1h", "P": "1", "W": "1", "T": "alice",
          "DATE": "2026-01-01", "SECONDS": "1", "MiB": "8", "MS": "5", "BYTES": "1G", "S": "1"}
SPECIAL = {("infer", "input"): "x=/nonexistent.npy", ("submit", "env"): "A=1",
           ("model", "input"): "x=/nonexistent.npy", ("model", "precision"): "fp16",
           ("batch", "precision"): "fp16", ("batch", "preprocess"): "scale=1",
           ("smi", "query"): "index", ("smi", "format"): "csv", ("smi", "id"): "cpu0",
           ("smi", "query-gpu"): "index,name", ("smi", "query-compute-apps"): "pid",
           ("smi", "json"): None, ("batch", "device"): "cpu0", ("model", "device"): "cpu0",
           ("submit", "gpus-per-node"): "1", ("submit", "ntasks-per-node"): "2"}


def gpusrv(*args, timeout=60):
    env = {**os.environ, "GPUSRV_URL": NOWHERE}
    env.pop("GPUSRV_TOKEN", None)
    return subprocess.run([GPUSRV, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def options_of(cmd):
    """(name, short, metavar) of each row, as `gpusrv help CMD` lists them."""
    p = gpusrv("help", cmd)
    assert p.returncode == 0, p.stderr
    rows = []
    for line in p.stdout.split("Options:\n", 1)[1].splitlines() if "Options:" in p.stdout else []:
        m = re.match(r"  (?:-(\w), )?--([a-z][a-z0-9-]*)(?: (\S+))?\s{2,}\S", line)
        if m:
            rows.append((m.group(2), m.group(1), m.group(3)))
    return rows


def test_every_command_lists_its_options_once():
    listed = gpusrv("--help").stdout
    for cmd in DAEMON_FACING + ENGINE:
        assert re.search(rf"^  {cmd} ", listed, re.M), cmd
        if cmd == "serve":
            continue  # its settings table is the daemon's config (gpusrv serve --help)
        rows = options_of(cmd)
        assert rows, cmd
        names = [r[0] for r in rows]
        shorts = [r[1] for r in rows if r[1]]
        assert len(set(names)) == len(names) and len(set(shorts)) == len(shorts), (cmd, rows)
        # `gpusrv help CMD` and `gpusrv CMD --help` are the same text.
        assert gpusrv(cmd, "--help").stdout == gpusrv("help", cmd).stdout


@pytest.mark.parametrize("cmd", DAEMON_FACING)
def test_daemon_facing_commands_take_the_same_daemon_options(cmd):
    names = {r[0] for r in options_of(cmd)}
    assert {"url", "token", "token-file"} <= names, names
    if cmd not in ("cancel", "wait", "logs", "submit", "infer"):
        assert "json" in names, names
    base = [*WORDS.get(cmd, [])]
    for form in (["--url", NOWHERE], [f"--url={NOWHERE}"]):
        p = gpusrv(cmd, *base, *form, *AFTER.get(cmd, []))
        assert p.returncode == 1, (cmd, form, p.stderr)  # past the options, the daemon is not there


def value_for(cmd, name, metavar):
    if (cmd, name) in SPECIAL:
        return SPECIAL[(cmd, name)]
    if metavar is None:
        return None
    return VALUES.get(metavar, "/tmp")


@pytest.mark.parametrize("cmd", DAEMON_FACING + ["model", "smi"])
def test_every_option_is_accepted_in_both_forms(cmd):
    for name, short, metavar in options_of(cmd):
        if cmd == "smi" and name in ("json", "format", "loop"):
            continue  # exclusive with --query, needs --query, runs until interrupted
        value = value_for(cmd, name, metavar)
        forms = [[f"--{name}"]] if value is None else [[f"--{name}", value], [f"--{name}={value}"]]
        if short and value is not None:
            forms.append([f"-{short}", value])
        for form in forms:
            extra = ["--url", NOWHERE] if cmd in DAEMON_FACING and name != "url" else []
            p = gpusrv(cmd, *WORDS.get(cmd, []), *form, *extra, *AFTER.get(cmd, []))
            assert p.returncode != 2, (cmd, form, p.stderr)


@pytest.mark.parametrize("cmd", DAEMON_FACING + ENGINE)
def test_unknown_options_are_usage_errors(cmd):
    p = gpusrv(cmd, *WORDS.get(cmd, []), "--no-such-option", *AFTER.get(cmd, []))
    assert p.returncode == 2 and "no-such-option" in p.stderr, (cmd, p.stderr)
    assert p.stdout == ""


@pytest.mark.parametrize("args,needle", [
    (["submit", "--cpus", "0", "--", "true"], "--cpus"),
    (["submit", "--gpus", "x", "--", "true"], "--gpus"),
    (["submit", "--mem", "lots", "--", "true"], "--mem"),
    (["submit", "--time", "forever", "--", "true"], "--time"),
    (["submit", "--json=yes", "--", "true"], "--json"),
    (["submit", "--priority"], "needs a value"),
    (["tenant", "add", "x", "--weight", "-1"], "--weight"),
    (["logs", "1", "-fz"], "'-z'"),
    (["batch", "m", "-b", "0"], "--batch"),
    (["smi", "-l", "0"], "--loop"),
])
def test_bad_values_name_the_option(args, needle):
    p = gpusrv(*args)
    assert p.returncode == 2 and needle in p.stderr, p.stderr


def test_token_file_is_read_and_a_token_on_the_command_line_is_hidden(tmp_path):
    secret = "gs_" + "s3cr3t" * 5
    (tmp_path / "token").write_text(secret + "\n")
    p = gpusrv("jobs", "--token-file", str(tmp_path / "token"))
    assert p.returncode == 1 and "cannot read" not in p.stderr, p.stderr
    p = gpusrv("jobs", "--token-file", str(tmp_path / "missing"))
    assert p.returncode == 1 and "cannot read a token from" in p.stderr, p.stderr
    # A command that stays a while (logs -f against a port that accepts and
    # never answers): its cmdline must not show the token.
    import socket
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        url = f"http://127.0.0.1:{srv.getsockname()[1]}"
        proc = subprocess.Popen([GPUSRV, "logs", "1", "-f", "--url", url, "--token", secret],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            conn, _ = srv.accept()  # it got past its options and is talking
            with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
            assert secret not in cmdline and "logs" in cmdline, cmdline
            conn.close()
        finally:
            proc.kill()
            _, err = proc.communicate(timeout=10)
        assert "visible to other users" in err


def test_commands_of_the_engine_run_through_gpusrv():
    # gpusrv execs gpusrv-engine for them: same output as running it directly.
    engine = os.path.join(os.path.dirname(GPUSRV), "gpusrv-engine")
    assert os.access(engine, os.X_OK)
    a = gpusrv("smi", "--query=index,id", "--format=csv,noheader")
    b = subprocess.run([engine, "smi", "--query=index,id", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=60)
    assert a.returncode == 0 and a.stdout == b.stdout and "cpu0" in a.stdout
    # The thin command maps none of the engine's libraries.
    maps = subprocess.run(["ldd", GPUSRV], capture_output=True, text=True).stdout
    for lib in ("libdnnl", "libopenblas", "libOpenCL", "libsqlite3", "libmicrohttpd"):
        assert lib not in maps, maps
