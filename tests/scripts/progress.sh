#!/bin/sh
# Test program: one progress line, waits for $WORK/go, another progress line, then a
# plain-text answer (no final JSON line).
set -eu
cat > /dev/null
echo '{"progress": 1, "total": 2, "message": "Step 1 of 2: warming up"}'
while [ ! -e "$WORK/go" ]; do sleep 0.05; done
echo 'report ready'
echo '{"progress": 2, "total": 2, "message": "Step 2 of 2: done"}'
echo 'all good'
