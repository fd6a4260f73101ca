#!/usr/bin/env bash
# SQLite on one node vs PostgreSQL on one node vs PostgreSQL on two nodes (issue 18), in
# one interleaved run on loopback, every setup up for the whole run and loaded in turn:
#
#   create  tools/call "noop_task" declaring the Tasks extension, oha   task creations/s
#   get     tasks/get of one existing (completed) task, oha              req/s
#   e2e     taskload: create E2E_N noop tasks, poll each until completed tasks/s
#
# After each creating step the script waits until the workers have drained the backlog,
# so that no step's tasks queue behind another's.
#
# On two nodes each step runs one load client per node at once, each with half the
# concurrency (and half of E2E_N): req/s add up; e2e is E2E_N over the slower client's
# time. Ratios to SQLite are taken within each round, then the median over rounds.
# Then the cross-node commit-to-notification latency (benches/crossnode.py): a task
# cancelled on node A, its `cancelled` notification on a listen stream on node B.
#
# PostgreSQL is a throwaway cluster of Debian's package (.ci/postgres.sh installs it) in
# a temp dir, run as an unprivileged user when we are root, with its durable defaults
# (fsync on, synchronous_commit on): every acknowledged write is flushed on both stores.
#
#   benches/postgres.sh                             # 3 rounds of 8 s steps at c=64
#   ROUNDS=5 DURATION=5 benches/postgres.sh
#   ROUNDS=0 benches/postgres.sh                    # the cross-node latency only
#   NODE_CPU=0.4 benches/postgres.sh                # each node capped at 0.4 of a core
#
# NODE_CPU stands in for nodes on machines of their own: every mcp-taskd node runs in
# a CPU cgroup of its own with that quota (needs root and a cgroup cpu controller),
# while PostgreSQL and the load clients share what is left. Without it, every node,
# PostgreSQL and the load clients share this machine's cores, and a second node adds
# work but no cores.
#
# Environment: DURATION (8), ROUNDS (3), CONC (64), E2E_N (10000), POLL_MS (50),
# LATENCY_N (300), PORT (8110; uses PORT..PORT+4), OUT (results folder), CARGO_TARGET_DIR,
# NODE_CPU (unset: no cap; else cores a node may use, e.g. 0.4),
# MCP_TASKD_PG_BIN (else .ci/postgres.sh finds it), BIN (a server binary to measure
# instead of building this checkout's: an earlier build, for a before/after pair).
# Needs oha, curl, python3.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=benches/lib.sh
. "$HERE/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
DURATION=${DURATION:-8}
ROUNDS=${ROUNDS:-3}
CONC=${CONC:-64}
E2E_N=${E2E_N:-10000}
POLL_MS=${POLL_MS:-50}
LATENCY_N=${LATENCY_N:-300}
PORT=${PORT:-8110}
OHA=${OHA:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-"${TMPDIR:-/tmp}/taskd-postgres-$STAMP"}
mkdir -p "$OUT"
PG_BIN=${MCP_TASKD_PG_BIN:-$("$REPO/.ci/postgres.sh")}

[ -n "${BIN:-}" ] || (cd "$REPO" && cargo build --release --bin mcp-taskd)
TASKLOAD=$(bench_bin taskload)
cp "${BIN:-$CARGO_TARGET_DIR/release/mcp-taskd}" "$OUT/taskd-bench"

# The PostgreSQL cluster: its own directory, port PORT+4, trust on 127.0.0.1.
PG_PORT=$((PORT + 4))
PG_DIR="$OUT/pg"
pg_start "$PG_BIN" "$PG_DIR" "$PG_PORT"
psql() { "$PG_BIN/psql" -X -q -h "$PG_DIR" -p "$PG_PORT" -U taskd -d postgres "$@"; }
psql -c "CREATE DATABASE one" -c "CREATE DATABASE two"

SERVERS=()
cleanup() {
  for pid in "${SERVERS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${SERVERS[@]}"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  pg_stop
  for group in "${CPU_GROUPS[@]}"; do rmdir "$group" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

# cap_cpu NAME PID: PID's threads may use NODE_CPU of a core (cgroup v1 or v2).
CPU_GROUPS=()
cap_cpu() {
  local group quota
  quota=$(python3 -c 'import sys; print(int(float(sys.argv[1]) * 100000))' "$NODE_CPU")
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    group=/sys/fs/cgroup/taskd-bench-$$-$1
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
    mkdir "$group"
    echo "$quota 100000" >"$group/cpu.max"
  else
    group=/sys/fs/cgroup/cpu/taskd-bench-$$-$1
    mkdir "$group"
    echo 100000 >"$group/cpu.cfs_period_us"
    echo "$quota" >"$group/cpu.cfs_quota_us"
  fi
  CPU_GROUPS+=("$group")
  echo "$2" >"$group/cgroup.procs"
}

config() { # name [database]
  {
    echo '[builtin]'
    echo 'sets = ["demo", "testing"]'
    echo '[store]'
    if [ -n "${2:-}" ]; then
      echo 'backend = "postgres"'
      echo "url = \"postgresql://taskd@127.0.0.1:$PG_PORT/$2\""
      echo 'pool_size = 16'
    else
      echo 'synchronous = "full"'
    fi
  } >"$OUT/$1.toml"
}
start() { # name port
  "$OUT/taskd-bench" serve --config "$OUT/$1.toml" --listen "127.0.0.1:$2" --data-dir "$OUT/$1-data" \
    >"$OUT/$1.out" 2>"$OUT/$1.log" &
  SERVERS+=($!)
  if [ -n "${NODE_CPU:-}" ]; then cap_cpu "$1" "$!"; fi
  for _ in $(seq 200); do grep -q 'listening on' "$OUT/$1.out" 2>/dev/null && return; sleep 0.1; done
  echo "$1 did not start: $(cat "$OUT/$1.log")" >&2
  exit 1
}
config sqlite; config pg1 one; config pg2a two; cp "$OUT/pg2a.toml" "$OUT/pg2b.toml"
start sqlite "$PORT"; start pg1 $((PORT + 1)); start pg2a $((PORT + 2)); start pg2b $((PORT + 3))
# Ports of each setup's nodes.
declare -A NODES=([sqlite]="$PORT" [pg1]="$((PORT + 1))" [pg2]="$((PORT + 2)) $((PORT + 3))")

META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}'
echo '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"noop_task","arguments":{},'"$META"'}}' >"$OUT/create.json"
COMMON=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream'
        -H 'MCP-Protocol-Version: 2026-07-28')
H_CREATE=("${COMMON[@]}" -H 'Mcp-Method: tools/call' -H 'Mcp-Name: noop_task')

# Per setup: one completed task for tasks/get (created on the first node).
for setup in sqlite pg1 pg2; do
  port=${NODES[$setup]%% *}
  id=$(curl -sS "http://127.0.0.1:$port/mcp" "${H_CREATE[@]}" --data-binary @"$OUT/create.json" |
    python3 -c 'import json, sys; r = json.load(sys.stdin)["result"]; assert r["resultType"] == "task", r; print(r["taskId"])')
  echo '{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"'"$id"'",'"$META"'}}' >"$OUT/get-$setup.json"
  echo "$id" >"$OUT/get-$setup.id"
done

oha_at() { # out port seconds conc body mcp-method mcp-name
  "$OHA" --no-tui -z "$3" -c "$4" -m POST "${COMMON[@]}" -H "Mcp-Method: $6" -H "Mcp-Name: $7" \
    -D "$5" -w --output-format json "http://127.0.0.1:$2/mcp" >"$1" 2>"$1.err" || true
}
# One oha per node of the setup, at once, the concurrency split between them.
oha_step() { # out-prefix setup body mcp-method mcp-name
  local ports i=0
  read -ra ports <<<"${NODES[$2]}"
  local conc=$((CONC / ${#ports[@]}))
  for port in "${ports[@]}"; do
    oha_at "$1.$i.json" "$port" "${DURATION}s" "$conc" "$3" "$4" "$5" &
    i=$((i + 1))
  done
  wait
  python3 - "$1" <<'EOF'
import glob, json, sys
rps = p99 = 0; codes = {}
for f in sorted(glob.glob(sys.argv[1] + ".*.json")):
    d = json.load(open(f))
    rps += d["summary"]["requestsPerSec"]; p99 = max(p99, d["latencyPercentiles"]["p99"] * 1000)
    for code, n in d["statusCodeDistribution"].items(): codes[code] = codes.get(code, 0) + n
json.dump({"rps": rps, "p99_ms": p99, "codes": codes}, open(sys.argv[1] + ".sum", "w"))
print("%.0f req/s, p99 %.2f ms, codes %s" % (rps, p99, codes))
EOF
}
# Jobs not yet done on the setup (its first node's /metrics: on PostgreSQL every node
# counts the whole database). Waits until the workers have drained what a step left, so
# that the next step's tasks do not queue behind it; records how long that took.
settle() { # out-file setup
  local port=${NODES[$2]%% *} start jobs
  start=$(date +%s%N)
  for _ in $(seq 1200); do
    jobs=$(curl -sS "http://127.0.0.1:$port/metrics" | awk '/^mcp_taskd_jobs\{/ {n += $NF} END {print n + 0}')
    [ "$jobs" = 0 ] && break
    sleep 0.25
  done
  echo "settle_ms=$(( ($(date +%s%N) - start) / 1000000 )) jobs_left=$jobs" >"$1"
}
e2e_step() { # out-prefix setup
  local ports i=0
  read -ra ports <<<"${NODES[$2]}"
  local n=$((E2E_N / ${#ports[@]})) conc=$((CONC / ${#ports[@]}))
  for port in "${ports[@]}"; do
    "$TASKLOAD" "127.0.0.1:$port" e2e "$n" "$conc" noop_task "$POLL_MS" >"$1.$i.e2e" 2>"$1.$i.err" &
    i=$((i + 1))
  done
  wait
  python3 - "$1" <<'EOF'
import glob, json, sys
runs = [json.loads(open(f).read()) for f in sorted(glob.glob(sys.argv[1] + ".*.e2e"))]
n = sum(r["n"] for r in runs); slowest = max(r["complete_s"] for r in runs)
created = sum(r["n"] for r in runs) / max(r["create_s"] for r in runs)
json.dump({"rps": n / slowest, "creations_per_s": created}, open(sys.argv[1] + ".sum", "w"))
print("%.0f tasks/s (%d tasks, last seen completed after %.2f s; creations %.0f/s)" % (n / slowest, n, slowest, created))
EOF
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(uname -n)  nproc: $(nproc)"
  if [ -n "${BIN:-}" ]; then echo "binary: $BIN"; else
    echo "commit: $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD || echo '+dirty')"; fi
  echo "settings: DURATION=$DURATION ROUNDS=$ROUNDS CONC=$CONC E2E_N=$E2E_N POLL_MS=$POLL_MS NODE_CPU=${NODE_CPU:-}"
  echo "postgres: $("$PG_BIN/postgres" --version)"
} | tee "$OUT/run.log"

for r in $(seq "$ROUNDS"); do
  echo "round $r load average: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/run.log"
  for setup in sqlite pg1 pg2; do
    f="$OUT/r$r-$setup"
    echo "round $r $setup create: $(oha_step "$f-create" "$setup" "$OUT/create.json" tools/call noop_task)" | tee -a "$OUT/run.log"
    settle "$f-create.settle" "$setup"
    echo "round $r $setup settle: $(cat "$f-create.settle")" | tee -a "$OUT/run.log"
    echo "round $r $setup get:    $(oha_step "$f-get" "$setup" "$OUT/get-$setup.json" tasks/get "$(cat "$OUT/get-$setup.id")")" | tee -a "$OUT/run.log"
    echo "round $r $setup e2e:    $(e2e_step "$f-e2e" "$setup" || cat "$f-e2e".*.err)" | tee -a "$OUT/run.log"
    settle "$f-e2e.settle" "$setup"
  done
done

echo "cross-node latency: $(python3 "$HERE/crossnode.py" "127.0.0.1:$((PORT + 2))" "127.0.0.1:$((PORT + 3))" "$LATENCY_N" | tee "$OUT/crossnode.json")" | tee -a "$OUT/run.log"

[ "$ROUNDS" -gt 0 ] || { echo "results: $OUT (run.log, crossnode.json)"; exit 0; }
python3 - "$OUT" "$ROUNDS" <<'EOF' | tee "$OUT/summary.txt"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def rps(r, setup, step):
    try: return json.load(open(f"{out}/r{r}-{setup}-{step}.sum"))["rps"]
    except (OSError, ValueError, KeyError): return float("nan")
print("| step | SQLite, 1 node | PostgreSQL, 1 node | PostgreSQL, 2 nodes | PG1/SQLite | PG2/PG1 |")
print("|---|---:|---:|---:|---:|---:|")
for step in ["create", "get", "e2e"]:
    med = lambda s: statistics.median(rps(r, s, step) for r in range(1, rounds + 1))
    ratio = lambda a, b: statistics.median(rps(r, a, step) / rps(r, b, step) for r in range(1, rounds + 1))
    print(f"| {step} | {med('sqlite'):,.0f} | {med('pg1'):,.0f} | {med('pg2'):,.0f} | {ratio('pg1', 'sqlite'):.2f} | {ratio('pg2', 'pg1'):.2f} |")
EOF
echo "results: $OUT (run.log, summary.txt, crossnode.json)"
