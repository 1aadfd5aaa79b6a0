#!/usr/bin/env bash
# The collection on one ansible-core of the support matrix (README.md, "Supported versions"), in a venv of its
# own with a controller Python that ansible-core accepts. `make test` runs the project venv's ansible-core
# (requirements-dev.txt) itself, and this script for the others: each changed conditionals, templating or
# module results (2.19), its sanity rules (2.21) or the Pythons it runs on (2.20: 3.12+).
#
#   tests/compat/run.sh CORE [PART]     CORE: 2.16, 2.19, 2.20 or 2.21
#     unit     the unit tests (default; they touch nothing on this machine: `make test` runs them beside the
#              integration tests)
#     live     one integration path: the containerd editor against a real containerd 2.1 (a daemon here)
#     sanity   ansible-test sanity of this ansible-core, with tests/sanity/ignore-CORE.txt
#     demo     `make demo`'s path from a fresh node: site.yml twice (the second changed=0), then --check --diff
#              (changed=0); no run may print a deprecation warning
#
# The Python: the first of the versions listed for CORE found as python3.X on PATH, in pyenv's versions or as
# python3. Where none is, the script runs itself in a controller container with Debian trixie's python3
# (tests/testbed/controller-image.sh), the repository mounted at the same path: only Debian's archive and
# PyPI are needed. COMPAT_CONTAINER=1 takes the container even where a Python is found (a fresh machine's path).
set -euo pipefail
core=${1:-}
part=${2:-unit}
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
usage() { echo "usage: tests/compat/run.sh 2.16|2.19|2.20|2.21 [unit|live|sanity|demo]" >&2; exit 2; }
case "$part" in unit|live|sanity|demo) ;; *) usage ;; esac
# The newest patch release PyPI serves of each, and the controller Pythons it runs on, preferred first
# (2.20 and 2.21 on different ones: the unit tests then cover both).
case "$core" in
  2.16) release=2.16.19 pythons="3.11 3.12 3.10" ;;
  2.19) release=2.19.14 pythons="3.11 3.12 3.13" ;;
  2.20) release=2.20.10 pythons="3.12 3.13 3.14" ;;
  2.21) release=2.21.5 pythons="3.13 3.12 3.14" ;;
  *) usage ;;
esac
# The test tools at the project venv's pins.
tools=$(grep -E '^(pytest|tomlkit|kubernetes|hypothesis)==' requirements-dev.txt | tr '\n' ' ')
# One venv per core, kept outside the checkout (GPUNODE_VENV_CACHE, default ~/.cache/gpunode-nvidia) so that every
# checkout on the machine (a CI run's fresh clone too) reuses it while its pins hold; the controller container's
# venvs stay in .cache, the one path it has mounted.
if [ -n "${GPUNODE_CONTROLLER_CONTAINER:-}" ]; then
  venv=$repo/.cache/core-$core-container-venv
else
  venv=${GPUNODE_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpunode-nvidia}/core-$core-venv
fi

# The interpreter of a Python X.Y that can create a venv, or nothing. The distribution's comes first: built with
# profile-guided optimisation, it runs the tests about 10 % faster than a source build (pyenv's). A venv's python
# (the project venv's comes first on PATH) is named by the interpreter it links to: the venv's pins then hold for
# every checkout.
python_of() {
  local version=$1 candidate
  for candidate in "/usr/bin/python$version" "python$version" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/python"$version" python3; do
    "$candidate" -c "import ensurepip, os, sys, venv
if '%d.%d' % sys.version_info[:2] == '$version': print(os.path.realpath(sys.executable))" 2>/dev/null | grep . &&
      return 0
  done
  return 1
}

python=
if [ -z "${COMPAT_CONTAINER:-}" ] || [ -n "${GPUNODE_CONTROLLER_CONTAINER:-}" ]; then
  for version in $pythons; do python=$(python_of "$version") && break; done
fi
if [ -z "$python" ]; then
  if [ -n "${GPUNODE_CONTROLLER_CONTAINER:-}" ]; then
    echo "no Python of $pythons in the controller container" >&2; exit 1
  fi
  tests/testbed/controller-image.sh
  mkdir -p "$HOME/.cache/pip"
  mounts=()
  # Where .cache links elsewhere (a cache shared between checkouts), the same path in the container; and the
  # machine's tools the tests call (Docker's CLI for the demo's node, Packer for the template checks).
  while IFS= read -r link; do
    target=$(readlink -f "$link")
    case "$target" in "$repo"|"$repo"/*) ;; *) mounts+=(-v "$target:$target") ;; esac
  done < <(find .cache .cache/collections/ansible_collections -maxdepth 1 -type l -xtype d)
  for tool in docker packer; do
    command -v "$tool" >/dev/null && mounts+=(-v "$(command -v "$tool"):/usr/local/bin/$tool:ro")
  done
  # This machine's way to PyPI (network, certificate authorities, pip's and the proxy's settings where set), its
  # Docker daemon (the demo's node) and pip's cache.
  exec docker run --rm --network host -e GPUNODE_CONTROLLER_CONTAINER=1 -e PIP_DISABLE_PIP_VERSION_CHECK=1 \
    -v /etc/ssl/certs:/etc/ssl/certs:ro -e PIP_CERT -e PIP_INDEX_URL -e PIP_TRUSTED_HOST \
    -e http_proxy -e https_proxy -e no_proxy -e HTTP_PROXY -e HTTPS_PROXY -e NO_PROXY \
    -v "$repo:$repo" -w "$repo" -v /var/run/docker.sock:/var/run/docker.sock "${mounts[@]}" \
    -v "$HOME/.cache/pip:/root/.cache/pip" local/gpunode-controller:trixie tests/compat/run.sh "$core" "$part"
fi

pins="ansible-core==$release $tools($python $("$python" -V 2>&1))"
mkdir -p "$(dirname "$venv")"
# Two checkouts may want the same venv at once: one builds it, the other waits.
exec 9>"$venv.lock"
flock 9
if [ "$(cat "$venv/.pins" 2>/dev/null)" != "$pins" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q --disable-pip-version-check "ansible-core==$release" $tools >"$venv.pip.log" 2>&1 || {
    tail -20 "$venv.pip.log"; echo "installing ansible-core $release failed (log: $venv.pip.log)"; exit 1; }
  echo "$pins" > "$venv/.pins"
fi
flock -u 9

# The tests read results through the `json` stdout callback, which ansible-core 2.16 routes to ansible.posix:
# the collection path has it (tests/testbed/bootstrap.sh; its requires_ansible is >=2.15).
export ANSIBLE_CONFIG=$repo/ansible.cfg ANSIBLE_COLLECTIONS_PATH=$repo/.cache/collections
export PATH=$venv/bin:$PATH
start=$(date +%s)
echo "ansible-core $release, $("$venv/bin/python" -V 2>&1) ($python)"

unit() {
  local ignored=()
  # The property tests (tests/unit/**/test_*_properties.py) import no ansible-core: derandomised, they run the
  # examples of the project venv's unit step again, on another Python at most.
  mapfile -t ignored < <(find tests/unit -name "test_*_properties.py" -printf "--ignore=%p\n")
  "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/unit "${ignored[@]}"
}

live() {
  "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    "tests/integration/test_containerd_runtime.py::test_runtime_reaches_the_live_daemon[containerd-2.1.9]"
}

demo() {
  local log=$repo/.cache/core-$core-demo
  node=gpunode-demo-core${core//./}
  mkdir -p "$log"
  docker rm -f -v "$node" >/dev/null 2>&1 || true
  trap 'docker rm -f -v "$node" >/dev/null 2>&1 || true' EXIT
  local run
  # demo/run.sh keeps site.yml's output in .cache/NODE-last.log: the proof after it reads the node through
  # ansible.posix's json callback, whose own deprecation warnings are not the collection's.
  for run in first second; do
    DEMO_NODE=$node DEMO_VENV=$venv demo/run.sh >"$log/$run-demo.log" 2>&1 || { tail -40 "$log/$run-demo.log"; return 1; }
    cp ".cache/$node-last.log" "$log/$run.log"
  done
  "$venv/bin/ansible-playbook" -i demo/inventory.yml -e ansible_host="$node" playbooks/site.yml --check --diff \
    >"$log/check.log" 2>&1 || { tail -40 "$log/check.log"; return 1; }
  demo_verdict "$log"
}

# The second run and the check changed nothing, and no site.yml run printed a deprecation warning.
demo_verdict() {
  local log=$1 file failed=0
  for file in second check; do
    grep -qE "^gpunode-demo +: ok=[0-9]+ +changed=0 +unreachable=0 +failed=0" "$log/$file.log" ||
      { echo "the $file run changed something or failed:"; grep -A2 "PLAY RECAP" "$log/$file.log"; failed=1; }
  done
  if grep -l "DEPRECATION WARNING" "$log"/{first,second,check}.log; then
    grep -h -A3 "DEPRECATION WARNING" "$log"/{first,second,check}.log; failed=1
  fi
  [ "$failed" -eq 0 ] && echo "demo on ansible-core $release: site.yml twice (second changed=0), --check --diff changed=0"
  return "$failed"
}

case "$part" in
  unit) unit ;;
  live) live ;;
  # The oldest core lints the code that ships (plugins/) with its pylint; the tests' own code, which never runs on
  # a user's controller, is linted by the newest core's, the stricter of the two. Every other test covers the tree.
  sanity) if [ "$core" = 2.16 ]; then
            # Both run, and either failing fails the step (set -e does not stop at a failed && list).
            failed=0
            VENV=$venv tests/sanity/run.sh --skip-test pylint || failed=1
            VENV=$venv tests/sanity/run.sh --test pylint plugins/ || failed=1
            [ "$failed" -eq 0 ] || exit 1
          else
            VENV=$venv tests/sanity/run.sh
          fi ;;
  demo) demo ;;
esac
echo "ansible-core $core $part: $(( $(date +%s) - start )) s"
