#!/usr/bin/env bash
# bench/gpu-check.sh - on a machine with an NVIDIA GPU: builds gpusrv with its
# CUDA plugin, runs the CUDA conformance suite, the op parity and whole-model
# tests on cuda0, then the copy benchmark, `gpusrv bench --device cuda0`
# (H2D/D2H, GEMM, the digits model, the pipelines; with a second GPU the
# exchange and the model split over both) and the first request served on
# cuda0 cold and warmed up, the DFT through cuFFT, and gpusrv batch's images
# resized on cuda0 (its bytes against the CPU's, then images/s); everything it
# prints also goes to one results file. Its steps' limits add up to 21 minutes
# (17 with GPUSRV_BUILD); on an H200 it ran in 3.5 minutes before the images.
#
#   bench/gpu-check.sh [RESULTS_FILE]      (default: gpu-check-results.txt,
#                                           or $OUT/gpu-check-results.txt)
# Needs what `make` needs (scripts/install-deps.sh) and the NVIDIA driver.
# GPUSRV_BUILD=DIR uses binaries built elsewhere (same layout as build/)
# instead of building; PYTHON=... names the Python with numpy, onnx,
# onnxruntime, mpmath and pytest (default .venv/bin/python); where its onnx
# is not 1.17, GSTEST_NODE_DIR=DIR names a copy of onnx 1.17's
# backend/test/data/node for the node tests. bench/gpu-prebuilt.sh sets all
# three for a machine that has the driver and Python but cannot build gpusrv.
set -u -o pipefail
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
run 10 nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
build=${GPUSRV_BUILD:-build-gpu}
[ -n "${GPUSRV_BUILD:-}" ] ||
  run 200 bash -c "set -o pipefail; cmake -S . -B $build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build $build -j \$(nproc) 2>&1 | tail -3"
if [ ! -f "$build/gpusrv-cuda.so" ]; then
  say "gpu-check: the CUDA plugin did not build (is the CUDA toolkit installed?)"
  exit 1
fi
build=$(cd "$build" && pwd) # absolute: the tests run from other folders
export GPUSRV_PLUGIN_PATH=$build
# Warnings say what is missing (no cuBLAS: "GEMM by a plain kernel"), info lines the
# GPUs that reach each other directly (P2P).
run 15 env GPUSRV_LOG=info "$build/gpusrv" smi
run 45 "$build/tests/hal_conformance" cuda
py=${PYTHON:-.venv/bin/python}
have_py=false; { [ -x "$py" ] || command -v "$py" >/dev/null; } && have_py=true
if $have_py; then
  export GPUSRV_BIN=$build/gpusrv GSTEST_DEVICE=cuda0 GSTEST_REQUIRE_DEVICE=1
  # float64: the second module (GS_REAL_F64) and cuBLAS GemmEx in 64F
  run 60 "$py" -m pytest -q -p no:cacheprovider tests/engine/test_float64.py
  # DFT and STFT through cuFFT, against numpy.fft
  run 60 "$py" -m pytest -q -p no:cacheprovider tests/engine/test_signal.py
  # (the op tests fail where an op falls back to the CPU on cuda0 without saying why)
  xdist=; "$py" -c 'import xdist' 2>/dev/null && xdist="-n $(nproc)"
  run 200 "$py" -m pytest -q -p no:cacheprovider $xdist tests/engine/test_ops.py tests/engine/test_models.py
  # gpusrv batch's images resized on cuda0 (image_taps_u8): the CPU's bytes, every filter
  run 60 env GSTEST_IMAGE_DEVICE=cuda0 "$py" -m pytest -q -p no:cacheprovider \
    tests/cli/test_batch_images.py -k device_resizes
  # The ONNX project's node tests on cuda0, then on cpu0 beside it: a case that
  # passes on cpu0 and is wrong or crashes on cuda0 is a CUDA kernel's fault.
  for dev in cuda0 cpu0; do
    list=$(dirname "$results")/node-$dev.txt
    run 90 bash -c "GSTEST_DEVICE=$dev GSTEST_NODE_WORKERS=$(nproc) '$py' tests/engine/onnx_node_cases.py --list > '$list'; tail -1 '$list'"
  done
  # The cases that pass on cpu0 and not on cuda0: the CUDA kernels' faults.
  dir=$(dirname "$results")
  say "== node cases passing on cpu0, not on cuda0:"
  join <(awk '$2 == "pass" {print $1}' "$dir/node-cpu0.txt" | sort) \
       <(awk '$2 != "pass" && NF > 1 {print $1, $2}' "$dir/node-cuda0.txt" | sort) |
    tee -a "$results" | wc -l | sed 's/^/== count: /' | tee -a "$results"
else
  say "gpu-check: no .venv (scripts/install-deps.sh makes it): op and model tests not run"
fi
run 40 "$build/bench/gs-bench-copy" --backend cuda --samples 5
run 50 env GPUSRV_LOG=warn "$build/gpusrv" bench --device cuda0
# DFT through cuFFT on cuda0 beside FFTW on the host cores
$have_py && run 90 "$py" bench/fft.py "$build" --device cuda0 --seconds 1
# Images/s of gpusrv batch with the recipe on the CPU and finished on cuda0 (resize included)
$have_py && run 150 "$py" bench/images.py "$build" --images 400 --threads "$(nproc)" --device cuda0
# The first request served on cuda0, cold and after warm-up (module load, cuBLAS set-up).
$have_py && run 20 "$py" bench/warmup.py "$build" cuda0
say "gpu-check: done in ${SECONDS}s; results in $results"
