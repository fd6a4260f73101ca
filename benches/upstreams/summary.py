#!/usr/bin/env python3
"""The tables of benches/upstreams.sh from its results folder (steps.jsonl, tasks.jsonl).

Per target and concurrency, medians over rounds: calls/s, latency p50/p99, the latency
added to the upstream called directly (the target's p50 or p99 minus direct's in the same
round and concurrency, then the median of those differences), and CPU per call of the
bridge process and of its upstream process. Then the durable tasks: tasks/s and CPU per
task, and the upstream tool over the built-in no-op, round by round.

    python3 benches/upstreams/summary.py OUT
"""

import json
import statistics
import sys
from collections import defaultdict

NAMES = {
    "direct": "direct (stdio, no bridge)",
    "taskd": "mcp-taskd, 2026-07-28",
    "taskd-legacy": "mcp-taskd, 2025-11-25 session",
    "supergateway": "supergateway, streamable HTTP",
    "mcp-proxy": "mcp-proxy, streamable HTTP",
    "taskd-builtin": "mcp-taskd built-in echo (no upstream)",
}


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, digits=2, sign=False):
    if value is None:
        return ""
    return f"{value:+.{digits}f}" if sign else f"{value:,.{digits}f}"


def main(out):
    steps = [json.loads(line) for line in open(f"{out}/steps.jsonl")]
    by = defaultdict(list)  # (target, conc) -> [step]
    direct = {}  # (round, conc) -> result
    for step in steps:
        result = step["result"]
        by[(step["target"], result["conc"])].append(step)
        if step["target"] == "direct":
            direct[(step["round"], result["conc"])] = result
    targets = [t for t in NAMES if any(key[0] == t for key in by)]
    concs = sorted({key[1] for key in by})
    print("| target | c | calls/s | p50 ms | p99 ms | added p50 ms | added p99 ms "
          "| bridge CPU µs/call | upstream CPU µs/call |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for conc in concs:
        for target in targets:
            rows = by.get((target, conc), [])
            if not rows:
                continue
            added50, added99, bridge, upstream = [], [], [], []
            for step in rows:
                result = step["result"]
                base = direct.get((step["round"], conc))
                if base and target != "direct":
                    added50.append(result["p50_ms"] - base["p50_ms"])
                    added99.append(result["p99_ms"] - base["p99_ms"])
                cpu = list(result["cpu_ms"].values())
                calls = max(result["calls"], 1)
                if target == "direct":
                    upstream.append(sum(cpu) * 1000 / calls)
                else:
                    bridge.append(cpu[0] * 1000 / calls if cpu else None)
                    upstream.append(cpu[1] * 1000 / calls if len(cpu) > 1 else None)
            results = [step["result"] for step in rows]
            print(f"| {NAMES[target]} | {conc} "
                  f"| {fmt(median(r['rate'] for r in results), 0)} "
                  f"| {fmt(median(r['p50_ms'] for r in results), 3)} "
                  f"| {fmt(median(r['p99_ms'] for r in results), 3)} "
                  f"| {fmt(median(added50), 3, True)} | {fmt(median(added99), 3, True)} "
                  f"| {fmt(median(bridge), 0)} | {fmt(median(upstream), 0)} |")
    print()
    print("Per round, p50 / p99 ms (load average at the step):")
    print()
    rounds = sorted({step["round"] for step in steps})
    print("| target | c | " + " | ".join(f"round {r}" for r in rounds) + " |")
    print("|---|---:|" + "---|" * len(rounds))
    for conc in concs:
        for target in targets:
            cells = {step["round"]: step for step in by.get((target, conc), [])}
            line = []
            for r in rounds:
                step = cells.get(r)
                line.append("" if step is None else
                            f"{step['result']['p50_ms']:.3f} / {step['result']['p99_ms']:.2f} "
                            f"({step['load']:.1f})")
            print(f"| {NAMES[target]} | {conc} | " + " | ".join(line) + " |")

    try:
        tasks = [json.loads(line) for line in open(f"{out}/tasks.jsonl")]
    except FileNotFoundError:
        return
    print()
    print("| tool | tasks/s | server CPU µs/task | upstream CPU µs/task |")
    print("|---|---:|---:|---:|")
    by_tool = defaultdict(list)
    for row in tasks:
        by_tool[row["result"]["tool"]].append(row)
    for tool, rows in by_tool.items():
        n = rows[0]["result"]["n"]
        print(f"| `{tool}` | {fmt(median(r['result']['tasks_per_s'] for r in rows), 0)} "
              f"| {fmt(median(r['server_cpu_ms'] * 1000 / n for r in rows), 0)} "
              f"| {fmt(median(r['upstream_cpu_ms'] * 1000 / n for r in rows), 0)} |")
    ratios = []
    for r in sorted({row["round"] for row in tasks}):
        pair = {row["result"]["tool"]: row["result"]["tasks_per_s"] for row in tasks
                if row["round"] == r}
        if "noop_task" in pair and len(pair) == 2:
            other = next(tool for tool in pair if tool != "noop_task")
            ratios.append(pair[other] / pair["noop_task"])
    if ratios:
        print()
        print("Upstream tool over the built-in no-op, tasks/s per round: "
              + ", ".join(f"{ratio:.2f}" for ratio in ratios)
              + f" (median {statistics.median(ratios):.2f})")


if __name__ == "__main__":
    main(sys.argv[1])
