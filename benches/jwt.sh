#!/usr/bin/env bash
# Issue 32: what a JWT access token costs against a static token, side by side in one
# run. One server (examples/bench.toml's settings) accepts both: a static token
# ([[auth.tokens]]) and RS256 access tokens of a local issuer (benches/jwtissuer.rs:
# discovery and a key set on a loopback port). Each round runs inline
# `tools/call echo` at CONC connections for SECONDS_EACH with each token in turn (the
# order alternating round by round; benches/eraload.rs with ERALOAD_TOKEN), and reads
# the server's CPU time (utime + stime of /proc/PID/stat) around each run. The JWT's
# key is cached after the first request (the warm-up), as in production.
#
#   cargo build --release && cargo bench --no-run --bench eraload --bench jwtissuer
#   benches/jwt.sh [target/release/mcp-taskd]
#
# Prints per round: token, calls/s, server CPU µs per call; then the medians of the
# per-round ratios jwt/static. Goal (issue 32): under 5% more server CPU per request.
# Environment: ROUNDS (5), SECONDS_EACH (5), CONC (16), PORT (8151).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-$REPO/target/release/mcp-taskd}
ROUNDS=${ROUNDS:-5}
SECONDS_EACH=${SECONDS_EACH:-5}
CONC=${CONC:-16}
PORT=${PORT:-8151}
bench_bin() { find "$REPO/target/release/deps" -maxdepth 1 -type f -executable -name "$1-*" | head -1; }
ERALOAD=$(bench_bin eraload)
ISSUER_BIN=$(bench_bin jwtissuer)
[ -x "$ERALOAD" ] && [ -x "$ISSUER_BIN" ] || { echo "build the load clients first (see the header)" >&2; exit 1; }
WORK=$(mktemp -d -t jwt-bench-XXXXXX)
ISSUER_PID="" SERVER=""
trap 'kill $ISSUER_PID $SERVER 2>/dev/null || true; rm -rf "$WORK"' EXIT

"$ISSUER_BIN" mcp-taskd-bench >"$WORK/issuer" &
ISSUER_PID=$!
for _ in $(seq 50); do [ "$(wc -l <"$WORK/issuer")" -ge 2 ] && break; sleep 0.1; done
ISSUER=$(sed -n 1p "$WORK/issuer")
JWT=$(sed -n 2p "$WORK/issuer")
STATIC=bench-static-token
DIGEST=$(printf %s "$STATIC" | sha256sum | cut -d' ' -f1)

cp "$REPO/examples/bench.toml" "$WORK/config.toml"
cat >>"$WORK/config.toml" <<TOML

[[auth.tokens]]
principal = "bench"
sha256 = "$DIGEST"

[auth.oauth]
issuer = "$ISSUER"
audiences = ["mcp-taskd-bench"]
TOML
RUST_LOG=error "$BIN" serve --config "$WORK/config.toml" --listen "127.0.0.1:$PORT" \
  --data-dir "$WORK/data" >/dev/null 2>&1 &
SERVER=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))

run() { # token-name token
  local before after calls_per_s calls
  before=$(cpu_ticks)
  read -r calls calls_per_s < <(ERALOAD_TOKEN=$2 "$ERALOAD" "127.0.0.1:$PORT" modern "$SECONDS_EACH" "$CONC" |
    python3 -c 'import json,sys; r = json.load(sys.stdin); print(r["calls"], r["calls_per_s"])')
  after=$(cpu_ticks)
  echo "$1 $calls_per_s $(awk -v t=$((after - before)) -v u="$TICK_US" -v c="$calls" 'BEGIN { printf "%.1f", t * u / c }')"
}

# Warm-up: the key set is fetched once, and both paths are exercised.
run jwt "$JWT" >/dev/null
run static "$STATIC" >/dev/null

echo "round token calls_per_s server_cpu_us_per_call"
for round in $(seq "$ROUNDS"); do
  order="static jwt"
  [ $((round % 2)) = 0 ] && order="jwt static"
  for token in $order; do
    value=$STATIC
    [ "$token" = jwt ] && value=$JWT
    echo "$round $(run "$token" "$value")"
  done
done | tee "$WORK/results"

python3 - "$WORK/results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) == 4 and parts[0].isdigit():
        rows.setdefault(int(parts[0]), {})[parts[1]] = (float(parts[2]), float(parts[3]))
rate = [r["jwt"][0] / r["static"][0] for r in rows.values()]
cpu = [r["jwt"][1] / r["static"][1] for r in rows.values()]
print("calls/s jwt/static per round:", ", ".join(f"{x:.2f}" for x in rate),
      f"median {statistics.median(rate):.3f}")
print("server CPU per call jwt/static per round:", ", ".join(f"{x:.3f}" for x in cpu),
      f"median {statistics.median(cpu):.3f} (goal < 1.05)")
PY
