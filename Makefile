# Makefile - a thin front for CMake. `make run`, `make test` and `make bench`
# install missing build dependencies first (scripts/install-deps.sh).
BUILD      ?= build
BUILD_ASAN ?= build-asan
BUILD_BENCH ?= build-bench
JOBS       ?= $(shell nproc)

.PHONY: all deps build run test test-asan bench zoo install clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt: | deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null

build: deps $(BUILD)/CMakeCache.txt
	@cmake --build $(BUILD) -j $(JOBS)

# The main job: the inference server on its defaults, over models/ (the digits demo).
run: build
	@echo "gpusrv: serving models/ on http://127.0.0.1:8000 (Ctrl-C stops it). Try:"
	@echo "  curl http://127.0.0.1:8000/v2/models/digits"
	@echo "  curl -X POST http://127.0.0.1:8000/v2/models/digits/infer -d @models/digits/example-request.json"
	$(BUILD)/gpusrv serve --model-repository models

# C tests and CLI tests in a normal build, then the same under ASan + UBSan.
test: build
	cd $(BUILD) && ctest --output-on-failure
	@$(MAKE) --no-print-directory test-asan

# clang, so that the ONNX decoder's libFuzzer target is built and run too.
test-asan: deps
	@CC=clang cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DGS_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD_ASAN) -j $(JOBS)
	cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure

# Installs gpusrv like a system service (see README.md): the command, its
# plugins and job supervisor, the client library, headers and pkg-config file,
# the systemd unit, and /etc/gpusrv/gpusrv.conf (kept if already there).
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# Benchmarks in an optimised build; figures go to stdout (see bench/RESULTS.md).
bench: deps
	@cmake -S . -B $(BUILD_BENCH) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD_BENCH) -j $(JOBS)
	$(BUILD_BENCH)/bench/gs-bench-copy
	.venv/bin/python bench/models.py $(BUILD_BENCH)
	-.venv/bin/python bench/models.py $(BUILD_BENCH) --device opencl0 # where there is one
	.venv/bin/python bench/serve.py $(BUILD_BENCH)
	.venv/bin/python bench/plan_memory.py $(BUILD_BENCH)
	.venv/bin/python bench/warmup.py $(BUILD_BENCH)
	-.venv/bin/python bench/warmup.py $(BUILD_BENCH) opencl0 # where there is one
	.venv/bin/python bench/fft.py $(BUILD_BENCH)
	.venv/bin/python bench/attention.py $(BUILD_BENCH)
	$(BUILD_BENCH)/bench/gs-bench-sched-plan
	.venv/bin/python bench/sched.py $(BUILD_BENCH)
	.venv/bin/python bench/cli_startup.py $(BUILD_BENCH) 50

# The model zoo: torchvision's models and torch.nn transformers, exported,
# checked against onnxruntime and timed (bench/zoo.py). torch and torchvision
# live in their own venv (about 5.6 GB), so this is not part of `make test`.
ZOO_VENV ?= .venv-zoo
zoo: build
	@test -x $(ZOO_VENV)/bin/python || python3 -m venv $(ZOO_VENV)
	@$(ZOO_VENV)/bin/python -c "import torch, torchvision, onnxruntime, onnx" 2>/dev/null || \
	  $(ZOO_VENV)/bin/pip install -q torch torchvision onnx==1.17.0 onnxruntime==1.20.1 numpy
	$(ZOO_VENV)/bin/python bench/zoo.py $(BUILD) $(ZOO_ARGS)

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_BENCH)
