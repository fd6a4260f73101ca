#!/usr/bin/env bash
# The long generated-input ("fuzz") run: every proptest harness of `cargo test` with many
# more cases and a fresh seed, in release builds.
#
#   in-process  the `fuzz` test modules beside each parser (src/): the JSON-RPC envelope
#               and _meta, the command-tool output protocol (and its stdout reader), the
#               TOML configuration
#   http        tests/fuzz/http.rs: generated requests against the real binary
#
#   benches/fuzz.sh                                  # 20000 cases per in-process harness, 5000 HTTP
#   FUZZ_CASES=100000 FUZZ_HTTP_CASES=20000 benches/fuzz.sh
#   FUZZ_SEED=1234 benches/fuzz.sh                   # replay a run (its seed is printed)
#
# Environment: FUZZ_CASES (20000), FUZZ_HTTP_CASES (5000), FUZZ_SEED (random),
# CARGO_TARGET_DIR. A failure prints the minimal failing input and the seed; the script
# exits non-zero. The figure of the last recorded run is in docs/benchmarks/fuzz.md.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
cd "$(dirname "$HERE")"
CASES=${FUZZ_CASES:-20000}
HTTP_CASES=${FUZZ_HTTP_CASES:-5000}
SEED=${FUZZ_SEED:-$(od -An -N6 -tu8 /dev/urandom | tr -d ' ')}
LOG=$(mktemp -t fuzz.XXXXXX)

echo "fuzz: seed $SEED, $CASES cases per in-process harness, $HTTP_CASES HTTP cases (log $LOG)"
cargo build --release --tests --quiet

failed=0
run() {
    local name=$1 cases=$2
    shift 2
    local started=$SECONDS status=ok
    if ! PROPTEST_RNG_SEED=$SEED PROPTEST_CASES=$cases cargo test --release "$@" \
        >>"$LOG" 2>&1; then
        status=FAILED
        failed=1
    fi
    local harnesses
    harnesses=$(grep -c "^test .*fuzz::.* \.\.\. " "$LOG" || true)
    echo "fuzz: $name: $status in $((SECONDS - started)) s ($harnesses harness results so far)"
}

run in-process "$CASES" --lib fuzz::
run http "$HTTP_CASES" --test tests fuzz:: -- --test-threads 1

grep -E "^test .*fuzz::.* \.\.\. " "$LOG" | sed 's/^/fuzz:   /'
if [ "$failed" -ne 0 ]; then
    grep -E -A3 "minimal failing input|Test failed" "$LOG" | head -60
    echo "fuzz: FAILED (seed $SEED); full output in $LOG"
    exit 1
fi
echo "fuzz: no failures (seed $SEED)"
