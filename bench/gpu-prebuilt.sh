#!/usr/bin/env bash
# bench/gpu-prebuilt.sh - runs bench/gpu-check.sh on a GPU machine that has
# the NVIDIA driver and a Python with numpy, onnx, onnxruntime, mpmath and
# pytest, but not gpusrv's build dependencies (a lent machine that cannot
# install packages). Two steps:
#
#   bench/gpu-prebuilt.sh pack DIR     here, after `make build` (DIR: .gpu,
#       which .gitignore ignores, is the usual choice): copies the
#       binaries gpu-check needs (stripped), the shared libraries they link
#       (xz-compressed) and onnx 1.17's node tests from .venv into DIR
#   bench/gpu-prebuilt.sh run DIR [RESULTS_FILE]     there, from a checkout
#       holding DIR: uses each carried library only where the machine has
#       none of that name, finds cuBLAS, cuFFT and NCCL where a Python package put
#       them, then runs gpu-check with GPUSRV_BUILD, PYTHON=python3 and
#       GSTEST_NODE_DIR set.
# Both machines must be x86-64 with a glibc at least as new as the one the
# binaries were built with.
set -eu -o pipefail
cd "$(dirname "$0")/.."
what=${1:-}; dir=${2:-}
[ -n "$dir" ] || { echo "usage: $0 pack|run DIR [RESULTS_FILE]" >&2; exit 2; }
case "$what" in
pack)
  programs="gpusrv gpusrv-engine gpusrv-job-shim gpusrv-cuda.so tests/hal_conformance
            bench/gs-bench-copy bench/gs-bench-models bench/gs-bench-fftw"
  rm -rf "$dir" && mkdir -p "$dir/build/tests" "$dir/build/bench" "$dir/libs"
  for f in $programs; do cp "build/$f" "$dir/build/$f" && strip "$dir/build/$f"; done
  # glibc's own libraries stay the machine's
  (cd build && ldd $programs) | awk '/=>/ {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libresolv|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.so' |
    xargs -I{} cp -L {} "$dir/libs/"
  tar cJf "$dir/libs.tar.xz" -C "$dir" libs && rm -rf "$dir/libs"
  node=$(.venv/bin/python -c 'import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data"))')
  tar cJf "$dir/node.tar.xz" -C "$node" node
  du -sh "$dir"
  ;;
run)
  dir=$(cd "$dir" && pwd)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  tar xJf "$dir/libs.tar.xz" -C "$tmp"
  tar xJf "$dir/node.tar.xz" -C "$tmp"
  mkdir -p "$tmp/missing"
  known=$(ldconfig -p)
  for l in "$tmp"/libs/*; do
    grep -q "/$(basename "$l")\$" <<<"$known" || cp "$l" "$tmp/missing/"
  done
  echo "carried libraries used: $(ls "$tmp/missing" | tr '\n' ' ')"
  path=$tmp/missing
  # The plugin opens these by soname (cuBLAS and cuFFT of the toolkit it was built with).
  for n in libcuda.so.1 libcublas.so libcufft.so libnccl.so.2 libnvidia-ml.so.1; do
    grep -q "/$n" <<<"$known" && continue
    f=$(find /usr /opt -name "$n*" 2>/dev/null | grep -v stubs | head -1 || true)
    [ -n "$f" ] && path=$path:$(dirname "$f") && echo "$n: $f"
  done
  export LD_LIBRARY_PATH=$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export GPUSRV_BUILD=$dir/build PYTHON=${PYTHON:-python3}
  export GPUSRV_PLUGIN_PATH=$dir/build GSTEST_NODE_DIR=$tmp/node
  bash bench/gpu-check.sh ${3:+"$3"}
  ;;
*) echo "usage: $0 pack|run DIR [RESULTS_FILE]" >&2; exit 2 ;;
esac
