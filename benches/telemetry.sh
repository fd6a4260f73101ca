#!/usr/bin/env bash
# Issue 33: what telemetry costs, side by side in one run. For each mode, on a fresh
# server (examples/bench.toml, fresh data dir): inline `tools/call echo` calls/s
# (benches/eraload.rs, modern era) and `noop_task` creations/s (benches/taskload.rs
# create), each at CONC connections. Modes, interleaved round by round:
#   off   no [telemetry]: the default
#   on    [telemetry] otlp_endpoint = a local OTLP/HTTP collector that reads each batch
#         whole and discards it (benches/otlpsink.rs: on a 2-core box a collector that
#         decodes, or a Python one that only reads, takes CPU from the server measured)
#   down  [telemetry] otlp_endpoint = a port nothing listens on
#   before  with BEFORE=<binary>: that build (one from before telemetry existed, e.g.
#         7393758) with no [telemetry], for "off is within noise of before"
# Clients send no traceparent: every request starts a trace, and the default sampler
# records it (parentbased_always_on), the costliest case. Besides the rates, the
# server's own CPU time (utime + stime of /proc/PID/stat) per inline call and per task
# (its creation and its run): on this box the collector shares the cores, so the rates
# also pay for the collector; the CPU per operation is the server's cost alone.
#
#   cargo build --release && cargo bench --no-run --bench eraload --bench taskload --bench otlpsink
#   benches/telemetry.sh [target/release/mcp-taskd]
#
# Environment: ROUNDS (3), INLINE_SECONDS (5), N (20000, creations), CONC (64).
# (Not SECONDS: bash keeps its own SECONDS, the shell's age, so it is always set.)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-$REPO/target/release/mcp-taskd}
ROUNDS=${ROUNDS:-3}
BEFORE=${BEFORE:-}
INLINE_SECONDS=${INLINE_SECONDS:-5}
N=${N:-20000}
CONC=${CONC:-64}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
bench_bin() { find "$REPO/target/release/deps" -maxdepth 1 -type f -executable -name "$1-*" | head -1; }
ERALOAD=$(bench_bin eraload)
TASKLOAD=$(bench_bin taskload)
OTLPSINK=$(bench_bin otlpsink)
[ -x "$ERALOAD" ] && [ -x "$TASKLOAD" ] && [ -x "$OTLPSINK" ] || { echo "build the load clients first (see the header)" >&2; exit 1; }
OUT=$(mktemp -d -t telemetry-bench-XXXXXX)
echo "results in $OUT" >&2

# The discarding collector, for the whole run.
"$OTLPSINK" 3600 >"$OUT/collector.port" &
COLLECTOR=$!
trap 'kill $COLLECTOR 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -s "$OUT/collector.port" ] && break; sleep 0.1; done
COLLECTOR_URL="http://127.0.0.1:$(head -1 "$OUT/collector.port")"
DEAD_URL="http://127.0.0.1:9"   # discard port: nothing listens

run() { # mode round port
  local mode=$1 round=$2 port=$3 data config pid
  data=$(mktemp -d)
  config="$data/config.toml"
  cp "$REPO/examples/bench.toml" "$config"
  case $mode in
    on) printf '\n[telemetry]\notlp_endpoint = "%s"\n' "$COLLECTOR_URL" >>"$config" ;;
    down) printf '\n[telemetry]\notlp_endpoint = "%s"\n' "$DEAD_URL" >>"$config" ;;
  esac
  local bin=$BIN
  [ "$mode" = before ] && bin=$BEFORE
  RUST_LOG=error "$bin" serve --config "$config" --listen "127.0.0.1:$port" --data-dir "$data/data" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  local t0 t1 t2 inline_json
  t0=$(cpu_ticks "$pid")
  inline_json=$("$ERALOAD" "127.0.0.1:$port" modern "$INLINE_SECONDS" "$CONC")
  t1=$(cpu_ticks "$pid")
  inline=$(echo "$inline_json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["calls_per_s"])')
  inline_calls=$(echo "$inline_json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["calls"])')
  create=$("$TASKLOAD" "127.0.0.1:$port" create "$N" "$CONC" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["creations_per_s"]))')
  # The creations' tasks run too (noop_task): their spans are part of a creation's cost.
  for _ in $(seq 100); do [ "$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^mcp_taskd_tasks\{status="completed"\}/ {print $2}')" = "$N" ] && break; sleep 0.1; done
  t2=$(cpu_ticks "$pid")
  inline_us=$(awk -v t=$((t1 - t0)) -v u="$TICK_US" -v c="$inline_calls" 'BEGIN { printf "%.1f", t * u / c }')
  create_us=$(awk -v t=$((t2 - t1)) -v u="$TICK_US" -v c="$N" 'BEGIN { printf "%.1f", t * u / c }')
  dropped=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^mcp_taskd_spans_dropped_total/ {s += $2} END {print s + 0}')
  exported=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^mcp_taskd_spans_exported_total/ {print $2}')
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$data"
  echo "$mode $round $inline $create ${exported:-0} $dropped $inline_us $create_us" | tee -a "$OUT/results"
}

echo "mode round inline_calls_per_s creations_per_s spans_exported spans_dropped server_cpu_us_per_call server_cpu_us_per_task"
for round in $(seq "$ROUNDS"); do
  # Interleaved, the order rotated each round to spread drift.
  case $((round % 3)) in
    1) modes="off on down" ;;
    2) modes="on down off" ;;
    0) modes="down off on" ;;
  esac
  if [ -n "$BEFORE" ]; then
    if [ $((round % 2)) = 1 ]; then modes="before $modes"; else modes="$modes before"; fi
  fi
  port=8400
  for mode in $modes; do
    port=$((port + 1))
    run "$mode" "$round" "$port"
  done
done
python3 - "$OUT/results" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
by_round = {}
for x in rows:
    by_round.setdefault(x[1], {})[x[0]] = x
for mode in ("before", "on", "down"):
    pairs = [(r[mode], r["off"]) for r in by_round.values() if mode in r and "off" in r]
    if not pairs:
        continue
    for column, name in ((6, "server CPU per inline call"), (7, "server CPU per task")):
        ratios = [float(m[column]) / float(o[column]) for m, o in pairs]
        print(f"{mode}/off {name}: " + ", ".join(f"{r:.2f}" for r in ratios)
              + f"  median {statistics.median(ratios):.2f}")
med = {}
for mode in ("before", "off", "on", "down"):
    r = [x for x in rows if x[0] == mode]
    if not r:
        continue
    med[mode] = (statistics.median(float(x[2]) for x in r), statistics.median(float(x[3]) for x in r))
print("median       inline/s  creations/s  inline/off  creations/off")
for mode, (inline, create) in med.items():
    print(f"{mode:<10} {inline:>10.0f} {create:>12.0f} {inline / med['off'][0]:>11.3f} {create / med['off'][1]:>14.3f}")
PY
