#!/usr/bin/env bash
# Flow control (issue 48): what concurrency keys, rates and pauses cost a drain that
# uses none of them, and what a key on every task costs, side by side with the build
# before flow control, in one run.
#
#   benches/flow.sh BEFORE_BIN [AFTER_BIN]   # AFTER_BIN: target/release (built)
#
# Each run, as benches/drain.sh does: a server whose `noop_task` is a placeholder
# command tool (one attempt at a time, never ends) takes N creations through MCP
# (benches/taskload.rs `create`); it stops (SIGTERM); a second server (8 workers,
# synchronous = FULL) drains the backlog on that store: from its exec to the newest
# completion. Five runs per round, in an order that rotates round by round:
# - before / after (N_BUILTIN tasks): the built-in no-op `noop_task`, no key, no rate:
#   the plain backlog, where every claim still passes the pause, rate and key checks
#   (goal: after within 5% of before);
# - before-cmd / after-cmd (N_CMD tasks): `noop_task` a command tool running
#   /bin/true, no key;
# - after-keyed (N_CMD tasks): the same tool with `concurrency_key = "/key"`, each task
#   created with one of KEYS values (max_concurrency_per_key 1, more values than
#   workers, so the gates hold a task only when two of one value meet): every task
#   passes its key's gate when created and gives its place back when it ends (goal:
#   within 15% of before-cmd).
#
# Prints a markdown table and refreshes the latest run on docs/benchmarks/flow.md.
# Environment: N_BUILTIN (20000), N_CMD (3000), KEYS (64), ROUNDS (3), CONC (32),
# PORT (8109), OUT, README (README=- leaves it alone), CARGO_TARGET_DIR. Needs python3,
# curl.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=benches/lib.sh
. "$HERE/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
N_BUILTIN=${N_BUILTIN:-20000}
N_CMD=${N_CMD:-3000}
KEYS=${KEYS:-64}
ROUNDS=${ROUNDS:-3}
CONC=${CONC:-32}
PORT=${PORT:-8109}
README=${README:-$REPO/docs/benchmarks/flow.md}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-"${TMPDIR:-/tmp}/taskd-flow-$STAMP"}
mkdir -p "$OUT"
[ $# -ge 1 ] || { echo "usage: $0 BEFORE_BIN [AFTER_BIN]" >&2; exit 2; }
BEFORE=$1
AFTER=${2:-$CARGO_TARGET_DIR/release/mcp-taskd}
if [ $# -lt 2 ]; then (cd "$REPO" && cargo build --release --bin mcp-taskd); fi
TASKLOAD=$(bench_bin taskload)
cp "$BEFORE" "$OUT/taskd-before"
cp "$AFTER" "$OUT/taskd-after"

# The configurations: fill (placeholder) and drain, for the built-in no-op, the command
# tool, and the command tool keyed. The key is declared when the backlog is created too:
# a task's key is taken from its arguments as it is stored.
fill_config "$PORT" >"$OUT/fill.toml"
cat >"$OUT/drain.toml" <<EOF
[server]
listen = "127.0.0.1:$PORT"
endpoint = "/mcp"
EOF
KEY_LINE='concurrency_key = "/key"'
sed "s|^max_concurrency = 1$|&\n$KEY_LINE|" "$OUT/fill.toml" >"$OUT/fill-keyed.toml"
command_drain() { # extra tool line
  cat <<EOF
[server]
listen = "127.0.0.1:$PORT"
endpoint = "/mcp"

[builtin]
sets = []

[[tools]]
name = "noop_task"
description = "a no-op command"
task_policy = "required"
command = ["/bin/true"]
$1
EOF
}
command_drain "" >"$OUT/drain-cmd.toml"
command_drain "$KEY_LINE" >"$OUT/drain-keyed.toml"

trap stop_server EXIT INT TERM

run() { # file binary fill-config drain-config n keys
  local data="$1.data" start
  uptime | sed 's/.*load average: //' >"$1.load"
  start_server "$2" "$3" "$data" "$1.fill"
  if [ "$6" = 0 ]; then
    "$TASKLOAD" "127.0.0.1:$PORT" create "$5" "$CONC" noop_task >"$1.create"
  else
    TASKLOAD_KEYS=$6 "$TASKLOAD" "127.0.0.1:$PORT" create "$5" "$CONC" noop_task >"$1.create"
  fi
  stop_server
  start=$(date +%s%3N)
  start_server "$2" "$4" "$data" "$1.drain"
  while [ "$(jobs_in_flight "$PORT")" != 0 ]; do sleep 0.1; done
  writer_cpu_ns "$SERVER" >"$1.writer"
  stop_server
  drain_result "$data/tasks.db" "$start" "$5" >"$1.json"
  rm -rf "$data"
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(uname -n)  nproc: $(nproc)"
  echo "commit: $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD || echo '+dirty')"
  echo "before: $BEFORE  after: $AFTER"
  echo "settings: N_BUILTIN=$N_BUILTIN N_CMD=$N_CMD KEYS=$KEYS ROUNDS=$ROUNDS CONC=$CONC"
} | tee "$OUT/run.log"
WHO=(before after before-cmd after-cmd after-keyed)
for r in $(seq "$ROUNDS"); do
  order=()
  for i in "${!WHO[@]}"; do order+=("${WHO[$(((i + r - 1) % ${#WHO[@]}))]}"); done
  for who in "${order[@]}"; do
    f="$OUT/r$r-$who"
    case $who in
      before) run "$f" "$OUT/taskd-before" "$OUT/fill.toml" "$OUT/drain.toml" "$N_BUILTIN" 0 ;;
      after) run "$f" "$OUT/taskd-after" "$OUT/fill.toml" "$OUT/drain.toml" "$N_BUILTIN" 0 ;;
      before-cmd) run "$f" "$OUT/taskd-before" "$OUT/fill.toml" "$OUT/drain-cmd.toml" "$N_CMD" 0 ;;
      after-cmd) run "$f" "$OUT/taskd-after" "$OUT/fill.toml" "$OUT/drain-cmd.toml" "$N_CMD" 0 ;;
      after-keyed) run "$f" "$OUT/taskd-after" "$OUT/fill-keyed.toml" "$OUT/drain-keyed.toml" "$N_CMD" "$KEYS" ;;
    esac
    echo "round $r $who: $(cat "$f.json") load $(cat "$f.load")" | tee -a "$OUT/run.log"
  done
done

python3 - "$OUT" "$README" "$(git -C "$REPO" rev-parse --short HEAD)" <<'PY' | tee "$OUT/summary.md"
import glob, json, os, statistics, sys

out, readme, commit = sys.argv[1], sys.argv[2], sys.argv[3]
runs = {}
for path in sorted(glob.glob(os.path.join(out, "r*-*.json"))):
    rnd, who = os.path.basename(path)[:-5].split("-", 1)
    load = open(path[:-5] + ".load").read().split(",")[0].strip()
    result = json.load(open(path))
    result["writer_us"] = int(open(path[:-5] + ".writer").read()) / 1000 / result["n"]
    runs.setdefault(int(rnd[1:]), {})[who] = (result, load)
names = {"before": "build before, built-in no-op", "after": "this build, built-in no-op",
         "before-cmd": "build before, command tool", "after-cmd": "this build, command tool",
         "after-keyed": "this build, command tool, a key on every task"}
# Each ratio: the drain rate of the first against the second, in the same round.
pairs = {"plain": ("after", "before"), "cmd": ("after-cmd", "before-cmd"),
         "keyed": ("after-keyed", "before-cmd"), "keyed_self": ("after-keyed", "after-cmd")}
ratios = {name: [] for name in pairs}
# The same pairs, by the store writer's CPU per task (the first's against the second's).
writer = {name: [] for name in pairs}
lines = ["| round | build, tool | tasks | drain s | tasks/s | writer CPU µs/task | load (1 min) |",
         "|---:|---|---:|---:|---:|---:|---:|"]
for rnd in sorted(runs):
    for who in names:
        if who in runs[rnd]:
            r, load = runs[rnd][who]
            lines.append("| %d | %s | %s | %.2f | %s | %.1f | %s |" % (
                rnd, names[who], f'{r["n"]:,}', r["drain_s"], f'{r["n"] / r["drain_s"]:,.0f}',
                r["writer_us"], load))
    for name, (a, b) in pairs.items():
        if a in runs[rnd] and b in runs[rnd]:
            ratios[name].append(runs[rnd][b][0]["drain_s"] / runs[rnd][a][0]["drain_s"])
            if runs[rnd][b][0]["writer_us"] > 0:
                writer[name].append(runs[rnd][a][0]["writer_us"] / runs[rnd][b][0]["writer_us"])
med = lambda xs: statistics.median(xs) if xs else float("nan")
lines.append("")
lines.append(("Medians of the rounds' ratios of drain rates: a plain backlog of the built-in "
              "no-op, this build against the build before, **%.3f×** (goal: within 5%%); the "
              "command tool, no key, %.3f×; the command tool with a key on every task against "
              "the build before without one **%.3f×** (goal: within 15%%), against this build "
              "without one %.3f×.") % (
    med(ratios["plain"]), med(ratios["cmd"]), med(ratios["keyed"]), med(ratios["keyed_self"])))
lines.append(("The store writer's CPU per task, this build against the build before: plain "
              "**%.3f×**, command tool %.3f×, keyed against the build before without a key "
              "%.3f×.") % (med(writer["plain"]), med(writer["cmd"]), med(writer["keyed"])))
table = "\n".join(lines)
print(table)
if readme != "-" and os.path.exists(readme):
    text = open(readme).read()
    begin, end = "<!-- latest run: begin -->", "<!-- latest run: end -->"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        stamp = "Commit `%s`, %s." % (commit, open(os.path.join(out, "run.log")).readline().strip())
        open(readme, "w").write(head + begin + "\n" + stamp + "\n\n" + table + "\n" + end + tail)
PY
echo "results in $OUT"
