# Two commands a newcomer needs: `make run` and `make test`. Each builds .venv itself.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: run test lint format bench smoke clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e .
	touch $@

$(DEV_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP) $@

run: $(STAMP)
	$(PY) -m serve_app run

test: $(DEV_STAMP)
	$(PY) -m pytest -q

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format: $(DEV_STAMP)
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache
