#!/usr/bin/env bash
# `make compat`: the unit tests and one integration path on the oldest supported ansible-core (2.16),
# in a venv of its own; `make test` runs the same tests on the newest (the project venv, 2.19).
# ansible-core 2.19 changed conditional and templating semantics: both ends must pass.
#
#   tests/compat/run.sh          both
#   tests/compat/run.sh unit     the unit tests only (touch nothing on this machine: `make test` runs them
#                                beside the integration tests)
#   tests/compat/run.sh live     the integration path only (a containerd on this machine: `make test` runs it
#                                after the integration tests, which discover this machine's runtimes)
set -euo pipefail
part=${1:-all}
case "$part" in all|unit|live) ;; *) echo "usage: tests/compat/run.sh [all|unit|live]" >&2; exit 2 ;; esac
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
venv=.cache/core216-venv
pins="ansible-core==2.16.19 pytest==9.0.3 tomlkit==0.15.2 kubernetes==37.0.2 hypothesis==6.170.15"
if [ "$(cat "$venv/.pins" 2>/dev/null)" != "$pins" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q --disable-pip-version-check $pins >.cache/core216-pip.log 2>&1 || {
    tail -20 .cache/core216-pip.log; echo "installing $pins failed (log: .cache/core216-pip.log)"; exit 1; }
  echo "$pins" > "$venv/.pins"
fi
# The tests read results through the `json` stdout callback, which ansible-core 2.16 routes to ansible.posix:
# the collection path has it (tests/testbed/bootstrap.sh; its requires_ansible is >=2.15).
export ANSIBLE_CONFIG=$repo/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$repo/.cache/collections
export PATH=$repo/$venv/bin:$PATH
start=$(date +%s)
"$venv/bin/ansible" --version | sed -n 1p  # sed reads it all: head would break the pipe
targets=()
[ "$part" = live ] || targets+=(tests/unit)
# The property tests (tests/unit/**/test_*_properties.py) import no ansible-core: with the same Python, tomlkit and
# hypothesis, derandomised, they would run the very examples of `make test`'s unit step on the very code again.
[ "$part" = live ] || while IFS= read -r file; do targets+=("--ignore=$file"); done < <(find tests/unit -name "test_*_properties.py")
# One integration path: the containerd editor (action plugin + node module) against a real containerd 2.1,
# then a CRI sandbox through the new runtime.
[ "$part" = unit ] ||
  targets+=("tests/integration/test_containerd_runtime.py::test_runtime_reaches_the_live_daemon[containerd-2.1.9]")
"$venv/bin/python" -m pytest -q -p no:cacheprovider "${targets[@]}"
echo "ansible-core 2.16 tests ($part): $(( $(date +%s) - start )) s"
