"""`gpusrv smi`: its JSON, table and CSV agree with /proc, every query field
works, and bad flags fail as DESIGN.md says (exit 2, usage on stderr)."""
import json
import os
import re
import signal
import subprocess
import time

import pytest

GPUSRV = os.environ.get("GPUSRV_BIN", "build/gpusrv")
PLUGINS = os.environ.get("GPUSRV_TEST_PLUGINS", "")
FIELDS = ["index", "id", "backend", "name", "memory.total", "memory.used", "memory.free",
          "utilization", "temperature", "power"]


def run(*args, env=None, timeout=60):
    full_env = dict(os.environ)
    full_env.pop("GPUSRV_BACKENDS", None)
    full_env.pop("GPUSRV_PLUGIN_PATH", None)
    full_env.update(env or {})
    return subprocess.run([GPUSRV, *args], capture_output=True, text=True, env=full_env,
                          timeout=timeout)


def smi_json(*extra, env=None):
    p = run("smi", "--json", *extra, env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def meminfo():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, rest = line.split(":", 1)
            out[key] = int(rest.split()[0]) * 1024
    return out


def cgroup_memory_limit():
    """The memory limit of this process's cgroup, v1 or v2, or None."""
    lines = open("/proc/self/cgroup").read().splitlines()
    candidates = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            candidates += [f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes",
                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidates += [f"/sys/fs/cgroup{path}/memory.max", "/sys/fs/cgroup/memory.max"]
    for c in candidates:
        try:
            text = open(c).read().strip()
        except OSError:
            continue
        return None if text == "max" else int(text)
    return None


def cpu_model_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def cpu0(doc):
    devs = [d for d in doc["devices"] if d["id"] == "cpu0"]
    assert len(devs) == 1, doc
    return devs[0]


def test_json_agrees_with_proc():
    doc = smi_json()
    d = cpu0(doc)
    assert d["index"] == 0 and d["backend"] == "cpu"
    mem = meminfo()
    limit = cgroup_memory_limit()
    expected_total = min(mem["MemTotal"], limit) if limit else mem["MemTotal"]
    assert d["memory_total_bytes"] == expected_total
    assert d["memory_used_bytes"] + d["memory_free_bytes"] == d["memory_total_bytes"]
    if not limit or limit >= mem["MemTotal"]:
        # Free is MemAvailable, read a moment apart: allow 2% of the total.
        assert abs(d["memory_free_bytes"] - meminfo()["MemAvailable"]) < 0.02 * expected_total
    assert 0.0 <= d["utilization_percent"] <= 100.0
    assert d["compute_units"] == len(os.sched_getaffinity(0))
    if cpu_model_name():
        assert d["name"] == cpu_model_name()
    # Fields the machine does not expose are null, never a made-up 0.
    for key, lo, hi in [("temperature_c", -40, 150), ("power_w", 0.001, 5000)]:
        assert d[key] is None or lo <= d[key] <= hi, (key, d[key])
    if not os.path.exists("/sys/class/powercap"):
        assert d["power_w"] is None
    assert d["processes"] is None  # the CPU backend cannot list processes


def test_json_names_skipped_plugins():
    if not PLUGINS:
        pytest.skip("GPUSRV_TEST_PLUGINS is not set (run through ctest)")
    doc = smi_json(env={"GPUSRV_PLUGIN_PATH": PLUGINS})
    ids = [d["id"] for d in doc["devices"]]
    assert ids == ["cpu0", "testcpu0"]
    skipped = {s["name"]: s["reason"] for s in doc["skipped_backends"]}
    assert "no fake driver" in skipped["nodevice"]
    assert "API version" in skipped["badversion"]
    table = run("smi", env={"GPUSRV_PLUGIN_PATH": PLUGINS})
    assert table.returncode == 0
    assert "Backends not loaded" in table.stdout and "no fake driver" in table.stdout


def test_table_shows_each_device():
    p = run("smi")
    assert p.returncode == 0, p.stderr
    d = cpu0(smi_json())
    row = [l for l in p.stdout.splitlines() if "| cpu0 " in l]
    assert len(row) == 2  # the device table and the processes table
    total_mib = d["memory_total_bytes"] >> 20
    assert f"/ {total_mib}MiB" in row[0]
    assert "Processes" in p.stdout


@pytest.mark.parametrize("field", FIELDS)
def test_each_query_field(field):
    p = run("smi", f"--query={field}", "--format=csv,noheader,nounits")
    assert p.returncode == 0, p.stderr
    value = p.stdout.strip().splitlines()[0]
    d = cpu0(smi_json())
    expect = {
        "index": str(d["index"]), "id": d["id"], "backend": d["backend"], "name": d["name"],
        "memory.total": str(d["memory_total_bytes"] >> 20),
    }
    if field in expect:
        assert value == expect[field]
    elif field in ("memory.used", "memory.free"):
        assert abs(int(value) - (d[field.replace(".", "_") + "_bytes"] >> 20)) <= 0.02 * (
            d["memory_total_bytes"] >> 20)
    elif field == "utilization":
        assert 0 <= float(value) <= 100
    else:  # temperature, power: a number or N/A, as the JSON says
        key = {"temperature": "temperature_c", "power": "power_w"}[field]
        assert (value == "[N/A]") == (d[key] is None)


def test_csv_header_and_units():
    p = run("smi", "--query=index,memory.total,utilization", "--format=csv")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "index, memory.total [MiB], utilization [%]"
    assert re.fullmatch(r"0, \d+ MiB, \d+ %", lines[1]), lines[1]
    p = run("smi", "-q", "id,name", "--format=csv,noheader")
    assert p.stdout.splitlines()[0].startswith("cpu0, ")


def test_select_device():
    for ident in ("cpu0", "0"):
        p = run("smi", "-i", ident, "--query=id", "--format=csv,noheader")
        assert p.returncode == 0 and p.stdout.strip() == "cpu0"
    p = run("smi", "-i", "cuda7")
    assert p.returncode == 1 and p.stdout == ""
    assert "no device 'cuda7'" in p.stderr


def test_unknown_query_field_exits_2_and_lists_fields():
    p = run("smi", "--query=index,gpu.fans", "--format=csv")
    assert p.returncode == 2
    assert p.stdout == ""
    assert "gpu.fans" in p.stderr
    for f in FIELDS:
        assert f in p.stderr


@pytest.mark.parametrize("args", [
    ["smi", "--bogus"], ["smi", "-z"], ["smi", "extra"], ["smi", "-l", "0"], ["smi", "-l", "abc"],
    ["smi", "-l"], ["smi", "--json", "--query=index"], ["smi", "--format=csv"],
    ["smi", "--query=index", "--format=xml"], ["smi", "--query="], ["smi", "--query=index,"],
])
def test_bad_smi_flags_exit_2_with_usage(args):
    p = run(*args)
    assert p.returncode == 2, (args, p.returncode, p.stderr)
    assert p.stdout == ""
    assert p.stderr.startswith("gpusrv: smi: ")


def test_unknown_short_option_is_named():
    p = run("smi", "-i", "cpu0", "-xq")
    assert p.returncode == 2
    assert "unknown option '-x'" in p.stderr


@pytest.mark.parametrize("args", [[], ["bogus"], ["--bogus"], ["help", "bogus"]])
def test_bad_commands_exit_2(args):
    p = run(*args)
    assert p.returncode == 2
    assert p.stdout == ""
    assert "Usage: gpusrv" in p.stderr or "unknown command" in p.stderr


def test_help_and_version():
    top = run("--help")
    assert top.returncode == 0 and "smi" in top.stdout and top.stdout.startswith("Usage: gpusrv")
    a, b = run("help", "smi"), run("smi", "--help")
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout and a.stdout.startswith("Usage: gpusrv smi")
    v = run("--version")
    assert v.returncode == 0 and re.fullmatch(r"gpusrv \d+\.\d+\.\d+\S*\n", v.stdout)


def test_loop_repeats_until_interrupted():
    env = dict(os.environ)
    env.pop("GPUSRV_PLUGIN_PATH", None)
    proc = subprocess.Popen([GPUSRV, "smi", "-l", "0.2", "--query=id", "--format=csv,noheader"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(1.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert out.count("cpu0") >= 3


def test_no_backend_fails_with_reason():
    p = run("smi", env={"GPUSRV_BACKENDS": "none"})
    assert p.returncode == 1
    assert "no backend could be started" in p.stderr
    assert "GPUSRV_BACKENDS" in p.stderr


def cuda_plugin_dir():
    """The directory holding gpusrv-cuda.so beside the gpusrv under test."""
    build = os.path.dirname(os.path.abspath(GPUSRV))
    return build if os.path.exists(os.path.join(build, "gpusrv-cuda.so")) else None


def test_cuda_plugin_says_why_it_cannot_run(tmp_path):
    """Without a driver the CUDA plugin is skipped with that reason; against
    the toolkit's stub libcuda it finds every driver entry point it lists
    (versioned names included) and then says the library is only a stub."""
    plugins = cuda_plugin_dir()
    if not plugins:
        pytest.skip("the CUDA plugin is not built here (no CUDA toolkit)")
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("this machine has an NVIDIA driver: the plugin runs for real")
    doc = smi_json(env={"GPUSRV_PLUGIN_PATH": plugins, "GPUSRV_BACKENDS": "cpu,cuda"})
    skipped = {s["name"]: s["reason"] for s in doc["skipped_backends"]}
    assert "no NVIDIA driver" in skipped["cuda"] and "libcuda.so.1" in skipped["cuda"]
    assert [d["id"] for d in doc["devices"]] == ["cpu0"]  # gpusrv carries on
    stubs = [p for p in ("/usr/local/cuda/lib64/stubs/libcuda.so",
                         "/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so")
             if os.path.exists(p)]
    if not stubs:
        return
    os.symlink(stubs[0], tmp_path / "libcuda.so.1")
    doc = smi_json(env={"GPUSRV_PLUGIN_PATH": plugins, "GPUSRV_BACKENDS": "cpu,cuda",
                        "LD_LIBRARY_PATH": str(tmp_path)})
    skipped = {s["name"]: s["reason"] for s in doc["skipped_backends"]}
    assert "stub library" in skipped["cuda"], skipped["cuda"]


def test_gpu_clocks_link_errors_and_health(tmp_path):
    """A GPU's clocks, PCIe link, ECC errors and health (here from the fakegpu
    test plugin, as NVML would give them) in smi's JSON and in /metrics; a
    device without them shows null and no series."""
    fake = os.environ.get("GPUSRV_TEST_FAKE_PLUGINS")
    if not fake:
        pytest.skip("GPUSRV_TEST_FAKE_PLUGINS is not set (run through ctest)")
    tele = tmp_path / "telemetry"
    tele.write_text("clocks 1980 2619\npcie 5 8 16\necc 3 0\nxid 79\nmemutil 37\npowerlimit 700\n"
                    "health 1 PCIe link at x8 of x16\n")
    env = {"GPUSRV_PLUGIN_PATH": fake, "GPUSRV_TEST_TELEMETRY": str(tele),
           "GPUSRV_TEST_FAKE_GPU_TYPE": "1"}
    doc = smi_json(env=env)
    gpu = next(d for d in doc["devices"] if d["id"] == "fakegpu0")
    cpu = next(d for d in doc["devices"] if d["id"] == "cpu0")
    assert gpu["clocks_mhz"] == {"sm": 1980.0, "memory": 2619.0}
    assert gpu["pcie"] == {"generation": 5, "width": 8, "max_width": 16}
    assert gpu["ecc_errors"] == {"corrected": 3, "uncorrected": 0}
    assert gpu["health"] == "degraded" and gpu["health_reason"] == "PCIe link at x8 of x16"
    assert cpu["clocks_mhz"] is None and cpu["health"] is None
    # nvidia-smi's identity fields: the fake GPU's UUID and PCI address; none for the CPU.
    uuid = "GPU-fa4e0000-0000-0000-0000-000000000000"
    q = subprocess.run([GPUSRV, "smi", "--query-gpu=index,uuid,pci.bus_id,utilization.memory,"
                        "power.limit", "--format=csv,noheader"], capture_output=True, text=True,
                       env={**os.environ, **env})
    assert q.returncode == 0, q.stderr
    rows = {line.split(", ")[0]: line for line in q.stdout.splitlines()}
    assert rows[str(gpu["index"])] == \
        f"{gpu['index']}, {uuid}, 00000000:3B:00.0, 37 %, 700.00 W", q.stdout
    assert rows[str(cpu["index"])] == f"{cpu['index']}, [N/A], [N/A], [N/A], [N/A]", q.stdout
    assert gpu["power_limit_w"] == 700 and gpu["memory_utilization"] == 37
    # The same in /metrics.
    import http.client
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "models").mkdir()
    full_env = {**os.environ, **env}
    full_env.pop("GPUSRV_BACKENDS", None)
    proc = subprocess.Popen([GPUSRV, "serve", "--http-port", str(port), "--grpc-port", "0",
                             "--model-repository",
                             str(tmp_path / "models"), "--state-dir", str(tmp_path / "state")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=full_env)
    try:
        body = None
        for _ in range(100):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/metrics")
                body = c.getresponse().read().decode()
                break
            except OSError:
                time.sleep(0.1)
        assert body is not None
        assert 'gpusrv_device_health{device="fakegpu0",backend="fakegpu",reason="PCIe link at x8 of x16"} 1' in body
        assert 'gpusrv_device_pcie_width{device="fakegpu0",backend="fakegpu"} 8' in body
        assert 'gpusrv_device_sm_clock_mhz{device="fakegpu0",backend="fakegpu"} 1980' in body
        assert 'gpusrv_device_ecc_errors_corrected_total{device="fakegpu0",backend="fakegpu"} 3' in body
        assert 'gpusrv_device_health{device="cpu0"' not in body
        # The GPU's gauges under dcgm-exporter's names and labels; the CPU is no GPU there.
        labels = (f'{{gpu="0",UUID="{uuid}",device="fakegpu0",modelName="{gpu["name"]}",'
                  f'Hostname="{socket.gethostname()}"}}')
        assert f"DCGM_FI_DEV_SM_CLOCK{labels} 1980" in body, body
        assert f"DCGM_FI_DEV_MEM_CLOCK{labels} 2619" in body
        assert f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{labels} 3" in body
        assert f"DCGM_FI_DEV_XID_ERRORS{labels} 79" in body
        assert 'gpusrv_device_last_xid{device="fakegpu0",backend="fakegpu"} 79' in body
        used = re.search(r"DCGM_FI_DEV_FB_USED" + re.escape(labels) + r" (\d+)", body)
        assert used and abs(int(used.group(1)) - (gpu["memory_used_bytes"] >> 20)) <= 0.02 * (
            gpu["memory_total_bytes"] >> 20), body
        assert re.search(r"DCGM_FI_DEV_GPU_UTIL" + re.escape(labels) + r" \d", body)
        assert 'device="cpu0",modelName' not in body
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_opencl_kernels_are_cached_on_disk(tmp_path):
    """The OpenCL kernels build once per device and driver: the binary lands
    in GPUSRV_CACHE_DIR, a later start reads it, and a corrupt entry is
    rebuilt rather than trusted."""
    build = os.path.dirname(os.path.abspath(GPUSRV))
    if not os.path.exists(os.path.join(build, "gpusrv-opencl.so")):
        pytest.skip("the OpenCL plugin is not built here")
    env = {"GPUSRV_PLUGIN_PATH": build, "GPUSRV_BACKENDS": "cpu,opencl",
           "GPUSRV_CACHE_DIR": str(tmp_path / "cache")}
    doc = smi_json(env=env)
    if "opencl0" not in [d["id"] for d in doc["devices"]]:
        pytest.skip("no OpenCL device here")
    # Two programs: the kernels in float32, and in float64 (PoCL has cl_khr_fp64).
    entries = sorted((tmp_path / "cache").glob("opencl-*.bin"))
    assert len(entries) == 2 and all(e.stat().st_size > 1000 for e in entries)
    long_ago = 1577836800  # 2020: reading an entry marks it used now
    for e in entries:
        os.utime(e, (long_ago, long_ago))
    assert "opencl0" in [d["id"] for d in smi_json(env=env)["devices"]]  # from the cache
    assert all(e.stat().st_mtime > long_ago + 86400 for e in entries)
    entries[0].write_bytes(b"not a program")
    assert "opencl0" in [d["id"] for d in smi_json(env=env)["devices"]]  # rebuilt
    assert entries[0].stat().st_size > 1000
    # Without the float64 program (GPUSRV_OPENCL_FP64=0), one; written
    # beside 20 entries of older sources, of which the 16 most recently used
    # stay (the new one among them).
    stale = tmp_path / "cache32"
    stale.mkdir()
    for i in range(20):
        old = stale / f"opencl-{i:016x}.bin"
        old.write_bytes(b"x")
        os.utime(old, (long_ago + i, long_ago + i))
    env.update(GPUSRV_CACHE_DIR=str(stale), GPUSRV_OPENCL_FP64="0")
    assert "opencl0" in [d["id"] for d in smi_json(env=env)["devices"]]
    kept = sorted(e.name for e in stale.glob("opencl-*.bin"))
    assert len(kept) == 16
    assert kept[:15] == [f"opencl-{i:016x}.bin" for i in range(5, 20)]
    assert (stale / kept[15]).stat().st_size > 1000  # the new entry


def test_opencl_telemetry_is_memory_only():
    """OpenCL says how much memory a device has and nothing else: smi shows
    the total, what this process holds there as used, the rest as free, and
    every other figure as not available (null)."""
    build = os.path.dirname(os.path.abspath(GPUSRV))
    if not os.path.exists(os.path.join(build, "gpusrv-opencl.so")):
        pytest.skip("the OpenCL plugin is not built here")
    doc = smi_json(env={"GPUSRV_PLUGIN_PATH": build, "GPUSRV_BACKENDS": "cpu,opencl"})
    dev = next((d for d in doc["devices"] if d["id"] == "opencl0"), None)
    if dev is None:
        pytest.skip("no OpenCL device here")
    assert dev["memory_total_bytes"] > 0
    assert dev["memory_used_bytes"] == 0  # this process holds nothing there
    for field in ("utilization_percent", "temperature_c", "power_w", "pcie", "ecc_errors"):
        assert dev[field] is None, field


def test_cuda_fatbin_has_every_device_kernel():
    """The CUDA plugin looks up every kernel of hal/devops by name when a
    device starts, and one missing would lose the device: the embedded
    fatbin must define each name in devops.h's list (checked here, where no
    GPU can load it)."""
    import re
    build = os.path.dirname(os.path.abspath(GPUSRV))
    fatbin = os.path.join(build, "generated", "cuda_kernels.fatbin")
    if not os.path.exists(fatbin):
        pytest.skip("the CUDA plugin is not built here (no CUDA toolkit)")
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src", "hal", "devops", "devops.h")
    listed = re.search(r"#define GS_DEVOPS_KERNELS\(X\)(.*?)\n\n", open(src).read(), re.S).group(1)
    names = re.findall(r"X\((\w+)\)", listed)
    assert len(names) > 40
    data = open(fatbin, "rb").read()
    missing = [n for n in names if b".text." + n.encode() + b"\0" not in data]
    assert not missing, missing


def test_nvidia_smi_names_flags_and_processes(tmp_path):
    """nvidia-smi's --query-gpu names, -L and --query-compute-apps, on the fakegpu test
    plugin's telemetry and processes (as NVML would give them); what no backend reports
    yet prints [N/A], as nvidia-smi does."""
    fake = os.environ.get("GPUSRV_TEST_FAKE_PLUGINS")
    if not fake:
        pytest.skip("GPUSRV_TEST_FAKE_PLUGINS is not set (run through ctest)")
    (tmp_path / "telemetry").write_text("clocks 1980 2619\npcie 5 8 16\necc 3 0\n")
    (tmp_path / "processes").write_text("4242 1073741824\n4343 2097152\n")
    env = {"GPUSRV_PLUGIN_PATH": fake, "GPUSRV_TEST_TELEMETRY": str(tmp_path / "telemetry"),
           "GPUSRV_TEST_PROCESSES": str(tmp_path / "processes")}
    gpu = next(d for d in smi_json(env=env)["devices"] if d["id"] == "fakegpu0")
    p = run("smi", "-i", "fakegpu0", "--query-gpu=index,name,memory.total,utilization.gpu,"
            "clocks.sm,clocks.mem,pcie.link.gen.current,pcie.link.width.current,"
            "ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,uuid,"
            "pci.bus_id,power.limit", "--format=csv", env=env)
    assert p.returncode == 0, p.stderr
    header, row = p.stdout.splitlines()
    assert header == ("index, name, memory.total [MiB], utilization.gpu [%], clocks.sm [MHz], "
                      "clocks.mem [MHz], pcie.link.gen.current, pcie.link.width.current, "
                      "ecc.errors.corrected.volatile.total, "
                      "ecc.errors.uncorrected.volatile.total, uuid, pci.bus_id, power.limit [W]")
    values = row.split(", ")
    assert values[0] == str(gpu["index"]) and values[1] == gpu["name"]
    assert values[2] == f"{gpu['memory_total_bytes'] >> 20} MiB"
    assert re.fullmatch(r"\d+ %", values[3]), values[3]
    assert values[4:10] == ["1980 MHz", "2619 MHz", "5", "8", "3", "0"]
    assert values[10:] == ["[N/A]", "[N/A]", "[N/A]"]
    # The same with noheader,nounits, as scripts ask for it.
    p = run("smi", "-i", "fakegpu0", "--query-gpu=clocks.sm,temperature.gpu",
            "--format=csv,noheader,nounits", env=env)
    assert p.stdout.strip() == "1980, " + ("[N/A]" if gpu["temperature_c"] is None
                                           else f"{gpu['temperature_c']:.0f}")
    # -L: a line per device.
    p = run("smi", "-L", env=env)
    assert p.returncode == 0, p.stderr
    assert f"GPU {gpu['index']}: {gpu['name']} (UUID: [N/A], id: fakegpu0, backend: fakegpu)" \
        in p.stdout.splitlines()
    # The processes on each device that lists them.
    p = run("smi", "-i", "fakegpu0", "--query-compute-apps=pid,process_name,used_memory,gpu_id",
            "--format=csv", env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["pid, process_name, used_memory [MiB], gpu_id",
                                     "4242, fake, 1024 MiB, fakegpu0", "4343, fake, 2 MiB, fakegpu0"]


@pytest.mark.parametrize("args,why", [
    (["--query=index", "--query-gpu=index"], "the same"),
    (["-L", "--json"], "cannot be combined"),
    (["--query-compute-apps=pid", "--query-gpu=index"], "cannot be combined"),
    (["--query-compute-apps=pid,gpu_temp"], "unknown --query-compute-apps field 'gpu_temp'"),
    (["--query-gpu=index,fan.speed"], "unknown --query-gpu field 'fan.speed'"),
])
def test_nvidia_smi_flags_that_are_refused(args, why):
    p = run("smi", *args)
    assert p.returncode == 2 and p.stdout == "" and why in p.stderr, p.stderr
