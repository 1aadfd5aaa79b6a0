# gpunode.nvidia: the two commands are `make demo` and `make test`.
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -euo pipefail -c

REPO := $(abspath .)
VENV := $(REPO)/.venv
PY := $(VENV)/bin/python
export ANSIBLE_COLLECTIONS_PATH := $(REPO)/.cache/collections
export ANSIBLE_CONFIG := $(REPO)/ansible.cfg
export PATH := $(VENV)/bin:$(PATH)

.PHONY: demo demo-clean test unit integration molecule lint bootstrap fuzz

bootstrap:
	tests/testbed/bootstrap.sh

# All tests: unit (no daemons), integration (real containerd/dockerd), Molecule (real systemd nodes).
test: bootstrap
	$(PY) -m pytest -q -p no:cacheprovider tests/unit tests/integration tests/molecule

unit: bootstrap
	$(PY) -m pytest -q tests/unit

integration: bootstrap
	$(PY) -m pytest -q tests/integration

demo:
	demo/run.sh

demo-clean:
	docker rm -f gpunode-demo >/dev/null 2>&1 || true

molecule: bootstrap
	$(PY) -m pytest -q tests/molecule

# ansible-lint is kept out of the test venv (it pins its own ansible-core range).
lint: bootstrap
	test -x .cache/lint-venv/bin/ansible-lint || { python3 -m venv .cache/lint-venv && \
	  .cache/lint-venv/bin/pip install -q ansible-core==2.19.14 ansible-lint==26.10.1 tomlkit kubernetes; }
	PATH=$(REPO)/.cache/lint-venv/bin:$$PATH .cache/lint-venv/bin/ansible-lint

# Property-based tests with the long hypothesis profile (>= 5000 examples per property).
fuzz: bootstrap
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q -p no:cacheprovider tests/unit -k propert
