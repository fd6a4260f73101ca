#!/usr/bin/env bash
# Bulk loader for benches/scale.sh: fills DATA_DIR/tasks.db with N stored no-op tasks in
# minutes, writing rows in the server's own schema (BIN creates and migrates the store
# first; the sqlite3 CLI then inserts, so the counting triggers (migrations 4, 5) keep
# task_counts / task_totals / job_counts exactly as the server's inserts would).
#
#   BIN=target/release/mcp-taskd benches/scale-fill.sh DATA_DIR N [LEASED [EXPIRED]]
#
# Rows, oldest first, one task every STEP_MS (5 ms) up to a minute ago:
# - the first EXPIRED tasks have `ttl_ms` = 60 s, so they are past their TTL (the janitor
#   deletes them as soon as the server starts); every other task keeps 7 days;
# - the last LEASED tasks are `working`, their job `running` under a live lease with an
#   open attempt (what a kill -9 leaves behind); start-up recovery must reclaim them;
# - every other task is a `noop_task` completed in its first attempt, as the server
#   leaves it: the task row (origin and result byte for byte as the server writes
#   them, version 2), its `attempts` row, no job, no outbox row (the janitor prunes
#   delivered ones). One in 1,009 `failed` instead (error, no result) and one in 101
#   created by principal `alice`, so that sparse filters have something to find.
#
# Ids are row-keyed, as the server issues them (crates/engine/src/ids.rs: `1`, the rowid in 11
# hex digits, 32 random hex digits); IDS=time fills time-ordered ids instead (12 hex
# digits of creation ms, then the random part), as stores before row keys hold them.
#
# How it differs from creation through MCP: no HTTP, no group commit and one transaction
# (journal_mode = DELETE during the fill, WAL again after), the random part from SQLite's
# randomblob rather than the OS, tasks
# inserted already completed (the `working` row of task_counts stays absent rather than
# at zero), and rows and index pages written in id order (packed b-tree pages; a store
# filled through MCP at c = 64 inserts slightly out of order and splits more pages).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$REPO/target/release/mcp-taskd}
DIR=$1 N=$2 LEASED=${3:-0} EXPIRED=${4:-0}
STEP_MS=${STEP_MS:-5}
case ${IDS:-row} in
  row) prefix="printf('1%011x', i + 1)" ;;
  time) prefix="printf('%012x', c)" ;;
  *) echo "IDS is row or time" >&2; exit 2 ;;
esac
mkdir -p "$DIR"
port=$((18000 + RANDOM % 2000))
"$BIN" serve --config "$REPO/examples/bench.toml" --listen 127.0.0.1:$port --data-dir "$DIR" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:$port/healthz >/dev/null && break; sleep 0.1; done
kill $pid; wait $pid 2>/dev/null || true
now=$(python3 -c 'import time;print(int(time.time()*1000))')
t0=$((now - 60000 - N * STEP_MS))
# Origin format 2 (crates/engine/src/model.rs, Origin): the usual protocol version and client
# capabilities are left out.
origin='{"v":2,"tool":"noop_task","arguments":{}}'
result='{"content":[{"type":"text","text":"done"}],"resultType":"complete"}'
error='{"code":-32603,"message":"the tool failed"}'
sqlite3 "$DIR/tasks.db" <<SQL
PRAGMA journal_mode = DELETE;
PRAGMA synchronous = OFF;
PRAGMA cache_size = -262144;
BEGIN;
WITH RECURSIVE s(i) AS (VALUES (0) UNION ALL SELECT i + 1 FROM s WHERE i < $N - 1),
     t(i, c, ttl, state) AS (
       SELECT i, $t0 + i * $STEP_MS,
              CASE WHEN i < $EXPIRED THEN 60000 ELSE 604800000 END,
              CASE WHEN i >= $N - $LEASED THEN 'working'
                   WHEN i % 1009 = 0 THEN 'failed' ELSE 'completed' END
       FROM s)
INSERT INTO tasks (rowid, id, endpoint, tenant, principal, tool, origin, status, created_at,
       updated_at, ttl_ms, expires_at, poll_interval_ms, result, error, input_responses,
       version)
SELECT i + 1, $prefix || lower(hex(randomblob(16))), '/mcp', '',
       CASE WHEN i % 101 = 0 THEN 'alice' ELSE 'anonymous' END, 'noop_task',
       CAST('$origin' AS BLOB), state, c,
       CASE WHEN state = 'working' THEN c ELSE c + 16 END, ttl, c + ttl, 1000,
       CASE WHEN state = 'completed' THEN '$result' END,
       CASE WHEN state = 'failed' THEN '$error' END, '{}',
       CASE WHEN state = 'working' THEN 1 ELSE 2 END
FROM t;
INSERT INTO attempts (task_id, attempt, started_at, ended_at, outcome)
SELECT id, 1, created_at + 12, CASE WHEN status = 'working' THEN NULL ELSE created_at + 16 END,
       CASE status WHEN 'working' THEN NULL ELSE status END
FROM tasks;
INSERT INTO jobs (task_id, state, attempt, max_attempts, backoff_ms, timeout_ms, run_after,
       lease_token, lease_expires, deadline, tool)
SELECT id, 'running', 1, 3, 1000, 60000, created_at, lower(hex(randomblob(16))),
       $now + 30000, $now + 60000, tool
FROM tasks WHERE status = 'working';
COMMIT;
PRAGMA journal_mode = WAL;
SQL
