#!/bin/sh
# Test program for a server killed with kill -9: it ignores SIGTERM, and so do (the
# disposition is inherited) a grandchild in its process group and an escapee that left
# the group by a double fork into a session of its own. Pids go to $WORK: the program's
# to "program", the grandchild's to "grandchildren", the escapee's to "escapees"; then
# "ready" once all three are written. Runs until killed.
set -eu
trap '' TERM
cat > /dev/null
echo "$$" > "$WORK/program"
sleep 300 &
echo "$!" >> "$WORK/grandchildren"
( setsid sh -c 'echo $$ >> "$WORK/escapees"; exec sleep 300' & )
while [ ! -s "$WORK/escapees" ]; do sleep 0.01; done
touch "$WORK/ready"
while :; do sleep 1; done
