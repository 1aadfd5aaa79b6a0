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

.PHONY: demo demo-clean test check unit integration molecule lint bootstrap bench fuzz

bootstrap:
	tests/testbed/bootstrap.sh

# All tests: integration (real containerd/dockerd) and Molecule (real systemd nodes) in TEST_WORKERS
# parallel workers (default 3; 1: one process), beside Galaxy import and the ansible-core matrix (sanity on
# 2.16 and 2.21, unit tests on 2.16, 2.19, 2.20 and 2.21, the demo's path on 2.21). One line per step; full logs in
# .cache/test-logs/ (tests/run.sh). It bootstraps the machine itself (tests/testbed/bootstrap.sh), beside the
# Galaxy import, which needs no project venv.
test:
	tests/run.sh all

# The inner loop (a few minutes): ansible-lint, ansible-test sanity on the files changed since
# CHECK_BASE (default HEAD: uncommitted and untracked files), unit tests.
check: bootstrap
	tests/run.sh check

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

# Publishing checks (also part of `make test`).
.PHONY: sanity galaxy-import role-docs changelog compat
# ansible-test sanity, offline: every default test on the controller Python.
sanity:
	tests/sanity/run.sh

# The built tarball as Galaxy's importer sees it (galaxy-importer in .cache/importer-venv).
galaxy-import:
	tests/galaxy/import.sh

# Regenerate the variables tables of roles/*/README.md and docs/variables.md from meta/argument_specs.yml.
role-docs:
	$(PY) tests/tools/role_readme.py
	$(PY) tests/tools/variables_doc.py

# Check the changelog fragments, then write CHANGELOG.md with antsibull-changelog (a preview of the
# galaxy.yml version until `antsibull-changelog release` is run for a release).
changelog:
	tests/tools/changelog.sh

# One ansible-core of the support matrix in a venv of its own (CORE 2.16, 2.19, 2.20, 2.21; PART unit, live,
# sanity, demo): make compat CORE=2.21 PART=demo. Its Python is found on the machine, or it runs in a Debian
# trixie controller container.
CORE ?= 2.16
PART ?= unit
compat:
	tests/compat/run.sh $(CORE) $(PART)

# Benchmarks print figures (no pass/fail) and are not part of `make test`. The fleet benchmark
# starts FLEET_SIZES node containers (largest size) and drives them over docker and SSH:
#   make bench FLEET_SIZES=1,10 FLEET_CONNECTIONS=docker,ssh
FLEET_SIZES ?= 1,10
FLEET_CONNECTIONS ?= docker,ssh
bench: bootstrap
	FLEET_SIZES=$(FLEET_SIZES) FLEET_CONNECTIONS=$(FLEET_CONNECTIONS) $(PY) tests/benchmarks/bench_fleet.py
	$(PY) tests/benchmarks/bench_upgrade.py
	$(PY) tests/benchmarks/bench_node_readers.py

# Property-based tests with the long hypothesis profile (>= 5000 examples per property).
fuzz: bootstrap
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q -p no:cacheprovider tests/unit -k propert
