#!/usr/bin/env bash
# Refresh the page's third-party files (localspec/server/ui/vendor/) from npm: the pinned versions
# below, their built ES modules and their licences, nothing else. Bump a version here, run
# `make ui-vendor`, look at the page, commit the result.
set -euo pipefail

MARKED=18.2.1           # Markdown -> HTML
DOMPURIFY=3.5.0         # sanitises that HTML before it reaches the page
HIGHLIGHTJS=11.12.0     # code highlighting (@highlightjs/cdn-assets: the built ES module, common languages)

cd "$(dirname "$0")/.."
DEST=localspec/server/ui/vendor
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

(cd "$TMP" && npm pack --silent "marked@$MARKED" "dompurify@$DOMPURIFY" "@highlightjs/cdn-assets@$HIGHLIGHTJS" >/dev/null)
for pkg in marked dompurify highlightjs-cdn-assets; do
    mkdir -p "$TMP/$pkg"
    tar -xzf "$TMP/$pkg"-*.tgz -C "$TMP/$pkg" --strip-components=1
done

rm -rf "$DEST"
mkdir -p "$DEST"
# the source maps are not shipped: drop the comment that points at them (devtools would ask for it)
strip_map() { sed '/^\/\/# sourceMappingURL=/d' "$1" > "$2"; }
strip_map "$TMP/marked/lib/marked.esm.js" "$DEST/marked.esm.js"
cp "$TMP/marked/LICENSE" "$DEST/marked.LICENSE.txt"
strip_map "$TMP/dompurify/dist/purify.es.mjs" "$DEST/purify.es.mjs"
cp "$TMP/dompurify/LICENSE" "$DEST/dompurify.LICENSE.txt"  # dual-licensed: Apache-2.0 or MPL-2.0
cp "$TMP/dompurify/LICENSE-MPL" "$DEST/dompurify.LICENSE-MPL.txt"
strip_map "$TMP/highlightjs-cdn-assets/es/highlight.min.js" "$DEST/highlight.min.js"
cp "$TMP/highlightjs-cdn-assets/LICENSE" "$DEST/highlightjs.LICENSE.txt"

cat > "$DEST/VERSIONS.txt" <<VERSIONS
Vendored by tools/vendor_ui.sh from npm; do not edit these files by hand.
marked@$MARKED: marked.esm.js (MIT)
dompurify@$DOMPURIFY: purify.es.mjs (Apache-2.0 or MPL-2.0)
@highlightjs/cdn-assets@$HIGHLIGHTJS: highlight.min.js (BSD-3-Clause)
VERSIONS
ls -l "$DEST"
