#!/usr/bin/env bash
# Bytes written to disk per task (docs/benchmarks/flash.md): builds the
# release server and the taskload client, then runs benches/flash.py on a data dir on
# disk (not tmpfs: tmpfs writes nothing to count).
#
#   benches/flash.sh                               # 5000 tasks a step, c = 1, 8, 64, full and normal
#   N=2000 CONCS=8 SYNCS=full benches/flash.sh --variant page8k=@page_size=8192
#
# Environment: N (5000), CONCS (1,8,64), SYNCS (full,normal), ROUNDS (1), OUT (results
# folder under target/), CARGO_TARGET_DIR; further arguments go to flash.py.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=benches/lib.sh
. "$HERE/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
OUT=${OUT:-$CARGO_TARGET_DIR/bench-flash}
(cd "$REPO" && cargo build --release --bin mcp-taskd)
TASKLOAD=$(bench_bin taskload)
[ "$(stat -f -c %T "$(dirname "$OUT")")" != tmpfs ] || { echo "OUT is on tmpfs" >&2; exit 1; }
python3 "$HERE/flash.py" "$CARGO_TARGET_DIR/release/mcp-taskd" "$TASKLOAD" "$OUT" \
  --n "${N:-5000}" --concs "${CONCS:-1,8,64}" --syncs "${SYNCS:-full,normal}" \
  --rounds "${ROUNDS:-1}" "$@"
