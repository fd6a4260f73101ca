#!/usr/bin/env bash
# Task-creation rate of the store's modes, side by side, in interleaved rounds:
#
#   before      a baseline binary (BEFORE=path: this branch's base, built), exclusive
#   exclusive   this build, store.locking = "exclusive", internal checkpoints (default)
#   untriggered as exclusive, with the counting triggers (schema.sql, migration 4)
#               dropped before the step: what the trigger-kept counts cost
#   shared      this build, locking = "shared", checkpoints = "external", no Litestream
#   litestream  as shared, with `litestream replicate` to a file replica running beside
#
# Each step: a fresh data dir, examples/bench.toml (synchronous = "full"), `oha -z DUR s
# -c CONC` of `tools/call noop_task` declaring the Tasks extension (every answer is a
# durable task, acknowledged after its fsynced commit), then a wait until the workers
# have run every task. Prints per mode and round the creations/s and the server's CPU
# time (user + system) per task over the step, then the medians and their ratios to
# `exclusive`. CPU per task is the steadier figure on a shared box. The order of the modes
# rotates between rounds to spread the box's drift.
#
#   ROUNDS=3 DUR=8 benches/store-modes.sh
#
# Environment: BEFORE (skipped when unset), ROUNDS (3), DUR (8), CONC (64), LITESTREAM
# (else .ci/litestream.sh installs it), OHA. Needs oha, curl, python3.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-3}
DUR=${DUR:-8}
CONC=${CONC:-64}
OHA=${OHA:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}
LITESTREAM=${LITESTREAM:-$("$REPO/.ci/litestream.sh")}
(cd "$REPO" && cargo build --release --bin mcp-taskd >&2)
OUT=$(mktemp -d -t store-modes-XXXXXX)
# Copies with their own names, so that nobody's `pkill mcp-taskd` stops a step.
cp "$REPO/target/release/mcp-taskd" "$OUT/taskd-after"
MODES=(exclusive untriggered shared litestream)
if [ -n "${BEFORE:-}" ]; then cp "$BEFORE" "$OUT/taskd-before"; MODES=(before "${MODES[@]}"); fi
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}'
BODY='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"noop_task","arguments":{},'"$META"'}}'
H=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream'
   -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' -H 'Mcp-Name: noop_task')
SERVER="" REPLICATOR=""
stop() {
  for pid in $REPLICATOR $SERVER; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  SERVER="" REPLICATOR=""
}
trap 'stop; rm -rf "$OUT"' EXIT

step() { # mode round -> prints creations/s
  local mode=$1 dir="$OUT/$1-$2" bin="$OUT/taskd-after" port=$((8500 + RANDOM % 400))
  mkdir -p "$dir"
  sed "s/^listen = .*/listen = \"127.0.0.1:$port\"/" "$REPO/examples/bench.toml" >"$dir/config.toml"
  case $mode in
    before) bin="$OUT/taskd-before" ;;
    shared|litestream) sed -i 's/^\[store\]$/[store]\nlocking = "shared"\ncheckpoints = "external"/' "$dir/config.toml" ;;
  esac
  serve() {
    "$bin" serve --config "$dir/config.toml" --data-dir "$dir/data" >"$dir/server.out" 2>"$dir/server.err" &
    SERVER=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  }
  serve
  if [ "$mode" = untriggered ]; then
    stop
    python3 -c 'import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
for (name,) in c.execute("SELECT name FROM sqlite_master WHERE type = '"'"'trigger'"'"'").fetchall():
    c.execute(f"DROP TRIGGER {name}")
c.commit()' "$dir/data/tasks.db"
    serve
  fi
  if [ "$mode" = litestream ]; then
    printf 'dbs:\n  - path: %s\n    replica:\n      type: file\n      path: %s\n' \
      "$dir/data/tasks.db" "$dir/replica" >"$dir/litestream.yml"
    "$LITESTREAM" replicate -config "$dir/litestream.yml" >"$dir/litestream.log" 2>&1 &
    REPLICATOR=$!
    for _ in $(seq 100); do [ -d "$dir/replica/ltx" ] && break; sleep 0.1; done
  fi
  cpu() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; } # utime + stime, in clock ticks
  local before_cpu; before_cpu=$(cpu)
  "$OHA" -z "${DUR}s" -c "$CONC" --no-tui -m POST "${H[@]}" -d "$BODY" \
    "http://127.0.0.1:$port/mcp" --output-format json >"$dir/oha.json" 2>/dev/null
  # The tasks created are also run (noop_task) by the same server: wait for the queue
  # to drain, so that the CPU counted is each task's whole life.
  # (Read from what every mode keeps: no ready job waiting and no attempt running, twice
  # in a row; the job counts are not kept in the `untriggered` mode.)
  local idle=0
  for _ in $(seq 300); do
    if curl -s "http://127.0.0.1:$port/metrics" |
      grep -cE '^mcp_taskd_(oldest_ready_job_age_seconds 0\.000|attempts_running 0)$' |
      grep -qx 2; then
      idle=$((idle + 1)); [ "$idle" -ge 2 ] && break
    else
      idle=0
    fi
    sleep 0.1
  done
  local ticks=$(( $(cpu) - before_cpu ))
  stop
  python3 -c 'import json,sys,os
s=json.load(open(sys.argv[1]))
ok=s.get("statusCodeDistribution",{}).get("200",0)
cpu_us=int(sys.argv[2]) / os.sysconf("SC_CLK_TCK") * 1e6 / max(ok, 1)
print(round(s["summary"]["requestsPerSec"]), ok, round(cpu_us))' "$dir/oha.json" "$ticks"
  rm -rf "$dir"
}

: >"$OUT/results"
for round in $(seq "$ROUNDS"); do
  n=${#MODES[@]}
  for i in $(seq 0 $((n - 1))); do
    mode=${MODES[$(((i + round - 1) % n))]}
    read -r rate ok cpu < <(step "$mode" "$round")
    echo "round $round  $mode  $rate creations/s  ($ok answered 200)  server CPU $cpu us/task"
    echo "$mode $rate $cpu" >>"$OUT/results"
  done
done
python3 - "$OUT/results" <<'PY'
import statistics, sys
rates, cpus = {}, {}
for line in open(sys.argv[1]):
    mode, rate, cpu = line.split()
    rates.setdefault(mode, []).append(float(rate))
    cpus.setdefault(mode, []).append(float(cpu))
base = statistics.median(rates["exclusive"])
base_cpu = statistics.median(cpus["exclusive"])
print("median creations/s (ratio to exclusive); median server CPU per task, created and run:")
for mode, values in rates.items():
    m, c = statistics.median(values), statistics.median(cpus[mode])
    print(f"  {mode:<11} {m:>7.0f}/s ({m / base:.2f})  {c:>5.0f} us ({c / base_cpu:.2f})"
          f"   rounds: {', '.join(str(int(v)) for v in values)}")
PY
