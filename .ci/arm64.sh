#!/usr/bin/env bash
# arm64.sh HOST_BINARY: the edge boxes' package (issue 34), after .ci/service.sh.
# For arm64 (aarch64-unknown-linux-gnu: Raspberry Pi 4/5, Jetson, gateways):
#   1. the Rust target (rustup), the cross linker (Debian's gcc-aarch64-linux-gnu),
#      qemu-user;
#   2. the release binary, cross-built (the bundled SQLite compiled for the target by
#      the same cross gcc), then packaged by .ci/deb.sh (file list, lintian);
#   3. the packaged binary run under qemu-user as a person would: .ci/walkthrough.sh
#      (serve on the embedded default, an inline call, tasks created, polled, cancelled
#      and completed, a command tool, kill -9 and restart with nothing lost);
#   4. the legacy Python client (Python SDK 1.x, pinned by .ci/interop-setup.sh);
#   5. a subset of the integration suite pointed at the emulated binary
#      (MCP_TASKD_TEST_BINARY, see tests/common/mod.rs): the areas in SUBSET below.
# armhf (32-bit Raspberry Pi OS) is not built here: docs/edge.md says why.
#
# qemu-user runs the binaries through binfmt_misc (registered here when it is not), so
# that what they start themselves (the run guard is this binary again) runs emulated
# too; QEMU_LD_PREFIX points it at the cross C library. What emulation cannot show is
# left out of the subset, each for its reason (see SUBSET).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
HOST_BINARY="$(realpath "${1:?usage: .ci/arm64.sh HOST_BINARY}")"
WORK="$(mktemp -d)"
SERVER=""
cleanup() {
  if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
step() { echo "== edge: $1 ($SECONDS s)"; }
fail() { echo "edge: $*" >&2; exit 1; }

# The integration areas run against the emulated arm64 binary. Left out: reaping::
# (qemu-user refuses PR_SET_CHILD_SUBREAPER, so the server warns and cannot adopt a
# tool's escaped descendants: a limit of the emulator, not of arm64), stdio:: (one of
# its checks reads that warning as a second line), the load and timing areas
# (hardening::, listen_streams::, robustness::, fuzz::, fair_workers::: they measure the
# emulator), and those that need other programs or a second backend (cluster::,
# postgres::, litestream::, dashboard::, systemd_notify::, storage::).
SUBSET=(smoke:: demo_tools:: durable_tasks:: command_tools:: bridge:: task_input:: legacy::
  operator:: notifications:: metrics::)

# triple, Debian architecture, GNU prefix of its cross tools.
TARGETS=(
  "aarch64-unknown-linux-gnu arm64 aarch64-linux-gnu"
)

step "cross toolchains"
packages=(qemu-user-static)
for target in "${TARGETS[@]}"; do
  read -r _ arch prefix <<<"$target"
  packages+=("gcc-$prefix" "libc6-dev-$arch-cross")
done
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
for target in "${TARGETS[@]}"; do
  read -r triple _ _ <<<"$target"
  rustup target list --installed | grep -qx "$triple" || rustup target add "$triple"
done

# binfmt_misc: the kernel starts ARM binaries with qemu (its F flag opens the emulator
# once, here, so that it works in any mount namespace).
binfmt=/proc/sys/fs/binfmt_misc
if [ ! -e "$binfmt/register" ]; then
  mount -t binfmt_misc binfmt_misc "$binfmt" ||
    fail "cannot mount binfmt_misc: the emulated runs need it (qemu-user through the kernel)"
fi
for emulator in qemu-aarch64; do
  [ -e "$binfmt/$emulator" ] || cat "/usr/lib/binfmt.d/$emulator.conf" >"$binfmt/register"
done

for target in "${TARGETS[@]}"; do
  read -r triple arch prefix <<<"$target"
  env_triple="$(tr 'a-z-' 'A-Z_' <<<"$triple")"
  step "$arch: cargo build --release --target $triple"
  started=$SECONDS
  env "CARGO_TARGET_${env_triple}_LINKER=$prefix-gcc" "CC_${triple//-/_}=$prefix-gcc" \
    "AR_${triple//-/_}=$prefix-ar" cargo build --release --quiet --target "$triple" --bin mcp-taskd
  echo "$arch build: $((SECONDS - started)) s"

  step "$arch: package"
  deb="$("$ROOT/.ci/deb.sh" "$HOST_BINARY" "$triple" | tail -n 1)"
  rm -rf "$WORK/$arch"
  dpkg -x "$deb" "$WORK/$arch"
  binary="$WORK/$arch/usr/bin/mcp-taskd"

  step "$arch: the packaged binary under qemu-user"
  export QEMU_LD_PREFIX="/usr/$prefix"
  "$ROOT/.ci/walkthrough.sh" "$binary"
  "$binary" check-config --config "$WORK/$arch/etc/mcp-taskd/config.toml" >/dev/null ||
    fail "$arch: the packaged configuration does not check"

  step "$arch: the legacy Python client (Python SDK 1.x)"
  cache="$("$ROOT/.ci/interop-setup.sh")"
  "$binary" serve --listen 127.0.0.1:0 --data-dir "$WORK/python-data" \
    >"$WORK/server.out" 2>"$WORK/server.err" &
  SERVER=$!
  url=""
  for _ in $(seq 600); do
    url="$(sed -n 's/^mcp-taskd listening on \(http:[^ ]*\)$/\1/p' "$WORK/server.out")"
    [ -n "$url" ] && break
    sleep 0.1
  done
  [ -n "$url" ] || fail "$arch: the server did not start: $(cat "$WORK/server.err")"
  HOME="$WORK" timeout -k 5 90 "$cache/py1/bin/python" "$ROOT/tests/interop/python_sdk1.py" "$url" \
    >"$WORK/python.out" 2>"$WORK/python.err" || true
  verdict="$(grep -E '^(PASS|FAIL) ' "$WORK/python.out" | tail -n 1)"
  echo "${verdict:-FAIL python-sdk-1.x: exited without a verdict}"
  [[ "$verdict" == PASS* ]] || { tail -n 15 "$WORK/python.err"; fail "$arch: the Python SDK 1.x client failed"; }
  kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=""

  step "$arch: integration subset under qemu-user (${SUBSET[*]})"
  started=$SECONDS
  MCP_TASKD_TEST_BINARY="$binary" cargo test --test tests -- "${SUBSET[@]}"
  echo "$arch integration subset: $((SECONDS - started)) s"
  unset QEMU_LD_PREFIX
done
step "done"
