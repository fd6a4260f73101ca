#!/usr/bin/env bash
# CI: compile-check mcp-taskd for both Apple targets (aarch64-apple-darwin,
# x86_64-apple-darwin) with the same Rust code a release builds: every crate, ours
# included, is type-checked and borrow-checked for the target (`cargo check`, the
# release profile's cfgs).
#
# The one stub: C dependencies. Build scripts (the bundled SQLite of libsqlite3-sys,
# and any other `cc` build) compile C with the target's compiler and archive it; without
# an Apple SDK here, CC/AR for the Apple targets are a stub that writes an empty object
# and an empty archive. `cargo check` never links, so the stubs are never used for more
# than letting those build scripts finish. A real Mac build compiles the same C with the
# Xcode command-line tools (docs/macos.md).
#
#   .ci/apple-check.sh            # both targets
#   .ci/apple-check.sh TARGET...  # only these
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
TARGETS=("$@")
[ "${#TARGETS[@]}" -gt 0 ] || TARGETS=(aarch64-apple-darwin x86_64-apple-darwin)

STUBS="$(mktemp -d)"
trap 'rm -rf "$STUBS"' EXIT
# cc: whatever the flags, write an empty object where -o says (or nothing, for probes).
cat >"$STUBS/cc" <<'SH'
#!/bin/sh
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift ;;
    -o*) out="${1#-o}" ;;
  esac
  shift
done
[ -z "$out" ] || : >"$out"
SH
# ar: an empty archive, whatever members it was given.
cat >"$STUBS/ar" <<'SH'
#!/bin/sh
for arg in "$@"; do
  case "$arg" in
    *.a) printf '!<arch>\n' >"$arg"; exit 0 ;;
  esac
done
SH
chmod +x "$STUBS/cc" "$STUBS/ar"

for target in "${TARGETS[@]}"; do
  rustup target add "$target" >/dev/null 2>&1 || true
  env_target=${target//-/_}
  echo "== cargo check --release --target $target (C dependencies stubbed)"
  env "CC_$env_target=$STUBS/cc" "AR_$env_target=$STUBS/ar" \
    "CARGO_TARGET_DIR=$ROOT/target/apple-check" \
    cargo check --release --locked --target "$target" --workspace --bins --lib
done
