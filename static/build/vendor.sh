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

# CodeMirror 6 and the languages editor.js imports, as one classic script
# that defines window.AtelierEditor. esbuild's own binary comes from its
# platform package (an optional dependency), so --ignore-scripts is fine.
meta=$(mktemp)
trap 'rm -f "$meta"' EXIT
node_modules/.bin/esbuild editor.js \
  --bundle --format=iife --minify --target=es2020 \
  --legal-comments=none --charset=utf8 --metafile="$meta" \
  --outfile="$out/codemirror.min.js"

# The licence file names every package that ended up in the bundle with
# its copyright line; they all share the MIT text that follows.
node - "$meta" > "$out/codemirror.LICENSE" <<'JS'
const fs = require("fs");
const meta = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const names = new Set();
for (const file of Object.keys(meta.inputs)) {
  const m = file.match(/node_modules\/((?:@[^/]+\/)?[^/]+)\//);
  if (m) names.add(m[1]);
}
const lines = [
  "static/vendor/codemirror.min.js is built by static/build/vendor.sh from",
  "static/build/editor.js and these packages:",
  "",
];
const notices = new Set();
for (const name of [...names].sort()) {
  const dir = "node_modules/" + name + "/";
  const pkg = JSON.parse(fs.readFileSync(dir + "package.json", "utf8"));
  if (pkg.license !== "MIT") throw new Error(name + " is not MIT-licensed: " + pkg.license);
  const text = fs.readFileSync(dir + "LICENSE", "utf8");
  const notice = text.split("\n").find((l) => /^copyright/i.test(l.trim()));
  lines.push("  " + name + " " + pkg.version);
  if (notice) notices.add(notice.trim());
}
const mit = fs.readFileSync("node_modules/codemirror/LICENSE", "utf8")
  .split("\n").filter((l) => !/^copyright/i.test(l.trim())).join("\n")
  .replace(/^MIT License\n+/, "");
lines.push("", "MIT License", "", ...[...notices].sort(), "", mit.trim(), "");
process.stdout.write(lines.join("\n"));
JS
echo "static/vendor updated"
