"""gpusrv slurm gres|node: this node's devices in Slurm's terms, checked
against the devices gpusrv smi lists, and given to slurmd itself (`slurmd -G`
parses slurm.conf and gres.conf and prints the GRES it would register)."""
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile

import pytest

GPUSRV = os.environ.get("GPUSRV_BIN", "gpusrv")


def run(*args, env=None):
    p = subprocess.run([GPUSRV, *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})})
    return p


def smi_devices(env=None):
    p = run("smi", "--json", env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["devices"]


def gres_lines(text):
    """gres.conf's lines as dicts, comments left out."""
    rows = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        rows.append(dict(kv.split("=", 1) for kv in line.split()))
    return rows


def test_gres_lines_count_every_device():
    p = run("slurm", "gres", "--node-name", "n1")
    assert p.returncode == 0, p.stderr
    rows = gres_lines(p.stdout)
    devices = smi_devices()
    assert sum(int(r.get("Count", 1)) for r in rows) == len(devices), (p.stdout, devices)
    for r in rows:
        assert r["NodeName"] == "n1"
        assert re.fullmatch(r"[a-z0-9_]+", r["Type"]), r
        assert "Count" in r or r["File"].startswith("/dev/nvidia"), r
    cpu = [r for r in rows if r["Name"] == "cpudev"]
    assert len(cpu) == 1 and cpu[0]["Count"] == "1", p.stdout


def test_same_devices_add_up_to_one_typed_line():
    """The fake GPU plugin's devices (CPUs under another backend's name)
    are one line of one type with their count, beside the CPU's own."""
    fake = os.environ.get("GPUSRV_TEST_FAKE_PLUGINS")
    if not fake:
        pytest.skip("GPUSRV_TEST_FAKE_PLUGINS is not set (run through ctest)")
    env = {"GPUSRV_PLUGIN_PATH": fake}
    ids = [d["id"] for d in smi_devices(env) if d["id"].startswith("fakegpu")]
    assert len(ids) >= 1
    p = run("slurm", "gres", "--node-name", "n1", env=env)
    assert p.returncode == 0, p.stderr
    fakes = [r for r in gres_lines(p.stdout) if r["Name"] == "fakegpu"]
    assert len(fakes) == 1 and int(fakes[0]["Count"]) == len(ids), p.stdout


def fake_gpus_with_nodes(tmp_path, n=2):
    """The fakegpu plugin's devices as GPUs with device nodes (files the
    test makes: nothing opens them)."""
    fake = os.environ.get("GPUSRV_TEST_FAKE_PLUGINS")
    if not fake:
        pytest.skip("GPUSRV_TEST_FAKE_PLUGINS is not set (run through ctest)")
    short = tempfile.mkdtemp(prefix="gsn")  # a node's path fits in 63 bytes
    nodes = [os.path.join(short, f"gpu{i}") for i in range(n)]
    for node in nodes:  # character devices, as /dev/null (slurmd checks), where root
        try:
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            open(node, "w").close()
    return {"GPUSRV_PLUGIN_PATH": fake, "GPUSRV_TEST_FAKE_GPUS": str(n),
            "GPUSRV_TEST_FAKE_GPU_TYPE": "1", "GPUSRV_TEST_FAKE_DEV_NODES": ",".join(nodes)}, nodes


def test_gpus_with_nodes_have_a_line_each_with_file(tmp_path):
    """Each GPU with a device node: Name=gpu, its File, in device order (the
    order the prolog's SLURM_JOB_GPUS indices follow); a GPU without one is
    a counted GRES of its backend, said on stderr (slurmd drops a gpu line
    without File)."""
    env, nodes = fake_gpus_with_nodes(tmp_path)
    p = run("slurm", "gres", "--node-name", "n1", env=env)
    assert p.returncode == 0, p.stderr
    gpus = [r for r in gres_lines(p.stdout) if r["Name"] == "gpu"]
    assert [r["File"] for r in gpus] == nodes and all("Count" not in r for r in gpus), p.stdout
    env["GPUSRV_TEST_FAKE_DEV_NODES"] = nodes[0]  # the second GPU has none
    p = run("slurm", "gres", "--node-name", "n1", env=env)
    rows = gres_lines(p.stdout)
    assert [r["File"] for r in rows if r["Name"] == "gpu"] == nodes[:1], p.stdout
    assert {"Name": "fakegpu", "Type": rows[0]["Type"], "Count": "1", "NodeName": "n1"} in rows
    assert "fakegpu1 is a GPU without a device node" in p.stderr


def test_node_line():
    p = run("slurm", "node", "--node-name", "n1")
    assert p.returncode == 0, p.stderr
    types_line, node_line = p.stdout.splitlines()
    names = types_line.split("=", 1)[1].split(",")
    assert "cpudev" in names and len(names) == len(set(names))
    node = dict(kv.split("=", 1) for kv in node_line.split())
    assert node["NodeName"] == "n1"
    assert int(node["CPUs"]) == os.cpu_count()
    with open("/proc/meminfo") as f:
        total_kib = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
    mib = total_kib // 1024  # what slurmd -C says; gpusrv leaves 1% below it
    assert abs(int(node["RealMemory"]) - (mib - mib // 100)) <= 1
    gres = {}
    for entry in node["Gres"].split(","):
        name, typ, count = entry.split(":")
        gres[(name, typ)] = int(count)
    g = run("slurm", "gres", "--node-name", "n1")
    from_gres = {}
    for r in gres_lines(g.stdout):
        key = (r["Name"], r["Type"])
        from_gres[key] = from_gres.get(key, 0) + int(r.get("Count", 1))
    assert gres == from_gres


def test_default_name_is_the_short_host_name():
    p = run("slurm", "node")
    assert p.returncode == 0, p.stderr
    assert f"NodeName={os.uname().nodename.split('.')[0]} " in p.stdout


@pytest.mark.parametrize("args,message", [
    (["slurm", "frob"], "unknown action 'frob'"),
    (["slurm", "node", "--node-name", "a b"], "no usable node name"),
    (["slurm", "node", "--node-name", "x=y"], "no usable node name"),
    (["slurm", "node", "--node-name", "n[1-2]"], "no usable node name"),
    (["slurm", "prolog"], "SLURM_JOB_ID is not a job id"),
    (["slurm"], ""),
])
def test_refusals(args, message):
    p = run(*args)
    assert p.returncode != 0
    assert message in p.stderr, p.stderr


def test_slurmd_accepts_the_lines(tmp_path):
    """slurmd -G reads the slurm.conf and gres.conf written from our output
    and prints the GRES it would register; each of ours must be there with
    its count."""
    slurmd = shutil.which("slurmd") or ("/usr/sbin/slurmd" if os.path.exists("/usr/sbin/slurmd")
                                        else None)
    if not slurmd:
        # Through ctest, install-deps has run and installed it: missing is a failure.
        assert not os.environ.get("GPUSRV_TEST_FAKE_PLUGINS"), "slurmd is not installed"
        pytest.skip("slurmd is not installed (install-deps installs slurmd)")
    env, _ = fake_gpus_with_nodes(tmp_path)
    node = run("slurm", "node", "--node-name", "gsnode1", env=env)
    gres = run("slurm", "gres", "--node-name", "gsnode1", env=env)
    assert "Name=gpu" in gres.stdout, gres.stdout
    assert node.returncode == 0 and gres.returncode == 0, node.stderr + gres.stderr
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=gstest\nSlurmctldHost=localhost\n"
                    f"SlurmdSpoolDir={tmp_path}/spool\nSlurmdPidFile={tmp_path}/slurmd.pid\n"
                    "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
                    f"{node.stdout}PartitionName=p Nodes=ALL Default=YES\n")
    (tmp_path / "gres.conf").write_text(gres.stdout)
    p = subprocess.run([slurmd, "-f", str(conf), "-N", "gsnode1", "-G"], capture_output=True,
                       text=True, timeout=60)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert not re.search(r"error|warning", out, re.I), out
    expected = {}
    for r in gres_lines(gres.stdout):
        key = (r["Name"], r["Type"])
        expected[key] = expected.get(key, 0) + int(r.get("Count", 1))
    for (name, typ), count in expected.items():
        printed = sum(int(m.group(1)) for m in re.finditer(
            rf"Gres Name={name} Type={typ} Count=(\d+)", out))
        assert printed == count, (name, typ, count, out)
