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
