#!/usr/bin/env bash
# Inline tools/call "echo" side by side with the Python and TypeScript SDK peers (issue #2):
# req/s, p50/p99 latency and peak RSS per target and concurrency, targets interleaved round
# by round by ../shared/bench/run-peers.sh. Builds the release binary first.
#
#   benches/run-peers.sh                                    # 10 s x 3 rounds at c = 1 8 64
#   DURATION=5 ROUNDS=1 CONC="64" benches/run-peers.sh      # a quick look
#   TARGETS="ours" benches/run-peers.sh                     # our server alone
#
# Environment: DURATION, ROUNDS, CONC, TARGETS (default "py ts ours"), PIN, OURS_PORT
# (8103), CONFIG (examples/bench.toml), OUT (results folder), PEERS_SCRIPT (the shared
# script), CARGO_TARGET_DIR. Everything printed also goes to $OUT/run.log; the table is
# $OUT/summary.txt.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
export DURATION=${DURATION:-10}
export ROUNDS=${ROUNDS:-3}
export CONC=${CONC:-"1 8 64"}
export TARGETS=${TARGETS:-"py ts ours"}
export OURS_PORT=${OURS_PORT:-8103}
CONFIG=${CONFIG:-$REPO/examples/bench.toml}
PEERS_SCRIPT=${PEERS_SCRIPT:-$REPO/../shared/bench/run-peers.sh}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
export OUT=${OUT:-"${TMPDIR:-/tmp}/taskd-peers-$STAMP"}
mkdir -p "$OUT"

(cd "$REPO" && cargo build --release --bin mcp-taskd)
# The server runs from a copy named taskd-bench: the shared script splits OURS_CMD on
# spaces (so no path here may contain one), and a concurrent `pkill mcp-taskd` from a
# test run elsewhere on the box then cannot stop the server mid-benchmark.
cp "$CARGO_TARGET_DIR/release/mcp-taskd" "$OUT/taskd-bench"
DATA=$OUT/data
case "$OUT$CONFIG" in *" "*) echo "OUT and CONFIG must not contain spaces" >&2; exit 2 ;; esac
export OURS_CMD="$OUT/taskd-bench serve --config $CONFIG --listen 127.0.0.1:$OURS_PORT --data-dir $DATA"

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(uname -n)  nproc: $(nproc)"
  echo "commit: $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD || echo '+dirty')"
  echo "load before: $(uptime)"
  echo "settings: DURATION=$DURATION ROUNDS=$ROUNDS CONC=\"$CONC\" TARGETS=\"$TARGETS\" PIN=${PIN:-0}"
  echo "ours: $OURS_CMD"
  echo "config: $CONFIG"
  sed 's/^/  | /' "$CONFIG"
} | tee "$OUT/run.log"
"$PEERS_SCRIPT" 2>&1 | tee -a "$OUT/run.log"
python3 "$HERE/peer_ratios.py" "$OUT" | tee -a "$OUT/run.log" "$OUT/summary.txt"
echo "load after: $(uptime)" | tee -a "$OUT/run.log"
echo "results: $OUT (run.log, summary.txt)"
