#!/usr/bin/env bash
# Issue 19: the store at scale, side by side with a small one in one run. Fills stores
# with benches/scale-fill.sh (a bulk loader; see there how it differs from creation
# through MCP), then, each figure next to its small-store counterpart, servers started
# one at a time on loopback with examples/bench.toml (synchronous = FULL):
#
#   get       tasks/get of random existing ids (taskload get, c=64 then c=8), 10M vs 10k,
#             A B B A; with OLD_IDS=1 also a 10M store of time-ordered ids (`big-time`,
#             as stores before row-keyed ids hold them: the lookup through the id index),
#             A B C C B A
#   preads    pread64 calls a tasks/get at c=8 (strace -c on the server), each store of
#             `get`
#   create    task creations/s (taskload create: CREATE_N noop_task creations at c=64),
#             10M vs 10k (a fresh copy each), A B B A
#   startup   start to /healthz 200: 1M tasks of which 100k leased at kill -9, vs 10k;
#             the recovery lines of its log
#   expiry    tasks/get p99 while the janitor deletes 1M expired tasks, vs the same server
#             once they are gone
#   metrics   GET /metrics at 10M vs 10k (50 scrapes each)
#   pages     dashboard task pages at 10M, per filter (the first page and the next one)
#   bytes     bytes on disk per stored no-op task, by table and index (dbstat)
#   rss       peak RSS (VmHWM) of each server above, 10M vs an empty store
#
# Load average is recorded with every step (the VM is shared). Then, when they exist,
# benches/spawn.sh and benches/drain.sh (issue 19's command-tool and drain rows) run
# and their output is appended. The tables go to OUT/tables.md, and with
# WRITE_README=1 replace the latest run on docs/benchmarks/store-scale.md.
#
#   BIN=target/release/mcp-taskd benches/scale.sh          # ~20 min, ~13 GB in OUT
#
# Environment: BIN (release binary; default target/release/mcp-taskd), OUT (results
# folder, default /tmp/taskd-scale-STAMP), BIG (10000000), MID (1000000), SMALL (10000),
# GET_S (8), GET_CONC ("64 8": the tasks/get concurrencies, each on the same server),
# CREATE_N (40000), ROUNDS (1: get and create run small big big small, ROUNDS times),
# KEEP=1 keeps the stores, REUSE=1 reuses those of OUT (and appends to its
# results), OLD_IDS=1 (see `get`), STEPS (a subset of "metrics get preads create startup
# expiry others"). Needs sqlite3, curl, python3, strace.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
BIN=${BIN:-$REPO/target/release/mcp-taskd}
BIG=${BIG:-10000000} MID=${MID:-1000000} SMALL=${SMALL:-10000}
GET_S=${GET_S:-8} GET_CONC=${GET_CONC:-64 8} CREATE_N=${CREATE_N:-40000}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-/tmp/taskd-scale-$STAMP}
CONFIG=$REPO/examples/bench.toml
PORT=${PORT:-8470}
mkdir -p "$OUT"
cargo bench --no-run --bench taskload >/dev/null 2>&1
TASKLOAD=$(ls -t "$REPO"/target/release/deps/taskload-* | grep -v '\.d$' | head -1)
STEPS=${STEPS:-metrics get preads create startup expiry others}
GET_STORES="small big"
[ "${OLD_IDS:-0}" = 1 ] && GET_STORES="small big big-time"
RESULTS=$OUT/results.jsonl
[ "${REUSE:-0}" = 1 ] || : > "$RESULTS"
log() { echo "[$(date -u +%T)] $*" >&2; }
load() { cut -d' ' -f1 /proc/loadavg; }
record() { echo "$1" >> "$RESULTS"; echo "$1"; } # one JSON line
now_s() { date +%s.%N; }

SERVER= STARTUP=
start() { # data_dir [log]  -> sets SERVER, and STARTUP: seconds to /healthz 200
  local t0; t0=$(now_s)
  "$BIN" serve --config "$CONFIG" --listen 127.0.0.1:$PORT --data-dir "$1" > "${2:-$OUT/server.log}" 2>&1 &
  SERVER=$!
  until curl -sf http://127.0.0.1:$PORT/healthz >/dev/null; do
    kill -0 $SERVER 2>/dev/null || { echo "server died: $(tail -3 "${2:-$OUT/server.log}")" >&2; exit 1; }
    sleep 0.005
  done
  STARTUP=$(python3 -c "print(round($(now_s) - $t0, 3))")
}
settle() { # until the server's workers have run every queued job (at most 5 min)
  for _ in $(seq 1200); do
    [ "$(curl -s http://127.0.0.1:$PORT/metrics | awk '/^mcp_taskd_jobs\{/ {n += $NF} END {print n + 0}')" = 0 ] && return
    sleep 0.25
  done
}
hwm_kib() { awk '/VmHWM/ {print $2}' /proc/$SERVER/status; }
cpu_ticks() { awk '{print $14 + $15}' /proc/$SERVER/stat; } # user + system, in clock ticks
TICK_US=$((1000000 / $(getconf CLK_TCK)))
stop() { kill $SERVER; wait $SERVER 2>/dev/null || true; SERVER=; }
trap '[ -n "$SERVER" ] && kill $SERVER 2>/dev/null; true' EXIT
ids_of() { # store n -> ids file of random live tasks the bench identity may read
  python3 - "$OUT/$1/tasks.db" "$2" > "$OUT/$1.ids" <<'PY'
import random, sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
live_after = int(time.time() * 1000) + 3_600_000
# Ids grow with creation time, and the expiry store's live tasks are its newest: draw
# from the ids of the oldest live task (one seek in tasks_by_expiry) to the newest.
oldest_live = db.execute("SELECT id FROM tasks WHERE expires_at > ? ORDER BY expires_at LIMIT 1",
                         (live_after,)).fetchone()[0]
lo, hi = (int(x[:12], 16) for x in (oldest_live, db.execute("SELECT MAX(id) FROM tasks").fetchone()[0]))
query = ("SELECT id FROM tasks WHERE id >= ? AND principal = 'anonymous' AND expires_at > ? "
         "ORDER BY id LIMIT 1")
ids, want = set(), int(sys.argv[2])
for _ in range(want * 5):
    if len(ids) == want:
        break
    row = db.execute(query, (f"{random.randint(lo, hi):012x}", live_after)).fetchone()
    if row:
        ids.add(row[0])
print("\n".join(ids))
PY
}

# --- fill ------------------------------------------------------------------------
fill() { # name n leased expired [ids: row or time]
  if [ "${REUSE:-0}" = 1 ] && [ -f "$OUT/$1/tasks.db" ]; then return; fi
  local t0; t0=$(now_s)
  IDS=${5:-row} BIN=$BIN "$REPO/benches/scale-fill.sh" "$OUT/$1" "$2" "${3:-0}" "${4:-0}" >/dev/null
  sqlite3 "$OUT/$1/tasks.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null
  record "{\"step\":\"fill\",\"store\":\"$1\",\"tasks\":$2,\"leased\":${3:-0},\"expired\":${4:-0},\"s\":$(python3 -c "print(round($(now_s) - $t0, 1))"),\"bytes\":$(stat -c %s "$OUT/$1/tasks.db"),\"load\":$(load)}"
}
log "filling stores in $OUT"
mkdir -p "$OUT/empty"
fill small "$SMALL"
fill big "$BIG"
fill leased "$MID" $((MID / 10))
fill expiring $((MID + SMALL)) 0 "$MID"
ids_of small 20000; ids_of big 20000; ids_of expiring 20000
if [ "${OLD_IDS:-0}" = 1 ]; then fill big-time "$BIG" 0 0 time; ids_of big-time 20000; fi

# --- bytes per task ----------------------------------------------------------------
for store in small big; do
  n=$([ $store = big ] && echo "$BIG" || echo "$SMALL")
  sqlite3 -json "$OUT/$store/tasks.db" "SELECT name, SUM(pgsize) AS bytes FROM dbstat GROUP BY name ORDER BY bytes DESC" \
    | python3 -c "import json,sys; rows=json.load(sys.stdin); print(json.dumps({'step':'bytes','store':'$store','tasks':$n,'per_task':{r['name']: round(r['bytes']/$n,1) for r in rows},'total_per_task':round(sum(r['bytes'] for r in rows)/$n,1)}))" >> "$RESULTS"
done

step() { [[ " $STEPS " == *" $1 "* ]]; }
# --- /metrics ----------------------------------------------------------------------
step metrics && for store in small big; do
  start "$OUT/$store"
  l=$(load)
  ms=$(for i in $(seq 50); do curl -s -o /dev/null -w '%{time_total}\n' http://127.0.0.1:$PORT/metrics; done \
    | python3 -c 'import json,sys; t=sorted(float(x)*1000 for x in sys.stdin.read().split()); print(json.dumps({"median": round(t[len(t)//2],2), "p90": round(t[int(len(t)*0.9)],2), "max": round(t[-1],2)}))')
  record "{\"step\":\"metrics\",\"store\":\"$store\",\"load\":$l,\"ms\":$ms}"
  # --- dashboard pages (10M only matters; 10k for reference) --------------------------
  if [ $store = big ]; then
    for filter in "" "status=failed" "status=working" "principal=alice" "tool=noop_task" "tool=no_such_tool" "since=$(( $(date +%s) * 1000 - 3600000 ))" "status=failed&principal=alice"; do
      url="http://127.0.0.1:$PORT/dashboard/api/tasks?limit=25&$filter"
      first=$(curl -s -H 'Accept: application/json' -o "$OUT/page.json" -w '%{time_total}' "$url")
      rows=$(python3 -c "import json;p=json.load(open('$OUT/page.json'));print(len(p['tasks']), json.dumps(p['next']), json.dumps(p.get('partial')))")
      next=$(echo "$rows" | cut -d' ' -f2 | tr -d '"')
      second=null
      if [ "$next" != null ]; then second=$(curl -s -H 'Accept: application/json' -o /dev/null -w '%{time_total}' "$url&before=$next"); fi
      record "{\"step\":\"page\",\"filter\":\"$filter\",\"load\":$(load),\"first_ms\":$(python3 -c "print(round($first*1000,1))"),\"next_ms\":$(python3 -c "print('null' if '$second'=='null' else round($second*1000,1))"),\"rows\":$(echo "$rows" | cut -d' ' -f1),\"partial\":$(echo "$rows" | cut -d' ' -f3)}"
    done
  fi
  stop
done

# --- tasks/get and creation, A B B A ---------------------------------------------------
ROUNDS=${ROUNDS:-1}
step get && for store in $(for _ in $(seq "$ROUNDS"); do echo $GET_STORES; echo $GET_STORES | tr ' ' '\n' | tac; done); do
  log "get: $store"
  start "$OUT/$store"
  for conc in $GET_CONC; do
    l=$(load); c0=$(cpu_ticks); r=$("$TASKLOAD" 127.0.0.1:$PORT get "$OUT/$store.ids" "$GET_S" "$conc"); c1=$(cpu_ticks)
    us=$(python3 -c "import json; print(round(($c1 - $c0) * $TICK_US / json.loads('$r')['requests'], 1))")
    record "{\"step\":\"get\",\"store\":\"$store\",\"load\":$l,\"result\":$r,\"cpu_us\":$us,\"hwm_kib\":$(hwm_kib)}"
  done
  stop
done
# --- pread64 calls a tasks/get ----------------------------------------------------------
step preads && for store in $GET_STORES; do
  log "preads: $store"
  start "$OUT/$store"
  # Warm up as the get step does (its first round of pages), then count.
  "$TASKLOAD" 127.0.0.1:$PORT get "$OUT/$store.ids" 2 8 >/dev/null
  strace -f -c -e trace=pread64 -o "$OUT/preads-$store.txt" -p $SERVER 2>/dev/null &
  tracer=$!
  sleep 1 # strace attaches to every thread
  r=$("$TASKLOAD" 127.0.0.1:$PORT get "$OUT/$store.ids" "$GET_S" 8)
  kill -INT $tracer; wait $tracer 2>/dev/null || true
  calls=$(awk '$NF == "pread64" {print $4}' "$OUT/preads-$store.txt")
  record "{\"step\":\"preads\",\"store\":\"$store\",\"load\":$(load),\"calls\":${calls:-0},\"result\":$r}"
  stop
done
step create && for store in $(for _ in $(seq "$ROUNDS"); do echo small big big small; done) empty; do
  log "create: $store"
  dir=$OUT/$store
  if [ $store = small ]; then rm -rf "$OUT/small-copy"; cp -r "$OUT/small" "$OUT/small-copy"; dir=$OUT/small-copy; fi
  if [ $store = empty ]; then rm -rf "$OUT/empty"; mkdir -p "$OUT/empty"; fi
  start "$dir"
  settle # a backlog a previous round left (it would be drained meanwhile)
  l=$(load)
  "$TASKLOAD" 127.0.0.1:$PORT create "$CREATE_N" 64 noop_task > "$OUT/create-$store.json"
  settle # so the next round on this store starts without one, within the live-task quota
  rps=$(python3 -c "import json;print(round(json.load(open('$OUT/create-$store.json'))['creations_per_s']))")
  record "{\"step\":\"create\",\"store\":\"$store\",\"load\":$l,\"rps\":$rps,\"hwm_kib\":$(hwm_kib)}"
  stop
done

# --- start-up with 100k leased at kill -9 ------------------------------------------------
step startup && for store in small leased; do
  log "startup: $store"
  rm -rf "$OUT/run"; cp -r "$OUT/$store" "$OUT/run"; sync
  l=$(load)
  start "$OUT/run" "$OUT/startup-$store.log"; s=$STARTUP
  # Until recovery has logged its end (at most 120 s).
  for _ in $(seq 1200); do grep -q 'reclaimed .* interrupted' "$OUT/startup-$store.log" && break; [ $store = small ] && break; sleep 0.1; done
  stop
  lines=$(grep -E 'integrity|recovery' "$OUT/startup-$store.log" | sed 's/^\[[^]]*\] //' | python3 -c 'import json,sys;print(json.dumps([l.strip() for l in sys.stdin]))')
  record "{\"step\":\"startup\",\"store\":\"$store\",\"load\":$l,\"healthz_s\":$s,\"log\":$lines}"
done
rm -rf "$OUT/run"

# --- tasks/get while the janitor expires 1M tasks ---------------------------------------
if step expiry; then
log "expiry"
start "$OUT/expiring" "$OUT/expiry.log"
l=$(load); r=$("$TASKLOAD" 127.0.0.1:$PORT get "$OUT/expiring.ids" "$GET_S" 64)
expired=$(curl -s http://127.0.0.1:$PORT/metrics | awk '/^mcp_taskd_tasks_expired_total/ {print $2}')
record "{\"step\":\"expiry\",\"phase\":\"during\",\"load\":$l,\"result\":$r,\"expired_so_far\":${expired:-null}}"
for _ in $(seq 600); do
  left=$(curl -s http://127.0.0.1:$PORT/metrics | awk '/^mcp_taskd_tasks_expired_total/ {print $2}')
  [ "${left:-0}" -ge "$MID" ] && break; sleep 1
done
t_done=$(date +%s)
l=$(load); r=$("$TASKLOAD" 127.0.0.1:$PORT get "$OUT/expiring.ids" "$GET_S" 64)
record "{\"step\":\"expiry\",\"phase\":\"after\",\"load\":$l,\"result\":$r,\"expired\":${left:-null}}"
stop
grep -c 'past their TTL' "$OUT/expiry.log" > "$OUT/expiry-writes.txt" || true
fi

# --- the other rows of issue 19 -----------------------------------------------------------
for other in spawn drain; do
  if step others && [ -x "$REPO/benches/$other.sh" ]; then
    log "benches/$other.sh"
    BIN=$BIN "$REPO/benches/$other.sh" > "$OUT/$other.txt" 2>&1 || echo "(exit status $?)" >> "$OUT/$other.txt"
  fi
done

python3 "$REPO/benches/scale_tables.py" "$RESULTS" "$OUT" > "$OUT/tables.md"
cat "$OUT/tables.md"
if [ "${WRITE_README:-0}" = 1 ]; then
  python3 "$REPO/benches/scale_tables.py" --readme "$REPO/docs/benchmarks/store-scale.md" "$OUT/tables.md"
fi
[ "${KEEP:-0}" = 1 ] || rm -rf "$OUT"/{small,small-copy,big,big-time,leased,expiring,empty}
log "done: $OUT"
