#!/usr/bin/env bash
# Command tools end to end (issue #19): no-op tasks of a tiny compiled program and of a
# shell script, created through MCP and drained by the workers, and the spawn cost per
# run against plain `fork`+`exec`, `posix_spawn` and `std::process::Command`. On x86-64
# a third tool, a static program without libc (its `_start` exits at once), shows what
# the server itself sustains: a C program's own start-up (the dynamic loader, and
# glibc asking `cpuid` for cache sizes, which traps to the hypervisor in a VM) costs
# about as much CPU as everything the server does for a run.
#
#   benches/spawn.sh [BIN]          # BIN: the mcp-taskd binary (default target/release)
#
# Per round, for each tool in turn (the order alternates round by round): the load
# average, then `taskload e2e N CONC TOOL` (benches/taskload.rs: N task creations over
# CONC connections, then each task polled until completed; tasks/s is N over the time
# from the first creation to the last completion seen), with the server's CPU split into
# its own threads and its reaped children (the programs), from /proc/PID/stat, and its
# context switches (`perf stat`, when perf works). Then benches/spawncost.rs runs the
# compiled program with each way of starting it, with as much touched heap as the
# server's resident set (fork copies page tables; posix_spawn does not).
#
# Prints a markdown table and refreshes the latest run on
# docs/benchmarks/command-tools.md. Environment: N (5000), CONC (64), ROUNDS (3), POLL_MS (100),
# SPAWNS (2000), PORT (8105), OUT (results folder), CARGO_TARGET_DIR, README (the page
# to refresh; README=- leaves it alone), PERF_STAT (0: no perf stat). Needs cc, python3.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=benches/lib.sh
. "$HERE/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
N=${N:-5000}
CONC=${CONC:-64}
ROUNDS=${ROUNDS:-3}
# The client's pause between two polls of a task still working. The server asks for
# 1,000 ms (`tasks.poll_interval_ms`); 100 ms is ten times as eager, about 1.5
# `tasks/get` a task here. At 20 ms (about 4.3 a task) the polls cost the server more
# CPU than the runs (docs/benchmarks/command-tools.md).
POLL_MS=${POLL_MS:-100}
SPAWNS=${SPAWNS:-2000}
PORT=${PORT:-8105}
README=${README:-$REPO/docs/benchmarks/command-tools.md}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-"${TMPDIR:-/tmp}/taskd-spawn-$STAMP"}
mkdir -p "$OUT"
BIN=${1:-$CARGO_TARGET_DIR/release/mcp-taskd}

if [ "$#" -eq 0 ]; then (cd "$REPO" && cargo build --release --bin mcp-taskd); fi
TASKLOAD=$(bench_bin taskload)
SPAWNCOST=$(bench_bin spawncost)
# A copy with its own name: a `pkill mcp-taskd` elsewhere on the box cannot stop it.
cp "$BIN" "$OUT/taskd-spawn"

# The two no-op programs: a C program that does nothing, and a shell script that does
# nothing. Both answer with the plain-text convenience (exit 0, empty stdout).
printf 'int main(void) { return 0; }\n' >"$OUT/noop.c"
cc -O2 -o "$OUT/noop" "$OUT/noop.c"
printf '#!/bin/sh\nexit 0\n' >"$OUT/noop.sh"
chmod +x "$OUT/noop.sh"
TOOLS="noop_bin noop_sh"
if [ "$(uname -m)" = x86_64 ]; then
  # shellcheck disable=SC2016 # C source: `$60` is the exit syscall, not a shell variable
  printf 'void _start(void) { __asm__ volatile("mov $60, %%eax\\n xor %%edi, %%edi\\n syscall"); }\n' \
    >"$OUT/noop_raw.c"
  cc -O2 -static -nostdlib -o "$OUT/noop_raw" "$OUT/noop_raw.c"
  TOOLS="$TOOLS noop_raw"
fi
cat >"$OUT/spawn.toml" <<EOF
[server]
listen = "127.0.0.1:$PORT"
endpoint = "/mcp"

[builtin]
sets = []

[[tools]]
name = "noop_bin"
description = "A compiled program that does nothing"
task_policy = "required"
command = ["$OUT/noop"]

[[tools]]
name = "noop_sh"
description = "A shell script that does nothing"
task_policy = "required"
command = ["$OUT/noop.sh"]

[[tools]]
name = "noop_raw"
description = "A static program without libc that does nothing (x86-64 only)"
task_policy = "required"
command = ["$OUT/noop_raw"]
EOF

"$OUT/taskd-spawn" serve --config "$OUT/spawn.toml" --data-dir "$OUT/data" \
  >"$OUT/server.out" 2>"$OUT/server.log" &
SERVER=$!
cleanup() {
  if kill -0 "$SERVER" 2>/dev/null; then
    kill "$SERVER" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$SERVER" 2>/dev/null && kill -9 "$SERVER" 2>/dev/null || true
  fi
}
trap cleanup EXIT INT TERM
for _ in $(seq 100); do grep -q 'listening on' "$OUT/server.out" 2>/dev/null && break; sleep 0.1; done
grep -q 'listening on' "$OUT/server.out" || { echo "server did not start: $(cat "$OUT/server.log")" >&2; exit 1; }

# utime+stime and cutime+cstime of the server, in clock ticks.
cpu_ticks() { python3 -c 'import sys
f = open("/proc/%s/stat" % sys.argv[1]).read().rsplit(")", 1)[1].split()
print(int(f[11]) + int(f[12]), int(f[13]) + int(f[14]))' "$SERVER"; }
PERF=""
if [ "${PERF_STAT:-1}" = 1 ] && perf stat -e task-clock -p "$SERVER" -- sleep 0.1 >/dev/null 2>&1; then PERF=perf; fi

step() { # round tool
  local f="$OUT/r$1-$2" before after
  uptime | sed 's/.*load average: //' >"$f.load"
  read -r -a before < <(cpu_ticks)
  if [ -n "$PERF" ]; then
    perf stat -x, -e task-clock,context-switches -p "$SERVER" -o "$f.perf" &
    local perf_pid=$!
  fi
  "$TASKLOAD" "127.0.0.1:$PORT" e2e "$N" "$CONC" "$2" "$POLL_MS" >"$f.e2e" 2>"$f.err" || true
  if [ -n "$PERF" ]; then kill -INT "$perf_pid"; wait "$perf_pid" || true; fi
  read -r -a after < <(cpu_ticks)
  echo "$(( after[0] - before[0] )) $(( after[1] - before[1] ))" >"$f.ticks"
  echo "round $1 $2: $(cat "$f.e2e" "$f.err") load $(cat "$f.load")" | tee -a "$OUT/run.log"
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(uname -n)  nproc: $(nproc)"
  echo "commit: $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD || echo '+dirty')"
  echo "binary: $BIN"
  echo "settings: N=$N CONC=$CONC ROUNDS=$ROUNDS POLL_MS=$POLL_MS SPAWNS=$SPAWNS"
} | tee "$OUT/run.log"

# Warm-up (not recorded): page cache, statement caches, the programs' pages.
"$TASKLOAD" "127.0.0.1:$PORT" e2e 500 "$CONC" noop_bin "$POLL_MS" >/dev/null
"$TASKLOAD" "127.0.0.1:$PORT" e2e 500 "$CONC" noop_sh "$POLL_MS" >/dev/null
for r in $(seq "$ROUNDS"); do
  order=$TOOLS
  if [ $((r % 2)) = 0 ]; then order=$(echo "$TOOLS" | tr ' ' '\n' | tac | tr '\n' ' '); fi
  for tool in $order; do step "$r" "$tool"; done
done
RSS_MIB=$(awk '/^VmRSS:/{print int($2 / 1024 + 0.5)}' "/proc/$SERVER/status")
echo "server RSS: $RSS_MIB MiB" | tee -a "$OUT/run.log"
cleanup

uptime | sed 's/.*load average: //' >"$OUT/spawncost.load"
"$SPAWNCOST" "$OUT/noop" "$SPAWNS" "$RSS_MIB" >"$OUT/spawncost-bin.json"
"$SPAWNCOST" "$OUT/noop.sh" "$((SPAWNS / 2))" "$RSS_MIB" >"$OUT/spawncost-sh.json"

python3 - "$OUT" "$README" "$(git -C "$REPO" rev-parse --short HEAD)" "$RSS_MIB" "$POLL_MS" <<'PY' | tee "$OUT/summary.md"
import glob, json, os, re, statistics, sys

out, readme, commit, rss, poll_ms = sys.argv[1:6]
hz = os.sysconf("SC_CLK_TCK")
rows = {}
for path in sorted(glob.glob(os.path.join(out, "r*-noop_*.e2e"))):
    base = path[:-4]
    name = os.path.basename(base)
    rnd, tool = name.split("-", 1)
    try:
        e2e = json.loads(open(path).read())
    except ValueError:
        continue
    own, children = (int(x) for x in open(base + ".ticks").read().split())
    n = e2e["n"]
    switches = None
    if os.path.exists(base + ".perf"):
        for line in open(base + ".perf"):
            parts = line.strip().split(",")
            if len(parts) > 2 and parts[2] == "context-switches" and parts[0].isdigit():
                switches = int(parts[0]) / n
    load = open(base + ".load").read().split(",")[0].strip()
    rows.setdefault(tool, []).append({
        "round": rnd[1:], "tps": e2e["tasks_per_s"], "create": e2e["creations_per_s"],
        "own_us": own * 1e6 / hz / n, "child_us": children * 1e6 / hz / n,
        "switches": switches, "load": load,
    })

lines = ["| tool | round | tasks/s end to end | creations/s | server µs/task | programs µs/task | context switches/task | load (1 min) |",
         "|---|---:|---:|---:|---:|---:|---:|---:|"]
medians = []
for tool in ("noop_bin", "noop_sh", "noop_raw"):
    for row in rows.get(tool, []):
        sw = "%.1f" % row["switches"] if row["switches"] is not None else "–"
        lines.append("| %s | %s | %s | %s | %.0f | %.0f | %s | %s |" % (
            tool, row["round"], f'{row["tps"]:,.0f}', f'{row["create"]:,.0f}',
            row["own_us"], row["child_us"], sw, row["load"]))
    if rows.get(tool):
        medians.append("%s **%s** tasks/s" % (tool, f'{statistics.median(r["tps"] for r in rows[tool]):,.0f}'))
table = "\n".join(lines)

spawn = ["| method | program | wall µs/run | CPU µs/run, spawning process | CPU µs/run, program |",
         "|---|---|---:|---:|---:|"]
for kind in ("bin", "sh"):
    path = os.path.join(out, "spawncost-%s.json" % kind)
    for line in open(path):
        m = json.loads(line)
        spawn.append("| %s | %s | %.0f | %.0f | %.0f |" % (
            m["method"], "compiled" if kind == "bin" else "shell script",
            m["wall_us"], m["cpu_self_us"], m["cpu_children_us"]))
spawn_load = open(os.path.join(out, "spawncost.load")).read().split(",")[0].strip()
section = f"""<!-- spawn.sh begin -->
Run of {os.path.basename(out)} at commit `{commit}`: no-op task tools (a C program that
returns 0, a `#!/bin/sh` script that exits 0, and on x86-64 `noop_raw`, a static
program without libc whose `_start` exits), created through MCP by
`benches/taskload.rs` (which polls each task every {poll_ms} ms until it is completed)
and drained by the workers (`workers.threads` = 8). Server µs/task is the server's own
CPU, programs µs/task that of its reaped children (the programs), both per completed
task. Goal: ≥ 1,000 tasks/s for the first two. Medians: {", ".join(medians)}.

{table}

Spawn cost per run (`benches/spawncost.rs`, one process starting the compiled program
or the script and waiting for it, sequentially, with {rss} MiB of touched heap like the
server's resident set; load {spawn_load}). "as configured" is how a command tool's run
starts its program now (`crates/tools/src/command/spawn.rs`: our own `clone(CLONE_VM |
CLONE_VFORK)` on a reused stack, C strings built once per tool, three pipes); "Command
piped, no hook" is how it did until 2026-12-01 (std `Command`, so glibc's
`posix_spawn`); "Command, pre_exec hook, 3 threads" is how it did until 2026-11-30 (a
hook armed the parent-death signal, which makes std `fork`; three helper threads).

{chr(10).join(spawn)}
<!-- spawn.sh end -->"""
print(section)
if readme != "-":
    text = open(readme).read()
    pattern = re.compile(r"<!-- spawn\.sh begin -->.*?<!-- spawn\.sh end -->", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section + "\n"
    open(readme, "w").write(text)
PY
echo "results: $OUT"
