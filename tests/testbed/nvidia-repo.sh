#!/usr/bin/env bash
# Build the local, signed package repository that stands in for NVIDIA's and Debian's
# driver / container toolkit repositories (neither NVIDIA's repositories nor a GPU can
# be reached on the test machines).
#
#   nvidia-repo.sh [OUT]     default OUT: .cache/testbed/nvidia-repo (rebuilt only when
#                            this script or the stand-ins change)
#
# OUT holds, ready to be served over HTTP (python3 -m http.server --directory OUT):
#   keys/nvidia-test.asc           test signing key (ASCII armoured, like NVIDIA's `gpgkey`)
#   keys/nvidia-test-rotated.asc   the key that replaces it (key rotation tests)
#   keys/unrelated.asc             a key that signed nothing (wrong key tests)
#   libnvidia-container/stable/deb/amd64/     flat repository like NVIDIA's
#       nvidia-container-toolkit, nvidia-container-toolkit-base, libnvidia-container-tools,
#       libnvidia-container1 at 1.17.7-1 (vulnerable to CVE-2025-23266: the toolkit's version
#       guard refuses it), 1.17.8-1 and 1.18.0-1; InRelease signed with nvidia-test,
#       InRelease.rotated signed with nvidia-test-rotated (swap it in to rotate).
#   libnvidia-container/newglibc/deb/amd64/   the same four packages at 1.18.1-1 whose
#       nvidia-container-cli and libnvidia-container.so.1 are real ELF files from Debian sid
#       that need GLIBC_2.38 (incident I4 on a glibc 2.36 host).
#   debian/dists/bookworm/{contrib,non-free,non-free-firmware}/   Debian-style archive with the
#       driver packages (nvidia-driver, nvidia-kernel-dkms, nvidia-smi, libcuda1, libnvidia-ml1 in
#       non-free, nvidia-open-kernel-dkms in contrib, firmware-nvidia-gsp in non-free-firmware) at
#       535.261.03-1 and 550.163.01-1, plus a 535.309.01-0+deb12u1 update of the non-free ones
#       only, as Debian 12 has it (the open module stays at 535.261.03).
#   debian/dists/bookworm/main/   the kernel guard's packages: linux-image-amd64 and linux-headers-amd64
#       at 6.1.190-1 (kernel 6.1.0-90-amd64) and 6.1.191-1 (kernel 6.1.0-91-amd64), both kernels'
#       linux-image-KERNEL and linux-headers-KERNEL (its /lib/modules/KERNEL/build link), and dkms
#       (tests/testbed/stand-ins/dkms). No Debian kernel has these ABI numbers: nothing real is shadowed.
#   cuda/repos/debian12/x86_64/   flat repository like NVIDIA's CUDA one, signed like the others:
#       nvidia-fabricmanager-535 at 535.261.03-1 (the Debian driver's version) and 535.309.01-1
#       (tests/testbed/stand-ins/nv-fabricmanager and its unit nvidia-fabricmanager.service), nvlsm.
#   offline/toolkit/, offline/driver/         the same .deb files in plain directories
#       (offline mode: install from a local directory of packages).
#
# Every binary is a STAND-IN: nvidia-container-runtime is tests/testbed/stand-ins/
# nvidia-container-runtime (records its call, execs runc), nvidia-ctk is
# tests/testbed/stand-ins/nvidia-ctk (--version, cdi generate), nvidia-container-cli is
# coreutils' `true` (bookworm build) or `env` (sid build), the kernel module packages hold
# no module and build nothing, the kernel packages hold no kernel, nv-fabricmanager is
# tests/testbed/stand-ins/nv-fabricmanager (prints its version, then sleeps). Package names, versions and dependencies follow NVIDIA's
# and Debian's packages, so apt resolves them as it would the real ones.
set -euo pipefail
# Parallel test workers share the cache this script fills: one run at a time.
exec 9<"$0"
flock 9
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/.cache/testbed/nvidia-repo}

for tool in dpkg-deb apt-ftparchive gpg; do
  command -v "$tool" >/dev/null || { echo "nvidia-repo.sh: $tool is missing (apt-get install apt-utils gnupg dpkg)" >&2; exit 1; }
done

inputs=$(cat "$0" "$here/stand-ins/nvidia-container-runtime" "$here/stand-ins/nvidia-ctk" "$here/stand-ins/dkms" \
  "$here/stand-ins/nv-fabricmanager" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$out/.stamp" 2>/dev/null)" = "$inputs" ]; then
  exit 0
fi

# Real ELF files: coreutils from bookworm (needs GLIBC_2.34) and from sid (GLIBC_2.38).
"$here/debian-archive.sh" coreutils bookworm sid >/dev/null
old_elf=$repo/.cache/testbed/coreutils-bookworm
new_elf=$repo/.cache/testbed/coreutils-sid

work=$(mktemp -d /tmp/gpunode-nvrepo.XXXXXX)
export GNUPGHOME=$work/gnupg
cleanup() { gpgconf --kill all >/dev/null 2>&1 || true; rm -rf "$work" ${new:+"$new"}; }
trap cleanup EXIT
mkdir -m 700 "$GNUPGHOME"
# Built beside OUT under a name of its own, then swapped in (see the end): a concurrent build or a
# reader of OUT never sees a half-built repository.
new=$(mktemp -d "$out.new.XXXXXX")
chmod 0755 "$new"
mkdir -p "$new/keys"

# --- keys ------------------------------------------------------------------------------------
declare -A keyid
for name in nvidia-test nvidia-test-rotated unrelated; do
  gpg --batch --quiet --passphrase "" --quick-gen-key "gpunode $name <$name@gpunode.invalid>" ed25519 sign never \
    2>"$work/gpg.log" || { cat "$work/gpg.log" >&2; exit 1; }
  keyid[$name]=$(gpg --batch --with-colons --list-keys "$name@gpunode.invalid" 2>/dev/null | awk -F: '/^fpr:/ {print $10; exit}')
  gpg --batch --armor --export "${keyid[$name]}" >"$new/keys/$name.asc"
done

sign_release() {  # DIR: Release -> InRelease (nvidia-test) and InRelease.rotated
  gpg --batch --yes --local-user "${keyid[nvidia-test]}" --clearsign -o "$1/InRelease" "$1/Release"
  gpg --batch --yes --local-user "${keyid[nvidia-test-rotated]}" --clearsign -o "$1/InRelease.rotated" "$1/Release"
}

# --- packages --------------------------------------------------------------------------------
# mkdeb DEST NAME VERSION ARCH "DEPENDS" SRC:DEST...   (a file, or @TEXT to write TEXT)
mkdeb() {
  local dest=$1 name=$2 version=$3 arch=$4 depends=$5; shift 5
  local root=$work/pkg/$name-$version
  rm -rf "$root"; mkdir -p "$root/DEBIAN" "$root/usr/share/doc/$name"
  printf 'STAND-IN test package built by tests/testbed/nvidia-repo.sh; not the real %s.\n' "$name" \
    >"$root/usr/share/doc/$name/STAND-IN"
  local spec src target
  for spec in "$@"; do
    src=${spec%%:*}; target=${spec#*:}
    mkdir -p "$root$(dirname "$target")"
    case "$src" in
      @*) printf '%s\n' "${src#@}" >"$root$target" ;;
      =*) ln -s "${src#=}" "$root$target" ;;
      *) cp "$src" "$root$target" ;;
    esac
    [ -L "$root$target" ] && continue
    case "$target" in  # data is not executable (systemd warns about executable unit files)
      /lib/systemd/*|/lib/modules/*|/usr/share/*|/boot/*) chmod 0644 "$root$target" ;;
      *) chmod 0755 "$root$target" ;;
    esac
  done
  {
    echo "Package: $name"
    echo "Version: $version"
    echo "Architecture: $arch"
    echo "Maintainer: gpunode.nvidia tests <tests@gpunode.invalid>"
    [ -n "$depends" ] && echo "Depends: $depends"
    echo "Section: utils"
    echo "Priority: optional"
    echo "Description: STAND-IN for $name (test package, no real content)"
  } >"$root/DEBIAN/control"
  mkdir -p "$dest"
  dpkg-deb --root-owner-group -Zgzip -b "$root" "$dest/${name}_${version}_${arch}.deb" >/dev/null
}

toolkit_packages() {  # DEST VERSION ELF_TREE CLI
  local dest=$1 v=$2 tree=$3 cli=$4 upstream=${2%-*}
  local lib=/usr/lib/x86_64-linux-gnu
  sed "s/@VERSION@/$upstream/" "$here/stand-ins/nvidia-ctk" >"$work/nvidia-ctk"
  mkdeb "$dest" libnvidia-container1 "$v" amd64 "" \
    "$tree/usr/libexec/coreutils/libstdbuf.so:$lib/libnvidia-container.so.$upstream" \
    "=libnvidia-container.so.$upstream:$lib/libnvidia-container.so.1"
  mkdeb "$dest" libnvidia-container-tools "$v" amd64 "libnvidia-container1 (>= $v)" \
    "$tree/$cli:/usr/bin/nvidia-container-cli"
  mkdeb "$dest" nvidia-container-toolkit-base "$v" amd64 "" \
    "$here/stand-ins/nvidia-container-runtime:/usr/bin/nvidia-container-runtime" \
    "$work/nvidia-ctk:/usr/bin/nvidia-ctk" \
    "@#!/bin/sh
exec /usr/bin/nvidia-container-runtime \"\$@\":/usr/bin/nvidia-container-runtime.cdi"
  mkdeb "$dest" nvidia-container-toolkit "$v" amd64 \
    "nvidia-container-toolkit-base (= $v), libnvidia-container-tools (>= $v), libnvidia-container-tools (<< 2.0.0)" \
    "@#!/bin/sh
# STAND-IN nvidia-container-runtime-hook $upstream
exit 0:/usr/bin/nvidia-container-runtime-hook"
}

driver_packages() {  # POOL VERSION [security]: the pool has contrib/, non-free/, non-free-firmware/
  local pool=$1 v=$2 upstream=${2%%-*}
  local smi="#!/bin/sh
# STAND-IN nvidia-smi $upstream: there is no GPU and no driver module here.
echo 'NVIDIA-SMI has failed because it couldn'\\''t communicate with the NVIDIA driver. (stand-in $upstream)'
exit 9"
  mkdeb "$pool/non-free-firmware" firmware-nvidia-gsp "$v" amd64 "" \
    "@stand-in GSP firmware $upstream:/lib/firmware/nvidia/$upstream/STAND-IN"
  mkdeb "$pool/non-free" nvidia-kernel-dkms "$v" amd64 "" \
    "@stand-in kernel module source $upstream (no dkms.conf: nothing is built):/usr/src/nvidia-current-$upstream/STAND-IN"
  mkdeb "$pool/non-free" nvidia-smi "$v" amd64 "" "@$smi:/usr/bin/nvidia-smi"
  mkdeb "$pool/non-free" libcuda1 "$v" amd64 "" "@stand-in libcuda $upstream:/usr/lib/x86_64-linux-gnu/nvidia/STAND-IN-libcuda"
  mkdeb "$pool/non-free" libnvidia-ml1 "$v" amd64 "" "@stand-in NVML $upstream:/usr/lib/x86_64-linux-gnu/nvidia/STAND-IN-nvml"
  mkdeb "$pool/non-free" nvidia-driver "$v" amd64 \
    "nvidia-kernel-dkms (= $v) | nvidia-open-kernel-dkms (= $v), nvidia-smi (= $v), libcuda1 (= $v)"
  [ "${3:-}" = security ] && return 0
  # Like Debian: the open module (contrib) is not rebuilt for the non-free security updates.
  mkdeb "$pool/contrib" nvidia-open-kernel-dkms "$v" amd64 "firmware-nvidia-gsp (= $v)" \
    "@stand-in open kernel module source $upstream (no dkms.conf: nothing is built):/usr/src/nvidia-current-open-$upstream/STAND-IN"
}

kernel_packages() {  # POOL ABI METAVERSION: one kernel's image and headers, and the metapackages naming it
  local pool=$1 abi=$2 meta=$3
  mkdeb "$pool" "linux-image-$abi" "$meta" amd64 "" \
    "@STAND-IN kernel image $abi (no kernel):/boot/vmlinuz-$abi" \
    "@STAND-IN modules of $abi:/lib/modules/$abi/STAND-IN"
  mkdeb "$pool" "linux-headers-$abi" "$meta" amd64 "" \
    "@STAND-IN headers of $abi (nothing to compile against):/usr/src/linux-headers-$abi/STAND-IN" \
    "=/usr/src/linux-headers-$abi:/lib/modules/$abi/build"
  mkdeb "$pool" linux-image-amd64 "$meta" amd64 "linux-image-$abi"
  mkdeb "$pool" linux-headers-amd64 "$meta" amd64 "linux-headers-$abi"
}

fabricmanager_packages() {  # DEST VERSION
  local dest=$1 v=$2 upstream=${2%-*}
  sed "s/FABRICMANAGER_STANDIN_VERSION:-[0-9.]*/FABRICMANAGER_STANDIN_VERSION:-$upstream/" \
    "$here/stand-ins/nv-fabricmanager" >"$work/nv-fabricmanager"
  mkdeb "$dest" "nvidia-fabricmanager-${upstream%%.*}" "$v" amd64 "" \
    "$work/nv-fabricmanager:/usr/bin/nv-fabricmanager" \
    "@# STAND-IN fabric manager configuration:/usr/share/nvidia/nvswitch/fabricmanager.cfg" \
    "@[Unit]
Description=STAND-IN NVIDIA fabric manager $upstream (test package)
[Service]
ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg
[Install]
WantedBy=multi-user.target:/lib/systemd/system/nvidia-fabricmanager.service"
}

flat_repo() {  # DIR [LABEL]: Packages, Release, InRelease for a repository with suite "/"
  (cd "$1" && apt-ftparchive packages . >Packages && gzip -9kf Packages \
    && apt-ftparchive -o APT::FTPArchive::Release::Origin="gpunode test (stand-in for NVIDIA)" \
         -o APT::FTPArchive::Release::Label="${2:-libnvidia-container}" release . >"$work/Release" \
    && mv "$work/Release" Release)
  sign_release "$1"
}

stable=$new/libnvidia-container/stable/deb/amd64
for v in 1.17.7-1 1.17.8-1 1.18.0-1; do
  toolkit_packages "$stable" "$v" "$old_elf" bin/true
done
flat_repo "$stable"

newglibc=$new/libnvidia-container/newglibc/deb/amd64
toolkit_packages "$newglibc" 1.18.1-1 "$new_elf" usr/bin/env
flat_repo "$newglibc"

# Debian-style archive: bookworm with contrib, non-free and non-free-firmware; 535.309.01 is a
# "security update" of the non-free packages only, as in Debian 12 (the open module stays 535.261.03).
debian=$new/debian
pool=$debian/pool
driver_packages "$pool" 535.261.03-1
driver_packages "$pool" 535.309.01-0+deb12u1 security
driver_packages "$pool" 550.163.01-1
# The kernel guard's: an installed kernel and the newer one an upgrade would bring, and DKMS.
kernel_packages "$pool/main" 6.1.0-90-amd64 6.1.190-1
kernel_packages "$pool/main" 6.1.0-91-amd64 6.1.191-1
mkdeb "$pool/main" dkms 3.0.10-8+deb12u1 amd64 "" "$here/stand-ins/dkms:/usr/sbin/dkms"
components="main contrib non-free non-free-firmware"
for component in $components; do
  mkdir -p "$debian/dists/bookworm/$component/binary-amd64"
  (cd "$debian" && apt-ftparchive packages "pool/$component" >"dists/bookworm/$component/binary-amd64/Packages" \
    && gzip -9kf "dists/bookworm/$component/binary-amd64/Packages")
done
(cd "$debian" && apt-ftparchive -o APT::FTPArchive::Release::Origin="gpunode test (stand-in for Debian)" \
    -o APT::FTPArchive::Release::Suite=bookworm -o APT::FTPArchive::Release::Codename=bookworm \
    -o APT::FTPArchive::Release::Components="$components" -o APT::FTPArchive::Release::Architectures=amd64 \
    release dists/bookworm >"$work/Release" && mv "$work/Release" dists/bookworm/Release)
sign_release "$debian/dists/bookworm"

# NVIDIA's CUDA repository (Debian 12): fabric manager at the 535 driver's versions, and NVLSM.
cuda=$new/cuda/repos/debian12/x86_64
fabricmanager_packages "$cuda" 535.261.03-1
fabricmanager_packages "$cuda" 535.309.01-1
mkdeb "$cuda" nvlsm 2025.06.1-1 amd64 "" "@#!/bin/sh
# STAND-IN NVLSM (NVLink subnet manager): no NVSwitch here.
echo 'nvlsm STAND-IN 2025.06.1':/usr/bin/nvlsm"
flat_repo "$cuda" cuda

mkdir -p "$new/offline/toolkit" "$new/offline/driver"
cp "$stable"/*.deb "$new/offline/toolkit/"
cp "$pool"/contrib/*.deb "$pool"/non-free/*.deb "$pool"/non-free-firmware/*.deb "$new/offline/driver/"

echo "$inputs" >"$new/.stamp"
# One atomic step: renameat2(RENAME_EXCHANGE) swaps the new tree and the old one (a plain rename
# onto an existing directory is impossible), then the old tree, now at the temporary name, goes.
if [ -d "$out" ] && [ ! -L "$out" ]; then
  python3 - "$new" "$out" <<'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
if libc.renameat2(AT_FDCWD, sys.argv[1].encode(), AT_FDCWD, sys.argv[2].encode(), RENAME_EXCHANGE) != 0:
    sys.exit("renameat2: %s" % os.strerror(ctypes.get_errno()))
PY
  rm -rf "$new"
else
  mv -T "$new" "$out"
fi
echo "built test repository $out"
