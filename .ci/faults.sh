#!/usr/bin/env bash
# faults.sh BINARY: the promise under faults, briefly (issue 50). The fault soak
# (benches/faults.sh) for 60 s on SQLite and 60 s on PostgreSQL (two nodes), and the
# partition test (benches/soak/partitions.py: two nodes and PostgreSQL in network
# namespaces, links cut with nftables inside them), which must run here, not skip:
# nftables is installed with apt-get when missing. Either failing fails CI; their
# results stay in ${TMPDIR:-/tmp}/taskd-ci-faults.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$1
OUT="${TMPDIR:-/tmp}/taskd-ci-faults"
rm -rf "$OUT"
mkdir -p "$OUT"
if ! command -v nft >/dev/null; then
  apt-get install -y --no-install-recommends nftables >/dev/null 2>&1 ||
    (apt-get update >/dev/null && apt-get install -y --no-install-recommends nftables >/dev/null)
fi
started=$SECONDS
DURATION=60 GAP=0.7 PAGE=- BIN="$BIN" OUT="$OUT/soak" benches/faults.sh sqlite postgres
echo "fault soak: $((SECONDS - started)) s"
started=$SECONDS
MCP_TASKD_REQUIRE_PARTITIONS=1 python3 benches/soak/partitions.py --bin "$BIN" \
  --out "$OUT/partitions" --json "$OUT/partitions.json"
echo "partitions: $((SECONDS - started)) s"
