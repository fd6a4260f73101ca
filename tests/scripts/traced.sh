#!/bin/sh
# Test program for tracing (tests/tracing.rs): run 1 crashes (a retry), run 2 hangs
# until the server is killed (a crash and a restart), run 3 records the trace context
# it was given and finishes.
set -eu
cat > /dev/null
echo "$MCP_TASK_ID:$MCP_TASK_ATTEMPT" >> "$WORK/runs"
echo "${TRACEPARENT:-none}" >> "$WORK/traces"
runs=$(wc -l < "$WORK/runs")
if [ "$runs" -eq 1 ]; then
    exit 3
fi
if [ "$runs" -eq 2 ]; then
    i=0
    while [ "$i" -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
fi
echo '{"result": {"content": [{"type": "text", "text": "result-marker-7f3a"}]}}'
