#!/usr/bin/env bash
# What a drain writes, build against build (issue 29): the WAL frames a drained task
# costs, by b-tree, and the server's CPU a task, for a one-identity backlog of N queued
# no-op tasks, round by round in turn.
#
#   benches/drain-frames.sh NAME=BIN [NAME=BIN ...]
#
# Each round and build: `noop_task` is a placeholder command tool while N tasks are
# created through MCP (the backlog stays queued; as benches/fair.sh fills one), the
# server is stopped, the data dir copied; then a server with the default configuration
# (8 workers, synchronous = FULL, the in-process no-op) and `store.checkpoints =
# "external"` (nothing checkpointed: the WAL keeps every frame) drains it, and is
# killed with SIGKILL once no job is queued or running. benches/wal_frames.py reads the
# WAL it leaves, naming each page by the copy taken before the drain (the drain frees
# the pages of `jobs` and its indexes). Prints per build and round: the drain time (exec
# to the newest `updated_at`), the server's CPU (utime + stime) a task, commits, frames
# a task and frames a task by b-tree; the JSON of each is kept in OUT.
#
# Environment: N (20000), ROUNDS (3), CONC (32, fill connections), PORT (8117), OUT.
# Needs python3 and curl.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=benches/lib.sh
. "$HERE/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
N=${N:-20000}
ROUNDS=${ROUNDS:-3}
CONC=${CONC:-32}
PORT=${PORT:-8117}
OUT=${OUT:-"${TMPDIR:-/tmp}/taskd-drain-frames-$(date -u +%Y%m%dT%H%M%SZ)"}
[ "$#" -gt 0 ] || { echo "usage: $0 NAME=BIN [NAME=BIN ...]" >&2; exit 2; }
mkdir -p "$OUT"
TASKLOAD=$(bench_bin taskload)
TICKS=$(getconf CLK_TCK)

fill_config "$PORT" >"$OUT/fill.toml"
cat >"$OUT/drain.toml" <<TOML
[server]
listen = "127.0.0.1:$PORT"
endpoint = "/mcp"

[store]
locking = "shared"
checkpoints = "external"
TOML

SERVER=""
trap '[ -z "$SERVER" ] || kill -9 "$SERVER" 2>/dev/null || true' EXIT INT TERM

for r in $(seq "$ROUNDS"); do
  for build in "$@"; do
    name=${build%%=*} bin=${build#*=} run="$OUT/$name.$r"
    start_server "$bin" "$OUT/fill.toml" "$run.data" "$run.fill"
    "$TASKLOAD" "127.0.0.1:$PORT" create "$N" "$CONC" noop_task >"$run.create"
    kill "$SERVER"; wait "$SERVER" || true
    cp -r "$run.data" "$run.before"
    start=$(date +%s%3N)
    start_server "$bin" "$OUT/drain.toml" "$run.data" "$run.drain"
    while [ "$(jobs_in_flight "$PORT")" != 0 ]; do sleep 0.2; done
    ticks=$(awk '{print $14 + $15}' "/proc/$SERVER/stat")
    kill -9 "$SERVER"; wait "$SERVER" 2>/dev/null || true
    SERVER=""
    python3 "$HERE/wal_frames.py" "$run.data" "$N" "$run.before" >"$run.json"
    python3 - "$run.json" "$run.data/tasks.db" "$start" "$N" "$ticks" "$TICKS" "$name" "$r" <<'PY'
import json, sqlite3, sys
path, db, start, n, ticks, hz, name, r = sys.argv[1:]
frames = json.load(open(path))
last = sqlite3.connect(f"file:{db}?mode=ro", uri=True).execute(
    "SELECT max(updated_at) FROM tasks").fetchone()[0]
n = int(n)
cpu_us = int(ticks) / int(hz) * 1e6 / n
trees = ", ".join(f"{k} {v / n:.3f}" for k, v in frames["frames_by_btree"].items())
print(f"{name} round {r}: drain {int(last) - int(start)} ms, CPU {cpu_us:.0f} us a task, "
      f"{frames['commits']} commits, {frames['frames_per_task']} frames a task: {trees}")
PY
    rm -rf "$run.data" "$run.before"
  done
done | tee "$OUT/run.log"
