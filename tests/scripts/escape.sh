#!/bin/sh
# Test program whose descendants leave its process group. $1 says how they escape:
#   setsid  a grandchild in a new session (setsid sleep 300 &)
#   double  a double fork: a subshell starts sleep in a new session and exits at once,
#           so the sleep is an orphan while the program still runs
#   double-bare  as double, but the escapee's environment is replaced (env -i), so
#           nothing in it names the run
#   setsid-hidden, double-hidden  as setsid and double-bare, and the escapee's stdio is
#           /dev/null: once it is an orphan, nothing about it ties it to the run
# and $2 how the run ends: "exit" (prints a result and exits 0 once $WORK/go exists),
# "wait" (runs until stopped) or "flood" (once $WORK/go exists, so that the test has
# seen the escapee alive, writes 100 kB to stdout, then waits). Each escapee's pid goes
# to $WORK/escapees once it has left the group; unless hidden, it keeps the program's
# stdin, stdout and stderr open.
set -eu
cat > /dev/null
echo "${MCP_TASK_ID:-inline}:${MCP_TASK_ATTEMPT:-0}" >> "$WORK/runs"
escapee='echo $$ >> "$WORK/escapees"; exec sleep 300'
case "$1" in
  setsid) setsid sh -c "$escapee" & ;;
  double) ( setsid sh -c "$escapee" & ) ;;
  double-bare) ( setsid env -i WORK="$WORK" sh -c "$escapee" & ) ;;
  setsid-hidden)
    setsid env -i WORK="$WORK" sh -c "$escapee" < /dev/null > /dev/null 2>&1 & ;;
  double-hidden)
    ( setsid env -i WORK="$WORK" sh -c "$escapee" < /dev/null > /dev/null 2>&1 & ) ;;
esac
# Wait until the escapee has recorded itself, so the run cannot end before it escaped.
while [ ! -s "$WORK/escapees" ]; do sleep 0.01; done
if [ "$2" = exit ]; then
  while [ ! -e "$WORK/go" ]; do sleep 0.01; done
  echo '{"result": {"content": [{"type": "text", "text": "left one behind"}]}}'
  exit 0
fi
echo '{"progress": 0, "message": "waiting"}'
if [ "$2" = flood ]; then
  while [ ! -e "$WORK/go" ]; do sleep 0.01; done
  head -c 100000 /dev/zero | tr '\0' x
fi
wait
sleep 300
