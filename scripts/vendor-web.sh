#!/usr/bin/env bash
# Refreshes the web page's libraries in specli/serve/web/static/vendor/ from the npm
# registry, at the versions pinned here, with their licences. The page has no build step:
# these files are committed and shipped in the package as they come from npm.
set -euo pipefail
cd "$(dirname "$0")/.."
MARKED=18.3.0 DOMPURIFY=3.5.0 HLJS=11.12.0 UPLOT=1.6.32
LANGS="bash c cpp css diff go java javascript json markdown plaintext python rust shell sql typescript xml yaml"
out=specli/serve/web/static/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "marked@$MARKED" "dompurify@$DOMPURIFY" "@highlightjs/cdn-assets@$HLJS" \
    "uplot@$UPLOT" >/dev/null)
for f in "$work"/*.tgz; do d="$work/$(basename "$f" .tgz)"; mkdir -p "$d"; tar xzf "$f" -C "$d"; done
rm -rf "$out"; mkdir -p "$out/highlight/languages" "$out/licenses"
cp "$work/marked-$MARKED/package/lib/marked.umd.js" "$out/marked.umd.js"
cp "$work/marked-$MARKED/package/LICENSE.md" "$out/licenses/marked.md" 2>/dev/null \
    || cp "$work/marked-$MARKED/package/LICENSE" "$out/licenses/marked.txt"
cp "$work/dompurify-$DOMPURIFY/package/dist/purify.min.js" "$out/purify.min.js"
cp "$work/dompurify-$DOMPURIFY/package/LICENSE" "$out/licenses/dompurify.txt"
h="$work/highlightjs-cdn-assets-$HLJS/package"
cp "$h/es/core.min.js" "$out/highlight/core.min.js"
for l in $LANGS; do cp "$h/es/languages/$l.min.js" "$out/highlight/languages/"; done
cp "$h/styles/github.min.css" "$out/highlight/github.min.css"
cp "$h/styles/github-dark.min.css" "$out/highlight/github-dark.min.css"
cp "$h/LICENSE" "$out/licenses/highlight.js.txt"
cp "$work/uplot-$UPLOT/package/dist/uPlot.iife.min.js" "$work/uplot-$UPLOT/package/dist/uPlot.min.css" "$out/"
cp "$work/uplot-$UPLOT/package/LICENSE" "$out/licenses/uplot.txt"
cat > "$out/README.md" <<EOM
# The web page's libraries, from the npm registry (scripts/vendor-web.sh refreshes them)

| library | version | licence | files |
|---|---|---|---|
| marked | $MARKED | MIT | marked.umd.js |
| dompurify | $DOMPURIFY | MPL-2.0 OR Apache-2.0 | purify.min.js |
| @highlightjs/cdn-assets | $HLJS | BSD-3-Clause | highlight/ (core and: $LANGS) |
| uplot | $UPLOT | MIT | uPlot.iife.min.js, uPlot.min.css |

Each library's licence is in licenses/.
EOM
du -cb "$out" | tail -1
