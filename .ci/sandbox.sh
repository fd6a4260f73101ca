#!/usr/bin/env bash
# Runs mcp-taskd with the command tools under the restrictions of
# systemd/mcp-taskd.service, on a host where systemd cannot start the unit (no systemd
# as PID 1, as in CI), and calls every tool. Needs root, unshare, setpriv and Debian's
# python3-seccomp (installed when missing).
#
#   .ci/sandbox.sh BINARY            the unit as shipped: every tool must work
#   .ci/sandbox.sh BINARY --strict   plus systemd/strict.conf's MemoryDenyWriteExecute:
#                                    the Node.js tool must fail, the others still work
#
# How each setting is reproduced (what differs from systemd is said in brackets):
#   ProtectSystem=strict     every mount remounted read-only in a private mount namespace
#   ProtectHome=yes          empty read-only tmpfs over /home, /root, /run/user
#                            [systemd: inaccessible, not empty]
#   PrivateTmp=yes           fresh tmpfs on /tmp and /var/tmp
#   PrivateDevices=yes       a tmpfs /dev with null, zero, full, random, urandom, tty, shm
#   ProtectProc=invisible,   a new procfs (hidepid=invisible,subset=pid) in a new PID
#   ProcSubset=pid           namespace [the server runs under a shell as PID 1]
#   ProtectHostname=yes      a new UTS namespace
#   StateDirectory=, UMask=  /var/lib/mcp-taskd{,/work} on a tmpfs, owned by the
#                            service's uid, umask 0077 [systemd: /var/lib/private + link]
#   DynamicUser=yes          an unprivileged uid from systemd's dynamic range (61234)
#                            [no PrivateUsers= user namespace]
#   CapabilityBoundingSet=,  setpriv --bounding-set=-all --inh-caps=-all --no-new-privs
#   AmbientCapabilities=, NoNewPrivileges=yes
#   LimitNOFILE=65536        ulimit -n
#   SystemCallFilter=, SystemCallErrorNumber=, SystemCallArchitectures=,
#   RestrictAddressFamilies=, RestrictNamespaces=, LockPersonality=, RestrictSUIDSGID=,
#   RestrictRealtime=, MemoryDenyWriteExecute= (strict)
#                            a seccomp filter: .ci/sandbox/seccomp_exec.py
#   [not reproduced: PrivateUsers=, PrivateMounts= beyond the private namespace,
#    ProtectClock='s device rule, ProtectKernel*= beyond read-only /sys and no /proc/sys,
#    RemoveIPC=, KeyringMode=, DevicePolicy=]
# Programs and configuration sit where the package puts them: /usr/bin/mcp-taskd and
# /etc/mcp-taskd/{config.toml,tools/}, through overlays visible only in the namespace.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
SERVICE_UID=61234

inside() { # WORK BINARY STRICT PORT_FILE — as root, in the new namespaces
  local work=$1 binary=$2 strict=$3
  mount -n --make-rprivate /
  for dir in /usr/bin /etc; do
    mkdir -p "$work/overlay$dir/upper" "$work/overlay$dir/work"
    mount -n -t overlay overlay \
      -o "lowerdir=$dir,upperdir=$work/overlay$dir/upper,workdir=$work/overlay$dir/work" "$dir"
  done
  install -m 0755 "$binary" /usr/bin/mcp-taskd
  install -m 0755 "$HERE/sandbox/seccomp_exec.py" /usr/bin/mcp-taskd-seccomp-exec
  install -d -m 0755 /etc/mcp-taskd/tools
  install -m 0644 "$HERE/sandbox/config.toml" /etc/mcp-taskd/config.toml
  install -m 0755 "$ROOT"/examples/scripts/* "$HERE/sandbox/jit.js" "$HERE/sandbox/probe.sh" \
    /etc/mcp-taskd/tools/
  # PrivateDevices=yes: built aside, moved over /dev once complete.
  mkdir -p "$work/dev"
  mount -n -t tmpfs -o mode=0755,nosuid,noexec tmpfs "$work/dev"
  for node in null zero full random urandom tty; do
    touch "$work/dev/$node"
    mount -n --bind "/dev/$node" "$work/dev/$node"
  done
  ln -s /proc/self/fd "$work/dev/fd"
  mkdir "$work/dev/shm"
  # ProtectSystem=strict: everything read-only, then the writable places on top.
  awk '{print $5}' /proc/self/mountinfo | sort -u | while read -r point; do
    mount -n -o remount,bind,ro "$point" 2>/dev/null || true
  done
  mount -n --move "$work/dev" /dev
  mount -n -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
  for home in /home /root /run/user; do
    if [ -d "$home" ]; then mount -n -t tmpfs -o ro,mode=0755 tmpfs "$home"; fi
  done
  mount -n -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
  mount -n -t tmpfs -o mode=1777,nosuid,nodev tmpfs /var/tmp
  mount -n -t tmpfs -o mode=0755,nosuid,nodev tmpfs /var/lib
  install -d -m 0700 -o "$SERVICE_UID" -g "$SERVICE_UID" /var/lib/mcp-taskd /var/lib/mcp-taskd/work
  mount -n -t proc -o hidepid=invisible,subset=pid,nosuid,nodev,noexec proc /proc
  hostname mcp-taskd-sandbox
  ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" # capped by this host's hard limit
  umask 0077
  cd /
  local strict_flag=()
  if [ "$strict" = strict ]; then strict_flag=(--strict); fi
  setpriv --reuid="$SERVICE_UID" --regid="$SERVICE_UID" --clear-groups --no-new-privs \
    --inh-caps=-all --bounding-set=-all \
    /usr/bin/python3 /usr/bin/mcp-taskd-seccomp-exec "${strict_flag[@]}" -- \
    /usr/bin/mcp-taskd serve --config /etc/mcp-taskd/config.toml \
    --data-dir /var/lib/mcp-taskd --listen 127.0.0.1:0 &
  local server=$!
  trap 'kill -TERM $server' TERM
  wait "$server" || true
  wait "$server" || true
}

if [ "${1:-}" = --inside ]; then
  shift
  inside "$@"
  exit 0
fi

BINARY="$(realpath "${1:?usage: .ci/sandbox.sh BINARY [--strict]}")"
STRICT=plain
if [ "${2:-}" = --strict ]; then STRICT=strict; fi
if ! /usr/bin/python3 -c 'import seccomp' 2>/dev/null; then
  apt-get install -y -q --no-install-recommends python3-seccomp >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends python3-seccomp >/dev/null; }
fi

WORK="$(mktemp -d)"
unshare --mount --pid --uts --fork --kill-child --propagation private \
  "$HERE/sandbox.sh" --inside "$WORK" "$BINARY" "$STRICT" >"$WORK/server.log" 2>&1 &
SANDBOX=$!
stop() {
  # The namespace's shell forwards SIGTERM to the server (a graceful drain).
  local shell
  shell="$(ps -o pid= --ppid "$SANDBOX" | tr -d ' ' || true)"
  if [ -n "$shell" ]; then kill -TERM "$shell" 2>/dev/null || true; fi
  wait "$SANDBOX" 2>/dev/null || true
}
trap 'stop; rm -rf "$WORK"' EXIT

for _ in $(seq 200); do
  grep -q '^mcp-taskd listening on' "$WORK/server.log" 2>/dev/null && break
  if ! kill -0 "$SANDBOX" 2>/dev/null; then break; fi
  sleep 0.1
done
URL="$(sed -n 's/^mcp-taskd listening on //p' "$WORK/server.log")"
if [ -z "$URL" ]; then
  echo "sandbox: the server did not start:" >&2
  cat "$WORK/server.log" >&2
  exit 1
fi

mcp() { # METHOD NAME PARAMS
  curl -sS "$URL" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
    -H "Mcp-Method: $1" -H "Mcp-Name: $2" \
    -d '{"jsonrpc":"2.0","id":1,"method":"'"$1"'","params":'"$3"'}'
}
META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{},"extensions":{"io.modelcontextprotocol/tasks":{}}}}'
PLAIN='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
task_id() { sed -n 's/.*"taskId":"\([^"]*\)".*/\1/p'; }
wait_status() { # TASK STATUS-REGEX
  local answer
  for _ in $(seq 150); do
    answer="$(mcp tasks/get "$1" '{"taskId":"'"$1"'",'"$META"'}')"
    if echo "$answer" | grep -Eq "\"status\":\"($2)\""; then echo "$answer"; return 0; fi
    sleep 0.1
  done
  echo "$answer"
  return 1
}
FAILED=0
check() { # NAME EXPECTED-REGEX ANSWER
  if echo "$3" | grep -Eq "$2"; then
    printf '  ok    %-16s %s\n' "$1" "$(echo "$3" | grep -Eo "$2" | head -1)"
  else
    printf '  FAIL  %-16s %s\n' "$1" "$3"
    FAILED=1
  fi
}

echo "sandbox ($STRICT): tools under the unit's restrictions"
check probe 'cwd=writable data_dir=writable tmp=writable config_dir=read-only usr_local=read-only homes=hidden proc_subset=pid processes_seen=[0-9]+ uid=61234' \
  "$(mcp tools/call probe '{"name":"probe","arguments":{},'"$PLAIN"'}')"
check validate_record "Invalid record: email must contain '@'" \
  "$(mcp tools/call validate_record '{"name":"validate_record","arguments":{"record":{"email":"nobody"}},'"$PLAIN"'}')"
TASK="$(mcp tools/call report '{"name":"report","arguments":{"topic":"sandbox","sections":2},'"$META"'}' | task_id)"
check report '"status":"completed"' "$(wait_status "$TASK" 'completed|failed|cancelled')"
TASK="$(mcp tools/call approve_release '{"name":"approve_release","arguments":{"service":"api","version":"1.4.0"},'"$META"'}' | task_id)"
wait_status "$TASK" 'input_required|failed' >/dev/null || true
mcp tasks/update "$TASK" '{"taskId":"'"$TASK"'","inputResponses":{"approval":{"action":"accept","content":{"approve":true}}},'"$META"'}' >/dev/null
check approve_release 'Deployed api@1.4.0' "$(wait_status "$TASK" 'completed|failed|cancelled')"
JIT="$(mcp tools/call jit '{"name":"jit","arguments":{},'"$PLAIN"'}')"
if [ "$STRICT" = strict ]; then
  # The runtime dies at its first JIT page (SIGTRAP, or SIGSEGV): an inline call that
  # ran and failed answers isError with the reason (issue 47), not -32603.
  check "jit (refused)" '"isError":true.*killed by signal|killed by signal.*"isError":true' "$JIT"
else
  check jit 'node v[0-9.]+ computed [0-9]+' "$JIT"
fi
if [ "$FAILED" != 0 ]; then
  echo "sandbox: server log:" >&2
  cat "$WORK/server.log" >&2
  exit 1
fi
