#!/usr/bin/env bash
# book.sh: builds the manual (the mdBook in docs/: docs/book.toml, docs/SUMMARY.md) with
# the pinned mdbook, installed once under the CI cache, into target/book; then checks
# every internal link of the book and of README.md (.ci/links.py: the file exists, the
# #fragment is a heading of it, every docs/*.md page is in SUMMARY.md). Fails on either.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.5.4
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/mcp-taskd-ci"
ROOT_DIR="$CACHE/mdbook-$VERSION"
MDBOOK="$ROOT_DIR/bin/mdbook"
if [ ! -x "$MDBOOK" ] || [ "$("$MDBOOK" --version)" != "mdbook v$VERSION" ]; then
  # No default features: no `serve`/`watch` (their web server and file watcher).
  nice cargo install mdbook --version "$VERSION" --locked --no-default-features \
    --root "$ROOT_DIR" --quiet
fi
rm -rf target/book
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# A warning (a page it cannot read, a link it cannot resolve) fails the build too.
if ! "$MDBOOK" build docs >"$log" 2>&1 || grep -Eq 'WARN|ERROR' "$log"; then
  cat "$log" >&2
  echo "book: mdbook failed or warned" >&2
  exit 1
fi
[ -f target/book/index.html ] || { echo "book: mdbook built nothing" >&2; exit 1; }
python3 .ci/links.py
echo "book: target/book, $(find target/book -name '*.html' | wc -l) pages, links clean"
