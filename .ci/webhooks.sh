#!/usr/bin/env bash
# webhooks.sh: installs, once, the Standard Webhooks reference verifier from PyPI
# (`standardwebhooks`, pinned) into a venv in a cache folder outside the repository
# (default ~/.cache/mcp-taskd-webhooks; set MCP_TASKD_WEBHOOKS_HOME to move it), and
# prints the venv's python. tests/webhooks.rs verifies every delivery with it
# (tests/scripts/webhook_receiver.py), so that the signatures are checked by a real
# verifier, not by mcp-taskd's own code. Re-running is cheap: the venv is rebuilt only
# when the pin changes.
set -euo pipefail
SPEC="standardwebhooks==1.3.0"
HOME_DIR="${MCP_TASKD_WEBHOOKS_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/mcp-taskd-webhooks}"
PYTHON="${PYTHON:-python3}"
VENV="$HOME_DIR/venv"
if [ "$(cat "$VENV/.pinned" 2>/dev/null)" != "$SPEC" ]; then
  rm -rf "$VENV"
  mkdir -p "$HOME_DIR"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps $SPEC >&2
  echo "$SPEC" >"$VENV/.pinned"
fi
echo "$VENV/bin/python"
