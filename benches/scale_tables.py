"""Tables for benches/scale.sh: reads its results.jsonl, prints Markdown.

    python3 benches/scale_tables.py RESULTS.jsonl OUT_DIR > tables.md
    python3 benches/scale_tables.py --readme docs/benchmarks/store-scale.md tables.md

The second form replaces what lies between the `<!-- scale:begin -->` and
`<!-- scale:end -->` markers of that page with the tables.
"""
import json
import os
import statistics
import sys

BEGIN, END = "<!-- scale:begin -->", "<!-- scale:end -->"


def readme(path, tables):
    text = open(path).read()
    body = open(tables).read().strip()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    open(path, "w").write(f"{head}{BEGIN}\n{body}\n{END}{tail}")


def main(results, out):
    rows = [json.loads(line) for line in open(results) if line.strip()]
    by = lambda step, **kw: [
        r for r in rows if r["step"] == step and all(r.get(k) == v for k, v in kw.items())
    ]
    mean = lambda xs: statistics.mean(xs) if xs else float("nan")
    loads = [r["load"] for r in rows if "load" in r]
    print(f"Results folder `{os.path.basename(out.rstrip('/'))}`; load average during the "
          f"steps {min(loads):.1f}–{max(loads):.1f} (the VM is shared).\n")
    fills = {r["store"]: r for r in by("fill")}
    print("| store | tasks | filled in | file | bytes a task |")
    print("|---|---:|---:|---:|---:|")
    for name, r in fills.items():
        print(f"| {name} | {r['tasks']:,} (leased {r['leased']:,}, expired {r['expired']:,}) | "
              f"{r['s']} s | {r['bytes'] / 2**20:,.0f} MiB | {r['bytes'] / r['tasks']:.0f} |")
    print()

    goals = []
    # One row per client concurrency: c=64 on 2 cores saturates them (the p99 is then
    # set by the scheduler's time slices), c=8 does not.
    for conc in sorted({r["result"]["conc"] for r in by("get")}, reverse=True):
        small = [r for r in by("get", store="small") if r["result"]["conc"] == conc]
        big = [r for r in by("get", store="big") if r["result"]["conc"] == conc]
        p99s, p99b = mean([r["result"]["p99_ms"] for r in small]), mean([r["result"]["p99_ms"] for r in big])
        rpss, rpsb = mean([r["result"]["rps"] for r in small]), mean([r["result"]["rps"] for r in big])
        # Issue 19 asked ≤ 1.2× at c=64; issue 35 asks ≤ 1.15× at c=8.
        bound = 1.15 if conc <= 8 else 1.2
        goals.append((f"`tasks/get` p99, random ids, c={conc}", f"{p99s:.2f} ms ({rpss:,.0f}/s)",
                      f"{p99b:.2f} ms ({rpsb:,.0f}/s)", f"{p99b / p99s:.2f}×", f"≤ {bound}×",
                      p99b / p99s <= bound))
        old = [r for r in by("get", store="big-time") if r["result"]["conc"] == conc]
        if old:
            p99o, rpso = mean([r["result"]["p99_ms"] for r in old]), mean([r["result"]["rps"] for r in old])
            goals.append((f"the same, 10M time-ordered ids (the lookup before row keys), c={conc}",
                          f"{p99s:.2f} ms", f"{p99o:.2f} ms ({rpso:,.0f}/s)", f"{p99o / p99s:.2f}×",
                          "(before)", True))
        cpus = mean([r["cpu_us"] for r in small if "cpu_us" in r])
        cpub = mean([r["cpu_us"] for r in big if "cpu_us" in r])
        if cpus == cpus and cpub == cpub:
            goals.append((f"server CPU a `tasks/get` (same runs, c={conc})", f"{cpus:.1f} µs",
                          f"{cpub:.1f} µs", f"{cpub / cpus:.2f}×", "(why)", True))
            cpuo = mean([r["cpu_us"] for r in old if "cpu_us" in r])
            if cpuo == cpuo:
                goals.append((f"the same, 10M time-ordered ids, c={conc}", f"{cpus:.1f} µs",
                              f"{cpuo:.1f} µs", f"{cpuo / cpus:.2f}×", "(before)", True))
    preads = {r["store"]: r["calls"] / max(r["result"]["requests"], 1) for r in by("preads")}
    if "small" in preads and "big" in preads:
        # Issue 35: at most half of the 4.2 a lookup measured at 10M before row keys.
        goals.append(("`pread64` calls a `tasks/get`, c=8 (strace -c)", f"{preads['small']:.2f}",
                      f"{preads['big']:.2f}", "", "≤ 2.1 (½ of 4.2)", preads["big"] <= 2.1))
        if "big-time" in preads:
            goals.append(("the same, 10M time-ordered ids", f"{preads['small']:.2f}",
                          f"{preads['big-time']:.2f}", f"row keys: {preads['big'] / preads['big-time']:.2f}×",
                          "(before)", True))
    cs, cb = mean([r["rps"] for r in by("create", store="small")]), mean([r["rps"] for r in by("create", store="big")])
    goals.append(("task creations/s, c=64", f"{cs:,.0f}", f"{cb:,.0f}", f"{cb / cs:.2f}×", "≥ 0.9×", cb / cs >= 0.9))
    st = {r["store"]: r for r in by("startup")}
    if "leased" in st:
        goals.append(("start-up to `/healthz` 200 (1M tasks, 100k leased)",
                      f"{st['small']['healthz_s']} s", f"{st['leased']['healthz_s']} s", "",
                      "≤ 1 s", st["leased"]["healthz_s"] <= 1.0))
    during, after = by("expiry", phase="during"), by("expiry", phase="after")
    if during and after:
        d, a = during[0]["result"]["p99_ms"], after[0]["result"]["p99_ms"]
        goals.append(("`tasks/get` p99 while the janitor expires 1M tasks (vs after)",
                      f"{a:.2f} ms", f"{d:.2f} ms", f"{d / a:.2f}×", "≤ 2×", d / a <= 2))
    ms = {r["store"]: r["ms"] for r in by("metrics")}
    if "big" in ms:
        goals.append(("`GET /metrics` (median of 50, curl)", f"{ms['small']['median']} ms",
                      f"{ms['big']['median']} ms", f"{ms['big']['median'] / ms['small']['median']:.2f}×",
                      "≤ 5 ms", ms["big"]["median"] <= 5))
    bytes_ = {r["store"]: r for r in by("bytes")}
    if "big" in bytes_:
        goals.append(("bytes on disk a stored no-op task (dbstat)", f"{bytes_['small']['total_per_task']:.0f}",
                      f"{bytes_['big']['total_per_task']:.0f}", "", "measured", True))
    hwm_big = max([r["hwm_kib"] for r in rows if r.get("store") == "big" and "hwm_kib" in r], default=0)
    hwm_empty = max([r["hwm_kib"] for r in rows if r.get("store") == "empty" and "hwm_kib" in r], default=0)
    if hwm_big and hwm_empty:
        diff = (hwm_big - hwm_empty) / 1024
        goals.append(("peak RSS (VmHWM, largest of the runs)", f"{hwm_empty / 1024:.1f} MiB (empty)",
                      f"{hwm_big / 1024:.1f} MiB", f"+{diff:.1f} MiB", "≤ +64 MiB", diff <= 64))
    print("| figure | small store (10k) | large store (10M) | ratio | goal | met |")
    print("|---|---:|---:|---:|---|---|")
    for name, s, b, ratio, goal, met in goals:
        print(f"| {name} | {s} | {b} | {ratio} | {goal} | {'yes' if met else '**no**'} |")
    print()

    print("Each run, in order (load average at its start):\n")
    print("| step | store | figure | load |")
    print("|---|---|---|---:|")
    for r in rows:
        if r["step"] == "get":
            fig = f"c={r['result']['conc']}: p99 {r['result']['p99_ms']} ms, p50 {r['result']['p50_ms']} ms, {r['result']['rps']:,.0f}/s"
            if "cpu_us" in r:
                fig += f", {r['cpu_us']} µs CPU"
        elif r["step"] == "create":
            fig = f"{r['rps']:,}/s"
        elif r["step"] == "expiry":
            fig = f"{r['phase']}: p99 {r['result']['p99_ms']} ms, {r['result']['rps']:,.0f}/s"
        elif r["step"] == "startup":
            fig = f"{r['healthz_s']} s to /healthz"
        elif r["step"] == "preads":
            fig = f"{r['calls']:,} pread64 over {r['result']['requests']:,} tasks/get at c=8"
        elif r["step"] == "metrics":
            fig = f"median {r['ms']['median']} ms, p90 {r['ms']['p90']} ms, max {r['ms']['max']} ms"
        else:
            continue
        print(f"| {r['step']} | {r.get('store', '')} | {fig} | {r['load']} |")
    print()

    if "big" in bytes_:
        print("Bytes a task by table and index (`dbstat`, 10M store):\n")
        print("| b-tree | bytes a task |")
        print("|---|---:|")
        for name, value in bytes_["big"]["per_task"].items():
            print(f"| `{name}` | {value} |")
        print()
    pages = by("page")
    if pages:
        print("Dashboard task pages at 10M (`/dashboard/api/tasks?limit=25&…`, curl):\n")
        print("| filter | first page | next page | rows | cut short |")
        print("|---|---:|---:|---:|---|")
        for r in pages:
            flt = r["filter"] or "(none)"
            if flt.startswith("since="):
                flt = "since=(1 h ago)"
            nxt = "—" if r["next_ms"] is None else f"{r['next_ms']} ms"
            print(f"| `{flt}` | {r['first_ms']} ms | {nxt} | {r['rows']} | {'yes' if r['partial'] else 'no'} |")
        print()
    for name in ("small", "leased"):
        if name in st:
            print(f"Start-up log, {name} store:\n")
            for line in st[name]["log"]:
                print(f"    {line}")
            print()
    # spawn.sh and drain.sh refresh their own pages (docs/benchmarks/); their output
    # stays in the results folder rather than being copied in here, where their
    # section markers would appear a second time.
    ran = [o for o in ("spawn", "drain") if os.path.exists(os.path.join(out, f"{o}.txt"))]
    if ran:
        names = " and ".join(f"`benches/{o}.sh`" for o in ran)
        print(f"{names} ran after these steps; their tables are on their own pages "
              f"(docs/benchmarks/command-tools.md, drain.md), their output in the results folder ({', '.join(o + '.txt' for o in ran)}).\n")


if __name__ == "__main__":
    if sys.argv[1] == "--readme":
        readme(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1], sys.argv[2])
