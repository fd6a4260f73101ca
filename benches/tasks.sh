#!/usr/bin/env bash
# Durable-task throughput with synchronous = FULL, in one interleaved run on loopback:
#
#   inline  tools/call "echo" (inline), oha                        req/s
#   create  tools/call "noop_task" declaring the Tasks extension, oha  task creations/s
#   get     tasks/get of one existing (completed) task, oha         req/s
#   e2e     taskload: create E2E_N noop tasks, then poll each until completed  tasks/s
#
# Each step also records where the box's CPU went (benches/stepcpu.py: server, load
# generator, others) and so the server's CPU time per request.
#
# Each round runs the four steps back to back at concurrency CONC, with a raw fsync probe
# (benches/fsync_probe.py: SQLite WAL+FULL single-row commits for PROBE_S seconds) right
# before each step, and the load average and the box's CPU busy share noted. After the
# create and e2e steps the script waits until the workers have drained the backlog and
# the janitor has pruned the outbox, so that neither can slow the next step. Ratios create/inline and get/inline are taken within each round, then the median
# over rounds is reported.
#
#   benches/tasks.sh                                   # 3 rounds of 10 s steps at c=64
#   ROUNDS=5 DURATION=5 benches/tasks.sh
#
# Environment: DURATION (10), ROUNDS (3), CONC (64), E2E_N (20000), POLL_MS (50),
# PROBE_S (2), PORT (8104), CONFIG (examples/bench.toml), OUT (results folder),
# CARGO_TARGET_DIR. Needs oha (cargo install oha --locked), curl, python3.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=benches/lib.sh
. "$HERE/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
CONC=${CONC:-64}
E2E_N=${E2E_N:-20000}
POLL_MS=${POLL_MS:-50}
PROBE_S=${PROBE_S:-2}
PORT=${PORT:-8104}
CONFIG=${CONFIG:-$REPO/examples/bench.toml}
OHA=${OHA:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-"${TMPDIR:-/tmp}/taskd-tasks-$STAMP"}
mkdir -p "$OUT"
URL="http://127.0.0.1:$PORT/mcp"

(cd "$REPO" && cargo build --release --bin mcp-taskd)
TASKLOAD=$(bench_bin taskload)
# A copy with its own name, so that a concurrent `pkill mcp-taskd` elsewhere on the box
# cannot stop the server mid-benchmark.
cp "$CARGO_TARGET_DIR/release/mcp-taskd" "$OUT/taskd-bench"

"$OUT/taskd-bench" serve --config "$CONFIG" --listen "127.0.0.1:$PORT" --data-dir "$OUT/data" \
  >"$OUT/server.out" 2>"$OUT/server.log" &
SERVER=$!
cleanup() {
  if kill -0 "$SERVER" 2>/dev/null; then
    kill "$SERVER" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$SERVER" 2>/dev/null && kill -9 "$SERVER" 2>/dev/null || true
  fi
}
trap cleanup EXIT INT TERM
for _ in $(seq 100); do grep -q 'listening on' "$OUT/server.out" 2>/dev/null && break; sleep 0.1; done
grep -q 'listening on' "$OUT/server.out" || { echo "server did not start: $(cat "$OUT/server.log")" >&2; exit 1; }

META_INLINE='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
META_TASKS='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}'
echo '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},'"$META_INLINE"'}}' >"$OUT/inline.json"
echo '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"noop_task","arguments":{},'"$META_TASKS"'}}' >"$OUT/create.json"
COMMON=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream'
        -H 'MCP-Protocol-Version: 2026-07-28')
H_INLINE=("${COMMON[@]}" -H 'Mcp-Method: tools/call' -H 'Mcp-Name: echo')
H_CREATE=("${COMMON[@]}" -H 'Mcp-Method: tools/call' -H 'Mcp-Name: noop_task')

# The task tasks/get reads: created now, polled until completed.
TASK_ID=$(curl -sS "$URL" "${H_CREATE[@]}" --data-binary @"$OUT/create.json" |
  python3 -c 'import json, sys; r = json.load(sys.stdin)["result"]; assert r["resultType"] == "task", r; print(r["taskId"])')
echo '{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"'"$TASK_ID"'",'"$META_TASKS"'}}' >"$OUT/get.json"
H_GET=("${COMMON[@]}" -H 'Mcp-Method: tasks/get' -H "Mcp-Name: $TASK_ID")
for _ in $(seq 100); do
  curl -sS "$URL" "${H_GET[@]}" --data-binary @"$OUT/get.json" >"$OUT/get-check.json"
  grep -q '"status":"completed"' "$OUT/get-check.json" && break
  sleep 0.1
done
{
  echo "=== inline: $(curl -sS "$URL" "${H_INLINE[@]}" --data-binary @"$OUT/inline.json")"
  echo "=== create: $(curl -sS "$URL" "${H_CREATE[@]}" --data-binary @"$OUT/create.json")"
  echo "=== get:    $(cat "$OUT/get-check.json")"
} | tee "$OUT/curl-check.txt"
grep -q '"status":"completed"' "$OUT/get-check.json" || { echo "task $TASK_ID did not complete" >&2; exit 1; }

probe() { python3 "$HERE/fsync_probe.py" "$OUT" "$PROBE_S" >"$1.probe"; }
# Load averages, and the box's CPU busy share over one second while our server is idle
# (other users of the machine).
load() {
  { uptime | sed 's/.*load average: //'
    python3 -c 'import time
def t():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(f), f[3] + f[4]
a = t(); time.sleep(1); b = t()
print("busy=%.0f%%" % (100 * (1 - (b[1] - a[1]) / max(1, b[0] - a[0]))))'
  } >"$1.load"
}
# Jobs not yet completed, and outbox rows the janitor has not pruned yet, from the
# server's metrics page (the server holds its database exclusively while it runs; the
# page's counts are up to a second old, so drain times can read up to a second long).
backlog() {
  curl -sS "http://127.0.0.1:$PORT/metrics" | python3 -c 'import sys
jobs = outbox = 0
for line in sys.stdin:
    if line.startswith("mcp_taskd_jobs{"):
        jobs += int(float(line.split()[-1]))
    elif line.startswith("mcp_taskd_outbox_rows "):
        outbox = int(float(line.split()[-1]))
print(jobs, outbox)'
}
# After a step that created tasks: waits until the workers have completed them all and
# the janitor has pruned the outbox rows they left (it prunes 5,000 a second), so that
# neither can slow the next step. Records the backlog and how long each took.
settle() { # file
  local start jobs outbox drained=""
  start=$(date +%s%N)
  read -r jobs outbox < <(backlog)
  echo "backlog=$jobs" >"$1.drain"
  echo "outbox=$outbox" >>"$1.drain"
  while :; do
    if [ -z "$drained" ] && [ "$jobs" = 0 ]; then
      drained=$(( ($(date +%s%N) - start) / 1000000 ))
      echo "drain_ms=$drained" >>"$1.drain"
    fi
    [ "$jobs" = 0 ] && [ "$outbox" -le 5000 ] && break
    sleep 0.2
    read -r jobs outbox < <(backlog)
  done
  echo "settle_ms=$(( ($(date +%s%N) - start) / 1000000 ))" >>"$1.drain"
}
oha_step() { # file duration headers-array-name body
  local -n hdrs=$3
  python3 "$HERE/stepcpu.py" "$SERVER" "$1.cpu" -- \
    "$OHA" --no-tui -z "$2" -c "$CONC" -m POST "${hdrs[@]}" -D "$4" -w --output-format json "$URL" \
    >"$1.json" 2>"$1.err" || true
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print("%.0f req/s, p99 %.2f ms, codes %s" % (d["summary"]["requestsPerSec"], d["latencyPercentiles"]["p99"] * 1000, d["statusCodeDistribution"]))' "$1.json" 2>/dev/null || echo '?'
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(uname -n)  nproc: $(nproc)"
  echo "commit: $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD || echo '+dirty')"
  echo "settings: DURATION=$DURATION ROUNDS=$ROUNDS CONC=$CONC E2E_N=$E2E_N POLL_MS=$POLL_MS PROBE_S=$PROBE_S"
  echo "config: $CONFIG"
  sed 's/^/  | /' "$CONFIG"
  echo "server: $(cat "$OUT/server.out")"
} | tee "$OUT/run.log"

# Warm-up (not recorded): page cache, statement caches, connections.
oha_step "$OUT/warmup-inline" 3s H_INLINE "$OUT/inline.json" >/dev/null
oha_step "$OUT/warmup-create" 3s H_CREATE "$OUT/create.json" >/dev/null
settle "$OUT/warmup-create"
oha_step "$OUT/warmup-get" 3s H_GET "$OUT/get.json" >/dev/null

for r in $(seq "$ROUNDS"); do
  f="$OUT/r$r"
  load "$f-inline"; probe "$f-inline"
  echo "round $r inline: $(oha_step "$f-inline" "${DURATION}s" H_INLINE "$OUT/inline.json")" | tee -a "$OUT/run.log"
  load "$f-create"; probe "$f-create"
  echo "round $r create: $(oha_step "$f-create" "${DURATION}s" H_CREATE "$OUT/create.json")" | tee -a "$OUT/run.log"
  settle "$f-create"
  echo "round $r settle: $(tr '\n' ' ' <"$f-create.drain")" | tee -a "$OUT/run.log"
  load "$f-get"; probe "$f-get"
  echo "round $r get:    $(oha_step "$f-get" "${DURATION}s" H_GET "$OUT/get.json")" | tee -a "$OUT/run.log"
  load "$f-e2e"; probe "$f-e2e"
  python3 "$HERE/stepcpu.py" "$SERVER" "$f-e2e.cpu" -- \
    "$TASKLOAD" "127.0.0.1:$PORT" e2e "$E2E_N" "$CONC" noop_task "$POLL_MS" >"$f-e2e.e2e" 2>"$f-e2e.err" || true
  echo "round $r e2e:    $(cat "$f-e2e.e2e" "$f-e2e.err")" | tee -a "$OUT/run.log"
  settle "$f-e2e"
done

awk '/^VmHWM:/{print "server peak RSS (VmHWM): " $2 " kB"}' "/proc/$SERVER/status" | tee "$OUT/peak-rss.txt"
ls -l "$OUT/data" >"$OUT/data-files.txt"
python3 "$HERE/summarize_tasks.py" "$OUT" | tee "$OUT/summary.txt"
echo "results: $OUT (run.log, summary.txt)"
