# kafka-handoff: the two commands are `make demo` and `make test`; everything else is their setup.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
# The (optional) C extensions are compiled by the editable install: reinstall when their sources change.
EXT    := setup.py $(sort $(wildcard src/kafka_handoff/*/*.c))
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml $(EXT) | cksum | cut -d' ' -f1)

.PHONY: setup demo test test-unit lint typecheck clean jars docs simulate

$(STAMP): pyproject.toml $(EXT)
	@start=$$(date +%s); \
	test -x $(PY) || $(PYTHON) -m venv $(VENV); \
	$(PIP) install -q --upgrade pip; \
	$(PIP) install -q -e '.[spark,dev,bench]'; \
	touch $(STAMP); \
	echo $$(( $$(date +%s) - start )) > $(VENV)/.setup-seconds; \
	echo "python environment ready in $$(( $$(date +%s) - start ))s"

setup: $(STAMP)
	@start=$$(date +%s); $(VENV)/bin/handoff broker fetch-jars || exit 1; \
	jars=$$(( $$(date +%s) - start )); \
	if [ -f $(VENV)/.setup-seconds ]; then \
	  py=$$(cat $(VENV)/.setup-seconds); rm -f $(VENV)/.setup-seconds; \
	  echo "first-time setup took $$(( py + jars ))s (python environment $${py}s, Kafka jars $${jars}s)"; \
	else \
	  echo "setup checked in $${jars}s"; \
	fi

jars: setup

demo: setup
	$(VENV)/bin/handoff demo

# The API reference from the docstrings; a broken cross-reference fails the build (make test runs it).
docs: $(STAMP)
	$(VENV)/bin/sphinx-build -q -E -n -W --keep-going -b html docs/api build/docs
	@echo "API reference: build/docs/index.html"

test: setup docs
	$(VENV)/bin/ruff check src tests examples
	$(VENV)/bin/ruff format --check src tests examples
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -p no:cacheprovider tests

test-unit: setup
	$(VENV)/bin/pytest -m "unit or threads" tests

# Deterministic simulation of consumer groups (tests/sim, docs/reliability.md "The simulator"): random
# schedules until HOURS have passed; reports schedules/s and each kind of violation with its first seed, shrunk.
HOURS ?= 1
simulate: setup
	PYTHONHASHSEED=0 PYTHONPATH=src:tests $(PY) -m sim.run --hours $(HOURS)

clean:
	rm -rf $(VENV) .handoff build *.egg-info
