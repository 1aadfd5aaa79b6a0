#!/usr/bin/env bash
# `make galaxy-import`: build the collection tarball and check it the way Galaxy does on upload,
# with galaxy-importer (PyPI) in its own venv (it pins its own ansible-core and ansible-lint).
# Fails when the importer reports an error.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
venv=.cache/importer-venv
pin="galaxy-importer==0.4.44"
# The same Python as the project venv's; the venv is built again when the pin or that Python changes.
python=$(tests/testbed/venv-python.sh)
stamp="$pin on $python, $("$python" -VV 2>&1)"
if [ "$(cat "$venv/.pin" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "$pin" >.cache/importer-pip.log 2>&1 || {
    tail -20 .cache/importer-pip.log; echo "installing $pin failed (log: .cache/importer-pip.log)"; exit 1; }
  echo "$stamp" > "$venv/.pin"
fi

out=.cache/galaxy-import
rm -rf "$out" && mkdir -p "$out"
"$venv/bin/ansible-galaxy" collection build --output-path "$out" . >/dev/null
tarball=$(ls "$out"/*.tar.gz)

start=$(date +%s)
# HOME under .cache: ansible-lint and ansible-doc write caches there; the user's own config is not read.
# Run from $out: the importer writes importer_result.json into the current directory.
(cd "$out" && env -u ANSIBLE_CONFIG -u ANSIBLE_COLLECTIONS_PATH \
  GALAXY_IMPORTER_CONFIG="$repo/tests/galaxy/importer.cfg" HOME="$repo/$out/home" PATH="$repo/$venv/bin:$PATH" \
  "$repo/$venv/bin/python" -m galaxy_importer.main --print-result "$repo/$tarball") >"$out/import.log" 2>&1 || {
    cat "$out/import.log"; echo "galaxy-importer failed on $tarball"; exit 1; }
# The importer reports most findings as log lines and still exits 0: any ERROR fails the check, also
# one it relays inside a WARNING line (ansible-lint's own errors arrive as "WARNING: ERROR ...").
# The full log stays in $out/import.log; only findings are printed. The result JSON that ends the log
# (from a line "{" on) quotes the docs, whose words are not findings.
if sed '/^{$/,$d' "$out/import.log" | grep -E '\bERROR\b'; then
  echo "galaxy-importer reported errors for $tarball (full log: $out/import.log)"; exit 1
fi
echo "galaxy-importer: $tarball imports cleanly ($(( $(date +%s) - start )) s; $(sed '/^{$/,$d' "$out/import.log" | grep -c '^WARNING') warnings, log: $out/import.log)"
