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
# records it (parentbased_always_on), the costliest case.
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
  inline=$("$ERALOAD" "127.0.0.1:$port" modern "$INLINE_SECONDS" "$CONC" | python3 -c 'import json,sys; print(json.load(sys.stdin)["calls_per_s"])')
  create=$("$TASKLOAD" "127.0.0.1:$port" create "$N" "$CONC" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["creations_per_s"]))')
  dropped=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^mcp_taskd_spans_dropped_total/ {s += $2} END {print s + 0}')
  exported=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^mcp_taskd_spans_exported_total/ {print $2}')
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$data"
  echo "$mode $round $inline $create ${exported:-0} $dropped" | tee -a "$OUT/results"
}

echo "mode round inline_calls_per_s creations_per_s spans_exported spans_dropped"
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
