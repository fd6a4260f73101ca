#!/usr/bin/env bash
# What an open dashboard costs end-to-end task throughput, in one interleaved run on
# loopback (issue 17: under 5%, as the same-run ratio with/without).
#
#   without  taskload: create E2E_N noop tasks, then poll each until completed   tasks/s
#   with     the same, while benches/dashpoll.py does what the open page does:
#            once a second GET {path}/api/overview and {path}/api/tasks?limit=25
#
# Each round runs both steps, the order alternating per round (odd rounds: without
# first), on one server with synchronous = FULL (examples/bench.toml). After each step the
# script waits until the workers have drained the backlog and the janitor has pruned the
# outbox, as benches/tasks.sh does. It prints per-round figures, the medians, the median
# of the per-round ratios with/without, and the poller's own request latency.
#
#   benches/dashboard.sh                       # 3 rounds, 80,000 tasks a step; ~3.5 min
#   ROUNDS=5 E2E_N=20000 benches/dashboard.sh
#
# Then, on the idle server, the CPU time the poller alone costs per second (IDLE_S, 20 s
# without and 20 s with it).
#
# Environment: ROUNDS (3), E2E_N (80000), IDLE_S (20), CONC (64), POLL_MS (50), PORT (8105),
# DASH_PATH (/dashboard), CONFIG (examples/bench.toml), BIN (a built mcp-taskd; default:
# build the release binary), OUT (results folder), CARGO_TARGET_DIR. Needs curl, python3.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=benches/lib.sh
. "$HERE/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
ROUNDS=${ROUNDS:-3}
E2E_N=${E2E_N:-80000}
CONC=${CONC:-64}
POLL_MS=${POLL_MS:-50}
PORT=${PORT:-8105}
IDLE_S=${IDLE_S:-20}
DASH_PATH=${DASH_PATH:-/dashboard}
CONFIG=${CONFIG:-$REPO/examples/bench.toml}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-"${TMPDIR:-/tmp}/taskd-dashboard-$STAMP"}
mkdir -p "$OUT"
BASE="http://127.0.0.1:$PORT"

if [ -z "${BIN:-}" ]; then
  (cd "$REPO" && cargo build --release --bin mcp-taskd)
  BIN="$CARGO_TARGET_DIR/release/mcp-taskd"
fi
TASKLOAD=$(bench_bin taskload)
# A copy with its own name, so that a concurrent `pkill mcp-taskd` elsewhere on the box
# cannot stop the server mid-benchmark.
cp "$BIN" "$OUT/taskd-bench"

"$OUT/taskd-bench" serve --config "$CONFIG" --listen "127.0.0.1:$PORT" --data-dir "$OUT/data" \
  >"$OUT/server.out" 2>"$OUT/server.log" &
SERVER=$!
POLLER=""
stop_poller() {
  if [ -n "$POLLER" ]; then
    kill "$POLLER" 2>/dev/null || true
    wait "$POLLER" 2>/dev/null || true
    POLLER=""
  fi
}
cleanup() {
  stop_poller
  if kill -0 "$SERVER" 2>/dev/null; then
    kill "$SERVER" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$SERVER" 2>/dev/null && kill -9 "$SERVER" 2>/dev/null || true
  fi
}
trap cleanup EXIT INT TERM
for _ in $(seq 100); do grep -q 'listening on' "$OUT/server.out" 2>/dev/null && break; sleep 0.1; done
grep -q 'listening on' "$OUT/server.out" || { echo "server did not start: $(cat "$OUT/server.log")" >&2; exit 1; }

# The dashboard must answer without a login (loopback, no tokens in the config).
for api in overview "tasks?limit=25"; do
  code=$(curl -sS -o "$OUT/check-$api.json" -w '%{http_code}' -H 'Accept: application/json' \
    "$BASE$DASH_PATH/api/$api")
  [ "$code" = 200 ] || { echo "dashboard api/$api answered $code: $(cat "$OUT/check-$api.json")" >&2; exit 1; }
done

# Jobs not yet completed, and outbox rows the janitor has not pruned yet, from the
# server's metrics page (as in benches/tasks.sh).
backlog() {
  curl -sS "$BASE/metrics" | python3 -c 'import sys
jobs = outbox = 0
for line in sys.stdin:
    if line.startswith("mcp_taskd_jobs{"):
        jobs += int(float(line.split()[-1]))
    elif line.startswith("mcp_taskd_outbox_rows "):
        outbox = int(float(line.split()[-1]))
print(jobs, outbox)'
}
settle() {
  local jobs outbox
  read -r jobs outbox < <(backlog)
  until [ "$jobs" = 0 ] && [ "$outbox" -le 5000 ]; do
    sleep 0.2
    read -r jobs outbox < <(backlog)
  done
}
e2e() { # file
  "$TASKLOAD" "127.0.0.1:$PORT" e2e "$E2E_N" "$CONC" noop_task "$POLL_MS" >"$1.e2e" 2>"$1.err" || true
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print("%.0f tasks/s (%.2f s)" % (d["tasks_per_s"], d["complete_s"]))' \
    "$1.e2e" 2>/dev/null || echo "? $(cat "$1.err")"
}
step() { # round kind
  local f="$OUT/r$1-$2"
  uptime | sed 's/.*load average: //' >"$f.load"
  if [ "$2" = with ]; then
    python3 "$HERE/dashpoll.py" poll "$BASE$DASH_PATH" "$f.poll" &
    POLLER=$!
    sleep 1 # the page is open before the load starts
  fi
  local result
  result=$(e2e "$f")
  stop_poller
  echo "round $1 $(printf '%-7s' "$2"): $result  load $(cat "$f.load")" | tee -a "$OUT/run.log"
  settle
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(uname -n)  nproc: $(nproc)"
  echo "commit: $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD || echo '+dirty')"
  echo "settings: ROUNDS=$ROUNDS E2E_N=$E2E_N CONC=$CONC POLL_MS=$POLL_MS DASH_PATH=$DASH_PATH"
  echo "config: $CONFIG"
  echo "server: $(cat "$OUT/server.out")"
} | tee "$OUT/run.log"

# Warm-up (not recorded): page cache, statement caches, connections.
e2e "$OUT/warmup" >/dev/null
settle

for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="without with"; else order="with without"; fi
  for kind in $order; do step "$r" "$kind"; done
done

echo "load after: $(uptime | sed 's/.*load average: //')" | tee -a "$OUT/run.log"

# The poller's cost in server CPU, which load on a shared box cannot blur: the idle
# server's CPU time over IDLE_S seconds, without and then with the poller.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }
idle_cpu() { # kind
  local a b
  if [ "$1" = with ]; then
    python3 "$HERE/dashpoll.py" poll "$BASE$DASH_PATH" "$OUT/idle.poll" &
    POLLER=$!
  fi
  a=$(cpu_ticks); sleep "$IDLE_S"; b=$(cpu_ticks)
  stop_poller
  echo $(( (b - a) * 1000 / $(getconf CLK_TCK) ))
}
without_ms=$(idle_cpu without)
with_ms=$(idle_cpu with)
echo "idle server CPU over ${IDLE_S} s: ${without_ms} ms without the dashboard, ${with_ms} ms with it" \
  "($(( (with_ms - without_ms) / IDLE_S )) ms of CPU per poll second)" | tee -a "$OUT/run.log"
python3 "$HERE/dashpoll.py" summary "$OUT" | tee "$OUT/summary.txt"
echo "results: $OUT (run.log, summary.txt)"
