#!/usr/bin/env bash
# Build the local Debian systemd node image used by the demo and Molecule, if missing.
#   node-image.sh [RELEASE]   (default bookworm) -> image local/gpunode-node:RELEASE
# The node boots systemd and carries Debian's own containerd and runc, like a
# freshly provisioned Kubernetes worker. No registry is needed: debootstrap
# from Debian's archive, then `docker import`.
set -euo pipefail
release=${1:-bookworm}
image=local/gpunode-node:$release
if docker image inspect "$image" >/dev/null 2>&1; then
  exit 0
fi
root=$(mktemp -d /var/tmp/gpunode-node.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "building $image (debootstrap $release, about a minute)"
debootstrap --variant=minbase \
  --include=systemd,systemd-sysv,python3,python3-apt,dbus,iproute2,procps,ca-certificates,gnupg,containerd,runc,sudo \
  "$release" "$root" http://deb.debian.org/debian >/dev/null
# A container has no consoles or hardware to wait for.
for unit in getty.target console-getty.service systemd-udevd.service systemd-remount-fs.service; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
echo "$release-node" > "$root/etc/hostname"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import -c 'CMD ["/sbin/init"]' -c 'ENV container=docker' - "$image" >/dev/null
echo "built $image"
