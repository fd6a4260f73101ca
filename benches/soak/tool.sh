#!/bin/sh
# The command tool of the fault soak (benches/faults.sh) and the partition test
# (benches/soak/partitions.py): behaves as arguments.mode says, so that a run can
# succeed, crash, hang or print a lot, on every attempt or on the first only.
#
#   ok          progress every 0.25 s for `seconds`, then a result naming the task,
#               its attempt and the node ($NODE) that ran it
#   print       `lines` lines on stdout and on stderr, then as ok
#   crash       exits 3 without a final message, every attempt (the task fails)
#   crash_once  crashes on attempt 1, then as ok
#   hang        sleeps far past timeout_ms, every attempt (the task fails)
#   hang_once   hangs on attempt 1, then as ok
#
# $DONE_DIR (set by the partition test's configuration): a task run writes
# DONE_DIR/TASK.ATTEMPT.NODE.start as it starts and DONE_DIR/TASK.ATTEMPT.NODE just
# before printing its result, so that the test knows which node ran which attempt and
# can show an attempt that finished and whose outcome the store refused. The argv carries a marker of the run
# (its first argument) that the soak uses to find these programs, and only these.
# No JSON parser: the server writes its request compactly (no spaces), so sed does.
request=$(cat)
field() { printf '%s' "$request" | sed -n "s/.*\"$1\":\"\{0,1\}\([A-Za-z0-9_.-]*\).*/\1/p"; }
mode=$(field mode)
seconds=$(field seconds)
lines=$(field lines)
attempt=${MCP_TASK_ATTEMPT:-0}
: "${seconds:=0}" "${lines:=0}"
if [ -n "${DONE_DIR:-}" ] && [ -n "${MCP_TASK_ID:-}" ]; then
  : >"$DONE_DIR/$MCP_TASK_ID.$attempt.${NODE:-node}.start"
fi

result() {
  if [ -n "${DONE_DIR:-}" ] && [ -n "${MCP_TASK_ID:-}" ]; then
    : >"$DONE_DIR/$MCP_TASK_ID.$attempt.${NODE:-node}"
  fi
  printf '{"result":{"content":[{"type":"text","text":"ok task=%s attempt=%s node=%s"}]}}\n' \
    "${MCP_TASK_ID:-inline}" "$attempt" "${NODE:-node}"
}

work() {
  # Progress a few times a second for $seconds (whole quarter seconds).
  steps=$(awk -v s="$seconds" 'BEGIN { printf "%d", s * 4 }')
  i=0
  while [ "$i" -lt "$steps" ]; do
    printf '{"progress":%d,"total":%d,"message":"step %d of %d"}\n' "$i" "$steps" "$i" "$steps"
    sleep 0.25
    i=$((i + 1))
  done
}

case "$mode" in
  print)
    i=0
    while [ "$i" -lt "$lines" ]; do
      echo "stdout line $i of attempt $attempt"
      echo "stderr line $i of attempt $attempt" >&2
      i=$((i + 1))
    done
    work
    result
    ;;
  crash)
    echo "tool.sh: simulated crash (attempt $attempt)" >&2
    exit 3
    ;;
  crash_once)
    if [ "$attempt" = 1 ]; then
      echo "tool.sh: simulated crash on the first attempt" >&2
      exit 3
    fi
    work
    result
    ;;
  hang)
    exec sleep 3600
    ;;
  hang_once)
    [ "$attempt" = 1 ] && exec sleep 3600
    work
    result
    ;;
  *)
    work
    result
    ;;
esac
