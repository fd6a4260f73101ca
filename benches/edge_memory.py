"""Resident memory of the release server, idle and under load, with the defaults and with
examples/edge.toml (docs/benchmarks/edge.md, "An edge box's memory").

Per round and per profile, on a fresh data dir: start the server, wait SETTLE_S, read
VmRSS (idle); then CONC taskload clients create N no-op tasks that the workers run
meanwhile (taskload e2e) while VmRSS is sampled every 50 ms: the largest sample and
VmHWM (the kernel's peak) after the load. Profiles alternate within each round; the
medians over rounds are printed as a markdown table, with edge/default ratios.

Usage (benches/edge-memory.sh builds and calls it):
  python3 edge_memory.py BINARY TASKLOAD EDGE_TOML OUT_DIR [--n N] [--conc C] [--rounds R]"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

SETTLE_S = 2.0


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def run(binary, taskload, config_text, base, n, conc, log):
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    config = os.path.join(base, "config.toml")
    with open(config, "w") as f:
        f.write(config_text)
    proc = subprocess.Popen([binary, "serve", "--config", config, "--listen", "127.0.0.1:0",
                             "--data-dir", os.path.join(base, "data")],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        match = re.match(r"mcp-taskd listening on http://([^/]+)/mcp", proc.stdout.readline())
        if not match:
            raise SystemExit("the server did not start")
        time.sleep(SETTLE_S)
        idle = status_kib(proc.pid, "VmRSS")
        peak, done = [idle], threading.Event()

        def sample():
            while not done.wait(0.05):
                peak.append(status_kib(proc.pid, "VmRSS"))

        sampler = threading.Thread(target=sample)
        sampler.start()
        out = subprocess.run([taskload, match.group(1), "e2e", str(n), str(conc)],
                             capture_output=True, text=True, check=True)
        done.set()
        sampler.join()
        load = json.loads(out.stdout.strip().splitlines()[-1])
        return {"idle_kib": idle, "load_kib": max(peak), "hwm_kib": status_kib(proc.pid, "VmHWM"),
                "tasks_per_s": load["tasks_per_s"]}
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("taskload")
    parser.add_argument("edge")
    parser.add_argument("out")
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--conc", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(args.edge) as f:
        # The profile as shipped, but on a port and data dir of the run's own.
        edge = re.sub(r"^(listen|data_dir) = .*$", "", f.read(), flags=re.M)
    profiles = [("default", '[builtin]\nsets = ["demo"]\n'), ("edge", edge)]
    rows = {name: [] for name, _ in profiles}
    with open(os.path.join(args.out, "server.log"), "a") as log:
        for round_ in range(args.rounds):
            order = profiles if round_ % 2 == 0 else profiles[::-1]
            for name, text in order:
                row = run(args.binary, args.taskload, text,
                          os.path.join(args.out, f"{name}-{round_}"), args.n, args.conc, log)
                rows[name].append(row)
                print(json.dumps(dict(row, profile=name, round=round_)), file=sys.stderr,
                      flush=True)
    with open(os.path.join(args.out, "edge-memory.json"), "w") as f:
        json.dump(rows, f, indent=1)
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
           for name, rs in rows.items()}
    print(f"| profile | idle RSS | peak RSS under load (c={args.conc}, {args.n} tasks) "
          "| VmHWM | no-op tasks/s |")
    print("|---|---:|---:|---:|---:|")
    for name in ("default", "edge"):
        m = med[name]
        print(f"| {name} | {m['idle_kib'] / 1024:.1f} MiB | {m['load_kib'] / 1024:.1f} MiB | "
              f"{m['hwm_kib'] / 1024:.1f} MiB | {m['tasks_per_s']:,.0f} |")
    ratio = {k: med["edge"][k] / med["default"][k] for k in med["edge"]}
    print(f"| edge / default | {ratio['idle_kib']:.2f}× | {ratio['load_kib']:.2f}× | "
          f"{ratio['hwm_kib']:.2f}× | {ratio['tasks_per_s']:.2f}× |")


if __name__ == "__main__":
    main()
