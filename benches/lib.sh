# shellcheck shell=bash
# Shared by the bench scripts (sourced, after they set REPO, OUT and CARGO_TARGET_DIR):
# building a bench program, and a throwaway PostgreSQL cluster. Not run on its own.

# bench_bin NAME: builds benches/NAME.rs in release and prints its executable's path;
# fails when cargo names none.
bench_bin() {
  local bin
  bin=$( (cd "$REPO" && cargo build --release --bench "$1" --message-format=json) |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$1")
  [ -x "$bin" ] || { echo "could not build benches/$1.rs" >&2; return 1; }
  echo "$bin"
}

# pg_start PG_BIN DIR PORT: initdb and start a cluster in DIR (trust auth for user
# `taskd` on 127.0.0.1:PORT, its socket in DIR), as an unprivileged user when run as
# root (PostgreSQL refuses root). pg_stop stops it; the caller's cleanup calls it.
PG_AS_OWNER=()
pg_start() {
  PG_CLUSTER_BIN=$1
  PG_CLUSTER_DIR=$2
  mkdir -p "$PG_CLUSTER_DIR"
  if [ "$(id -u)" = 0 ]; then
    local owner group
    owner=$(id -u postgres 2>/dev/null || id -u nobody)
    group=$(id -g postgres 2>/dev/null || id -g nobody)
    chown "$owner:$group" "$PG_CLUSTER_DIR"
    PG_AS_OWNER=(setpriv "--reuid=$owner" "--regid=$group" --clear-groups)
  fi
  "${PG_AS_OWNER[@]}" "$PG_CLUSTER_BIN/initdb" -D "$PG_CLUSTER_DIR/data" -U taskd -A trust \
    -E UTF8 --no-locale >"$PG_CLUSTER_DIR/initdb.log"
  "${PG_AS_OWNER[@]}" "$PG_CLUSTER_BIN/pg_ctl" -D "$PG_CLUSTER_DIR/data" \
    -l "$PG_CLUSTER_DIR/postgres.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $3 -k $PG_CLUSTER_DIR -c max_connections=200" \
    start >/dev/null
}
pg_stop() {
  [ -n "${PG_CLUSTER_DIR:-}" ] || return 0
  "${PG_AS_OWNER[@]}" "$PG_CLUSTER_BIN/pg_ctl" -D "$PG_CLUSTER_DIR/data" -m fast -w stop \
    >/dev/null 2>&1 || true
}

# fill_config PORT: prints the configuration of a server that takes a backlog through
# MCP and keeps it queued (benches/drain.sh, fair.sh, drain-frames.sh): `noop_task` is a
# placeholder command tool that runs one attempt at a time and never ends.
fill_config() {
  cat <<EOF
# Fill: noop_task is a placeholder that runs one attempt at a time and never ends, so
# the rest of the backlog stays queued.
[server]
listen = "127.0.0.1:$1"
endpoint = "/mcp"

[builtin]
sets = []

[workers]
shutdown_grace_ms = 100

[[tools]]
name = "noop_task"
description = "placeholder"
task_policy = "required"
command = ["/bin/sleep", "3600"]
max_concurrency = 1
EOF
}

# start_server BINARY CONFIG DATA LOG: starts `BINARY serve` in the background, its pid
# in SERVER, its stdout and stderr in LOG.out and LOG.log, and waits until it listens.
start_server() {
  "$1" serve --config "$2" --data-dir "$3" >"$4.out" 2>"$4.log" &
  SERVER=$!
  for _ in $(seq 300); do grep -q 'listening on' "$4.out" 2>/dev/null && break; sleep 0.05; done
  grep -q 'listening on' "$4.out" || { echo "server did not start: $(cat "$4.log")" >&2; exit 1; }
}

# stop_server: stops the server start_server started (SIGTERM; SIGKILL after 30 s).
SERVER=""
stop_server() {
  if [ -n "$SERVER" ] && kill -0 "$SERVER" 2>/dev/null; then
    kill "$SERVER" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$SERVER" 2>/dev/null && kill -9 "$SERVER" 2>/dev/null || true
  fi
  SERVER=""
}

# drain_result DB START_MS N: after a drain, checks that the stopped server's store at DB
# holds N completed tasks and prints {"n", "drain_s"}: START_MS (the draining server's
# exec) to the newest completion.
drain_result() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sqlite3, sys
db, start, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
c = sqlite3.connect(db)
done, last = c.execute("SELECT count(*), max(updated_at) FROM tasks WHERE status = 'completed'").fetchone()
assert done == n, (done, n)
print(json.dumps({"n": n, "drain_s": (last - start) / 1000}))
PY
}

# writer_cpu_ns PID: the CPU time (ns) the store writer thread of the server PID has
# used so far (Linux: its /proc schedstat), or 0 where there is none. The writer does
# most of a drain's work, and its CPU per task is steadier than the drain's wall time
# on a shared box.
writer_cpu_ns() {
  local t
  for t in /proc/"$1"/task/*; do
    if [ "$(cat "$t/comm" 2>/dev/null)" = store-writer ]; then
      cut -d' ' -f1 "$t/schedstat"
      return
    fi
  done
  echo 0
}

# jobs_in_flight PORT: the jobs queued or running on the server at PORT (its /metrics).
# awk, not python3: the drains poll this ten times a second, and each Python start-up
# costs 59 ms of CPU (perf stat, this 2-core box): over half a core taken from the
# server being measured.
jobs_in_flight() {
  curl -sS "http://127.0.0.1:$1/metrics" |
    awk '/^mcp_taskd_jobs\{/ && (/"queued"/ || /"running"/) { n += $NF } END { printf "%d\n", n }'
}
