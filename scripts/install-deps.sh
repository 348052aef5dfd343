#!/usr/bin/env bash
# install-deps.sh - installs what building and testing gpusrv needs, once.
# Idempotent and silent when everything is already present. Debian packages are
# installed only when run as root; otherwise the missing ones are named and the
# script fails. The Python test environment lives in .venv at the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."

debs=(build-essential cmake pkg-config clang libclang-rt-14-dev libjansson-dev libopenblas-dev libdnnl-dev
      libmicrohttpd-dev libcurl4-openssl-dev
      python3 python3-venv)

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
