#!/bin/sh
# Test program that never finishes on its own: records the run, starts a grandchild in
# its process group (sleep 300 &), writes both pids to $WORK, then waits.
set -eu
cat > /dev/null
echo "${MCP_TASK_ID:-inline}:${MCP_TASK_ATTEMPT:-0}" >> "$WORK/runs"
sleep 300 &
echo "$!" >> "$WORK/grandchildren"
echo "$$" >> "$WORK/children"
echo '{"progress": 0, "message": "lingering"}'
wait
