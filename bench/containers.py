"""bench/containers.py - what running a job in a container costs: the time
from a job's start to its end for `true`, as a process job and as a
container job (rootless podman as the tenant's user, in the job's cgroup),
beside `podman run` of the same image called directly as that user, in
the same run. Needs root, podman, runc and busybox (scripts/install-deps.sh).

    .venv/bin/python bench/containers.py build [--runs N] [--cpus N]

podman's own start (about 0.2 s of CPU here) runs inside the job's cgroup
and counts in its `cpus`: a job limited to half a core starts about twice
as slowly as podman called directly.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "sched"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--cpus", type=float, default=2,
                    help="the jobs' CPU limit: podman's own start counts in it")
    args = ap.parse_args()
    os.environ["GPUSRV_BIN"] = os.path.join(os.path.abspath(args.build), "gpusrv")
    import test_frontdesk
    import test_containers as tc
    test_frontdesk.GPUSRV = os.environ["GPUSRV_BIN"]
    image = tc.image.__wrapped__()  # the test image, in each test user's store
    user = tc.USERS[0]
    direct = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        tc.as_user(user, "podman", "--runtime", "runc", "run", "--rm", "--network=none",
                   "--read-only", "--pull=never", image, "true")
        direct.append(time.perf_counter() - t0)
    tmp = Path(tempfile.mkdtemp(prefix="gpusrv-bench-"))
    spans = {"process": [], "container": []}
    with test_frontdesk.daemon(tmp, "--allowed-images", image) as d:
        token = tc.tenants(d)[0]
        for _ in range(args.runs):
            for kind, asks in (("process", {}), ("container", {"image": image})):
                status, job = d.request("POST", "/api/v1/jobs",
                                        {"command": ["true"], "cpus": args.cpus, **asks},
                                        token)
                assert status == 201, job
                job = d.wait(job["id"], timeout=60, token=token)
                assert job["state"] == "COMPLETED", job
                spans[kind].append(job["end_time"] - job["start_time"])
    p50 = {k: statistics.median(v) * 1e3 for k, v in spans.items()}
    p50["podman run"] = statistics.median(direct) * 1e3
    print(f"job `true`, start to end, median of {args.runs} (ms), jobs at cpus {args.cpus}:")
    print(f"  process job        {p50['process']:8.1f}")
    print(f"  container job      {p50['container']:8.1f}")
    print(f"  podman run direct  {p50['podman run']:8.1f}   (peer: the same podman, no gpusrv)")
    print(f"  container job / podman run direct: {p50['container'] / p50['podman run']:.2f}x; "
          f"added to a process job: {p50['container'] - p50['process']:.1f} ms")


if __name__ == "__main__":
    main()
