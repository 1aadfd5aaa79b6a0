#!/usr/bin/env bash
# `make sanity`: ansible-test sanity on the controller Python, offline except for PyPI. VENV: the venv whose
# ansible-test runs (default: the project venv; tests/compat/run.sh CORE sanity passes another ansible-core's).
#
# ansible-test must run from a path ending in ansible_collections/<namespace>/<name>, so the
# collection's files (tracked and not ignored) are copied under .cache/sanity/. Each sanity test
# gets its own virtual environment; ansible-test bootstraps pip into it with a get-pip script it
# downloads from a host that is not reachable from CI. We write that script ourselves, at the path
# ansible-test looks at first, and have it install pip from PyPI's own pip wheel: every sanity test
# then installs its pinned requirements from PyPI (--requirements).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
venv=${VENV:-$repo/.venv}
python=$venv/bin/python
work=$repo/.cache/sanity

python_version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
pip_version=$("$python" - "$python_version" <<'PY'
import sys
from ansible_test._internal.python_requirements import get_venv_packages
from ansible_test._internal.host_configs import NativePythonConfig
print(get_venv_packages(NativePythonConfig(version=sys.argv[1]))["pip"])
PY
)
bootstrap=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
if [ ! -s "$bootstrap" ] || ! grep -q "what else it is asked for from the index" "$bootstrap"; then
  mkdir -p "$work/wheels" "$(dirname "$bootstrap")"
  "$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$work/wheels" "pip==$pip_version"
  "$python" tests/sanity/write_get_pip.py "$work/wheels/pip-$pip_version-py3-none-any.whl" "$bootstrap"
fi

# A fresh copy each run: ansible-test must see exactly the files a commit would hold.
dest=$work/ansible_collections/gpunode/nvidia
rm -rf "$dest"
mkdir -p "$dest"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [ -e "$f" ] && printf '%s\0' "$f"
done | tar -c --null -T - -f - | tar -x -f - -C "$dest"

cd "$dest"
# Its own git index: ansible-test lists a collection's files with git, and the enclosing checkout
# ignores .cache/.
git init -q . && git add -A
start=$(date +%s)
# Each line stamped with the time, so that the duration of every test can be read from the log.
"$venv/bin/ansible-test" sanity --requirements --python "$python_version" \
  --color no "$@" 2>&1 | while IFS= read -r line; do printf '%(%T)T %s\n' -1 "$line"; done
echo "ansible-test sanity: $(( $(date +%s) - start )) s"
