# kafka-handoff: the two commands are `make demo` and `make test`; everything else is their setup.
SHELL  := bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
VENV   := .venv
# Every extra the tests, docs and benchmarks use (a user's core install needs none of them).
EXTRAS := pipeline,cli,aio,metrics,schema-registry,devbroker,dev,bench
# Where CI keeps the output and JUnit report of a test run (.ci/run prints the failures' logs from it).
LOGS   := build/test-logs
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
# The (optional) C extensions are compiled by the editable install: reinstall when their sources change.
EXT    := setup.py $(sort $(wildcard src/kafka_handoff/*/*.c))
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml $(EXT) | cksum | cut -d' ' -f1)

.PHONY: _no_checks setup test-setup demo test test-unit check lint typecheck clean jars docs kerberos test-pythons test-portable-c simulate

# MIT Kerberos (SASL/GSSAPI): the gssapi package builds against libkrb5-dev, and the dev broker's
# --security kerberos runs the distribution's KDC.  Installed with apt-get when missing (as root, or with
# sudo); skipped when present.  Without them GSSAPI is unavailable -- an error under CI=true.
KRB5_PACKAGES := krb5-kdc krb5-admin-server krb5-user libkrb5-dev
KRB5_PRESENT  := command -v krb5-config >/dev/null && test -x /usr/sbin/krb5kdc && test -x /usr/sbin/kadmin.local
kerberos:
	@if $(KRB5_PRESENT); then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  echo "installing MIT Kerberos ($(KRB5_PACKAGES))"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(KRB5_PACKAGES) >/dev/null; \
	elif command -v apt-get >/dev/null && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then \
	  echo "installing MIT Kerberos ($(KRB5_PACKAGES)) with sudo"; \
	  sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && \
	  sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(KRB5_PACKAGES) >/dev/null; \
	fi; \
	if ! $(KRB5_PRESENT); then \
	  if [ "$$CI" = true ]; then echo "CI=true: MIT Kerberos ($(KRB5_PACKAGES)) is missing" >&2; exit 1; fi; \
	  echo "note: MIT Kerberos ($(KRB5_PACKAGES)) not installed: GSSAPI and --security kerberos unavailable"; \
	fi

$(STAMP): pyproject.toml $(EXT) | kerberos
	@start=$$(date +%s); \
	test -x $(PY) || $(PYTHON) -m venv $(VENV); \
	$(PIP) install -q --upgrade pip; \
	extras=$(EXTRAS); if command -v krb5-config >/dev/null; then extras=$$extras,kerberos; fi; \
	$(PIP) install -q -e ".[$$extras]"; \
	touch $(STAMP); \
	echo $$(( $$(date +%s) - start )) > $(VENV)/.setup-seconds; \
	echo "python environment ready in $$(( $$(date +%s) - start ))s"

setup: kerberos $(STAMP)
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

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests examples
	$(VENV)/bin/ruff format --check src tests examples

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The whole suite on TEST_WORKERS pytest-xdist workers (docs/testing.md: how tests share brokers), the API
# docs, ruff and mypy running beside it (.ci/test).  Its output goes to $(LOGS)/pytest.out too (the checks'
# to $(LOGS)/checks.out), and a JUnit report with the captured output and log records of every failing test
# to $(LOGS)/junit.xml.  A CI cancel or Ctrl-C (SIGTERM/SIGINT) stops it and the brokers it started.
TEST_WORKERS ?=
_no_checks:
# The tests also need the dev Schema Registry (built once from Maven Central: minutes the first time, which
# `make demo` does not pay).
test-setup: setup
	@$(VENV)/bin/handoff broker fetch-jars --schema-registry || exit 1

test: test-setup
	VENV=$(VENV) LOGS=$(LOGS) TEST_WORKERS=$(TEST_WORKERS) MAKE="$(MAKE)" .ci/test

test-unit: $(STAMP)
	$(VENV)/bin/pytest -p no:cacheprovider -m "unit or threads" tests

# The inner loop: lint, types and the unit tests (no broker, no Spark), the tests on 2 processes with ruff
# and mypy (incremental: build/mypy-cache) beside them; their output follows the tests'.
check: $(STAMP)
	@mkdir -p build; \
	$(MAKE) --no-print-directory -k lint typecheck > build/check-lint.out 2>&1 & lint=$$!; \
	$(VENV)/bin/pytest -p no:cacheprovider -q -n 2 -m "unit or threads" tests; tests=$$?; \
	wait $$lint; lint_status=$$?; cat build/check-lint.out; \
	if [ $$lint_status -ne 0 ]; then echo "make check: lint/typecheck failed" >&2; fi; \
	[ $$tests -eq 0 ] && [ $$lint_status -eq 0 ]

# The unit suite on every supported CPython found here (python3.11/3.12/3.13, pyenv or PATH), each in its
# own .venv-3.x.  Not part of `make test`: the first run installs every extra per interpreter.
test-pythons:
	.ci/test-pythons

# The C extensions built with -DKAFKA_HANDOFF_PORTABLE_C (the overflow checks a compiler without GCC/Clang
# builtins, e.g. MSVC, compiles) into a copy of src/, and the unit suite run on them in C mode (CI=true:
# a fast path that is off is an error).
PORTABLE := build/portable-c
test-portable-c: $(STAMP)
	rm -rf $(PORTABLE) && mkdir -p $(PORTABLE)
	cp -r src $(PORTABLE)/src && find $(PORTABLE)/src -name '*.so' -delete
	CFLAGS="$${CFLAGS:-} -DKAFKA_HANDOFF_PORTABLE_C" $(PY) setup.py -q build_ext --force \
	  --build-lib $(PORTABLE)/src --build-temp $(PORTABLE)/tmp
	PYTHONPATH=$(PORTABLE)/src $(PY) -c 'import kafka_handoff as k, sys; i = k.build_info(); \
	  print(i); sys.exit(i["c_overflow_checks"] != "portable" or bool(i["fast_paths_off"]))'
	PYTHONPATH=$(PORTABLE)/src CI=true $(VENV)/bin/pytest -p no:cacheprovider -q -m "unit or threads" tests

# Deterministic simulation of consumer groups (tests/sim, docs/reliability.md "The simulator"): random
# schedules until HOURS have passed; reports schedules/s and each kind of violation with its first seed, shrunk.
HOURS ?= 1
simulate: setup
	PYTHONHASHSEED=0 PYTHONPATH=src:tests $(PY) -m sim.run --hours $(HOURS)

clean:
	rm -rf $(VENV) .venv-3.* .handoff build *.egg-info
