# The two set-up commands of the README. Each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: demo test test-all docs docs-strict lint format bench hooks clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first, pinned: the CPU wheel on disk; a looser spec would pull a CUDA build
	$(PIP) install --quiet --disable-pip-version-check torch==2.13.0
	$(PIP) install --quiet --disable-pip-version-check -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tl-leadterms demo

test: $(STAMP) docs-strict
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not slow"

# the documentation site (docs/, mkdocs.yml) into site/; offline, no web font or CDN
MKDOCS := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(PY) -m mkdocs build -q
docs: $(STAMP)
	$(MKDOCS)
	@echo "open site/index.html"

# broken links, anchors and API references fail the build
docs-strict: $(STAMP)
	$(MKDOCS) --strict

test-all: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

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
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info site
