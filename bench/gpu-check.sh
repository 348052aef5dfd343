#!/usr/bin/env bash
# bench/gpu-check.sh - on a machine with an NVIDIA GPU: builds gpusrv with its
# CUDA plugin, runs the CUDA conformance suite, the op parity and whole-model
# tests on cuda0, then the copy, model and serving benchmarks; everything it
# prints also goes to one results file. Meant to finish in under 8 minutes.
#
#   bench/gpu-check.sh [RESULTS_FILE]      (default: gpu-check-results.txt,
#                                           or $OUT/gpu-check-results.txt)
# Needs what `make` needs (scripts/install-deps.sh) and the NVIDIA driver.
set -u
cd "$(dirname "$0")/.."
results=${1:-${OUT:+$OUT/}gpu-check-results.txt}
: > "$results"
say() { echo "$@" | tee -a "$results"; }
run() { # run a step with a time limit, its output into the results
  local limit=$1; shift
  say "== $* (limit ${limit}s)"
  local start=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee -a "$results"
  local rc=${PIPESTATUS[0]}
  say "== exit $rc after $((SECONDS - start))s"
  return 0
}

say "gpu-check: $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
run 20 nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
build=build-gpu
run 300 bash -c "cmake -S . -B $build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build $build -j \$(nproc) 2>&1 | tail -3"
if [ ! -f "$build/gpusrv-cuda.so" ]; then
  say "gpu-check: the CUDA plugin did not build (is the CUDA toolkit installed?)"
  exit 1
fi
export GPUSRV_PLUGIN_PATH=$PWD/$build
run 30 "$build/gpusrv" smi
run 120 "$build/tests/hal_conformance" cuda
py=.venv/bin/python
if [ -x "$py" ]; then
  run 240 env GPUSRV_BIN=$build/gpusrv GSTEST_DEVICE=cuda0 "$py" -m pytest -q -x tests/engine/test_ops.py tests/engine/test_models.py
else
  say "gpu-check: no .venv (scripts/install-deps.sh makes it): op and model tests not run"
fi
run 120 "$build/bench/gs-bench-copy" --backend cuda --samples 5
[ -x "$py" ] && run 120 "$py" bench/models.py "$build"
[ -x "$py" ] && run 180 "$py" bench/serve.py "$build"
say "gpu-check: done in ${SECONDS}s; results in $results"
