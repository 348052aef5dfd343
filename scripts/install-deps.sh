#!/usr/bin/env bash
# install-deps.sh - installs what building and testing gpusrv needs, once.
# Idempotent and silent when everything is already present. Debian packages are
# installed only when run as root; otherwise the missing ones are named and the
# script fails. The Python test environment lives in .venv at the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."

debs=(build-essential cmake pkg-config clang libclang-rt-14-dev libjansson-dev libdnnl-dev
      libmicrohttpd-dev libgnutls28-dev libcurl4-openssl-dev libb64-0d libsqlite3-dev libssl-dev task-spooler
      libncurses-dev tmux chromium prometheus libfftw3-dev libopenblas-dev
      libjpeg62-turbo-dev libpng-dev
      ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd libclblast-dev libvkfft-dev
      libgrpc-dev protobuf-c-compiler libprotobuf-c-dev
      podman runc uidmap fuse-overlayfs slirp4netns busybox-static slurmd
      slurmctld slurm-client slurmrestd slurmdbd mariadb-server slurm-wlm-jwt-plugin munge openmpi-bin libopenmpi-dev libpmix2
      iproute2 util-linux
      openssl curl python3 python3-venv)

missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing Debian packages: ${missing[*]} (run as root, or install them)" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python is used only by tests and tools (DESIGN.md); pinned in tests/requirements.txt.
stamp=.venv/.requirements
if [ ! -x .venv/bin/python ] || ! cmp -s tests/requirements.txt "$stamp"; then
  echo "install-deps: preparing .venv from tests/requirements.txt" >&2
  python3 -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -r tests/requirements.txt
  cp tests/requirements.txt "$stamp"
fi

# perf_analyzer, Triton's load generator, for the serving tests and bench/serve: the
# binary ships inside the tritonclient 2.34 wheel (later wheels dropped it); it needs
# libb64 (Debian, above) and the CUDA 12 runtime library (PyPI, in requirements.txt),
# though it talks only HTTP here. A wrapper points it at that library.
if [ ! -x .venv/bin/perf_analyzer ]; then
  echo "install-deps: extracting perf_analyzer from the tritonclient 2.34.0 wheel" >&2
  tmp=$(mktemp -d)
  .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all:     --platform manylinux1_x86_64 -d "$tmp" tritonclient==2.34.0
  .venv/bin/python - "$tmp" <<'PY'
import glob, os, stat, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "tritonclient-2.34.0-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    data = z.read("tritonclient-2.34.0.data/data/bin/perf_analyzer")
with open(".venv/bin/perf_analyzer.bin", "wb") as f:
    f.write(data)
os.chmod(".venv/bin/perf_analyzer.bin", 0o755)
PY
  cat > .venv/bin/perf_analyzer <<'SH'
#!/bin/sh
here=$(dirname "$(readlink -f "$0")")
lib=$(ls -d "$here"/../lib/python3*/site-packages/nvidia/cuda_runtime/lib | head -n 1)
LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/perf_analyzer.bin" "$@"
SH
  chmod +x .venv/bin/perf_analyzer
  rm -rf "$tmp"
fi

# The ONNX backend node tests as onnx 1.20.1 regenerated them (opsets up to
# 25), beside the 1.17.0 wheel's own in the venv: only the test data is
# taken from the wheel (tests/engine/onnx_node_cases.py, set "1.20").
node_dir=.venv/onnx-node-1.20.1
if [ ! -d "$node_dir" ]; then
  echo "install-deps: extracting the node tests of the onnx 1.20.1 wheel" >&2
  tmp=$(mktemp -d)
  .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux_2_28_x86_64 --python-version 3.11 -d "$tmp" onnx==1.20.1
  .venv/bin/python - "$tmp" "$node_dir" <<'PY'
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "onnx-1.20.1-*.whl"))[0]
prefix = "onnx/backend/test/data/node/"
partial = sys.argv[2] + ".partial"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            out = os.path.join(partial, name[len(prefix):])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with open(out, "wb") as f:
                f.write(z.read(name))
os.rename(partial, sys.argv[2])
PY
  rm -rf "$tmp"
fi
