"""Bytes written to disk per task (issue 34, flash storage), from /proc/PID/io and the
per-thread /proc/PID/task/TID/io `write_bytes` of the release server: what the kernel
was asked to write to the data dir's file system on the process's behalf, counted in
4 KiB pages as they are dirtied (a page written again after its fsync counts again).

Per step, on a fresh data dir on disk (not tmpfs), after start-up has settled:
- `e2e`: CONC clients create N no-op tasks (`taskload e2e`), which the server's 8
  workers run meanwhile: creation, the attempt and its outcome, as in use;
- `create`: the same creations with nothing run (`noop_task` is a placeholder command
  tool at `max_concurrency = 1`, so one attempt runs and every other job stays queued);
- `attempts`: that backlog drained by a server with the built-in `noop_task`, started
  on the same data dir (8 workers): each attempt's claim and outcome.
Each step's bytes are split by thread: `store-writer` writes the WAL (every commit's
frames, fsynced at `synchronous = "full"`), `store-checkpoin` copies WAL frames into
tasks.db (a passive checkpoint every 100 ms), and the rest (the janitor's truncation,
start-up). The "after" column is what the 1.5 s after the last request wrote: the
checkpoint that follows the load, and the outbox pruning.

Usage (benches/flash.sh builds and calls it):
  python3 flash.py BINARY TASKLOAD OUT_DIR [--n N] [--concs 1,8,64]
      [--syncs full,normal] [--variant NAME=TOML ...] [--wal-frames]
A variant adds TOML to every step's configuration (e.g. a setting under test); the
baseline runs as `default`. Prints a markdown table and writes OUT_DIR/flash.json.
`--wal-frames` also runs e2e at c=8 with checkpoints off and reads the WAL it leaves
with wal_frames.py: frames per commit and by b-tree."""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SETTLE_S = 1.5
AFTER_S = 1.5


def thread_io(pid):
    """write_bytes by thread name, and the process's total (exited threads included)."""
    by_name = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/io") as f:
                io = dict(line.split(": ") for line in f.read().splitlines())
        except (FileNotFoundError, ProcessLookupError):
            continue
        by_name[name] = by_name.get(name, 0) + int(io["write_bytes"])
    with open(f"/proc/{pid}/io") as f:
        io = dict(line.split(": ") for line in f.read().splitlines())
    by_name["_process"] = int(io["write_bytes"])
    return by_name


def delta(after, before):
    names = set(after) | set(before)
    return {n: after.get(n, 0) - before.get(n, 0) for n in names}


def split(d):
    """writer / checkpointer / other / total, from a thread_io delta."""
    writer = d.get("store-writer", 0)
    checkpointer = d.get("store-checkpoin", 0)
    total = d["_process"]
    return {"wal": writer, "checkpoint": checkpointer,
            "other": total - writer - checkpointer, "total": total}


def precreate(data, page_size):
    """An empty tasks.db in WAL mode with `page_size`-byte pages, for the server to fill."""
    import sqlite3
    os.makedirs(data, exist_ok=True)
    db = sqlite3.connect(os.path.join(data, "tasks.db"))
    db.execute(f"PRAGMA page_size = {page_size}")
    assert db.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    db.execute("VACUUM")
    assert db.execute("PRAGMA page_size").fetchone()[0] == page_size
    db.close()


class Server:
    def __init__(self, binary, config, data_dir, log):
        self.config_path = os.path.join(os.path.dirname(data_dir), "config.toml")
        with open(self.config_path, "w") as f:
            f.write(config)
        self.proc = subprocess.Popen(
            [binary, "serve", "--config", self.config_path, "--listen", "127.0.0.1:0",
             "--data-dir", data_dir],
            stdout=subprocess.PIPE, stderr=log, text=True)
        line = self.proc.stdout.readline()
        match = re.match(r"mcp-taskd listening on http://([^/]+)/mcp", line)
        if not match:
            raise SystemExit(f"the server did not start: {line!r}")
        self.host = match.group(1)
        self.pid = self.proc.pid

    def metrics(self):
        with urllib.request.urlopen(f"http://{self.host}/metrics", timeout=10) as r:
            return r.read().decode()

    def jobs(self, state):
        match = re.search(r'^mcp_taskd_jobs\{state="%s"\} (\d+)' % state, self.metrics(), re.M)
        return int(match.group(1)) if match else 0

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        self.proc.wait(timeout=60)


def config(sync, builtin, extra, tools=""):
    return (f'[store]\nsynchronous = "{sync}"\n{extra.get("store", "")}\n'
            f'[builtin]\nsets = [{builtin}]\n{extra.get("rest", "")}\n{tools}')


PLACEHOLDER = """
[[tools]]
name = "noop_task"
description = "Holds its one slot: every other job stays queued (benches/flash.py)."
command = ["/bin/sleep", "600"]
task_policy = "required"
max_concurrency = 1
"""


def taskload(taskload_bin, host, mode, n, conc):
    out = subprocess.run([taskload_bin, host, mode, str(n), str(conc)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def parse_extra(toml):
    """Splits a variant's TOML into lines for [store] (keys without a table) and the rest.
    `@page_size=N` instead creates tasks.db with N-byte pages before the server first
    opens it (SQLite fixes the page size when the file is created)."""
    if toml.startswith("@page_size="):
        return {"store": "", "rest": "", "page_size": int(toml.split("=", 1)[1])}
    store, rest = [], []
    target = store
    for line in toml.split("\\n"):
        if line.strip().startswith("["):
            target = rest
        target.append(line)
    return {"store": "\n".join(store), "rest": "\n".join(rest)}


def run_step(args, variant, extra, sync, conc, step, out, log):
    base = os.path.join(out, f"{variant}-{sync}-c{conc}-{step}")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    data = os.path.join(base, "data")
    if "page_size" in extra:
        precreate(data, extra["page_size"])
    row = {"variant": variant, "sync": sync, "conc": conc, "step": step, "n": args.n}
    if step == "e2e":
        server = Server(args.binary, config(sync, '"demo"', extra), data, log)
        time.sleep(SETTLE_S)
        s0 = thread_io(server.pid)
        load = taskload(args.taskload, server.host, "e2e", args.n, conc)
        s1 = thread_io(server.pid)
        time.sleep(AFTER_S)
        s2 = thread_io(server.pid)
        server.stop()
        row.update(creations_per_s=load["creations_per_s"], tasks_per_s=load["tasks_per_s"])
    else:
        server = Server(args.binary, config(sync, "", extra, PLACEHOLDER), data, log)
        time.sleep(SETTLE_S)
        s0 = thread_io(server.pid)
        load = taskload(args.taskload, server.host, "create", args.n, conc)
        s1 = thread_io(server.pid)
        time.sleep(AFTER_S)
        s2 = thread_io(server.pid)
        server.stop()
        row.update(creations_per_s=load["creations_per_s"])
        create = dict(row, load=split(delta(s1, s0)), after=split(delta(s2, s1)))
        # The backlog drained by the built-in no-op: the attempts alone.
        server = Server(args.binary, config(sync, '"demo"', extra), data, log)
        a0 = thread_io(server.pid)
        started = time.time()
        while server.jobs("queued") + server.jobs("running") > 0:
            if time.time() - started > 600:
                raise SystemExit("the backlog did not drain in 10 minutes")
            time.sleep(0.05)
        drained = time.time() - started
        a1 = thread_io(server.pid)
        time.sleep(AFTER_S)
        a2 = thread_io(server.pid)
        server.stop()
        attempts = dict(row, step="attempts", tasks_per_s=args.n / drained,
                        load=split(delta(a1, a0)), after=split(delta(a2, a1)))
        attempts.pop("creations_per_s", None)
        return [create, attempts]
    row.update(load=split(delta(s1, s0)), after=split(delta(s2, s1)))
    return [row]


def wal_frames(args, out, log):
    """e2e at c=8, full, with nothing checkpointed; the WAL it leaves, read."""
    base = os.path.join(out, "wal-frames")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    data = os.path.join(base, "data")
    extra = {"store": 'locking = "shared"\ncheckpoints = "external"', "rest": ""}
    server = Server(args.binary, config("full", '"demo"', extra), data, log)
    time.sleep(SETTLE_S)
    taskload(args.taskload, server.host, "e2e", args.n, 8)
    time.sleep(AFTER_S)
    server.stop(signal.SIGKILL)
    result = subprocess.run([sys.executable, os.path.join(HERE, "wal_frames.py"), data,
                             str(args.n)], capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def per_task(row, part, key):
    return row[part][key] / row["n"] / 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("taskload")
    parser.add_argument("out")
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--concs", default="1,8,64")
    parser.add_argument("--syncs", default="full,normal")
    parser.add_argument("--steps", default="e2e,create")
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--wal-frames", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    variants = [("default", {"store": "", "rest": ""})]
    for spec in args.variant:
        name, toml = spec.split("=", 1)
        variants.append((name, parse_extra(toml)))
    rows = []
    with open(os.path.join(args.out, "server.log"), "a") as log:
        for round_ in range(args.rounds):
            for sync in args.syncs.split(","):
                for conc in [int(c) for c in args.concs.split(",")]:
                    for step in args.steps.split(","):
                        # Variants side by side, their order rotated round by round.
                        order = variants[round_ % len(variants):] + variants[:round_ % len(variants)]
                        for name, extra in order:
                            for row in run_step(args, name, extra, sync, conc, step,
                                                args.out, log):
                                row["round"] = round_
                                rows.append(row)
                                print(json.dumps(row), file=sys.stderr, flush=True)
        frames = wal_frames(args, args.out, log) if args.wal_frames else None
    with open(os.path.join(args.out, "flash.json"), "w") as f:
        json.dump({"rows": rows, "wal_frames": frames}, f, indent=1)
    print("| variant | sync | c | step | tasks/s | WAL KiB/task | checkpoint KiB/task "
          "(during) | other | after the load | **total KiB/task** |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        rate = row.get("creations_per_s", row.get("tasks_per_s"))
        total = (row["load"]["total"] + row["after"]["total"]) / row["n"] / 1024
        print(f"| {row['variant']} | {row['sync']} | {row['conc']} | {row['step']} | "
              f"{rate:,.0f} | {per_task(row, 'load', 'wal'):.1f} | "
              f"{per_task(row, 'load', 'checkpoint'):.1f} | {per_task(row, 'load', 'other'):.1f} | "
              f"{per_task(row, 'after', 'total'):.1f} | **{total:.1f}** |")
    if frames:
        print()
        print("WAL of e2e at c=8, full, nothing checkpointed:", json.dumps(frames))


if __name__ == "__main__":
    main()
