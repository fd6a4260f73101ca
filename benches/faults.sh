#!/usr/bin/env bash
# The fault-injection soak (issue 50): clients of both eras keep a mix of work going
# while faults arrive at random, then a checker proves, for every acknowledged task,
# that it is there, ended once and stayed so, was never completed by two attempts and
# stayed within its retries (benches/soak/faults.py says how; check.py what is proved).
#
#   benches/faults.sh [BACKEND...]     # sqlite, postgres (two nodes); default both
#
# Environment: DURATION (600 s of faults per backend), SEED (drawn when unset; printed,
# and a run is repeated by giving it again), GAP (mean seconds between faults per lane,
# 1.0), LEASE_MS (2000), BIN (a built mcp-taskd; else target/release, built), OUT (the
# results folder; one subfolder per backend), PAGE (docs/benchmarks/faults.md, whose
# latest run it rewrites; PAGE=- leaves it alone). Needs root (a tmpfs for the full
# disk), python3, and for postgres PostgreSQL's binaries (.ci/postgres.sh installs them;
# MCP_TASKD_PG_BIN names them). Exit status 1 when any backend's check failed.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
DURATION=${DURATION:-600}
SEED=${SEED:-$(python3 -c 'import random; print(random.SystemRandom().randrange(1, 1 << 31))')}
GAP=${GAP:-1.0}
LEASE_MS=${LEASE_MS:-2000}
PAGE=${PAGE:-$REPO/docs/benchmarks/faults.md}
OUT=${OUT:-"${TMPDIR:-/tmp}/taskd-faults-$(date -u +%Y%m%dT%H%M%SZ)"}
BACKENDS=("$@")
[ ${#BACKENDS[@]} -gt 0 ] || BACKENDS=(sqlite postgres)
if [ -z "${BIN:-}" ]; then
  (cd "$REPO" && cargo build --release --bin mcp-taskd)
  BIN=$CARGO_TARGET_DIR/release/mcp-taskd
fi
mkdir -p "$OUT"
echo "fault soak: ${BACKENDS[*]}, $DURATION s each, seed $SEED, gap $GAP s, lease $LEASE_MS ms; results in $OUT"

status=0
port=18600
for backend in "${BACKENDS[@]}"; do
  python3 "$HERE/soak/faults.py" --bin "$BIN" --backend "$backend" --duration "$DURATION" \
    --seed "$SEED" --gap "$GAP" --lease-ms "$LEASE_MS" --port "$port" \
    --out "$OUT/$backend" --json "$OUT/$backend.json" || status=1
  port=$((port + 50))
done

# The latest run on the page: one table per backend, with its seed and commit.
python3 - "$OUT" "$PAGE" "$(git -C "$REPO" rev-parse --short HEAD)" "${BACKENDS[@]}" <<'PY'
import json, os, sys

out, page, commit, backends = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
lines = []
for backend in backends:
    path = os.path.join(out, backend + ".json")
    if not os.path.exists(path):
        lines.append(f"**{backend}**: no result (the run failed before its checker).\n")
        continue
    r = json.load(open(path))
    c = r["check"]
    nodes = "one node" if backend == "sqlite" else "two nodes"
    lines.append(f"**{backend}** ({nodes}), {r['duration_s']:.0f} s, seed `{r['seed']}`, mean gap "
                 f"{r['gap_s']} s per lane, lease {r['lease_ms']} ms, commit `{commit}`:\n")
    lines.append("| fault | count | recovery p50 | recovery max | not recovered |")
    lines.append("|---|---:|---:|---:|---:|")
    for kind, f in r["faults"].items():
        p50 = "-" if f["recovery_p50_s"] is None else f"{f['recovery_p50_s']:.2f} s"
        mx = "-" if f["recovery_max_s"] is None else f"{f['recovery_max_s']:.2f} s"
        lines.append(f"| {kind} | {f['count']} | {p50} | {mx} | {f['unrecovered']} |")
    lines.append("")
    lines.append(f"Tasks acknowledged **{c['acknowledged']:,}**: lost **{c['lost']}**, contradictory "
                 f"**{c['contradictory']}**, double-completed **{c['double_completed']}**, over-retried "
                 f"**{c['over_retried']}**, stuck beyond their lease **{c['stuck']}** (waiting for an "
                 f"answer nobody gave: {c['waiting_for_input']}). Final states {c['final']}; "
                 f"notifications checked {c['notifications']:,}; inline calls {r['inline']['ok']:,} answered, "
                 f"{r['inline']['failed']:,} refused or failed, {r['inline']['wrong']} wrong; "
                 f"outcomes the fence refused {r['outcomes_discarded_by_the_fence']}; server panics "
                 f"{r['server_panics']}; drain {r['drain_s']} s.\n")
table = "\n".join(lines)
print(table)
if page != "-" and os.path.exists(page):
    text = open(page).read()
    begin, end = "<!-- latest run: begin -->", "<!-- latest run: end -->"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        open(page, "w").write(head + begin + "\n" + table + "\n" + end + tail)
PY
exit $status
