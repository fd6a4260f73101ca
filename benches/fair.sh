#!/usr/bin/env bash
# Fair claiming (issue 29): what taking turns costs, and what it buys, in one run.
#
#   benches/fair.sh [BIN]    # BIN: the mcp-taskd binary (default: target/release, built)
#
# Steps, each on a fresh data dir, their order changing round by round:
#
# - drain-before, drain-1, drain-1000: the drain of a backlog of N no-op tasks queued
#   first (as benches/drain.sh fills one: `noop_task` a placeholder command tool that
#   keeps all but one queued, N creations through MCP, SIGTERM; then a server with the
#   built-in no-op and the default configuration, 8 workers, synchronous = FULL, starts
#   on that store). Timed from that server's exec to the newest `updated_at` (start-up
#   included). `before` is BEFORE, a build from before fair claiming (one queue, oldest
#   first), with one identity; `1` and `1000` are BIN with the backlog spread over one
#   and over 1,000 identities (TASKLOAD_TOKENS: creation i presents token t{i % M};
#   the fill configuration lists the 1,000 tokens, for both binaries).
# - e2e-before, e2e-now: end-to-end no-op tasks (benches/taskload.rs `e2e N 64`: create
#   N from 64 connections, then poll each until completed) on a fresh server with
#   examples/bench.toml's settings and no tokens (the one anonymous identity): the
#   creation rate and the end-to-end rate, BEFORE against BIN.
# - latency (BIN): token t0 fills a backlog of LAT_N tasks as above; a server with the
#   no-op and 2 workers starts on it, and token t1 runs K tasks one after the other
#   (`taskload latency`: create, poll every 0.2 ms until completed), while t0's backlog
#   drains (the jobs still queued after them are printed: 0 means the backlog ran out
#   before they ended); once the queue is empty, K more on the idle queue, same server.
#   Two workers, so that the backlog keeps them busy but leaves the box a core: the ratio
#   measures the queue, not a box whose every core the drain holds (tests/fair_share.rs
#   does the same). latency-before: BEFORE's first task behind the same backlog (it waits
#   for all of it), for reference.
#
# Prints the medians and the ratios (each round's ratio of the same round's steps, then
# the median over rounds). Goals (issue 29): drain-1 and drain-1000 at least 0.9x
# drain-before; latency behind the backlog within 2x idle.
#
# Environment: N (20000), LAT_N (10000), K (20), ROUNDS (3), CONC (32, fill
# connections), PORT (8107), BEFORE (/tmp/mcp-taskd-before), OUT, CARGO_TARGET_DIR.
# Needs python3 and curl.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=benches/lib.sh
. "$HERE/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
N=${N:-20000}
LAT_N=${LAT_N:-10000}
K=${K:-20}
ROUNDS=${ROUNDS:-3}
CONC=${CONC:-32}
PORT=${PORT:-8107}
BEFORE=${BEFORE:-/tmp/mcp-taskd-before}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-"${TMPDIR:-/tmp}/taskd-fair-$STAMP"}
mkdir -p "$OUT"
BIN=${1:-$CARGO_TARGET_DIR/release/mcp-taskd}

if [ "$#" -eq 0 ]; then (cd "$REPO" && cargo build --release --bin mcp-taskd); fi
[ -x "$BEFORE" ] || { echo "BEFORE=$BEFORE is not an executable" >&2; exit 1; }
TASKLOAD=$(bench_bin taskload)
cp "$BIN" "$OUT/taskd-now"
cp "$BEFORE" "$OUT/taskd-before"

# Tokens t0 … t999 (sha256 of the token text): only keys both binaries know.
python3 - "$OUT/tokens.toml" <<'PY'
import hashlib, sys
with open(sys.argv[1], "w") as f:
    for i in range(1000):
        digest = hashlib.sha256(f"t{i}".encode()).hexdigest()
        f.write(f'[[auth.tokens]]\nprincipal = "p{i}"\nsha256 = "{digest}"\n\n')
PY
{ fill_config "$PORT"; echo; cat "$OUT/tokens.toml"; } >"$OUT/fill.toml"
# The drain: the default configuration (8 workers), the demo set's in-process no-op.
cat >"$OUT/drain.toml" <<EOF
[server]
listen = "127.0.0.1:$PORT"
endpoint = "/mcp"
EOF
# End to end: examples/bench.toml's settings.
cat >"$OUT/e2e.toml" <<EOF
[server]
listen = "127.0.0.1:$PORT"
endpoint = "/mcp"

[store]
synchronous = "full"

[builtin]
sets = ["demo"]
EOF
# Latency: the no-op, 2 workers, the tokens.
cat - "$OUT/tokens.toml" >"$OUT/latency.toml" <<EOF
[server]
listen = "127.0.0.1:$PORT"
endpoint = "/mcp"

[builtin]
sets = ["demo"]

[workers]
threads = 2

EOF

trap stop_server EXIT INT TERM
load() { uptime | sed 's/.*load average: //; s/,.*//'; }

# fill BINARY DATA LOG COUNT IDENTITIES: COUNT queued no-op tasks, spread over IDENTITIES.
fill() {
  start_server "$1" "$OUT/fill.toml" "$2" "$3.fill"
  TASKLOAD_TOKENS=$5 "$TASKLOAD" "127.0.0.1:$PORT" create "$4" "$CONC" noop_task >"$3.create"
  stop_server
}

drain() { # file binary identities
  local data="$1.data" start
  fill "$2" "$data" "$1" "$N" "$3"
  load >"$1.load"
  start=$(date +%s%3N)
  start_server "$2" "$OUT/drain.toml" "$data" "$1.drain"
  while [ "$(jobs_in_flight "$PORT")" != 0 ]; do sleep 0.2; done
  stop_server
  python3 - "$data/tasks.db" "$start" "$N" >"$1.json" <<'PY'
import json, sqlite3, sys
db, start, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
c = sqlite3.connect(db)
done, last = c.execute("SELECT count(*), max(updated_at) FROM tasks WHERE status = 'completed'").fetchone()
assert done == n, (done, n)
print(json.dumps({"drain_s": (last - start) / 1000, "tasks_per_s": n / ((last - start) / 1000)}))
PY
  rm -rf "$data"
}

e2e() { # file binary
  local data="$1.data"
  load >"$1.load"
  start_server "$2" "$OUT/e2e.toml" "$data" "$1"
  "$TASKLOAD" "127.0.0.1:$PORT" e2e "$N" 64 >"$1.json"
  stop_server
  rm -rf "$data"
}

latency() { # file binary k_behind k_idle
  local data="$1.data" left
  fill "$2" "$data" "$1" "$LAT_N" 1
  load >"$1.load"
  start_server "$2" "$OUT/latency.toml" "$data" "$1.run"
  "$TASKLOAD" "127.0.0.1:$PORT" latency "$3" t1 >"$1.behind"
  left=$(jobs_in_flight "$PORT")
  if [ "$4" -gt 0 ]; then
    while [ "$(jobs_in_flight "$PORT")" != 0 ]; do sleep 0.2; done
    "$TASKLOAD" "127.0.0.1:$PORT" latency "$4" t1 >"$1.idle"
  else
    echo '{"latency_ms": []}' >"$1.idle"
  fi
  stop_server
  python3 - "$1.behind" "$1.idle" "$left" >"$1.json" <<'PY'
import json, statistics, sys
behind = json.load(open(sys.argv[1]))["latency_ms"]
idle = json.load(open(sys.argv[2]))["latency_ms"]
out = {"behind_ms": statistics.median(behind), "first_ms": behind[0],
       "queued_after": int(sys.argv[3])}
if idle:
    out["idle_ms"] = statistics.median(idle)
print(json.dumps(out))
PY
  rm -rf "$data"
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(uname -n)  nproc: $(nproc)"
  echo "commit: $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD || echo '+dirty')"
  echo "binary: $BIN  before: $BEFORE ($("$BEFORE" --version 2>/dev/null || echo '?'))"
  echo "settings: N=$N LAT_N=$LAT_N K=$K ROUNDS=$ROUNDS CONC=$CONC"
} | tee "$OUT/run.log"
STEPS=(drain-before drain-1 drain-1000 e2e-before e2e-now latency latency-before)
for r in $(seq "$ROUNDS"); do
  # Rotate the order round by round, and reverse it every other round.
  order=() rev=()
  for i in "${!STEPS[@]}"; do order+=("${STEPS[$(((i + r) % ${#STEPS[@]}))]}"); done
  if [ $((r % 2)) = 0 ]; then
    for ((i = ${#order[@]} - 1; i >= 0; i--)); do rev+=("${order[$i]}"); done
    order=("${rev[@]}")
  fi
  for step in "${order[@]}"; do
    f="$OUT/r$r-$step"
    case $step in
      drain-before) drain "$f" "$OUT/taskd-before" 1 ;;
      drain-1) drain "$f" "$OUT/taskd-now" 1 ;;
      drain-1000) drain "$f" "$OUT/taskd-now" 1000 ;;
      e2e-before) e2e "$f" "$OUT/taskd-before" ;;
      e2e-now) e2e "$f" "$OUT/taskd-now" ;;
      latency) latency "$f" "$OUT/taskd-now" "$K" "$K" ;;
      latency-before) latency "$f" "$OUT/taskd-before" 1 0 ;;
    esac
    echo "round $r $step: $(cat "$f.json") load $(cat "$f.load")" | tee -a "$OUT/run.log"
  done
done

python3 - "$OUT" "$N" "$LAT_N" "$K" <<'PY' | tee "$OUT/summary.md"
import glob, json, os, statistics, sys

out, n, lat_n, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
runs = {}
for path in glob.glob(os.path.join(out, "r*-*.json")):
    rnd, step = os.path.basename(path)[:-5].split("-", 1)
    runs.setdefault(int(rnd[1:]), {})[step] = json.load(open(path))
rounds = sorted(runs)
med = statistics.median

def values(step, key):
    return [runs[r][step][key] for r in rounds if step in runs[r]]

def ratios(top, bottom, key):
    return [runs[r][top][key] / runs[r][bottom][key]
            for r in rounds if top in runs[r] and bottom in runs[r]]

def fmt(xs, f="%.0f"):
    return ", ".join(f % x for x in xs)

print(f"N={n:,} drain and end to end, LAT_N={lat_n:,} backlog, K={k}; {len(rounds)} rounds")
print()
print("| step | median | per round |")
print("|---|---:|---|")
for step, key, unit in [("drain-before", "tasks_per_s", "tasks/s"),
                        ("drain-1", "tasks_per_s", "tasks/s"),
                        ("drain-1000", "tasks_per_s", "tasks/s"),
                        ("e2e-before", "creations_per_s", "creations/s"),
                        ("e2e-now", "creations_per_s", "creations/s"),
                        ("e2e-before", "tasks_per_s", "tasks/s end to end"),
                        ("e2e-now", "tasks_per_s", "tasks/s end to end")]:
    v = values(step, key)
    if v:
        print(f"| {step} {unit} | {med(v):,.0f} | {fmt(v)} |")
for step, key, label in [("latency", "idle_ms", "latency idle, ms"),
                         ("latency", "behind_ms", "latency behind the backlog, ms"),
                         ("latency", "queued_after", "jobs still queued after them"),
                         ("latency-before", "first_ms", "before: first task behind the backlog, ms")]:
    v = values(step, key)
    if v:
        print(f"| {label} | {med(v):,.1f} | {fmt(v, '%.1f')} |")
print()
print("| ratio (per round, then the median) | median | per round | goal |")
print("|---|---:|---|---|")
for label, r, goal in [
        ("drain, 1 identity / before", ratios("drain-1", "drain-before", "tasks_per_s"), "≥ 0.9"),
        ("drain, 1,000 identities / before", ratios("drain-1000", "drain-before", "tasks_per_s"), "≥ 0.9"),
        ("drain, 1,000 / 1 identity", ratios("drain-1000", "drain-1", "tasks_per_s"), "≈ 1"),
        ("creations/s, now / before", ratios("e2e-now", "e2e-before", "creations_per_s"), ""),
        ("end to end, now / before", ratios("e2e-now", "e2e-before", "tasks_per_s"), "≥ 0.9"),
        ("latency behind the backlog / idle",
            [runs[x]["latency"]["behind_ms"] / runs[x]["latency"]["idle_ms"]
             for x in rounds if "latency" in runs[x]], "≤ 2")]:
    if r:
        print(f"| {label} | **{med(r):.2f}×** | {fmt(r, '%.2f')} | {goal} |")
PY
echo "results: $OUT"
