#!/usr/bin/env bash
# Drain of a queued backlog (issue #19): N no-op tasks queued first, workers started
# after, time until the last one completed; side by side with effectum 0.7.0
# (../shared/bench/effectum-bench), stock and with its journal pragma fixed.
#
#   benches/drain.sh [BIN]          # BIN: the mcp-taskd binary (default target/release)
#
# Ours, per round: a server whose `noop_task` is a placeholder command tool (`sleep`,
# `max_concurrency = 1`: one attempt runs, every other job stays queued) takes N task
# creations through MCP (benches/taskload.rs `create`); it is stopped (SIGTERM: the
# running attempt is released, uncounted); then a server with the built-in demo set,
# whose `noop_task` is the in-process no-op, starts on that store with the default
# configuration (8 workers, synchronous = FULL). The drain time runs from that server's
# exec to the newest `updated_at` in the store (read with python's sqlite3 once it has
# stopped): start-up and recovery included.
#
# Ours again with 64 workers: as many jobs in flight as effectum's harness keeps (4
# workers × 16), the comparison at equal concurrency; and with 64 workers and
# synchronous = NORMAL (effectum's durability setting), for reference. With more jobs
# in flight, more outcomes share each commit and its fsync: a batch grows from about 8
# writes to about 64.
#
# effectum, per round: `effectum-bench N 4 16 100` (enqueue in batches of 100, then 4
# workers × 16 concurrency), stock (it issues `PRAGMA journal = wal`, not a pragma, so the
# file stays in rollback-journal mode) and with `wal` (the file put in WAL mode before the
# queue opens it: what the corrected pragma does); both with effectum's
# synchronous = NORMAL. The three runs alternate their order round by round.
#
# Prints a markdown table and refreshes the latest run on docs/benchmarks/drain.md.
# Environment: N (100000), ROUNDS (2), CONC (32, creation connections), PORT (8106),
# EFFECTUM (an effectum-bench binary; built from ../shared/bench/effectum-bench into
# ${TMPDIR:-/tmp}/taskd-effectum-bench when unset), OUT, README (README=- leaves it
# alone), CARGO_TARGET_DIR. Needs python3, curl, cargo (for effectum).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=benches/lib.sh
. "$HERE/lib.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
N=${N:-100000}
ROUNDS=${ROUNDS:-2}
CONC=${CONC:-32}
PORT=${PORT:-8106}
README=${README:-$REPO/docs/benchmarks/drain.md}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-"${TMPDIR:-/tmp}/taskd-drain-$STAMP"}
mkdir -p "$OUT"
BIN=${1:-$CARGO_TARGET_DIR/release/mcp-taskd}

if [ "$#" -eq 0 ]; then (cd "$REPO" && cargo build --release --bin mcp-taskd); fi
TASKLOAD=$(bench_bin taskload)
if [ -z "${EFFECTUM:-}" ]; then
  SRC=${TMPDIR:-/tmp}/taskd-effectum-bench
  if [ ! -x "$SRC/target/release/effectum-bench" ]; then
    rm -rf "$SRC"
    cp -r "$REPO/../shared/bench/effectum-bench" "$SRC" 2>/dev/null ||
      cp -r /work/shared/bench/effectum-bench "$SRC"
    chmod -R u+w "$SRC"
    # The `wal` argument: WAL mode set on the file before effectum opens it.
    python3 - "$SRC/src/main.rs" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
old = "    let queue = Arc::new(Queue::new(&path).await.unwrap());"
new = """    if std::env::args().nth(5).as_deref() == Some("wal") {
        let c = rusqlite::Connection::open(&path).unwrap();
        let jm: String = c.query_row("PRAGMA journal_mode = wal", [], |r| r.get(0)).unwrap();
        assert_eq!(jm, "wal");
    }
""" + old
assert old in text
open(path, "w").write(text.replace(old, new, 1))
PY
    (cd "$SRC" && CARGO_TARGET_DIR="$SRC/target" cargo build --release)
  fi
  EFFECTUM=$SRC/target/release/effectum-bench
fi
cp "$BIN" "$OUT/taskd-drain"

fill_config "$PORT" >"$OUT/fill.toml"
cat >"$OUT/drain.toml" <<EOF
[server]
listen = "127.0.0.1:$PORT"
endpoint = "/mcp"
EOF
# As many jobs in flight as effectum's harness (4 workers × 16).
cat "$OUT/drain.toml" - >"$OUT/drain-64.toml" <<EOF

[workers]
threads = 64
EOF
# The same with effectum's durability setting: no fsync at each commit.
cat "$OUT/drain-64.toml" - >"$OUT/drain-64-normal.toml" <<EOF

[store]
synchronous = "normal"
EOF

trap stop_server EXIT INT TERM

ours() { # file config
  local data="$1.data" start
  start_server "$OUT/taskd-drain" "$OUT/fill.toml" "$data" "$1.fill"
  "$TASKLOAD" "127.0.0.1:$PORT" create "$N" "$CONC" noop_task >"$1.create"
  stop_server
  uptime | sed 's/.*load average: //' >"$1.load"
  start=$(date +%s%3N)
  start_server "$OUT/taskd-drain" "$2" "$data" "$1.drain"
  while [ "$(jobs_in_flight "$PORT")" != 0 ]; do sleep 0.2; done
  stop_server
  drain_result "$data/tasks.db" "$start" "$N" >"$1.json"
  rm -rf "$data"
}
effectum() { # file mode
  uptime | sed 's/.*load average: //' >"$1.load"
  (cd "$OUT" && "$EFFECTUM" "$N" 4 16 100 $2) >"$1.txt"
  python3 - "$1.txt" "$N" >"$1.json" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
m = re.search(r"drain: (\d+) jobs in ([0-9.]+)s", text)
jm = re.search(r"journal_mode as seen by a fresh connection = (\w+)", text)
print(json.dumps({"n": int(m.group(1)), "drain_s": float(m.group(2)), "journal_mode": jm.group(1) if jm else "?"}))
PY
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(uname -n)  nproc: $(nproc)"
  echo "commit: $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD || echo '+dirty')"
  echo "binary: $BIN  effectum: $EFFECTUM"
  echo "settings: N=$N ROUNDS=$ROUNDS CONC=$CONC"
} | tee "$OUT/run.log"
for r in $(seq "$ROUNDS"); do
  case $((r % 3)) in
    1) order="ours stock ours64 normal64 wal" ;;
    2) order="stock normal64 wal ours ours64" ;;
    0) order="wal ours64 ours stock normal64" ;;
  esac
  for who in $order; do
    f="$OUT/r$r-$who"
    case $who in
      ours) ours "$f" "$OUT/drain.toml" ;;
      ours64) ours "$f" "$OUT/drain-64.toml" ;;
      normal64) ours "$f" "$OUT/drain-64-normal.toml" ;;
      stock) effectum "$f" "" ;;
      wal) effectum "$f" wal ;;
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
    result = json.load(open(path))
    load = open(path[:-5] + ".load").read().split(",")[0].strip()
    runs.setdefault(int(rnd[1:]), {})[who] = (result, load)
names = {"ours": "mcp-taskd (8 workers: the default; synchronous FULL)",
         "ours64": "mcp-taskd (64 workers: effectum's jobs in flight; synchronous FULL)",
         "normal64": "mcp-taskd (64 workers, synchronous NORMAL)",
         "stock": "effectum 0.7.0 stock (rollback journal, synchronous NORMAL)",
         "wal": "effectum 0.7.0, journal pragma fixed (WAL, synchronous NORMAL)"}
lines = ["| round | system | drain s | tasks/s | load (1 min) | ours (8) / it | ours (64) / it |",
         "|---:|---|---:|---:|---:|---:|---:|"]
ratios = {(mine, it): [] for mine in ("ours", "ours64") for it in ("stock", "wal")}
for rnd in sorted(runs):
    for who in ("ours", "ours64", "normal64", "stock", "wal"):
        if who not in runs[rnd]:
            continue
        result, load = runs[rnd][who]
        cells = []
        for mine in ("ours", "ours64"):
            cell = ""
            if who in ("stock", "wal") and mine in runs[rnd]:
                value = result["drain_s"] / runs[rnd][mine][0]["drain_s"]
                ratios[(mine, who)].append(value)
                cell = "%.2f×" % value
            cells.append(cell)
        lines.append("| %d | %s | %.2f | %s | %s | %s | %s |" % (
            rnd, names[who], result["drain_s"], f'{n / result["drain_s"]:,.0f}', load, *cells))
summary = "; ".join(
    "%s workers against %s **%.2f×**" % ("8" if mine == "ours" else "64",
                                         "stock" if it == "stock" else "fixed",
                                         statistics.median(v))
    for (mine, it), v in ratios.items() if v)
section = f"""<!-- drain.sh begin -->
Run of {os.path.basename(out)} at commit `{commit}`: {n:,} no-op tasks queued first, then
drained by workers started after the fill. Ours: created through MCP while `noop_task`
was a placeholder that keeps all but one queued; then a server with the built-in no-op
starts on that store, and the drain runs from its exec to the newest `updated_at`
(start-up included). effectum: its own harness (enqueue in batches of 100, then 4 workers
× 16 = 64 jobs in flight), timed from its workers' creation. "ours (8) / it" is its drain
time over ours with the default 8 workers, "ours (64) / it" over ours with 64 (the same
jobs in flight as effectum), in the same round (goal ≥ 1.0× against both, with our
default synchronous = FULL). The synchronous = NORMAL row is effectum's durability
setting, for reference. Medians of the per-round ratios: {summary}.

{chr(10).join(lines)}
<!-- drain.sh end -->"""
print(section)
if readme != "-":
    text = open(readme).read()
    pattern = re.compile(r"<!-- drain\.sh begin -->.*?<!-- drain\.sh end -->", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section + "\n"
    open(readme, "w").write(text)
PY
echo "results: $OUT"
