#!/usr/bin/env bash
# Rebuilds static/vendor from the versions pinned in package-lock.json.
# go build never needs this: the results are committed and embedded.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --ignore-scripts
out=../vendor
mkdir -p "$out"
cp node_modules/htmx.org/dist/htmx.min.js "$out/htmx.min.js"
cp node_modules/htmx.org/LICENSE "$out/htmx.LICENSE"
echo "static/vendor updated"
