#!/usr/bin/env bash
# Build the local Debian systemd node image used by the demo and Molecule, if missing.
#   node-image.sh [RELEASE]   (default bookworm) -> image local/gpunode-node:RELEASE
# The node boots systemd and carries Debian's own containerd and runc, like a
# freshly provisioned Kubernetes worker. No registry is needed: debootstrap
# from Debian's archive, then `docker import`.
set -euo pipefail
# Parallel test workers share the cache this script fills: one run at a time.
exec 9<"$0"
flock 9
release=${1:-bookworm}
image=local/gpunode-node:$release
# Rebuild when this recipe changed: the image carries the recipe's checksum in its environment.
recipe=$(sha256sum "$0" | cut -c1-16)
if docker image inspect -f '{{.Config.Env}}' "$image" 2>/dev/null | grep -q "GPUNODE_IMAGE_RECIPE=$recipe"; then
  exit 0
fi
root=$(mktemp -d /var/tmp/gpunode-node.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "building $image (debootstrap $release, about a minute)"
debootstrap --variant=minbase \
  --include=systemd,systemd-sysv,python3,python3-apt,python3-debian,dbus,iproute2,procps,ca-certificates,gnupg,containerd,runc,sudo \
  "$release" "$root" http://deb.debian.org/debian >/dev/null
# A container has no consoles or hardware to wait for.
for unit in getty.target console-getty.service systemd-udevd.service systemd-remount-fs.service; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
echo "$release-node" > "$root/etc/hostname"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import -c 'CMD ["/sbin/init"]' -c 'ENV container=docker' \
  -c "ENV GPUNODE_IMAGE_RECIPE=$recipe" - "$image" >/dev/null
echo "built $image"
