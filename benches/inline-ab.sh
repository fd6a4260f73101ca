#!/usr/bin/env bash
# Inline `tools/call echo` at c=64 on several release binaries, one after another, so
# that builds can be compared within one run (docs/benchmarks/inline.md, "The layout step
# and this stop's changes"). Each target starts on a fresh data dir with
# examples/bench.toml, gets `oha -z DUR s -c 64`, and stops. Reverse the order between
# groups yourself (run it twice with the arguments swapped) to cancel drift.
#
#   benches/inline-ab.sh before=/path/to/old/mcp-taskd after=target/release/mcp-taskd
#
# Environment: DUR (8), ROUNDS (1), CONFIG (examples/bench.toml), OHA. Needs oha, curl,
# python3.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
DUR=${DUR:-8}
ROUNDS=${ROUNDS:-1}
CONFIG=${CONFIG:-$REPO/examples/bench.toml}
OHA=${OHA:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}
BODY='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
OUT=$(mktemp -d -t inline-ab-XXXXXX)

run() { # name binary port round
  local data pid
  data=$(mktemp -d)
  "$2" serve --config "$CONFIG" --listen "127.0.0.1:$3" --data-dir "$data/data" >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$3/healthz" >/dev/null && break; sleep 0.1; done
  "$OHA" -z "${DUR}s" -c 64 --no-tui -m POST \
    -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' -H 'Mcp-Name: echo' \
    -d "$BODY" "http://127.0.0.1:$3/mcp" --output-format json >"$OUT/$1-$4.json" 2>/dev/null
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$data"
  python3 - "$OUT/$1-$4.json" "$1" "$4" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["summary"]
print(f"{sys.argv[2]} round {sys.argv[3]}: {s['requestsPerSec']:.0f} req/s, "
      f"p99 {d['latencyPercentiles']['p99'] * 1000:.2f} ms, success {s['successRate']}")
PY
}

for round in $(seq "$ROUNDS"); do
  port=8300
  for target in "$@"; do
    port=$((port + 1))
    run "${target%%=*}" "${target#*=}" "$port" "$round"
  done
done
