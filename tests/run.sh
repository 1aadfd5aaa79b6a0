#!/usr/bin/env bash
# `make test` and `make check`: each step prints one line with its result and time; its whole output
# goes to .cache/test-logs/STEP.log, and a failing step prints the tail of that log. Every step runs
# even after a failure (one CI run reports everything), and the exit status is 1 if any failed.
#
#   tests/run.sh all      bootstrap, Galaxy import, the ansible-core matrix (README.md, "Supported versions"):
#                         ansible-test sanity on 2.21 and 2.16, the unit tests on 2.16, 2.20, 2.21 and the project
#                         venv's 2.19, the demo's path on 2.21; integration + Molecule
#   tests/run.sh check    the inner loop: lint, sanity on the files changed since CHECK_BASE (default HEAD:
#                         uncommitted and untracked files), beside the unit tests
#
# `all` runs in two lanes, because each step alone keeps about one of CI's two cores busy: the Galaxy import
# beside the venv's creation, then the checks that touch nothing on this machine but a node container of their
# own (sanity, the unit tests on each ansible-core, the demo's path) one after the other, beside the
# integration tests and Molecule scenarios, which run in TEST_WORKERS pytest-xdist workers (see
# pytest_parallel, and tests/conftest.py for what a unit of work is). The one integration path on
# ansible-core 2.16 starts a containerd here, so it runs last, alone. tests/compat/run.sh finds each
# ansible-core's Python (or runs in a Debian trixie controller container) and keeps its venv in .cache.
# The testbed scripts that fill shared caches take a lock of their own, and each Molecule scenario has a
# docker network of its own.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 1
export ANSIBLE_CONFIG=$repo/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$repo/.cache/collections
export PATH=$repo/.venv/bin:$PATH
python=$repo/.venv/bin/python
logs=$repo/.cache/test-logs
mkdir -p "$logs"
failed_list=$logs/failed-steps
rm -f "$failed_list"
suite_start=$(date +%s)

step() {
  local name=$1 start status
  shift
  start=$(date +%s)
  "$@" >"$logs/$name.log" 2>&1
  status=$?
  # One printf per step: the lines of two lanes never interleave.
  if [ "$status" -eq 0 ]; then
    printf 'ok    %-12s %5d s   %s\n' "$name" $(($(date +%s) - start)) "$(result_line "$name")"
  else
    echo "$name" >>"$failed_list"
    printf 'FAIL  %-12s %5d s   (exit %d) full log: %s\n%s\n' "$name" $(($(date +%s) - start)) "$status" \
      ".cache/test-logs/$name.log" "$(tail -n 60 "$logs/$name.log" | sed 's/^/      | /')"
  fi
  return "$status"
}

# The lines of a step's log that say what ran it (tests/compat/run.sh: ansible-core and Python) and what passed
# (pytest's summary, the importer's result, ...).
result_line() {
  { grep -m 1 -E '^ansible-core [0-9.]+, Python' "$logs/$1.log"
    grep -E '^[0-9]+ passed|passed|^(bootstrap|galaxy-importer|ansible-test sanity|demo on ansible-core)' \
      "$logs/$1.log" | tail -n 1 | sed -E 's/^=+ | =+$//g'; } | paste -s -d ';' - | sed 's/;/; /'
}

# Three workers by default; TEST_WORKERS=1 runs everything in one process, in the former order.
pytest_parallel() {
  local workers=${TEST_WORKERS:-3}
  if [ "$workers" -le 1 ]; then
    "$python" -m pytest -q -p no:cacheprovider --durations=25 "$@"
  else
    # --no-loadscope-reorder: keep the order tests/conftest.py gives (longest first); xdist would put the
    # units with the most tests first, so the single-test Molecule scenarios and rollouts would start last.
    "$python" -m pytest -q -p no:cacheprovider -n "$workers" --dist loadgroup --no-loadscope-reorder \
      --durations=25 "$@"
  fi
}

changed_files() {
  { git diff --name-only "${CHECK_BASE:-HEAD}" -- . ; git ls-files --others --exclude-standard; } |
    sort -u | while IFS= read -r f; do [ -f "$f" ] && printf '%s\n' "$f"; done
}

sanity_changed() {
  local files
  mapfile -t files < <(changed_files)
  if [ "${#files[@]}" -eq 0 ]; then
    echo "no changed files since ${CHECK_BASE:-HEAD}: nothing to check"
    return 0
  fi
  tests/sanity/run.sh "${files[@]}"
}

case "${1:-all}" in
  all)
    tests/testbed/bootstrap.sh system ||
      { echo "FAILED: bootstrap of the Debian packages or dockerd (logs: .cache/bootstrap.log, .cache/dockerd.log)"; exit 1; }
    # The Galaxy import needs no project venv: it runs while bootstrap.sh creates the venv (one core each).
    step galaxy-import tests/galaxy/import.sh &
    galaxy=$!
    if step bootstrap tests/testbed/bootstrap.sh venv; then
      {
        step sanity-2.21 tests/compat/run.sh 2.21 sanity
        step sanity-2.16 tests/compat/run.sh 2.16 sanity
        step unit-2.16 tests/compat/run.sh 2.16 unit
        step unit-2.20 tests/compat/run.sh 2.20 unit
        step unit-2.21 tests/compat/run.sh 2.21 unit
        step demo-2.21 tests/compat/run.sh 2.21 demo
        step unit "$python" -m pytest -q -p no:cacheprovider tests/unit
      } &
      checks=$!
      step integration pytest_parallel tests/molecule tests/integration
      wait "$galaxy" "$checks"
      step live-2.16 tests/compat/run.sh 2.16 live
    else
      wait "$galaxy"
    fi
    ;;
  check)
    # Two lanes again: lint and sanity each keep one core busy, and the unit tests' two workers leave about
    # a third of both cores idle (they wait on the ansible processes they start).
    {
      step lint make --no-print-directory lint
      step sanity sanity_changed
    } &
    lint=$!
    step unit "$python" -m pytest -q -p no:cacheprovider -n 2 tests/unit
    wait "$lint"
    ;;
  *)
    echo "usage: tests/run.sh [all|check]" >&2
    exit 2
    ;;
esac

total=$(($(date +%s) - suite_start))
if [ -s "$failed_list" ]; then
  echo "FAILED: $(tr '\n' ' ' <"$failed_list")(${total} s; logs in .cache/test-logs/)"
  exit 1
fi
echo "all passed (${total} s)"
