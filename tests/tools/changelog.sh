#!/usr/bin/env bash
# `make changelog`: lint the fragments, then write CHANGELOG.md with antsibull-changelog.
# Until a release is cut (`antsibull-changelog release` in the checkout, which moves the fragments into
# changelogs/changelog.yaml), CHANGELOG.md previews the version in galaxy.yml from the fragments: the
# release is made in a scratch copy and only its CHANGELOG.md comes back.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
bin=${VENV:-$repo/.venv}/bin
"$bin/antsibull-changelog" lint
if ! ls changelogs/fragments/*.y*ml >/dev/null 2>&1; then
  PATH=$bin:$PATH ANSIBLE_COLLECTIONS_PATH=$repo/.cache/collections "$bin/antsibull-changelog" generate
  exit 0
fi
scratch=$repo/.cache/changelog/ansible_collections/gpunode/nvidia
rm -rf "$repo/.cache/changelog" && mkdir -p "$scratch"
git ls-files -z --cached --others --exclude-standard | tar -c --null -T - -f - | tar -x -f - -C "$scratch"
version=$("$bin/python" -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["version"])')
(cd "$scratch" && PATH=$bin:$PATH ANSIBLE_COLLECTIONS_PATH=$repo/.cache/changelog \
  "$bin/antsibull-changelog" release --version "$version" --date "$(date -u +%F)")
cp "$scratch/CHANGELOG.md" CHANGELOG.md
echo "CHANGELOG.md: $version previewed from changelogs/fragments"
