#!/bin/sh
# Test program for a server crash: the first run records itself and keeps running
# (short sleeps, so nothing long-lived is left behind); later runs finish at once.
set -eu
cat > /dev/null
echo "$MCP_TASK_ID:$MCP_TASK_ATTEMPT" >> "$WORK/runs"
echo "${TRACEPARENT:-none}" >> "$WORK/traces"
echo "$$" > "$WORK/pid"
runs=$(wc -l < "$WORK/runs")
if [ "$runs" -eq 1 ]; then
    i=0
    while [ "$i" -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
fi
echo "{\"result\": {\"content\": [{\"type\": \"text\", \"text\": \"finished on run $runs\"}]}}"
