# The two set-up commands of the README. Each creates .venv on first use.
# .venv gets the newest TransformerLens the pin allows (4.x); `make test` also builds .venv-tl39
# with TransformerLens 3.9.0 (what SAELens needs) and runs the model-facing tests there.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
VENV39 := .venv-tl39
PY39 := $(VENV39)/bin/python
STAMP39 := $(VENV39)/.installed
# tests that need HookedTransformer (TL 3.x) or face models: the second environment runs these
TL39_TESTS := (hooked or models) and not slow

.PHONY: demo test test-main test-tl39 test-all lint format bench hooks clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first, pinned: the CPU wheel on disk; a looser spec would pull a CUDA build
	$(PIP) install --quiet --disable-pip-version-check torch==2.13.0
	$(PIP) install --quiet --disable-pip-version-check -e ".[dev]"
	touch $(STAMP)

$(STAMP39): pyproject.toml
	test -x $(PY39) || $(PYTHON) -m venv $(VENV39)
	$(PY39) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	# the exact TL 3.9.0 in the same command as the project, so the pin cannot lift it to 4.x
	$(PY39) -m pip install --quiet --disable-pip-version-check transformer-lens==3.9.0 -e ".[dev]"
	touch $(STAMP39)

demo: $(STAMP)
	$(VENV)/bin/tl-leadterms demo

test: test-main test-tl39

# the main suite in .venv (TransformerLens 4.x on a fresh install; `hooked` tests skip there)
test-main: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not slow"

test-tl39: $(STAMP39)
	HF_HUB_OFFLINE=1 $(PY39) -m pytest -q -m "$(TL39_TESTS)"

test-all: $(STAMP) $(STAMP39)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q
	HF_HUB_OFFLINE=1 $(PY39) -m pytest -q -m "hooked or models"

lint: $(STAMP)
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(STAMP)
	$(PY) benchmarks/bench_stats.py

hooks:
	git config core.hooksPath hooks

clean:
	rm -rf $(VENV) $(VENV39) .pytest_cache .ruff_cache *.egg-info
