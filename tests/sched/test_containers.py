"""Jobs in containers (issue 21): `gpusrv submit --image` runs the job in a
local OCI image through rootless podman as the tenant's user, inside the
job's cgroup. The image is made here without a registry (`podman import` of
a root filesystem holding busybox). Checked: the environment is the
image's; the job's work directory is /job and what it writes there belongs
to the tenant outside; exit codes pass through; a memory hog ends
OUT_OF_MEMORY; cancel kills the container and leaves none behind; a second
tenant sees neither the first's container nor its files; images outside
the allow-list, images not present and bad mounts are refused."""
import os
import json
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from test_frontdesk import FAKE_PLUGINS, IS_ROOT, daemon

IMAGE = "localhost/gpusrv-test:1"
USERS = ("gsct_a", "gsct_b")
BUSYBOX = shutil.which("busybox") or "/bin/busybox"

pytestmark = [
    pytest.mark.skipif(not IS_ROOT, reason="running jobs as other users needs root"),
    pytest.mark.skipif(not shutil.which("podman") or not shutil.which("runc"),
                       reason="podman and runc are not installed (scripts/install-deps.sh)"),
    pytest.mark.skipif(not os.path.exists(BUSYBOX),
                       reason="busybox (busybox-static) is not installed for the test image"),
]


def as_user(user, *cmd, check=True):
    home = f"/home/{user}"
    return subprocess.run(["runuser", "-u", user, "--", "env", "-i", f"HOME={home}",
                           f"USER={user}", "PATH=/usr/local/bin:/usr/bin:/bin", *cmd],
                          capture_output=True, text=True, timeout=120, check=check, cwd="/")


def rootfs_tar(path):
    """A root filesystem of busybox and an os-release of its own."""
    root = path / "rootfs"
    for d in ("bin", "etc", "tmp", "proc", "sys", "dev", "job"):
        (root / d).mkdir(parents=True)
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    for tool in ("sh", "cat", "echo", "id", "sleep", "dd", "ls", "stat", "env", "touch", "true"):
        os.symlink("busybox", root / "bin" / tool)
    (root / "etc" / "os-release").write_text('NAME="gpusrv test image"\nID=gpusrvtest\n')
    tar = path / "rootfs.tar"
    with tarfile.open(tar, "w") as t:
        t.add(root, arcname=".")
    os.chmod(path, 0o755)
    os.chmod(tar, 0o644)
    return tar


def open_dir():
    """A directory the test users can reach (pytest's own are 0700)."""
    d = Path(tempfile.mkdtemp(prefix="gpusrv-ct-"))
    os.chmod(d, 0o755)
    return d


@pytest.fixture(scope="module")
def image():
    """Each test user has the image in its own (rootless) store."""
    where = open_dir()
    tar = rootfs_tar(where)
    for user in USERS:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", user],
                       capture_output=True)
        as_user(user, "podman", "rm", "--all", "--force")  # an earlier run's, if it was killed
        as_user(user, "podman", "rmi", "--all", "--force")
        as_user(user, "podman", "import", "--quiet", str(tar), IMAGE)
        as_user(user, "podman", "import", "--quiet", str(tar), "localhost/other:1")
    shutil.rmtree(where)
    return IMAGE


def tenants(d):
    return [d.cli("tenant", "add", f"t{i}", "--user", u).stdout.strip()
            for i, u in enumerate(USERS)]


def submit(d, token, command, **asks):
    status, job = d.request("POST", "/api/v1/jobs", {"command": command, "cpus": 0.5,
                                                     "image": IMAGE, **asks}, token)
    assert status == 201, job
    return job["id"]


def containers_of(user):
    return as_user(user, "podman", "ps", "--all", "--format", "{{.Names}}").stdout.split()


def test_a_job_runs_in_its_image_as_its_user(tmp_path, image):
    with daemon(tmp_path, "--allowed-images", "localhost/gpusrv-test:*") as d:
        a, _ = tenants(d)
        j = submit(d, a, ["sh", "-c", "cat /etc/os-release; echo $GREETING; id -u; pwd; "
                                      "echo kept > /job/out.txt; echo oops >&2; exit 3"],
                   env=["GREETING=hello from outside"])
        job = d.wait(j, timeout=60, token=a)
        out, err = d.log(j, token=a), d.log(j, "stderr", token=a)
        assert job["state"] == "FAILED" and job["exit_code"] == 3, (job, err)
        assert job["image"] == IMAGE and job["mounts"] == []
        assert 'NAME="gpusrv test image"' in out  # the image's, not Debian's
        lines = out.split("\n")
        assert "hello from outside" in lines
        assert "0" in lines and "/job" in lines  # root inside, in the work directory
        assert "oops" in err
        written = os.path.join(d.state, "jobs", str(j), "work", "out.txt")
        assert open(written).read() == "kept\n"
        assert os.stat(written).st_uid == int(as_user(USERS[0], "id", "-u").stdout)
        assert containers_of(USERS[0]) == []  # removed once it ended
        # The root filesystem is read-only, and there is no network.
        j = submit(d, a, ["sh", "-c", "touch /etc/x || echo read-only; ls /sys/class/net"])
        assert d.wait(j, timeout=60, token=a)["state"] == "COMPLETED"
        out = d.log(j, token=a)
        assert "read-only" in out and out.split()[-1] == "lo", out


def test_mounts_and_their_modes(tmp_path, image):
    where = open_dir()
    shared = where / "data"
    shared.mkdir()
    (shared / "in.txt").write_text("input\n")
    os.chmod(shared, 0o777)
    with daemon(tmp_path, "--allowed-images", "localhost/gpusrv-*") as d:
        a, _ = tenants(d)
        j = submit(d, a, ["sh", "-c", "cat /data/in.txt; echo no > /data/x || echo denied; "
                                      "echo yes > /rw/y"],
                   mounts=[f"{shared}:/data:ro", f"{shared}:/rw"])
        job = d.wait(j, timeout=60, token=a)
        assert job["state"] == "COMPLETED", (job, d.log(j, "stderr", token=a))
        assert job["mounts"] == [f"{shared}:/data:ro", f"{shared}:/rw:rw"]
        assert d.log(j, token=a).split() == ["input", "denied"]
        assert (shared / "y").read_text() == "yes\n" and not (shared / "x").exists()
        # What the tenant's user cannot read, its container cannot either.
        secret = where / "secret"
        secret.mkdir(mode=0o700)
        (secret / "key").write_text("hidden\n")
        j = submit(d, a, ["cat", "/s/key"], mounts=[f"{secret}:/s:ro"])
        job = d.wait(j, timeout=60, token=a)
        assert job["state"] == "FAILED" and "hidden" not in d.log(j, token=a), job
    shutil.rmtree(where)


def test_a_memory_hog_ends_out_of_memory(tmp_path, image):
    with daemon(tmp_path, "--allowed-images", IMAGE) as d:
        a, _ = tenants(d)
        j = submit(d, a, ["dd", "if=/dev/zero", "of=/dev/null", "bs=1500M", "count=1"],
                   mem="600M")
        job = d.wait(j, timeout=60, token=a)
        assert job["state"] == "OUT_OF_MEMORY", (job, d.log(j, "stderr", token=a))


def test_cancel_kills_the_container_and_tenants_stay_apart(tmp_path, image):
    with daemon(tmp_path, "--allowed-images", IMAGE) as d:
        a, b = tenants(d)
        j = submit(d, a, ["sh", "-c", "echo started; echo private > /job/mine.txt; sleep 600"])
        deadline = time.time() + 60
        while "started" not in d.log(j, token=a):
            assert time.time() < deadline, d.log(j, "stderr", token=a)
            time.sleep(0.1)
        assert len(containers_of(USERS[0])) == 1
        assert containers_of(USERS[1]) == []  # b's podman does not see a's container
        # Nor can b's job read a's files.
        work_a = os.path.join(d.state, "jobs", str(j), "work")
        jb = submit(d, b, ["cat", "/a/mine.txt"],
                    mounts=[f"{work_a}:/a:ro"])
        assert d.wait(jb, timeout=60, token=b)["state"] == "FAILED"
        assert "private" not in d.log(jb, token=b)
        t0 = time.time()
        assert d.request("DELETE", f"/api/v1/jobs/{j}", token=a)[0] == 200
        assert d.wait(j, timeout=30, token=a)["state"] == "CANCELLED"
        assert time.time() - t0 < 15
        deadline = time.time() + 30
        while containers_of(USERS[0]):
            assert time.time() < deadline, (containers_of(USERS[0]), d.log(j, "stderr", token=a))
            time.sleep(0.2)
        assert "sleep 600" not in subprocess.run(["ps", "-eo", "args"], capture_output=True,
                                                 text=True).stdout


def test_booked_devices_reach_the_container_through_cdi(tmp_path, image):
    """Stand-in device nodes (clones of /dev/null) named in the test's own CDI
    spec: a job that booked fakegpu0 sees its node and not fakegpu1's; a job
    without devices sees neither. `gpusrv cdi generate` writes a spec podman
    reads (no device has nodes on a machine without GPUs)."""
    if not FAKE_PLUGINS:
        pytest.skip("GPUSRV_TEST_FAKE_PLUGINS not set: no device to book")
    nodes = ["/dev/gpusrv-test-fake0", "/dev/gpusrv-test-fake1"]
    spec_path = "/etc/cdi/gpusrv-test.json"
    os.makedirs("/etc/cdi", exist_ok=True)
    try:
        for n in nodes:
            if os.path.exists(n):
                os.unlink(n)
            os.mknod(n, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            os.chmod(n, 0o666)
        with open(spec_path, "w") as f:
            json.dump({"cdiVersion": "0.5.0", "kind": "gpusrv.test/device", "devices": [
                {"name": f"fakegpu{i}", "containerEdits": {"deviceNodes": [{"path": n}]}}
                for i, n in enumerate(nodes)]}, f)
        with daemon(tmp_path, "--allowed-images", IMAGE, "--job-devices", "fakegpu0",
                    "--cdi-spec", spec_path, env={"GPUSRV_PLUGIN_PATH": FAKE_PLUGINS}) as d:
            a, _ = tenants(d)
            show = ["sh", "-c", "ls /dev; echo visible=$GPUSRV_VISIBLE_DEVICES; "
                                "echo x > /dev/gpusrv-test-fake0 && echo usable"]
            j = submit(d, a, show, gpus=1)
            job = d.wait(j, timeout=60, token=a)
            out = d.log(j, token=a)
            assert job["state"] == "COMPLETED" and job["devices"] == "fakegpu0", (job, out)
            assert "gpusrv-test-fake0" in out and "usable" in out and "visible=fakegpu0" in out
            assert "gpusrv-test-fake1" not in out
            j = submit(d, a, ["ls", "/dev"])
            job = d.wait(j, timeout=60, token=a)
            out = d.log(j, token=a)
            assert job["state"] == "COMPLETED" and "gpusrv-test-fake" not in out, (job, out)
        generated = tmp_path / "gpusrv.json"
        p = subprocess.run([d.command()[0], "cdi", "generate", "--output", str(generated)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        spec = json.loads(generated.read_text())
        assert spec["kind"] == "gpusrv.dev/device" and spec["cdiVersion"] == "0.5.0"
        assert "cpu0" in p.stderr and "no device node" in p.stderr  # left out, and said
    finally:
        for n in nodes:
            if os.path.exists(n):
                os.unlink(n)
        if os.path.exists(spec_path):
            os.unlink(spec_path)


def test_network_root_pulls_and_time_limits_as_configured(tmp_path, image):
    host_nets = sorted(os.listdir("/sys/class/net"))
    with daemon(tmp_path, "--allowed-images", "localhost/*") as d:
        a, _ = tenants(d)
        status, err = d.request("POST", "/api/v1/jobs", {"command": ["true"], "image": IMAGE,
                                                         "network": "host"}, a)
        assert status == 403 and "no host network" in err["error"], err
        status, err = d.request("POST", "/api/v1/jobs", {"command": ["true"], "image": IMAGE,
                                                         "network": "bridge"}, a)
        assert status == 400 and "'none' or 'host'" in err["error"], err
        # Nothing is pulled: a missing image is refused at submit.
        status, err = d.request("POST", "/api/v1/jobs", {"command": ["true"],
                                                         "image": "localhost/absent:1"}, a)
        assert status == 400 and "gpusrv pulls none" in err["error"], err
        # A writable root, where asked; a time limit ends the container as any job.
        j = submit(d, a, ["sh", "-c", "touch /etc/x && echo writable"], writable_root=True)
        job = d.wait(j, timeout=60, token=a)
        assert job["state"] == "COMPLETED" and job["writable_root"] and job["network"] == "none"
        assert "writable" in d.log(j, token=a)
        j = submit(d, a, ["sleep", "600"], time_limit=2)
        assert d.wait(j, timeout=60, token=a)["state"] == "TIMEOUT"
    with daemon(tmp_path, "--allowed-images", "localhost/*", "--container-host-network",
                "--pull-images") as d:
        a, _ = tenants(d)
        j = submit(d, a, ["ls", "/sys/class/net"], network="host")
        job = d.wait(j, timeout=60, token=a)
        assert job["state"] == "COMPLETED" and job["network"] == "host", job
        assert sorted(d.log(j, token=a).split()) == host_nets
        # Pulls allowed: accepted, and podman's pull (through its own registry
        # settings; none answers here) is what fails the job.
        j = submit(d, a, ["true"], image="localhost/absent:1")
        job = d.wait(j, timeout=120, token=a)
        assert job["state"] == "FAILED" and "absent" in d.log(j, "stderr", token=a), job


def test_images_lists_what_a_tenant_may_use(tmp_path, image):
    with daemon(tmp_path, "--allowed-images", "localhost/gpusrv-*") as d:
        a, _ = tenants(d)
        status, reply = d.request("GET", "/api/v1/images", token=a)
        assert status == 200, reply
        assert [i["name"] for i in reply["images"]] == [IMAGE]  # not localhost/other:1
        assert reply["images"][0]["size"] > 0 and reply["images"][0]["created"] > 0
        p = d.cli("images", token=a)
        assert IMAGE in p.stdout and "other" not in p.stdout
        assert d.request("GET", "/api/v1/images")[0] == 401
    with daemon(tmp_path) as d:  # no containers: no images
        a, _ = tenants(d)
        assert d.request("GET", "/api/v1/images", token=a) == (200, {"images": []})


def test_image_checks_leave_the_http_threads_free(tmp_path, image):
    """Submits that name an image run podman on threads of their own: eight at
    once over the daemon's two HTTP threads all queue, and the server answers
    other requests meanwhile."""
    import threading
    with daemon(tmp_path, "--allowed-images", IMAGE, "--http-threads", "2") as d:
        a, _ = tenants(d)
        answers, live = [], []

        def submit_one():
            answers.append(d.request("POST", "/api/v1/jobs", {"command": ["true"], "cpus": 0.1,
                                                              "image": IMAGE}, a)[0])

        def probe():
            for _ in range(10):
                t0 = time.time()
                assert d.request("GET", "/v2/health/live")[0] == 200
                live.append(time.time() - t0)

        threads = [threading.Thread(target=submit_one) for _ in range(8)]
        threads.append(threading.Thread(target=probe))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert answers == [201] * 8, answers
        assert len(live) == 10
        for j in range(1, 9):
            assert d.wait(j, timeout=120, token=a)["state"] == "COMPLETED"


def test_images_and_mounts_that_are_refused(tmp_path, image):
    with daemon(tmp_path) as d:  # no allowed images: no containers
        a, _ = tenants(d)
        status, err = d.request("POST", "/api/v1/jobs", {"command": ["true"], "image": IMAGE}, a)
        assert status == 400 and "allows no images" in err["error"], err
    with daemon(tmp_path, "--allowed-images", "localhost/gpusrv-*,localhost/absent:*") as d:
        a, _ = tenants(d)
        for asks, code, why in [
                ({"image": "localhost/other:1"}, 403, "not among the server's allowed images"),
                ({"image": "localhost/absent:1"}, 400, "not among user gsct_a's local images"),
                ({"image": "--privileged"}, 400, "is not an image name"),
                ({"image": IMAGE, "mounts": ["relative:/x"]}, 400, "absolute paths"),
                ({"image": IMAGE, "mounts": ["/tmp:/x/../etc"]}, 400, "absolute paths"),
                ({"image": IMAGE, "mounts": ["/tmp:/job"]}, 400, "may not be / or /job"),
                ({"image": IMAGE, "mounts": ["/tmp:/job/"]}, 400, "trailing '/'"),
                ({"image": IMAGE, "mounts": ["/tmp://job"]}, 400, "'//'"),
                ({"image": IMAGE, "mounts": ["/dev/null:/d"]}, 403, "come through CDI"),
                ({"image": IMAGE, "mounts": ["/proc:/p:ro"]}, 403, "come through CDI"),
                ({"image": IMAGE, "env": [" CUDA_VISIBLE_DEVICES=3"]}, 400, "letters, digits"),
                ({"image": IMAGE, "env": ["#A=1"]}, 400, "letters, digits"),
                ({"image": IMAGE, "mounts": ["/tmp:/x:rwx"]}, 400, "SRC:DST[:ro|:rw]"),
                ({"image": IMAGE, "mounts": "/tmp:/x"}, 400, "mounts must be a list"),
                ({"mounts": ["/tmp:/x"]}, 400, "are for a job in a container"),
                ({"network": "host"}, 400, "are for a job in a container"),
                ({"image": IMAGE, "env": ["A=two\nlines"]}, 400, "newline")]:
            status, err = d.request("POST", "/api/v1/jobs", {"command": ["true"], **asks}, a)
            assert status == code and why in err["error"], (asks, status, err)
        # The command line says the same.
        p = d.cli("submit", "--image", "localhost/other:1", "--", "true", token=a, check=False)
        assert p.returncode != 0 and "allowed images" in p.stderr
        p = d.cli("submit", "--image", IMAGE, "--mount", "/tmp:/t:ro", "--json", "--", "true",
                  token=a)
        assert '"image":"localhost/gpusrv-test:1"' in p.stdout.replace(" ", "")
