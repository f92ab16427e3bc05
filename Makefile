# Two commands a newcomer needs: `make run` and `make test`. Each builds .venv itself.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
# Present once `make gpu-install` ran: every later (re)install swaps onnxruntime again.
GPU_MARK := $(VENV)/.gpu
ORT_GPU ?= onnxruntime-gpu>=1.18

.PHONY: run test lint format bench smoke soak locust serve-run clean gpu-install gpu-swap gpu-prepare gpu-check

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# --no-compile: pip would byte-compile every module of torch, Ray and the rest (about a
# minute of the build on 2 cores); Python compiles the modules that are imported, once.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --no-compile -e .
	if [ -f $(GPU_MARK) ]; then $(MAKE) --no-print-directory gpu-swap; fi
	touch $@

$(DEV_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --no-compile -e ".[dev]"
	if [ -f $(GPU_MARK) ]; then $(MAKE) --no-print-directory gpu-swap; fi
	touch $(STAMP) $@

run: $(STAMP)
	$(PY) -m serve_app run

# The import layers first (seconds): a broken layer fails before the suite. Two workers,
# each running whole groups of tests (tests/scheduling.py): most of the suite's time is
# services starting and waiting, which the two overlap (~18 min instead of ~30 in one
# process on 2 cores). The slowest tests are listed at the end: where the time goes.
test: $(DEV_STAMP)
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -q --durations=30 -n 2 --dist loadscope --no-loadscope-reorder

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/lint-imports --no-cache

format: $(DEV_STAMP)
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

# Operations (docs/operations.md). smoke: 60 s Locust mix on a fresh service, 0 failures.
smoke: $(DEV_STAMP)
	cd loadtests && ../$(PY) smoke.py --users $${USERS:-20} --seconds $${SECONDS_:-60}

# Soak: 30 min (MINUTES=2 for a trial); replica memory over time in loadtests/results/.
soak: $(DEV_STAMP)
	cd loadtests && ../$(PY) soak.py --minutes $${MINUTES:-30} --users $${USERS:-20}

# Locust web UI against a running service (make run); MEMSERVE_API_KEY must be set.
locust: $(DEV_STAMP)
	$(VENV)/bin/locust -f loadtests/locustfile.py --host $${HOST:-http://127.0.0.1:8000}

# The Serve config without the launcher (embedded Postgres is attached/started by the app).
# The same Ray environment as make run: throughput mode, and HAProxy where its binary runs
# (serve_app.ingress_proxy prints the RAY_* words; MEMSERVE_HAPROXY=false: Python proxy).
# serve run's shutdown can leave the HAProxy a late reload started (Ray kills its proxy
# actor before that child): stop whatever still listens on the app's port afterwards.
SERVE_PORT ?= 8000
serve-run: $(STAMP)
	env RAY_SERVE_THROUGHPUT_OPTIMIZED=1 RAY_worker_niceness=0 $$($(PY) -m serve_app.ingress_proxy) \
		$(VENV)/bin/serve run serve_app/serve_config.yaml; \
	status=$$?; $(PY) -m serve_app.ingress_proxy --reap $(SERVE_PORT); exit $$status

clean:
	rm -rf $(VENV) .pytest_cache

# GPU nodes (docs/operations.md, GPU): onnxruntime and onnxruntime-gpu are two
# distributions of one package, and whichever installed last owns its files. gpu-swap
# (deployments/gpu_install.sh) removes both and installs the GPU one alone; gpu-install marks the venv so every
# later reinstall (pyproject changed) swaps again, then verifies: exactly one
# distribution provides onnxruntime, and it has CUDAExecutionProvider.
gpu-install: $(STAMP)
	touch $(GPU_MARK)
	$(MAKE) --no-print-directory gpu-swap

gpu-swap:
	PYTHON=$(PY) ORT_GPU="$(ORT_GPU)" bash deployments/gpu_install.sh

# The GPU check (loadtests/gpu_check.py): gpu-prepare fills .gpu/ (fp16 torch weights,
# the int8 ONNX copy, the BEIR sets; < 64 MiB) to carry to a bare GPU machine, where
# `bash loadtests/gpu_check.sh` runs; here gpu-check is its CPU dry run.
gpu-prepare: $(DEV_STAMP)
	$(PY) loadtests/gpu_bundle.py --force

gpu-check:
	PYTHON=$(PY) bash loadtests/gpu_check.sh --dry-run
