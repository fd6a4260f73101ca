#!/usr/bin/env bash
# PostgreSQL `tasks/get` of two builds side by side (issue 35): BEFORE and AFTER each
# serve a database of their own on one throwaway PostgreSQL cluster (Debian's package,
# its durable defaults, as benches/postgres.sh), each gets 50 completed no-op tasks, and
# `taskload get` reads random ones of them for DURATION seconds at CONC connections, the two
# builds alternating round by round (the order swapped every other round).
#
#   benches/pg-get-ab.sh BEFORE AFTER       # ROUNDS (6), DURATION (5), CONC (8), PG_PORT (8134)
#
# Prints one JSON line a round and build (requests/s, p50/p99/max ms). Needs curl and
# python3; MCP_TASKD_PG_BIN, else .ci/postgres.sh finds PostgreSQL.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=benches/lib.sh
. "$HERE/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
[ $# -eq 2 ] || { echo "usage: $0 BEFORE AFTER" >&2; exit 2; }
ROUNDS=${ROUNDS:-6}
DURATION=${DURATION:-5}
CONC=${CONC:-8}
PG_PORT=${PG_PORT:-8134}
PG_BIN=${MCP_TASKD_PG_BIN:-$("$REPO/.ci/postgres.sh")}
OUT=$(mktemp -d)
chmod 755 "$OUT" # the cluster runs as an unprivileged user when we are root
TASKLOAD=$(bench_bin taskload)
pg_start "$PG_BIN" "$OUT/pg" "$PG_PORT"
"$PG_BIN/psql" -X -q -h "$OUT/pg" -p "$PG_PORT" -U taskd -d postgres \
  -c "CREATE DATABASE before" -c "CREATE DATABASE after"
SERVERS=()
cleanup() {
  for pid in "${SERVERS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${SERVERS[@]}"; do wait "$pid" 2>/dev/null || true; done
  pg_stop
  rm -rf "$OUT"
}
trap cleanup EXIT INT TERM
declare -A PORTS=([before]=$((PG_PORT - 3)) [after]=$((PG_PORT - 2)))
start() { # name binary
  printf '[builtin]\nsets = ["demo", "testing"]\n[store]\nbackend = "postgres"\nurl = "postgresql://taskd@127.0.0.1:%s/%s"\npool_size = 16\n' \
    "$PG_PORT" "$1" >"$OUT/$1.toml"
  "$2" serve --config "$OUT/$1.toml" --listen "127.0.0.1:${PORTS[$1]}" --data-dir "$OUT/$1-data" \
    >"$OUT/$1.out" 2>"$OUT/$1.log" &
  SERVERS+=($!)
  for _ in $(seq 200); do grep -q 'listening on' "$OUT/$1.out" 2>/dev/null && return; sleep 0.1; done
  echo "$1 did not start: $(cat "$OUT/$1.log")" >&2
  exit 1
}
start before "$1"
start after "$2"
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}'
for name in before after; do
  for _ in $(seq 50); do
    curl -sS "http://127.0.0.1:${PORTS[$name]}/mcp" -H 'Content-Type: application/json' \
      -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
      -H 'Mcp-Method: tools/call' -H 'Mcp-Name: noop_task' \
      --data-binary '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"noop_task","arguments":{},'"$META"'}}' |
      python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["result"]["taskId"])' >>"$OUT/$name.ids"
  done
done
for round in $(seq "$ROUNDS"); do
  order="before after"
  [ $((round % 2)) -eq 0 ] && order="after before"
  for name in $order; do
    echo "round $round $name $("$TASKLOAD" "127.0.0.1:${PORTS[$name]}" get "$OUT/$name.ids" "$DURATION" "$CONC")"
  done
done
