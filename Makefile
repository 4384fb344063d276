# Two commands for a newcomer: `make run` (set up, then start the main job) and `make test`.
# Both create .venv and install what they need; nothing else is assumed on the machine.

VENV    ?= .venv
PY      := $(VENV)/bin/python
# The CPU build of torch on machines without an NVIDIA GPU. On a Linux box with no GPU and a
# plain PyPI, add TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu" to avoid the CUDA build.
TORCH_SPEC     ?= torch==2.13.0
TORCH_PIP_ARGS ?=
# llama.cpp for the GGUF tests (built from source): without its multimodal library, and portable (AVX2, not
# -march=native): a native build on a CPU with AMX crashes in ggml_backend_amx_mul_mat on q8_0 files (llama.cpp
# issue 20824), and every machine then tests the same code. pip's wheel cache ignores CMAKE_ARGS: --no-cache-dir.
LLAMA_CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF
# The Holmes corpus beside the repository (the shared data of the series), when it is there.
HOLMES_SHARED := $(abspath ../shared/data/holmes.txt)
ifneq ($(wildcard $(HOLMES_SHARED)),)
export TINYGPT_HOLMES_PATH ?= $(HOLMES_SHARED)
endif

.PHONY: install install-test run test test-slow test-scale test-slurm test-all coverage lint bench clean chromium postgresql slurm mlflow-clients

# What running needs: torch, then the package and its runtime dependencies (`make run`).
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e .
	touch $@

# What testing needs besides: the test and export-test extras (pytest, playwright, transformers, llama.cpp, ...).
install-test: $(VENV)/.installed-test

$(VENV)/.installed-test: $(VENV)/.installed
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install -q --no-cache-dir -e ".[test,export-test]"
	touch $@

# The main job: the dashboard (app + a worker for this machine's best device).
run: install
	$(VENV)/bin/tinygpt serve

lint: install-test
	$(VENV)/bin/ruff check tinygpt app worker tests benchmarks scripts

# Debian's Chromium, and axe-core (npm) that the browser tests run on every page they open
chromium:
	scripts/install-chromium.sh
	VENV=$(VENV) scripts/install-axe.sh

postgresql:
	scripts/install-postgresql.sh

# MLflow's client in two versions (2.22.1, 3.17.2), each in its own environment, for tests/test_mlflow.py
mlflow-clients: install-test
	VENV=$(VENV) scripts/install-mlflow-clients.sh

slurm:
	scripts/install-slurm.sh

# In the tests, OpenMP's idle threads sleep instead of spinning: with two pytest processes, their trainings and
# the jobs they start on two cores, spinning threads took 40% more CPU time (user 11 min 11 s against 8 min 2 s
# of one default suite) and failed timed waits. `make run` and `make bench` leave OpenMP as it is.
test test-slow test-scale test-slurm test-all coverage: export OMP_WAIT_POLICY = PASSIVE
# two pytest processes, a test file each at a time (so that a file's fixtures, such as its shared app, start once)
TWO_PROCESSES := -n 2 --dist loadfile

# The default suite (under 15 minutes on 2 cores: 296 s on a fresh clone here, 554 s with the set-up (MLflow clients included)):
# everything but the tests marked slow or gpu, on two pytest processes.
test: lint chromium postgresql mlflow-clients
	$(PY) -m pytest -q $(TWO_PROCESSES) --durations=20

# The slow tests: faults (kills, full disk, ...), API fuzzing, load, scale-out, long trainings, a real
# single-node Slurm (about 16 minutes on 2 cores: two pytest processes, then the load test by itself);
# CI runs them after `make test`.
test-slow: install-test chromium postgresql slurm mlflow-clients
	$(PY) -m pytest -q -m "slow and not gpu and not alone" $(TWO_PROCESSES) --durations=20
	$(PY) -m pytest -q -m "slow and not gpu and alone" --durations=5

# Scale-out: 4 workers against 16 queued runs on PostgreSQL (about a minute); CI runs it with `make test-slow`.
test-scale: install-test postgresql
	$(PY) -m pytest -q -m scale

# The Slurm executor against a real single-node Slurm (about 4 minutes); CI runs it with `make test-slow`.
test-slurm: install-test slurm
	$(PY) -m pytest -q -m slurm

test-all: install-test chromium postgresql slurm
	$(PY) -m pytest -q -m "not gpu"

# Branch coverage of tinygpt, app and worker over both suites together (subprocesses included); slower than
# `make test` + `make test-slow`, so not part of CI. Prints the report; coverage.json keeps the figures.
coverage: install-test chromium postgresql slurm
	rm -f .coverage .coverage.*
	-$(VENV)/bin/coverage run -m pytest -q -m "not gpu" $(TWO_PROCESSES) -p no:cacheprovider
	$(VENV)/bin/coverage combine -q
	$(VENV)/bin/coverage report --precision=1 | tail -n 1
	$(VENV)/bin/coverage json -q -o coverage.json

# Benchmarks: measured side by side in one run; rewrites BENCHMARKS.md.
bench: install-test
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache runs
