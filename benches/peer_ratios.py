#!/usr/bin/env python3
"""Our req/s over each peer's, from a run-peers.sh results folder, paired round by round
(the shared summary divides by the first target in name order instead), with issue #2's
targets at c=64: >= 10x the Python SDK, >= 5x the TypeScript SDK, p99 < 10 ms.
"""
import glob
import json
import os
import re
import statistics
import sys

out = sys.argv[1]
rps, p99 = {}, {}
for f in glob.glob(os.path.join(out, "r*-c*-*.json")):
    m = re.match(r"r(\d+)-c(\d+)-(\w+)\.json$", os.path.basename(f))
    if not m:
        continue
    try:
        d = json.load(open(f))
        key = (int(m.group(1)), int(m.group(2)), m.group(3))
        rps[key] = d["summary"]["requestsPerSec"]
        p99[key] = (d.get("latencyPercentiles") or {}).get("p99")
    except (OSError, ValueError, KeyError):
        pass
TARGETS = {"py": 10, "ts": 5}
for conc in sorted({c for (_, c, _) in rps}):
    for peer, want in TARGETS.items():
        r = [rps[(n, c, t)] / rps[(n, c, peer)] for (n, c, t) in sorted(rps)
             if c == conc and t == "ours" and rps.get((n, c, peer))]
        if not r:
            continue
        verdict = ""
        if conc == 64:
            verdict = f"; target >= {want}x: {'met' if statistics.median(r) >= want else 'MISSED'}"
        print(f"ours/{peer} req/s c={conc}: median {statistics.median(r):.1f}x over {len(r)} paired rounds "
              f"({', '.join(f'{x:.1f}' for x in r)}){verdict}")
ours64 = [p99[k] * 1000 for k in sorted(p99) if k[1] == 64 and k[2] == "ours" and p99[k]]
if ours64:
    med = statistics.median(ours64)
    print(f"ours p99 c=64: median {med:.2f} ms ({', '.join(f'{x:.2f}' for x in ours64)}); "
          f"target < 10 ms: {'met' if med < 10 else 'MISSED'}")
