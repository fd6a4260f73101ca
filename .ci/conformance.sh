#!/usr/bin/env bash
# conformance.sh BINARY SHARED_DIR [GUARDED_LIST]
# Starts BINARY on examples/conformance.toml (ephemeral port, temporary data dir), runs
# the official suite at SPEC_VERSION (default 2026-07-28), and fails if any scenario
# listed in GUARDED_LIST (default .ci/conformance-guarded) did not pass with zero failed
# checks.
set -euo pipefail
BIN="$1"; SHARED="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"
GUARDED="${3:-$HERE/conformance-guarded}"
ROOT="$(cd "$HERE/.." && pwd)"
WORK="$(mktemp -d -t mcp-taskd-conformance-XXXXXX)"
"$SHARED/conformance/setup.sh" >/dev/null
"$BIN" serve --config "$ROOT/examples/conformance.toml" --listen 127.0.0.1:0 \
  --data-dir "$WORK/data" >"$WORK/stdout" 2>"$WORK/stderr" &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true' EXIT
URL=""
for _ in $(seq 1 100); do
  URL="$(sed -n 's/^mcp-taskd listening on \(http:[^ ]*\)$/\1/p' "$WORK/stdout")"
  [ -n "$URL" ] && break
  sleep 0.1
done
if [ -z "$URL" ]; then
  echo "server did not start:"; cat "$WORK/stderr"; exit 1
fi
SPEC_VERSION="${SPEC_VERSION:-2026-07-28}" FAIL_ON=none "$SHARED/conformance/run-conformance.sh" "$URL" "$WORK/results" || true
SUMMARY="$WORK/results/summary.tsv"
[ -f "$SUMMARY" ] || { echo "no conformance summary"; exit 1; }
bad=0
while read -r scenario; do
  case "$scenario" in ''|'#'*) continue;; esac
  line="$(awk -F'\t' -v s="$scenario" '$1==s' "$SUMMARY")"
  status="$(printf '%s' "$line" | cut -f3)"
  failed="$(printf '%s' "$line" | cut -f5)"
  if [ "$status" != PASS ] || [ "$failed" != 0 ]; then
    echo "REGRESSION: $scenario status=${status:-missing} failed=${failed:-?}"
    bad=1
  fi
done <"$GUARDED"
if [ "$bad" -ne 0 ]; then
  echo "server stderr (tail):"; tail -n 50 "$WORK/stderr"
  exit 1
fi
echo "conformance ($(basename "$GUARDED")): every guarded scenario passed"
