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

.PHONY: demo test test-main test-tl39 test-all docs docs-strict lint format bench hooks clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first, pinned: the CPU wheel on disk; a looser spec would pull a CUDA build
	$(PIP) install --quiet --disable-pip-version-check torch==2.13.0
	$(PIP) install --quiet --disable-pip-version-check -e ".[dev]"
	touch $(STAMP)

# .venv-tl39 is a copy of .venv (torch 2.13.0 and every other dependency already installed)
# with TransformerLens swapped for 3.9.0, in the same command as the project so that the pin
# cannot lift it back to 4.x. Building it from scratch downloads and unpacks everything again
# (measured: 24 min on a loaded 2-core machine, against under 2 min for copy and swap). Run it as
# $(PY39) -m ...: the copied console scripts still point at .venv's python.
$(STAMP39): $(STAMP)
	rm -rf $(VENV39)
	cp -a $(VENV) $(VENV39)
	rm -f $(STAMP39)
	$(PY39) -m pip install --quiet --disable-pip-version-check transformer-lens==3.9.0 -e ".[dev]"
	touch $(STAMP39)

demo: $(STAMP)
	$(VENV)/bin/tl-leadterms demo

# .venv-tl39 first: the main suite then compares its bridges with TL 3.9's numbers (and back)
test: docs-strict $(STAMP39) test-main test-tl39

# the main suite in .venv (TransformerLens 4.x on a fresh install; `hooked` tests skip there)
test-main: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not slow"

test-tl39: $(STAMP39)
	HF_HUB_OFFLINE=1 TL_LEADTERMS_OTHER_PYTHON=$(abspath $(PY)) $(PY39) -m pytest -q -m "$(TL39_TESTS)"

test-all: $(STAMP) $(STAMP39)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q
	HF_HUB_OFFLINE=1 $(PY39) -m pytest -q -m "hooked or models"

# the documentation site (docs/, mkdocs.yml) into site/; offline, no web font or CDN. Never -q:
# it hides the warnings, and --strict then fails with no word of why
MKDOCS := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(PY) -m mkdocs build
docs: $(STAMP)
	$(MKDOCS)
	@echo "open site/index.html"

# every warning (a broken link, anchor or API reference, a formula that does not convert) fails
docs-strict: $(STAMP)
	$(MKDOCS) --strict

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
	rm -rf $(VENV) $(VENV39) .pytest_cache .ruff_cache *.egg-info site
