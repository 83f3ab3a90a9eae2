#!/usr/bin/env bash
# Rebuilds static/vendor from the versions pinned in package-lock.json.
# go build never needs this: the results are committed and embedded.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund --ignore-scripts
out=../vendor
mkdir -p "$out"
cp node_modules/htmx.org/dist/htmx.min.js "$out/htmx.min.js"
# htmx 4's own SSE extension (hx-sse:connect), for the admin dashboard.
cp node_modules/htmx.org/dist/ext/hx-sse.min.js "$out/hx-sse.min.js"
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

# xterm.js and its fit addon, as one classic script that defines
# window.AtelierXterm (see xterm.js here). Three changes on the way, all for
# the pages' CSP (see the top of xterm.js): xterm.css is bundled as text for
# a constructable sheet; xterm's three <style> elements become
# <atelier-xterm-style> ones, whose text goes to adopted sheets; and its one
# setAttribute("style", ...) becomes a CSSOM assignment. The build stops if
# that code is not found as expected, e.g. after a version change.
node - "$out/xterm.min.js" <<'JS'
const fs = require("fs");
const esbuild = require("esbuild");
const csp = {
  name: "csp",
  setup(build) {
    build.onLoad({ filter: /[\\/]@xterm[\\/]xterm[\\/]lib[\\/]xterm\.mjs$/ }, (args) => {
      const src = fs.readFileSync(args.path, "utf8");
      const re = /_addStyle\((\w+),(\w+)\)\{\1\.setAttribute\("style",`\$\{\1\.getAttribute\("style"\)\|\|""\}\$\{\2\};`\)\}/g;
      const found = src.match(re) || [];
      if (found.length !== 1) throw new Error("xterm: expected one _addStyle to patch, found " + found.length);
      let out = src.replace(re, (_, el, css) => `_addStyle(${el},${css}){${el}.style.cssText+=${css}+";"}`);
      if (/setAttribute\(\s*["']style["']/.test(out)) throw new Error("xterm: another setAttribute(\"style\") is left");
      const styles = out.split('createElement("style")').length - 1;
      if (styles !== 3) throw new Error("xterm: expected three <style> elements to replace, found " + styles);
      out = out.split('createElement("style")').join('createElement("atelier-xterm-style")');
      if (/["'`]style["'`]\s*\)/.test(out.replace(/getAttribute\("style"\)/g, ""))) {
        throw new Error("xterm: another way of making a <style> element is left");
      }
      return { contents: out, loader: "js" };
    });
    build.onLoad({ filter: /[\\/]@xterm[\\/]xterm[\\/]css[\\/]xterm\.css$/ }, (args) => {
      const css = fs.readFileSync(args.path, "utf8")
        .replace(/\/\*[\s\S]*?\*\//g, "")
        .replace(/\s+/g, " ")
        .replace(/\s*([{};,>])\s*/g, "$1")
        .trim();
      return { contents: css, loader: "text" };
    });
  },
};
esbuild.build({
  entryPoints: ["xterm.js"],
  bundle: true,
  format: "iife",
  minify: true,
  target: "es2020",
  legalComments: "none",
  charset: "utf8",
  outfile: process.argv[2],
  plugins: [csp],
  logLevel: "warning",
}).catch(() => process.exit(1));
JS

# Both packages are MIT-licensed, with their own copyright lines.
node - > "$out/xterm.LICENSE" <<'JS'
const fs = require("fs");
const parts = [
  "static/vendor/xterm.min.js is built by static/build/vendor.sh from",
  "static/build/xterm.js and these packages:",
  "",
];
const texts = [];
for (const name of ["@xterm/xterm", "@xterm/addon-fit"]) {
  const dir = "node_modules/" + name + "/";
  const pkg = JSON.parse(fs.readFileSync(dir + "package.json", "utf8"));
  if (pkg.license !== "MIT") throw new Error(name + " is not MIT-licensed: " + pkg.license);
  parts.push("  " + name + " " + pkg.version);
  texts.push("", "---- " + name + " " + pkg.version + " ----", "", fs.readFileSync(dir + "LICENSE", "utf8").trim());
}
process.stdout.write(parts.concat(texts, [""]).join("\n"));
JS
echo "static/vendor updated"
