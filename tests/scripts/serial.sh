#!/bin/sh
# Test program for max_concurrency: logs its start and end around a short sleep
# ($PAUSE seconds, 0.3 by default). Inline runs log as "inline".
set -eu
cat > /dev/null
run="${MCP_TASK_ID:-inline}"
echo "start $run" >> "$WORK/log"
sleep "${PAUSE:-0.3}"
echo "end $run" >> "$WORK/log"
echo done
