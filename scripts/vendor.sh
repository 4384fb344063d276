#!/usr/bin/env bash
# Re-fetch the vendored front-end libraries from the npm registry (pinned versions, files unmodified).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fetch() {  # package version files...
  local pkg=$1 version=$2; shift 2
  (cd "$tmp" && npm pack --silent "$pkg@$version" >/dev/null && mkdir -p "$pkg" && tar xzf "$pkg-$version.tgz" -C "$pkg")
  local dest="static/vendor/$pkg-$version"
  mkdir -p "$dest"
  for f in "$@" LICENSE package.json; do cp "$tmp/$pkg/package/$f" "$dest/"; done
}
fetch htmx.org 2.0.8 dist/htmx.min.js
fetch uplot 1.6.32 dist/uPlot.iife.min.js dist/uPlot.min.css
# The API pages (/docs, /redoc): FastAPI's CDN defaults, served from here instead.
fetch swagger-ui-dist 5.32.0 swagger-ui-bundle.js swagger-ui.css NOTICE
fetch redoc 2.5.2 bundles/redoc.standalone.js
# The sweep page: parallel coordinates and the importance bars (uPlot has no parallel coordinates).
fetch echarts 6.1.0 dist/echarts.min.js NOTICE
