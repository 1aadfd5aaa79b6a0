#!/usr/bin/env bash
# Build the controller image for the ansible-cores that need a newer Python than the machine has, if missing.
#   controller-image.sh   -> image local/gpunode-controller:trixie
# Debian 13's python3 (3.13) with venv and pip, git (ansible-test lists the collection's files with it) and
# the shell linter of ansible-test's sanity: built like the node image (debootstrap from Debian's archive, then
# `docker import`), so no registry is needed. tests/compat/run.sh runs in it with the repository mounted.
set -euo pipefail
# Parallel test steps share the image: one build at a time.
exec 9<"$0"
flock 9
image=local/gpunode-controller:trixie
# Rebuild when this recipe changed: the image carries the recipe's checksum in its environment.
recipe=$(sha256sum "$0" | cut -c1-16)
if docker image inspect -f '{{.Config.Env}}' "$image" 2>/dev/null | grep -q "GPUNODE_IMAGE_RECIPE=$recipe"; then
  exit 0
fi
root=$(mktemp -d /var/tmp/gpunode-controller.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "building $image (debootstrap trixie, about a minute)"
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,git,ca-certificates,shellcheck \
  trixie "$root" http://deb.debian.org/debian >/dev/null
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
# The repository is mounted with this machine's owner: git must not refuse it as another user's.
printf '[safe]\n\tdirectory = *\n' > "$root/etc/gitconfig"
tar -C "$root" -c . | docker import -c "ENV GPUNODE_IMAGE_RECIPE=$recipe" -c 'ENV LANG=C.UTF-8' - "$image" >/dev/null
echo "built $image"
