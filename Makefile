# kafka-handoff: the two commands are `make demo` and `make test`; everything else is their setup.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
# The (optional) C extensions are compiled by the editable install: reinstall when their sources change.
EXT    := setup.py $(sort $(wildcard src/kafka_handoff/*/*.c))
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml $(EXT) | cksum | cut -d' ' -f1)

.PHONY: setup demo test test-unit lint typecheck clean jars docs kerberos

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
	extras=spark,dev,bench; if command -v krb5-config >/dev/null; then extras=$$extras,kerberos; fi; \
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

test: setup docs
	$(VENV)/bin/ruff check src tests examples
	$(VENV)/bin/ruff format --check src tests examples
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -p no:cacheprovider tests

test-unit: setup
	$(VENV)/bin/pytest -m "unit or threads" tests

clean:
	rm -rf $(VENV) .handoff build *.egg-info
