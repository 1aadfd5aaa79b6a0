#!/usr/bin/env bash
# The Python the test venvs are built on (tests/testbed/bootstrap.sh: the project venv; tests/galaxy/import.sh: the
# importer's): the distribution's python3 where ansible-core accepts it (3.11+), else the first python3 on PATH.
# Debian's and Ubuntu's are built with profile-guided optimisation and LTO; on a Python built from source without
# them (pyenv's default, which a PATH may put first), the tests' ansible runs take about 10 % more CPU.
set -euo pipefail
if /usr/bin/python3 -c 'import ensurepip, sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo /usr/bin/python3
else
  command -v python3
fi
