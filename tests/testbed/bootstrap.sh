#!/usr/bin/env bash
# Everything `make demo` and `make test` need on a fresh Debian 12 machine (run as root):
# Debian packages, a running Docker engine, the Python venv, the collection path and
# the node image. Idempotent: a second run only checks.
#
#   tests/testbed/bootstrap.sh          all of it
#   tests/testbed/bootstrap.sh system   the Debian packages and a running Docker engine
#   tests/testbed/bootstrap.sh venv     the rest: the venv, the collection path, the node image and test images
#
# `make test` runs `system` first, then `venv` beside the Galaxy import (which needs only python3-venv):
# creating the venv keeps one core busy for about a minute and a half, and the import fills the other.
set -euo pipefail
part=${1:-all}
case "$part" in all|system|venv) ;; *) echo "usage: tests/testbed/bootstrap.sh [all|system|venv]" >&2; exit 2 ;; esac
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
log=.cache/bootstrap.log
mkdir -p .cache

system() {
  local need=() pkg
  for pkg in docker.io runc debootstrap busybox-static python3-venv apt-utils gnupg chromium shellcheck packer; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]}"
    apt-get update -qq >>"$log" 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >>"$log" 2>&1
  fi

  # No systemd as PID 1 on the test machines: start dockerd ourselves when nothing answers.
  if ! docker info >/dev/null 2>&1; then
    echo "starting dockerd"
    (setsid dockerd >.cache/dockerd.log 2>&1 &)
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || { tail -20 .cache/dockerd.log; exit 1; }
  fi
}

# The collections the tests use beside ansible-core: community.docker (Molecule's docker driver, the
# docker connection) and ansible.posix (its callbacks; Molecule's driver requires it). They come from the
# pinned `ansible` package's wheel, into the collection path: installing the whole package would unpack its
# 37,000 files (about 45 CPU s) for these two.
collections_pin="ansible==12.3.0"
test_collections() {
  local dest=.cache/collections wheels=.cache/testbed/wheels stamp=.cache/collections/.from-ansible-package
  [ "$(cat "$stamp" 2>/dev/null)" = "$collections_pin" ] && return 0
  rm -rf "$wheels" "$dest/ansible_collections/community/docker" "$dest/ansible_collections/ansible/posix"
  .venv/bin/pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$wheels" \
    "$collections_pin" >>"$log" 2>&1
  .venv/bin/python - "$wheels"/ansible-*.whl "$dest" <<'PY'
import sys
import zipfile

wheel, dest = sys.argv[1:3]
wanted = ("ansible_collections/community/docker/", "ansible_collections/ansible/posix/")
with zipfile.ZipFile(wheel) as archive:
    archive.extractall(dest, [name for name in archive.namelist() if name.startswith(wanted)])
PY
  rm -rf "$wheels"
  echo "$collections_pin" > "$stamp"
}

venv() {
  local stamp=.venv/.requirements.sha256 want python link=.cache/collections/ansible_collections/gpunode/nvidia
  python=$(tests/testbed/venv-python.sh)
  want=$({ cat meta/requirements.txt requirements.txt requirements-dev.txt; "$python" -VV; } | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "creating the Python venv (.venv) with $python ($("$python" -V 2>&1))"
    rm -rf .venv
    "$python" -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check -r requirements-dev.txt >>"$log" 2>&1
    echo "$want" > "$stamp"
  fi

  test_collections

  if [ ! -L "$link" ]; then
    mkdir -p "$(dirname "$link")"
    ln -sfn "$repo" "$link"
  fi

  tests/testbed/node-image.sh bookworm
  tests/testbed/images.sh >/dev/null
  echo "bootstrap: .venv, the collection path, the node image and the test images are ready"
}

[ "$part" = venv ] || system
[ "$part" = system ] || venv
