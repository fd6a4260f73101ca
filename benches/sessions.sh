#!/usr/bin/env bash
# Issue 28: what durable legacy sessions cost, side by side in one run. Each round, on a
# fresh server with examples/bench.toml's settings, for BEFORE (a build without durable
# sessions) and BIN, the order alternating round by round:
#   - legacy inline `tools/call echo` calls/s (benches/eraload.rs `legacy SECONDS CONC`:
#     one session per connection, so each connection's initialize writes its session);
#   - noop_task creations/s (benches/taskload.rs `create N CONC`, the 2026 path).
#
#   BEFORE=/path/to/old/mcp-taskd benches/sessions.sh [BIN]
#
# Environment: ROUNDS (5), SECONDS_EACH (5), N (20000), CONC (64), PORT (8141).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=benches/lib.sh
. "$HERE/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
ROUNDS=${ROUNDS:-5}
SECONDS_EACH=${SECONDS_EACH:-5}
N=${N:-20000}
CONC=${CONC:-64}
PORT=${PORT:-8141}
BIN=${1:-$CARGO_TARGET_DIR/release/mcp-taskd}
[ -n "${BEFORE:-}" ] && [ -x "$BEFORE" ] || { echo "BEFORE=<binary> is required" >&2; exit 2; }
if [ "$#" -eq 0 ]; then (cd "$REPO" && cargo build --release --bin mcp-taskd); fi
ERALOAD=$(bench_bin eraload)
TASKLOAD=$(bench_bin taskload)
WORK=$(mktemp -d -t taskd-sessions-XXXXXX)
SERVER=""
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$WORK"' EXIT

echo "round mode legacy_inline_per_s creations_per_s"
for r in $(seq "$ROUNDS"); do
  order="before now"
  [ $((r % 2)) = 0 ] && order="now before"
  for mode in $order; do
    binary=$BIN
    [ "$mode" = before ] && binary=$BEFORE
    rm -rf "$WORK/data"
    "$binary" serve --config "$REPO/examples/bench.toml" --listen "127.0.0.1:$PORT" \
      --data-dir "$WORK/data" >"$WORK/out" 2>"$WORK/err" &
    SERVER=$!
    for _ in $(seq 200); do grep -q 'listening on' "$WORK/out" && break; sleep 0.05; done
    legacy=$("$ERALOAD" "127.0.0.1:$PORT" legacy "$SECONDS_EACH" "$CONC" |
      python3 -c 'import json, sys; print("%.0f" % json.load(sys.stdin)["calls_per_s"])')
    created=$("$TASKLOAD" "127.0.0.1:$PORT" create "$N" "$CONC" |
      python3 -c 'import json, sys; print("%.0f" % json.load(sys.stdin)["creations_per_s"])')
    kill "$SERVER"; wait "$SERVER" 2>/dev/null || true
    SERVER=""
    echo "$r $mode $legacy $created"
  done
done | tee "$WORK/results"
python3 - "$WORK/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) == 4 and parts[0].isdigit():
        rows.setdefault(parts[0], {})[parts[1]] = (float(parts[2]), float(parts[3]))
for index, label in [(0, "legacy inline"), (1, "creations")]:
    ratios = [r["now"][index] / r["before"][index] for r in rows.values() if len(r) == 2]
    print(f"{label}: now / before per round {', '.join('%.2f' % x for x in ratios)}; "
          f"median {statistics.median(ratios):.2f}x")
PY
