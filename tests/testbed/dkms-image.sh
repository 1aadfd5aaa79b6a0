#!/usr/bin/env bash
# Build the node image with Debian's real module signing tool chain, if missing.
#   dkms-image.sh   -> image local/gpunode-dkms:bookworm
# On top of local/gpunode-node:bookworm (node-image.sh): Debian's dkms, openssl, mokutil, kmod,
# the headers of Debian's current bookworm kernel (linux-headers-amd64, with the kernel's
# scripts/sign-file) and unattended-upgrades. The Secure Boot tests build and sign a real module
# with them; nothing is loaded (a container shares the host's kernel).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
image=local/gpunode-dkms:bookworm
recipe=$(sha256sum "$0" | cut -c1-16)
if docker image inspect -f '{{.Config.Env}}' "$image" 2>/dev/null | grep -q "GPUNODE_DKMS_RECIPE=$recipe"; then
  exit 0
fi
"$here/node-image.sh" bookworm
name=gpunode-sb-dkms-build-$$
trap 'docker rm -f "$name" >/dev/null 2>&1 || true' EXIT
docker run --name "$name" local/gpunode-node:bookworm bash -euc '
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends dkms openssl mokutil kmod make gcc libc6-dev \
    linux-headers-amd64 unattended-upgrades apt-utils
  rm -rf /var/cache/apt/archives/*.deb' >/dev/null
docker commit -c 'CMD ["/sbin/init"]' -c "ENV GPUNODE_DKMS_RECIPE=$recipe" "$name" "$image" >/dev/null
echo "built $image"
