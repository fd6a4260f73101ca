#!/usr/bin/env bash
# The steps of benches/tasks.sh, short, for several release binaries in one run (to
# compare builds): per binary, on a fresh data dir with examples/bench.toml, inline
# `echo`, task creation (`noop_task` declaring the Tasks extension) and `tasks/get` of
# one task, each `oha -z DUR s -c 64`; prints req/s and the create/inline and
# get/inline ratios. Reverse the order between runs to cancel drift.
#
#   benches/tasks-ab.sh before=/path/to/old/mcp-taskd after=target/release/mcp-taskd
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
DUR=${DUR:-5}
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}'
OHA=${OHA:-$(command -v oha || echo "$HOME/.cargo/bin/oha")}
OUT=$(mktemp -d -t tasks-ab-XXXXXX)
H=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28')
rate() { python3 -c "import json,sys;print(round(json.load(open(sys.argv[1]))['summary']['requestsPerSec']))" "$1"; }
one() { # name bin port
  d=$(mktemp -d); $2 serve --config "$REPO/examples/bench.toml" --listen 127.0.0.1:$3 --data-dir $d/data >/dev/null 2>&1 & p=$!
  for i in $(seq 50); do curl -sf http://127.0.0.1:$3/healthz >/dev/null && break; sleep 0.1; done
  U=http://127.0.0.1:$3/mcp
  "$OHA" -z ${DUR}s -c 64 --no-tui -m POST "${H[@]}" -H 'Mcp-Method: tools/call' -H 'Mcp-Name: echo' -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},'"$META"'}}' $U --output-format json > "$OUT/inline.json" 2>/dev/null
  "$OHA" -z ${DUR}s -c 64 --no-tui -m POST "${H[@]}" -H 'Mcp-Method: tools/call' -H 'Mcp-Name: noop_task' -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"noop_task","arguments":{},'"$META"'}}' $U --output-format json > "$OUT/create.json" 2>/dev/null
  id=$(curl -s $U "${H[@]}" -H 'Mcp-Method: tools/call' -H 'Mcp-Name: noop_task' -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"noop_task","arguments":{},'"$META"'}}' | sed -n 's/.*"taskId":"\([^"]*\)".*/\1/p')
  sleep 1
  "$OHA" -z ${DUR}s -c 64 --no-tui -m POST "${H[@]}" -H 'Mcp-Method: tasks/get' -H "Mcp-Name: $id" -d '{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"'$id'",'"$META"'}}' $U --output-format json > "$OUT/get.json" 2>/dev/null
  kill $p; wait $p 2>/dev/null || true; rm -rf $d
  i=$(rate "$OUT/inline.json"); c=$(rate "$OUT/create.json"); g=$(rate "$OUT/get.json")
  python3 -c "print('$1', 'inline', $i, 'create', $c, 'get', $g, 'create/inline', round($c/$i,2), 'get/inline', round($g/$i,2))"
}
for spec in "$@"; do name=${spec%%=*}; bin=${spec#*=}; one $name $bin $((8400+RANDOM%100)); done
