#!/usr/bin/env bash
# axe-core, the accessibility checker the browser tests run on every page they open (tests/browser.py), from the
# npm registry (pinned, unmodified) into the virtual environment: a test tool, not shipped with the dashboard.
set -euo pipefail
cd "$(dirname "$0")/.."
version=4.10.3
dest="${VENV:-.venv}/axe-core-$version"
[ -f "$dest/axe.min.js" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "axe-core@$version" >/dev/null && tar xzf "axe-core-$version.tgz")
mkdir -p "$dest"
cp "$tmp/package/axe.min.js" "$tmp/package/LICENSE" "$tmp/package/package.json" "$dest/"
