#!/bin/sh
# Test program for max_concurrency: logs its start and end around a short sleep.
set -eu
cat > /dev/null
echo "start $MCP_TASK_ID" >> "$WORK/log"
sleep 0.3
echo "end $MCP_TASK_ID" >> "$WORK/log"
echo done
