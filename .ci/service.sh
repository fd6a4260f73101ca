#!/usr/bin/env bash
# CI for running mcp-taskd as a service (called by .ci/run after the conformance step):
#   1. the systemd units (the service, its drop-ins, the socket that holds its listener
#      across restarts): `systemd-analyze verify` clean, and
#      `systemd-analyze security --offline=true` at most 2.0;
#   2. the live /metrics page of the release binary passes `promtool check metrics`;
#   3. `cargo deb` builds the package (.ci/deb.sh: its file list, lintian, which also
#      renders every man page), which is unpacked in a scratch root: its configuration
#      checks, and `--version` names the commit;
#   4. the example tools run under the unit's restrictions (.ci/sandbox.sh), as shipped
#      and with systemd/strict.conf.
# Usage: .ci/service.sh BINARY   (a release build of this tree)
set -euo pipefail
cd "$(dirname "$0")/.."
BINARY="$(realpath "${1:?usage: .ci/service.sh target/release/mcp-taskd}")"
MAX_EXPOSURE=2.0
WORK="$(mktemp -d)"
SERVER=""
cleanup() {
  if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
step() { echo "== service: $1 ($SECONDS s)"; }
fail() { echo "service: $*" >&2; exit 1; }

# --- 1. the unit -------------------------------------------------------------------
step "systemd-analyze verify and security"
command -v systemd-analyze >/dev/null ||
  apt-get install -y -q --no-install-recommends systemd >/dev/null ||
  { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends systemd >/dev/null; }
# `verify` checks that ExecStart's program exists: check a copy whose commands point at
# the binary under test, with the drop-ins beside it (verify reads <unit>.d/ there).
UNITS="$WORK/units"
mkdir -p "$UNITS/mcp-taskd.service.d"
sed "s#/usr/bin/mcp-taskd#$BINARY#g" systemd/mcp-taskd.service >"$UNITS/mcp-taskd.service"
cp systemd/mcp-taskd.socket "$UNITS/mcp-taskd.socket"
for dropin in strict.conf usr-local-bin.conf; do
  sed "s#/usr/local/bin/mcp-taskd#$BINARY#g" "systemd/$dropin" >"$UNITS/mcp-taskd.service.d/$dropin"
done
verify="$(systemd-analyze verify "$UNITS/mcp-taskd.service" "$UNITS/mcp-taskd.socket" 2>&1)" ||
  fail "verify failed: $verify"
[ -z "$verify" ] || fail "verify is not clean: $verify"
exposure() { # UNIT-FILE
  systemd-analyze security --offline=true "$1" 2>&1 |
    sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p'
}
mkdir -p "$WORK/plain"
cp systemd/mcp-taskd.service "$WORK/plain/"
shipped="$(exposure "$WORK/plain/mcp-taskd.service")"
strict="$(exposure "$UNITS/mcp-taskd.service")"
echo "exposure: $shipped as shipped, $strict with strict.conf (at most $MAX_EXPOSURE)"
[ -n "$shipped" ] || fail "no exposure level from systemd-analyze security"
awk -v e="$shipped" -v max="$MAX_EXPOSURE" 'BEGIN { exit !(e <= max) }' ||
  fail "exposure $shipped is above $MAX_EXPOSURE"

# --- 2. metrics --------------------------------------------------------------------
step "promtool check metrics"
PROMTOOL="$(command -v promtool || true)"
if [ -z "$PROMTOOL" ]; then
  # Only promtool is needed from Debian's `prometheus` package: unpacked, not installed
  # (installing it would pull web assets and start a Prometheus server).
  CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/mcp-taskd-ci"
  PROMTOOL="$CACHE/usr/bin/promtool"
  if [ ! -x "$PROMTOOL" ]; then
    mkdir -p "$CACHE"
    (cd "$WORK" && { apt-get download -q prometheus 2>/dev/null ||
      { apt-get update -q >/dev/null && apt-get download -q prometheus; }; })
    dpkg-deb --fsys-tarfile "$WORK"/prometheus_*.deb | tar -x -C "$CACHE" ./usr/bin/promtool
  fi
fi
"$BINARY" serve --listen 127.0.0.1:0 --data-dir "$WORK/data" >"$WORK/server.out" 2>"$WORK/server.err" &
SERVER=$!
for _ in $(seq 100); do
  grep -q '^mcp-taskd listening on' "$WORK/server.out" 2>/dev/null && break
  sleep 0.1
done
BASE="$(sed -n 's#^mcp-taskd listening on \(http://[^/]*\)/.*#\1#p' "$WORK/server.out")"
[ -n "$BASE" ] || fail "the server did not start: $(cat "$WORK/server.err")"
# One task first, so that every series has been through a real count.
curl -sS "$BASE/mcp" -H 'Content-Type: application/json' \
  -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' \
  -H 'Mcp-Method: tools/call' -H 'Mcp-Name: noop_task' \
  -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"noop_task","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}' \
  | grep -q '"taskId"' || fail "noop_task created no task"
curl -sS -o "$WORK/metrics.txt" "$BASE/metrics"
kill "$SERVER"
wait "$SERVER" || true
SERVER=""
grep -q '^mcp_taskd_oldest_ready_job_age_seconds ' "$WORK/metrics.txt" || fail "no queue age on the page"
"$PROMTOOL" check metrics <"$WORK/metrics.txt" || fail "promtool check metrics"
echo "promtool: $(grep -c '^mcp_taskd_' "$WORK/metrics.txt") samples, clean"

# --- 3. the package ----------------------------------------------------------------
step "cargo deb"
# The release binary is already built (the conformance step): package it as it is.
cargo build --release --quiet
DEB="$(.ci/deb.sh "$BINARY" | tail -n 1)"
SCRATCH="$WORK/root"
dpkg -x "$DEB" "$SCRATCH"
"$SCRATCH/usr/bin/mcp-taskd" check-config --config "$SCRATCH/etc/mcp-taskd/config.toml" >/dev/null ||
  fail "the packaged configuration does not check"
# CI builds from a clone: build.rs must have found the commit.
commit="$(git rev-parse HEAD | cut -c1-12)"
[ "$("$SCRATCH/usr/bin/mcp-taskd" --version)" = "mcp-taskd $(dpkg-deb -f "$DEB" Version | sed 's/-[^-]*$//') (commit $commit)" ] ||
  fail "--version does not name commit $commit: $("$SCRATCH/usr/bin/mcp-taskd" --version)"
echo "package: $(basename "$DEB"), $("$SCRATCH/usr/bin/mcp-taskd" --version)"

# --- 4. tools under the sandbox ----------------------------------------------------
step "sandbox"
if unshare --mount --pid --fork true 2>/dev/null; then
  .ci/sandbox.sh "$BINARY"
  .ci/sandbox.sh "$BINARY" --strict
else
  echo "sandbox: skipped (no mount and PID namespaces here)"
fi
step "done"
