#!/usr/bin/env bash
# Webhooks (issue 49): what one webhook costs task creations and a drain, side by side
# with the build before webhooks and with no webhook, in one run; and the delivery lag
# under that load.
#
#   benches/webhooks.sh BEFORE_BIN [AFTER_BIN]   # AFTER_BIN: target/release (built)
#
# Per round, three runs in an order that rotates round by round:
# - before: BEFORE_BIN (a build without webhooks), no webhook;
# - none:   AFTER_BIN, no webhook;
# - hook:   AFTER_BIN, one webhook for task.created and task.completed to a fast
#           receiver on loopback (benches/webhooksink.rs: answers 204 at once, records
#           each delivery's arrival minus its event's time).
# Each run, as benches/drain.sh does: a server whose noop_task is a placeholder command
# tool (one attempt at a time, never ends) takes N creations through MCP at CONC
# connections (benches/taskload.rs `create`: creations/s); it stops (SIGTERM); a server
# with the built-in no-op noop_task (8 workers, synchronous = FULL) drains the backlog on
# that store (its exec to the newest completion: drain s). In the hook run the webhook
# is configured in both servers: N task.created events are recorded and delivered while
# the tasks are created (the rest after the stop, by the draining server), and N
# task.completed events while they drain. Then it waits until the receiver has every
# one of the 2N events (distinct webhook-ids): "all delivered" is that moment after the
# drain's end, and the lag p50/p99/max is over every delivery of the run. The drain
# server's store writer thread CPU up to the drain's end, per task, is reported too
# (lib.sh writer_cpu_ns): steadier than wall time on a shared box.
#
# Prints a markdown table and refreshes the latest run on docs/benchmarks/webhooks.md.
# The receiver runs under SCHED_IDLE (`chrt --idle 0`; SINK_NICE=N runs it at nice N
# instead): it stands for one on another machine, and takes only the CPU the server
# leaves.
# Environment: N (20000), ROUNDS (3), CONC (32), EVENTS ('"task.created",
# "task.completed"'), PORT (8107), SINK_PORT (8108), SINK_NICE (unset), OUT, README
# (README=- leaves it alone), CARGO_TARGET_DIR. Needs python3, curl.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=benches/lib.sh
. "$HERE/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
N=${N:-20000}
ROUNDS=${ROUNDS:-3}
CONC=${CONC:-32}
PORT=${PORT:-8107}
SINK_PORT=${SINK_PORT:-8108}
# The webhook's events (TOML strings); the run waits for one delivery per task of each.
EVENTS=${EVENTS:-'"task.created", "task.completed"'}
PER_TASK=$(echo "$EVENTS" | tr ',' '\n' | grep -c task)
README=${README:-$REPO/docs/benchmarks/webhooks.md}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-"${TMPDIR:-/tmp}/taskd-webhooks-$STAMP"}
mkdir -p "$OUT"
[ $# -ge 1 ] || { echo "usage: $0 BEFORE_BIN [AFTER_BIN]" >&2; exit 2; }
BEFORE=$1
AFTER=${2:-$CARGO_TARGET_DIR/release/mcp-taskd}
if [ $# -lt 2 ]; then (cd "$REPO" && cargo build --release --bin mcp-taskd); fi
TASKLOAD=$(bench_bin taskload)
SINK=$(bench_bin webhooksink)
cp "$BEFORE" "$OUT/taskd-before"
cp "$AFTER" "$OUT/taskd-after"

printf 'whsec_%s\n' "$(head -c 32 /dev/urandom | base64)" >"$OUT/hook.secret"
cat >"$OUT/hook.part" <<EOF

[[webhooks]]
name = "sink"
url = "${HOOK_URL:-http://127.0.0.1:$SINK_PORT/hook}"
events = [$EVENTS]
secret_file = "$OUT/hook.secret"
allow_http = ["127.0.0.1"]
EOF
fill_config "$PORT" >"$OUT/fill.toml"
cat >"$OUT/drain.toml" <<EOF
[server]
listen = "127.0.0.1:$PORT"
endpoint = "/mcp"
EOF
cat "$OUT/fill.toml" "$OUT/hook.part" >"$OUT/fill-hook.toml"
cat "$OUT/drain.toml" "$OUT/hook.part" >"$OUT/drain-hook.toml"

SINK_PID=""
cleanup() {
  stop_server
  [ -z "$SINK_PID" ] || kill "$SINK_PID" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

# A real receiver is on another machine; here it takes only the CPU the server leaves
# (SINK_NICE=0 gives it an equal share). Idle, not niced: a niced receiver still holds
# a core until its slice ends when a server thread wakes, and the server's threads
# mostly wait on each other.
if [ -n "${SINK_NICE:-}" ]; then
  nice -n "$SINK_NICE" "$SINK" "$SINK_PORT" 4 >"$OUT/sink.out" 2>&1 &
else
  chrt --idle 0 "$SINK" "$SINK_PORT" 4 >"$OUT/sink.out" 2>&1 &
fi
SINK_PID=$!
for _ in $(seq 100); do grep -q listening "$OUT/sink.out" 2>/dev/null && break; sleep 0.05; done
sink_stats() { curl -sS "http://127.0.0.1:$SINK_PORT/stats"; }

run() { # file binary fill-config drain-config
  local data="$1.data" start end
  curl -sS -X POST "http://127.0.0.1:$SINK_PORT/reset" >/dev/null
  uptime | sed 's/.*load average: //' >"$1.load"
  start_server "$2" "$3" "$data" "$1.fill"
  "$TASKLOAD" "127.0.0.1:$PORT" create "$N" "$CONC" noop_task >"$1.create"
  stop_server
  start=$(date +%s%3N)
  start_server "$2" "$4" "$data" "$1.drain"
  while [ "$(jobs_in_flight "$PORT")" != 0 ]; do sleep 0.1; done
  end=$(date +%s%3N)
  writer_cpu_ns "$SERVER" >"$1.writer"
  if [ "$3" = "$OUT/fill-hook.toml" ] && [ -z "${HOOK_URL:-}" ]; then
    # Every event delivered (distinct webhook-ids), within 5 minutes.
    for _ in $(seq 3000); do
      [ "$(sink_stats | grep -o '"distinct":[0-9]*' | cut -d: -f2)" -ge $((PER_TASK * N)) ] && break
      sleep 0.1
    done
  fi
  sink_stats >"$1.sink"
  stop_server
  python3 - "$data/tasks.db" "$start" "$end" "$N" "$1.create" "$1.sink" "$1.writer" >"$1.json" <<'PY'
import json, sqlite3, sys
db, start, end, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
writer_ns = int(open(sys.argv[7]).read().strip() or 0)
create, sink = json.load(open(sys.argv[5])), json.load(open(sys.argv[6]))
c = sqlite3.connect(db)
done, last = c.execute("SELECT count(*), max(updated_at) FROM tasks WHERE status = 'completed'").fetchone()
assert done == n, (done, n)
result = {"n": n, "creations_per_s": create["creations_per_s"], "drain_s": (last - start) / 1000,
          "writer_us_per_task": writer_ns / 1000 / n}
if sink["count"] and sink["distinct"] >= n:
    result.update({"delivered": sink["distinct"], "received": sink["count"],
                   "all_delivered_after_drain_s": max(0, (sink["last_arrival_ms"] - last) / 1000),
                   "lag_p50_ms": sink["p50_ms"], "lag_p99_ms": sink["p99_ms"], "lag_max_ms": sink["max_ms"]})
print(json.dumps(result))
PY
  rm -rf "$data"
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(uname -n)  nproc: $(nproc)"
  echo "commit: $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD || echo '+dirty')"
  echo "before: $BEFORE  after: $AFTER"
  echo "settings: N=$N ROUNDS=$ROUNDS CONC=$CONC EVENTS=[$EVENTS]"
} | tee "$OUT/run.log"
for r in $(seq "$ROUNDS"); do
  case $((r % 3)) in
    1) order="before none hook" ;;
    2) order="hook before none" ;;
    0) order="none hook before" ;;
  esac
  for who in $order; do
    f="$OUT/r$r-$who"
    case $who in
      before) run "$f" "$OUT/taskd-before" "$OUT/fill.toml" "$OUT/drain.toml" ;;
      none) run "$f" "$OUT/taskd-after" "$OUT/fill.toml" "$OUT/drain.toml" ;;
      hook) run "$f" "$OUT/taskd-after" "$OUT/fill-hook.toml" "$OUT/drain-hook.toml" ;;
    esac
    echo "round $r $who: $(cat "$f.json") load $(cat "$f.load")" | tee -a "$OUT/run.log"
  done
done

python3 - "$OUT" "$README" "$(git -C "$REPO" rev-parse --short HEAD)" "$N" <<'PY' | tee "$OUT/summary.md"
import glob, json, os, re, statistics, sys

out, readme, commit, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
runs = {}
for path in sorted(glob.glob(os.path.join(out, "r*-*.json"))):
    rnd, who = os.path.basename(path)[:-5].split("-", 1)
    load = open(path[:-5] + ".load").read().split(",")[0].strip()
    runs.setdefault(int(rnd[1:]), {})[who] = (json.load(open(path)), load)
names = {"before": "build before webhooks", "none": "this build, no webhook",
         "hook": "this build, one webhook"}
lines = ["| round | build | creations/s | drain s | writer CPU µs/task | all delivered after the drain | lag p50 / p99 / max | load (1 min) |",
         "|---:|---|---:|---:|---:|---:|---:|---:|"]
ratios = {key: [] for key in ("create_none", "create_before", "drain_none", "drain_before", "writer_none")}
for rnd in sorted(runs):
    for who in ("before", "none", "hook"):
        if who not in runs[rnd]:
            continue
        r, load = runs[rnd][who]
        delivered = lag = ""
        if who == "hook":
            delivered = "%.2f s" % r["all_delivered_after_drain_s"]
            lag = "%.0f / %.0f / %.0f ms" % (r["lag_p50_ms"], r["lag_p99_ms"], r["lag_max_ms"])
            for base in ("none", "before"):
                if base in runs[rnd]:
                    b = runs[rnd][base][0]
                    ratios["create_" + base].append(r["creations_per_s"] / b["creations_per_s"])
                    ratios["drain_" + base].append(b["drain_s"] / r["drain_s"])
                    if base == "none" and b.get("writer_us_per_task"):
                        ratios["writer_none"].append(r["writer_us_per_task"] / b["writer_us_per_task"])
        writer = "%.1f" % r["writer_us_per_task"] if r.get("writer_us_per_task") else ""
        lines.append("| %d | %s | %s | %.2f | %s | %s | %s | %s |" % (
            rnd, names[who], f'{r["creations_per_s"]:,.0f}', r["drain_s"], writer, delivered, lag, load))
med = lambda xs: statistics.median(xs) if xs else float("nan")
lines.append("")
lines.append(("Medians of the rounds' ratios, one webhook against none: creations/s **%.2f×** "
              "(against the build before: %.2f×), drain rate **%.2f×** (against the build before: "
              "%.2f×); the drain's store writer CPU per task %.2f× of none. Goal: both within "
              "10%% of none.") % (
    med(ratios["create_none"]), med(ratios["create_before"]),
    med(ratios["drain_none"]), med(ratios["drain_before"]), med(ratios["writer_none"])))
table = "\n".join(lines)
print(table)
if readme != "-" and os.path.exists(readme):
    text = open(readme).read()
    begin, end = "<!-- latest run: begin -->", "<!-- latest run: end -->"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        stamp = "Commit `%s`, N = %d, %s." % (commit, n, open(os.path.join(out, "run.log")).readline().strip())
        open(readme, "w").write(head + begin + "\n" + stamp + "\n\n" + table + "\n" + end + tail)
PY
echo "results in $OUT"
