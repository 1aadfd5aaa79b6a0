#!/usr/bin/env bash
# Fetch Debian packages of several releases into .cache/testbed without touching
# the system's apt state: a private sources list, lists and cache.
#   debian-archive.sh PACKAGE RELEASE...   -> .cache/testbed/PACKAGE-RELEASE/ (dpkg -x tree)
set -euo pipefail
# Parallel test workers share the cache this script fills: one run at a time.
exec 9<"$0"
flock 9
here=$(cd "$(dirname "$0")/../.." && pwd)
D=${TESTBED_DIR:-$here/.cache/testbed}
pkg=$1; shift
mkdir -p "$D/apt/lists/partial" "$D/apt/cache/archives/partial" "$D/debs"
if [ ! -s "$D/apt/sources.list" ]; then
  for rel in bookworm trixie sid; do
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $rel main"
  done > "$D/apt/sources.list"
fi
# The package cache is kept beside the lists (pkgcache.bin): a machine whose apt keeps none (Docker's
# docker-clean sets the names empty) would parse three releases' lists again in every call, about 3 CPU s each.
O=(-o "Dir::Etc::SourceList=$D/apt/sources.list" -o Dir::Etc::SourceParts=- -o "Dir::State::Lists=$D/apt/lists"
   -o "Dir::Cache=$D/apt/cache" -o Dir::Cache::pkgcache=pkgcache.bin -o Dir::Cache::srcpkgcache=srcpkgcache.bin
   -o Debug::NoLocking=1 -o APT::Get::List-Cleanup=0)
# Refresh the private lists at most once a day.
if [ -z "$(find "$D/apt/lists" -maxdepth 1 -name '*Packages*' -mtime -1 -print -quit)" ]; then
  apt-get "${O[@]}" -qq update
fi
for rel in "$@"; do
  dest="$D/$pkg-$rel"
  [ -e "$dest/.done" ] && continue
  ver=$(apt-cache "${O[@]}" madison "$pkg" | awk -v r="$rel" -F' *\\| *' '$3 ~ "debian " r "/main" {print $2; exit}')
  [ -n "$ver" ] || { echo "no $pkg in $rel" >&2; exit 1; }
  (cd "$D/debs" && apt-get "${O[@]}" -qq download "$pkg=$ver")
  rm -rf "$dest"; mkdir -p "$dest"
  dpkg -x "$D/debs/${pkg}_${ver//:/%3a}_"*.deb "$dest"
  echo "$ver" > "$dest/.done"
  echo "$pkg $rel: $ver -> $dest"
done
