#!/usr/bin/env bash
# Resident memory, idle and under load, defaults beside examples/edge.toml
# (docs/benchmarks/edge.md, "An edge box's memory"): builds the release server and the
# taskload client, then runs benches/edge_memory.py.
#
#   benches/edge-memory.sh                       # 3 rounds, 20000 tasks at c=64
#   N=5000 ROUNDS=5 benches/edge-memory.sh
#
# Environment: N (20000), CONC (64), ROUNDS (3), OUT (results folder under target/),
# CARGO_TARGET_DIR.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=benches/lib.sh
. "$HERE/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
OUT=${OUT:-$CARGO_TARGET_DIR/bench-edge-memory}
(cd "$REPO" && cargo build --release --bin mcp-taskd)
TASKLOAD=$(bench_bin taskload)
python3 "$HERE/edge_memory.py" "$CARGO_TARGET_DIR/release/mcp-taskd" "$TASKLOAD" \
  "$REPO/examples/edge.toml" "$OUT" --n "${N:-20000}" --conc "${CONC:-64}" --rounds "${ROUNDS:-3}"
