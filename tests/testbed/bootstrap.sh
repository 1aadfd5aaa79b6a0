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

venv() {
  local stamp=.venv/.requirements.sha256 want link=.cache/collections/ansible_collections/gpunode/nvidia
  want=$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "creating the Python venv (.venv)"
    python3 -m venv .venv
    .venv/bin/pip install -q --disable-pip-version-check -r requirements-dev.txt >>"$log" 2>&1
    echo "$want" > "$stamp"
  fi

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
