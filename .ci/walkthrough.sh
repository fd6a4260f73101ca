#!/usr/bin/env bash
# walkthrough.sh BINARY: what a person does with a fresh mcp-taskd, with curl, as the
# README shows it; .ci/arm64.sh runs it on the cross-built binaries under qemu-user.
#   1. `serve` on the embedded default (no --config), from an empty directory;
#   2. an inline call (echo);
#   3. a task created, polled to completed (generate_report), and one cancelled while
#      it waits for input (approve_deployment);
#   4. a command tool (examples/commands.toml's report.sh, as a task);
#   5. kill -9 during work, a restart on the same data dir: every acknowledged task is
#      still there, and the one in flight completes after the restart.
# Prints one line a step; exits non-zero at the first step that fails.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BINARY="$(realpath "${1:?usage: .ci/walkthrough.sh BINARY}")"
WORK="$(mktemp -d -t mcp-taskd-walk-XXXXXX)"
SERVER=""
BASE=""
stop() { # stop [SIGNAL]: stops the server
  if [ -n "$SERVER" ]; then
    kill "-${1:-TERM}" "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    SERVER=""
  fi
}
trap 'stop KILL; rm -rf "$WORK"' EXIT
fail() {
  echo "walkthrough: $*" >&2
  [ -f "$WORK/server.err" ] && tail -n 20 "$WORK/server.err" | sed 's/^/    | /' >&2
  exit 1
}
step() { echo "walkthrough: $* ($SECONDS s)"; }

start() { # start [ARGS...]: serve from $WORK on a free port, waits for the address line
  (cd "$WORK" && exec "$BINARY" serve --listen 127.0.0.1:0 "$@") \
    >"$WORK/server.out" 2>>"$WORK/server.err" &
  SERVER=$!
  BASE=""
  for _ in $(seq 600); do # emulated start-up is slow: up to 60 s
    BASE="$(sed -n 's#^mcp-taskd listening on \(http://[^/]*\)/mcp$#\1#p' "$WORK/server.out")"
    [ -n "$BASE" ] && break
    kill -0 "$SERVER" 2>/dev/null || fail "the server exited at start-up"
    sleep 0.1
  done
  [ -n "$BASE" ] || fail "the server did not print its address"
  curl -sf "$BASE/healthz" >/dev/null || fail "/healthz did not answer 200"
}

META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{},"extensions":{"io.modelcontextprotocol/tasks":{}}}}'
PLAIN='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
mcp() { # mcp METHOD NAME PARAMS: one MCP request, its answer on stdout
  curl -sS --max-time 60 "$BASE/mcp" \
    -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' \
    -H 'MCP-Protocol-Version: 2026-07-28' \
    -H "Mcp-Method: $1" -H "Mcp-Name: $2" \
    -d '{"jsonrpc":"2.0","id":1,"method":"'"$1"'","params":'"$3"'}'
}
task_id() { sed -n 's/.*"taskId":"\([^"]*\)".*/\1/p'; }
status_of() { mcp tasks/get "$1" '{"taskId":"'"$1"'",'"$META"'}'; }
# wait_status TASK REGEX: polls tasks/get until the status matches; prints the answer.
wait_status() {
  local answer
  for _ in $(seq 300); do
    answer="$(status_of "$1")"
    if grep -Eq '"status":"('"$2"')"' <<<"$answer"; then
      printf '%s' "$answer"
      return 0
    fi
    sleep 0.2
  done
  fail "task $1 never reached $2; last answer: $answer"
}

step "1. serve on the embedded default ($("$BINARY" --version))"
start
[ -d "$WORK/mcp-taskd-data" ] || fail "no ./mcp-taskd-data under the working directory"

step "2. an inline call"
answer="$(mcp tools/call echo '{"name":"echo","arguments":{"text":"hello edge"},'"$PLAIN"'}')"
grep -q '"text":"hello edge"' <<<"$answer" || fail "echo answered: $answer"

step "3. a task created, polled and completed; one cancelled"
report="$(mcp tools/call generate_report '{"name":"generate_report","arguments":{"topic":"edge","sections":2},'"$META"'}' | task_id)"
[ -n "$report" ] || fail "generate_report gave no task handle"
answer="$(wait_status "$report" 'completed|failed|cancelled')"
grep -q '"status":"completed"' <<<"$answer" || fail "generate_report ended: $answer"
approval="$(mcp tools/call approve_deployment '{"name":"approve_deployment","arguments":{"service":"api","version":"1.0.0"},'"$META"'}' | task_id)"
[ -n "$approval" ] || fail "approve_deployment gave no task handle"
wait_status "$approval" input_required >/dev/null
answer="$(mcp tasks/cancel "$approval" '{"taskId":"'"$approval"'",'"$META"'}')"
grep -q '"result"' <<<"$answer" || fail "tasks/cancel answered: $answer"
answer="$(wait_status "$approval" 'completed|failed|cancelled')"
grep -q '"status":"cancelled"' <<<"$answer" || fail "the cancelled task ended: $answer"
stop

step "4. a command tool (examples/commands.toml: report.sh)"
start --config "$ROOT/examples/commands.toml" --data-dir "$WORK/commands-data"
command_task="$(mcp tools/call report '{"name":"report","arguments":{"topic":"edge","sections":1},'"$META"'}' | task_id)"
[ -n "$command_task" ] || fail "report gave no task handle"
answer="$(wait_status "$command_task" 'completed|failed|cancelled')"
grep -q '"structuredContent":{"topic":"edge","sections":1}' <<<"$answer" ||
  fail "report ended: $answer"
stop

step "5. kill -9 during work, restart, nothing lost"
start
done_ids=()
for n in 1 2 3; do
  id="$(mcp tools/call generate_report '{"name":"generate_report","arguments":{"topic":"t'"$n"'","sections":1},'"$META"'}' | task_id)"
  [ -n "$id" ] || fail "task $n: no handle"
  done_ids+=("$id")
done
for id in "${done_ids[@]}"; do wait_status "$id" completed >/dev/null; done
inflight="$(mcp tools/call generate_report '{"name":"generate_report","arguments":{"topic":"crash","sections":4},'"$META"'}' | task_id)"
[ -n "$inflight" ] || fail "the in-flight task: no handle"
wait_status "$inflight" working >/dev/null
stop KILL
start
for id in "${done_ids[@]}"; do
  grep -q '"status":"completed"' <<<"$(status_of "$id")" || fail "task $id was lost by the restart"
done
answer="$(wait_status "$inflight" 'completed|failed|cancelled')"
grep -q '"status":"completed"' <<<"$answer" || fail "the task in flight at kill -9 ended: $answer"
stop
step "done: 5 steps passed"
