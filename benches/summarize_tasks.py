#!/usr/bin/env python3
"""Summarise a benches/tasks.sh results folder: medians over rounds, per-round ratios.

max ms is the slowest request of any round (a stall of the box shows there first);
load1 and busy% are the load average and the box's CPU busy share just before a step;
srv us/req is the server's CPU time per request (per task for e2e: creation, polls and
completion), others the cores used by other processes during the step (stepcpu.py).

Reads r<round>-<step>.json (oha), r<round>-e2e.e2e (taskload), .probe (fsync probe taken
right before the step), .load (load averages before the step) and r<round>-create.drain.
"""
import glob
import json
import math
import os
import re
import statistics
import sys

out = sys.argv[1]
STEPS = ["inline", "create", "get", "e2e"]
rounds = {}  # round -> step -> dict
for f in glob.glob(os.path.join(out, "r*-*.probe")):
    m = re.match(r"r(\d+)-(\w+)\.probe$", os.path.basename(f))
    if not m:
        continue
    rnd, step = int(m.group(1)), m.group(2)
    base = f[: -len(".probe")]
    row = {"probe": json.load(open(f))["commits_per_s"]}
    try:
        lines = open(base + ".load").read().split("\n")
        row["load1"] = float(lines[0].split(",")[0])
        row["busy"] = float(lines[1].strip().removeprefix("busy=").rstrip("%"))
    except (OSError, ValueError, IndexError):
        row["load1"], row["busy"] = math.nan, math.nan
    if step == "e2e":
        try:
            d = json.loads(open(base + ".e2e").read())
            row.update(rps=d["tasks_per_s"], creations=d["creations_per_s"], n=d["n"],
                       complete_s=d["complete_s"], polls=d["polls"], errors=0)
        except (OSError, ValueError, KeyError):
            row.update(rps=0.0, errors=1)
    else:
        try:
            d = json.load(open(base + ".json"))
            codes = d.get("statusCodeDistribution") or {}
            lp = d.get("latencyPercentiles") or {}
            row.update(
                rps=d["summary"]["requestsPerSec"],
                p50=(lp.get("p50") or math.nan) * 1000,
                p99=(lp.get("p99") or math.nan) * 1000,
                slowest=(d["summary"].get("slowest") or math.nan) * 1000,
                ok=int(codes.get("200", 0)),
                errors=sum(int(v) for k, v in codes.items() if k != "200")
                + sum(int(v) for v in (d.get("errorDistribution") or {}).values()),
            )
        except (OSError, ValueError, KeyError):
            row.update(rps=0.0, p50=math.nan, p99=math.nan, ok=0, errors=-1)
        if step == "create":
            try:
                drain = dict(l.strip().split("=") for l in open(base + ".drain") if "=" in l)
                row["backlog"] = int(drain["backlog"])
                row["drain_s"] = int(drain["drain_ms"]) / 1000
                row["settle_s"] = int(drain["settle_ms"]) / 1000
            except (OSError, ValueError, KeyError):
                pass
    try:
        cpu = json.load(open(base + ".cpu"))
        row["others"] = cpu["cores"]["others"]
        done = row.get("ok") if step != "e2e" else row.get("n")
        row["us_per"] = cpu["server_cpu_s"] / done * 1e6 if done else math.nan
    except (OSError, ValueError, KeyError, TypeError):
        row["others"], row["us_per"] = math.nan, math.nan
    rounds.setdefault(rnd, {})[step] = row

if not rounds:
    sys.exit("no results in " + out)


def med(values):
    values = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(values) if values else math.nan


def span(values):
    return f"{min(values):,.0f}-{max(values):,.0f}" if values else "-"


print(f"{'step':8} {'runs':>4} {'req/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'errors':>6} "
      f"{'srv us/req':>10} {'others':>6}  {'fsync probe commits/s (median; min-max)':>40}  {'load1':>5} {'busy%':>5}")
for step in STEPS:
    rows = [rounds[k][step] for k in sorted(rounds) if step in rounds[k]]
    if not rows:
        continue
    probes = [x["probe"] for x in rows]
    unit = "tasks/s" if step == "e2e" else ""
    print(
        f"{step:8} {len(rows):>4} {med([x['rps'] for x in rows]):>9,.0f} "
        f"{med([x.get('p50', math.nan) for x in rows]):>7.2f} {med([x.get('p99', math.nan) for x in rows]):>7.2f} "
        f"{max([x.get('slowest', math.nan) for x in rows]):>7.0f} "
        f"{sum(x['errors'] for x in rows):>6} {med([x['us_per'] for x in rows]):>10.1f} "
        f"{med([x['others'] for x in rows]):>6.2f}  {med(probes):>24,.0f} ({span(probes):>13})  "
        f"{med([x['load1'] for x in rows]):>5.2f} {med([x['busy'] for x in rows]):>5.0f} {unit}"
    )
e2e = [r["e2e"] for r in rounds.values() if "e2e" in r and r["e2e"].get("errors") == 0]
if e2e:
    print(f"e2e detail (median): creation {med([x['creations'] for x in e2e]):,.0f}/s, last completion "
          f"seen after {med([x['complete_s'] for x in e2e]):.2f} s, {med([x['polls'] for x in e2e]):,.0f} polls")
creates = [r["create"] for r in rounds.values() if "create" in r and "backlog" in r["create"]]
if creates:
    print(f"create step left a backlog of {med([x['backlog'] for x in creates]):,.0f} jobs (median), drained in "
          f"{med([x['drain_s'] for x in creates]):.1f} s after the step (outbox pruned after "
          f"{med([x.get('settle_s', math.nan) for x in creates]):.1f} s)")

print()
print("per round: req/s (server us/req; other processes' cores during the step; fsync probe commits/s)")
for rnd in sorted(rounds):
    r = rounds[rnd]
    cells = "  ".join(f"{s} {r[s]['rps']:,.0f} ({r[s]['us_per']:.0f}us; {r[s]['others']:.2f}; {r[s]['probe']:,.0f})"
                      for s in STEPS if s in r)
    print(f"  round {rnd}: {cells}")
for num, target in (("create", 0.7), ("get", 0.9)):
    ratios = [rounds[k][num]["rps"] / rounds[k]["inline"]["rps"] for k in sorted(rounds)
              if num in rounds[k] and "inline" in rounds[k] and rounds[k]["inline"]["rps"]]
    if ratios:
        verdict = "meets" if med(ratios) >= target else "misses"
        print(f"ratio {num}/inline: median {med(ratios):.2f} over {len(ratios)} rounds "
              f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)}); target >= {target}: {verdict}")
try:
    print(open(os.path.join(out, "peak-rss.txt")).read().strip())
except OSError:
    pass
