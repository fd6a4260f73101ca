#!/usr/bin/env bash
# CI: the portable implementations (what macOS and every system but Linux use: posix_spawn,
# waitid supervision, no /proc reaper, a run guard fed by the server's own record, peer
# checks without TCP_INFO/SIOCOUTQNSD) built on Linux with `--features portable`, and run
# through the tests of what they replace, next to the Linux-specific run of `cargo test`:
#
# - the unit tests (spawning, output handling, slots);
# - command tools (tests/command_tools.rs) and reaping (tests/reaping.rs, which checks
#   the portable build's documented gaps instead of Linux's behaviour: docs/macos.md);
# - the admin socket's peer check (operator::the_admin_socket…);
# - connection limits and unsent bytes (tests/hardening.rs, listen streams), but for
#   the two listen tests of a hang-up seen at once: the portable build cannot ask the
#   TCP state, and notices a client that left at the next write (docs/macos.md).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
cargo test --workspace --features portable --lib
cargo test --features portable --test tests -- \
  command_tools:: reaping:: operator::the_admin_socket hardening:: listen_streams:: \
  --skip listen_streams::a_closed_stream_frees_its_slot_within_a_second \
  --skip listen_streams::a_client_that_half_closes_gets_the_graceful_answer
echo "portable: $((SECONDS - started)) s"
