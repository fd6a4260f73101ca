#!/usr/bin/env bash
# build.sh [BEFORE] [AFTER]: what building costs, two commits side by side in one run
# (issue 45: the workspace split against the one crate before it). For each commit, in
# a worktree of its own with a target dir of its own (the cargo registry shared, so
# downloads cost neither):
#   1. a clean `cargo build --release` (what a packager and CI pay);
#   2. one handler edited (a comment appended to handlers/tools_call.rs, wherever the
#      commit keeps it), then `cargo build --release` again;
#   3. a clean `cargo build` (dev profile), then the same edit and `cargo build` again:
#      the edit-compile loop of a developer.
# ROUNDS (default 1) repeats it all, the commits' order alternating. Wall-clock seconds
# are printed per step, and the after/before ratio of each step's median at the end.
# Defaults: BEFORE = the last commit before the workspace (58c2966), AFTER = HEAD.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
BEFORE="${1:-58c2966}"
AFTER="${2:-HEAD}"
ROUNDS="${ROUNDS:-1}"
WORK="$(mktemp -d -t mcp-taskd-build-XXXXXX)"
trap 'cd "$REPO"; git worktree remove --force "$WORK/before" 2>/dev/null; git worktree remove --force "$WORK/after" 2>/dev/null; rm -rf "$WORK"' EXIT
git -C "$REPO" worktree add --detach "$WORK/before" "$BEFORE" >/dev/null 2>&1
git -C "$REPO" worktree add --detach "$WORK/after" "$AFTER" >/dev/null 2>&1
export CARGO_TERM_COLOR=never

handler() {
  if [ -f "$1/crates/server/src/handlers/tools_call.rs" ]; then
    echo "$1/crates/server/src/handlers/tools_call.rs"
  else
    echo "$1/src/handlers/tools_call.rs"
  fi
}

# seconds COMMAND...: runs it, prints its wall-clock seconds.
seconds() {
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

measure() {
  local name="$1" dir="$WORK/$1" file
  file="$(handler "$dir")"
  cd "$dir"
  rm -rf target
  local clean edit dev_clean dev_edit
  clean=$(seconds cargo build --release --locked)
  echo "// edited by benches/build.sh $(date +%s%N)" >>"$file"
  edit=$(seconds cargo build --release --locked)
  dev_clean=$(seconds cargo build --locked)
  echo "// edited by benches/build.sh $(date +%s%N)" >>"$file"
  dev_edit=$(seconds cargo build --locked)
  git checkout -q -- "$file"
  echo "$name clean_release=$clean handler_release=$edit clean_dev=$dev_clean handler_dev=$dev_edit" | tee -a "$WORK/results"
  rm -rf target
}

echo "before: $(git -C "$WORK/before" log -1 --format='%h %s' | cut -c1-80)"
echo "after:  $(git -C "$WORK/after" log -1 --format='%h %s' | cut -c1-80)"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order="before after"; else order="after before"; fi
  for name in $order; do measure "$name"; done
done
python3 - "$WORK/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, *fields = line.split()
    for field in fields:
        key, value = field.split("=")
        rows.setdefault((name, key), []).append(float(value))
keys = ["clean_release", "handler_release", "clean_dev", "handler_dev"]
print(f"{'step':<16} {'before s':>9} {'after s':>9} {'after/before':>13}")
for key in keys:
    b = statistics.median(rows[("before", key)])
    a = statistics.median(rows[("after", key)])
    print(f"{key:<16} {b:9.1f} {a:9.1f} {a / b:13.2f}")
PY
