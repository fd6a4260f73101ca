#!/usr/bin/env python3
"""A task's output (issue 47): what capturing a command tool's output costs, side by side
in one run with the build before it, and what a tool that floods its stderr does.

    python3 benches/output.py                  # builds BEFORE and AFTER, runs, writes the page
    ROUNDS=3 FLOOD_ROUNDS=2 python3 benches/output.py --page -
    python3 benches/output.py --extra $'[workers]\nthreads = 64' --page -

Three columns, each a release build of a commit (not the working tree): `before`, the
last commit without output capture (BEFORE, default 548ed17: a command tool's stderr
read and dropped, logged at debug level only); `after`, the commit under test (AFTER,
default HEAD), with the defaults (`output.max_bytes_per_task` = 256 KiB); `after_off`,
the same binary with the tool's `output_max_bytes = 0` (keeps nothing).

(a) throughput and (b) bytes written, every round on a fresh server and data dir, the
three columns in a rotating order (round r starts at column r mod 3): the tool `chatty`,
a C program that writes 10 lines (58 bytes each, one write(2) each) to stderr and exits
0. After a warm-up of 300 tasks and 1.5 s of quiet, `benches/taskload.rs e2e N CONC
chatty POLL_MS` (N creations over CONC connections, each task polled until completed);
then 1.5 s more (the checkpoint that follows). Per completed task: tasks/s end to end;
`write_bytes` of the server process from /proc/PID/io (bytes the kernel was asked to
write to the file system for it: WAL frames, checkpoint copies, a page written again
counted again; what wears flash and takes I/O bandwidth; the same count as
benches/flash.py); the server's own CPU (and of it, the store writer's and the
workers' threads) and the programs' (reaped children) from /proc; the mean attempt
duration (`mcp_taskd_attempt_duration_seconds`, which ends after the attempt's last
output write and before its outcome's); fsync/fdatasync calls (perf stat, when perf
works: one a commit at `synchronous = "full"`, plus the checkpoints'). After the
server stops, what the store keeps per task (SQLite's dbstat): the output tables' bytes.

(c) a flood: a tool whose C program writes FLOOD_MB MiB of 100-byte lines to stderr as
fast as the pipe takes them. On a server with two tokens, `other` first creates 64
`chatty` tasks; then CLIENTS paced clients of `other` (one keep-alive connection each,
a `tasks/get` of one of those tasks every INTERVAL_MS) are timed for IDLE_S seconds with
nothing else running (idle), and again while `flood` runs one task of the flood tool
(from its creation to its completion, seen by polling every 50 ms). Per flood:
`tasks/get` p50/p99/max of the other clients (send to answer; the lag behind their
schedule too), the flood's duration, write_bytes during it (and 1.5 s after), fsyncs,
the server's CPU, and after the server stops, the bytes and lines kept for the flood
task and the lines dropped (kept + dropped = lines printed). Run for `after` and, as
references, `after_off` and `before` (FLOOD_BUILDS), rounds alternating idle and flood;
then for `after`, FLOOD_LONG_ROUNDS floods of FLOOD_LONG_MB MiB: a longer window, and
whether the bytes written follow the flood's duration (the batching) or its volume.

Prints markdown tables, writes OUT/results.json, and rewrites the latest run on
docs/benchmarks/output.md between `<!-- output.py begin -->` and `<!-- output.py end -->`
(`--page -` leaves it alone). Environment (or the flags of the same names): ROUNDS (7),
N (5000), CONC (64), POLL_MS (100), FLOOD_ROUNDS (5), FLOOD_MB (100), FLOOD_LONG_MB
(1000), FLOOD_LONG_ROUNDS (2), CLIENTS (4), INTERVAL_MS (5), IDLE_S (5), FLOOD_BUILDS
(after,after_off,before), COLUMNS (the throughput steps' columns), EXTRA (TOML at the
head of every configuration, e.g. `[workers]` threads), BEFORE (548ed17), AFTER (HEAD),
BEFORE_BIN / AFTER_BIN / TASKLOAD (built ones instead of building), CACHE
(~/.cache/mcp-taskd-bench/output: each source tree is built once, in a worktree of its
commit, into a target dir of its own; a commit that changes no source reuses the
build), OUT (results folder, on disk: not tmpfs). Needs git, cargo, cc, python3 (with
sqlite3); perf optional.
"""

import argparse
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
VERSION = "2026-07-28"
TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
SETTLE_S = 1.5
AFTER_S = 1.5
WARMUP = 300
HZ = os.sysconf("SC_CLK_TCK")
COLUMNS = ("before", "after", "after_off")

CHATTY_C = r"""
#include <stdio.h>
#include <stdlib.h>
/* 10 lines of build chatter on stderr (unbuffered: one write(2) a line), exit 0. */
int main(void) {
    const char *id = getenv("MCP_TASK_ID");
    for (int i = 1; i <= 10; i++)
        fprintf(stderr, "step %2d of 10: compiling module_%02d.c for task %.12s\n", i, i, id ? id : "-");
    return 0;
}
"""

FLOOD_C = r"""
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* argv[1] MiB of 100-byte lines (99 characters and a line end) to stderr, 64 KiB a write. */
int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 100;
    static char buf[65500];
    for (int i = 0; i < 655; i++) {
        memset(buf + i * 100, 'a' + i % 26, 99);
        buf[i * 100 + 99] = '\n';
    }
    long total = mib * 1024 * 1024, lines = total / 100, left = lines;
    while (left > 0) {
        long n = left < 655 ? left : 655;
        char *p = buf;
        size_t len = n * 100;
        while (len > 0) {
            ssize_t w = write(2, p, len);
            if (w <= 0) return 1;
            p += w;
            len -= w;
        }
        left -= n;
    }
    return 0;
}
"""


def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw).stdout.strip()


# --- builds -------------------------------------------------------------------------

# What the binary and taskload are built from: a commit that changes none of these (a
# docs commit) reuses the build of one that has the same.
SOURCES = ["Cargo.toml", "Cargo.lock", "build.rs", "src", "crates", "vendor", "schema.sql",
           "schema-postgres.sql", "examples", "benches/taskload.rs"]


def source_key(sha):
    listing = sh("git", "-C", REPO, "ls-tree", "-r", sha, "--", *SOURCES)
    return hashlib.sha256(listing.encode()).hexdigest()[:12]


def build(commit, cache, with_taskload):
    """The release mcp-taskd of `commit` (and taskload): (commit, the commit it was
    built from, binary, taskload), built once per source tree into the cache."""
    sha = sh("git", "-C", REPO, "rev-parse", commit + "^{commit}")
    dest = os.path.join(cache, "src-" + source_key(sha))
    binary = os.path.join(dest, "mcp-taskd")
    taskload = os.path.join(dest, "taskload")
    if os.path.exists(binary) and (not with_taskload or os.path.exists(taskload)):
        return sha, open(os.path.join(dest, "commit")).read().strip(), binary, taskload
    os.makedirs(dest, exist_ok=True)
    tree = tempfile.mkdtemp(prefix=f"output-bench-{sha[:7]}-")
    os.rmdir(tree)
    sh("git", "-C", REPO, "worktree", "add", "--detach", tree, sha)
    # A target dir per source tree: cargo names a path dependency's artifacts by its
    # path inside the workspace and judges them fresh by mtime, so two worktrees sharing
    # one target dir can link the other commit's crates.
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(cache, "target-" + os.path.basename(dest)))
    try:
        print(f"building {sha[:7]} (release) in {tree}", file=sys.stderr, flush=True)
        subprocess.run(["cargo", "build", "--release", "--locked", "--bin", "mcp-taskd"],
                       cwd=tree, env=env, check=True)
        shutil.copy2(os.path.join(env["CARGO_TARGET_DIR"], "release", "mcp-taskd"), binary)
        if with_taskload:
            out = subprocess.run(
                ["cargo", "build", "--release", "--locked", "--bench", "taskload",
                 "--message-format=json"], cwd=tree, env=env, check=True,
                stdout=subprocess.PIPE, text=True).stdout
            for line in out.splitlines():
                m = json.loads(line)
                if (m.get("reason") == "compiler-artifact" and m["target"]["name"] == "taskload"
                        and m.get("executable")):
                    shutil.copy2(m["executable"], taskload)
        with open(os.path.join(dest, "commit"), "w") as f:
            f.write(sha + "\n")
    finally:
        subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", tree],
                       capture_output=True)
    return sha, sha, binary, taskload


# --- the server ---------------------------------------------------------------------

def process_write_bytes(pid):
    with open(f"/proc/{pid}/io") as f:
        io = dict(line.split(": ") for line in f.read().splitlines())
    return int(io["write_bytes"])


def cpu_ticks(pid):
    """(own utime+stime, reaped children's cutime+cstime) in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def thread_cpu(pid):
    """CPU ticks of the server's live threads by kind: the store's writer, the workers,
    the rest (connections, answer threads, checkpointer, upkeep)."""
    kinds = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                text = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        kind = ("writer" if name == "store-writer" else
                "workers" if name.startswith("worker-") else "rest")
        kinds[kind] = kinds.get(kind, 0) + int(fields[11]) + int(fields[12])
    return kinds


def attempt_seconds(host, tool):
    """(sum, count) of the tool's attempt-duration histogram, from /metrics."""
    import urllib.request
    with urllib.request.urlopen(f"http://{host}/metrics", timeout=10) as r:
        text = r.read().decode()
    values = {}
    for what in ("sum", "count"):
        m = re.search(r'^mcp_taskd_attempt_duration_seconds_%s\{tool="%s"\} (\S+)' % (what, tool),
                      text, re.M)
        values[what] = float(m.group(1)) if m else 0.0
    return values["sum"], values["count"]


def load1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


class Server:
    def __init__(self, binary, config, work, name):
        os.makedirs(work, exist_ok=True)
        self.data = os.path.join(work, "data")
        self.config_path = os.path.join(work, "config.toml")
        with open(self.config_path, "w") as f:
            f.write(config)
        self.log = open(os.path.join(work, "server.log"), "w")
        # A copy with its own name: a `pkill mcp-taskd` elsewhere on the box cannot stop it.
        copy = os.path.join(os.path.dirname(work), name)
        if not os.path.exists(copy):
            shutil.copy2(binary, copy)
        self.proc = subprocess.Popen(
            [copy, "serve", "--config", self.config_path, "--listen", "127.0.0.1:0",
             "--data-dir", self.data], stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        match = re.match(r"mcp-taskd listening on http://([^/]+)/mcp", line)
        if not match:
            self.proc.kill()
            raise SystemExit(f"the server did not start: {line!r}, see {self.log.name}")
        self.host = match.group(1)
        self.port = int(self.host.rsplit(":", 1)[1])
        self.pid = self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Perf:
    """fsync and fdatasync calls of a process, while running (None when perf does not work)."""
    EVENTS = "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync"

    def __init__(self, pid, path, enabled):
        self.proc, self.path = None, path
        if enabled:
            self.proc = subprocess.Popen(["perf", "stat", "-x,", "-e", self.EVENTS, "-p", str(pid),
                                          "-o", path], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)

    def stop(self):
        if not self.proc:
            return None
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=30)
        total = 0
        try:
            for line in open(self.path):
                parts = line.strip().split(",")
                if len(parts) > 2 and "sys_enter_f" in parts[2] and parts[0].isdigit():
                    total += int(parts[0])
        except FileNotFoundError:
            return None
        return total


def perf_works():
    if shutil.which("perf") is None:
        return False
    r = subprocess.run(["perf", "stat", "-e", Perf.EVENTS, "--", "true"], capture_output=True)
    return r.returncode == 0


# --- MCP over HTTP ------------------------------------------------------------------

class Client:
    """One keep-alive connection."""

    def __init__(self, port, token=None):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.token, self.rid = token, 0

    def call(self, method, params, name=None):
        self.rid += 1
        params = dict(params)
        params["_meta"] = {"io.modelcontextprotocol/protocolVersion": VERSION,
                           "io.modelcontextprotocol/clientCapabilities": TASKS}
        body = json.dumps({"jsonrpc": "2.0", "id": self.rid, "method": method,
                           "params": params})
        headers = {"Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": VERSION, "Mcp-Method": method}
        if name:
            headers["Mcp-Name"] = name
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self.conn.request("POST", "/mcp", body, headers)
        response = self.conn.getresponse()
        data = response.read()
        message = json.loads(data)
        if response.status != 200 or "result" not in message:
            raise RuntimeError(f"{method}: HTTP {response.status}: {data[:300]!r}")
        return message["result"]

    def create(self, tool):
        result = self.call("tools/call", {"name": tool, "arguments": {}}, tool)
        task = result.get("task") or result  # 2026-07-28: the result is the task
        if result.get("resultType", "task") != "task" or "taskId" not in task:
            raise RuntimeError(f"tools/call {tool} created no task: {result}")
        return task["taskId"]

    def get(self, task_id):
        return self.call("tasks/get", {"taskId": task_id}, task_id)

    def wait(self, task_id, pause=0.05):
        while True:
            status = self.get(task_id).get("status")
            if status in ("completed", "failed", "cancelled"):
                return status
            time.sleep(pause)


# --- (a) and (b) ----------------------------------------------------------------------

def tool_config(name, command, column, extra=""):
    text = (f'[[tools]]\nname = "{name}"\ndescription = "benches/output.py"\n'
            f'task_policy = "required"\ncommand = {json.dumps(command)}\n{extra}')
    if column == "after_off":
        text += "output_max_bytes = 0\n"
    return text


def store_bytes(data):
    """Bytes by b-tree of the stopped server's tasks.db (dbstat), and the output rows."""
    path = os.path.join(data, "tasks.db")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        by_tree = dict(db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"))
    except sqlite3.OperationalError:
        by_tree = {}
    tasks = db.execute("SELECT count(*) FROM tasks").fetchone()[0]
    has_output = db.execute(
        "SELECT count(*) FROM sqlite_schema WHERE name = 'task_output'").fetchone()[0]
    lines = line_bytes = 0
    if has_output:
        columns = {row[1] for row in db.execute("PRAGMA table_info(task_output)")}
        # A row per line (migration 14), or per written batch (migration 19).
        query = ("SELECT coalesce(sum(lines), 0), coalesce(sum(bytes), 0) FROM task_output"
                 if "lines" in columns else
                 "SELECT count(*), coalesce(sum(length(CAST(line AS BLOB))), 0) FROM task_output")
        lines, line_bytes = db.execute(query).fetchone()
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.close()
    output_trees = sum(v for k, v in by_tree.items() if "task_output" in k)
    return {"tasks": tasks, "file_bytes": page_size * pages, "output_tree_bytes": output_trees,
            "output_lines": lines, "output_line_bytes": line_bytes}


def throughput_step(args, column, binary, taskload, rnd, out, perf):
    work = os.path.join(out, f"a-r{rnd}-{column}")
    build = column if column not in ("after", "after_off") else "after"
    config = (args.extra + '\n[builtin]\nsets = []\n'
              + tool_config("chatty", [os.path.join(out, "chatty")], column))
    server = Server(binary, config, work, f"taskd-output-{build}")
    try:
        subprocess.run([taskload, server.host, "e2e", str(WARMUP), str(args.conc), "chatty",
                        str(args.poll_ms)], check=True, capture_output=True)
        time.sleep(SETTLE_S)
        load = load1()
        io0, (own0, kids0) = process_write_bytes(server.pid), cpu_ticks(server.pid)
        threads0, attempts0 = thread_cpu(server.pid), attempt_seconds(server.host, "chatty")
        counter = Perf(server.pid, os.path.join(work, "perf.txt"), perf)
        run = subprocess.run([taskload, server.host, "e2e", str(args.n), str(args.conc), "chatty",
                              str(args.poll_ms)], capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"taskload failed ({column}, round {rnd}): {run.stderr}")
        e2e = json.loads(run.stdout.strip().splitlines()[-1])
        time.sleep(AFTER_S)
        fsyncs = counter.stop()
        io1, (own1, kids1) = process_write_bytes(server.pid), cpu_ticks(server.pid)
        threads1, attempts1 = thread_cpu(server.pid), attempt_seconds(server.host, "chatty")
    finally:
        server.stop()
    kept = store_bytes(server.data)
    attempts = attempts1[1] - attempts0[1]
    n = args.n
    row = {"column": column, "round": rnd, "load": load,
           "tps": e2e["tasks_per_s"], "creations_per_s": e2e["creations_per_s"],
           "write_kib_per_task": (io1 - io0) / 1024 / n,
           "server_us_per_task": (own1 - own0) * 1e6 / HZ / n,
           "programs_us_per_task": (kids1 - kids0) * 1e6 / HZ / n,
           "writer_us_per_task": (threads1.get("writer", 0) - threads0.get("writer", 0)) * 1e6 / HZ / n,
           "workers_us_per_task": (threads1.get("workers", 0) - threads0.get("workers", 0)) * 1e6 / HZ / n,
           "attempt_ms": (attempts1[0] - attempts0[0]) * 1000 / attempts if attempts else None,
           "fsyncs_per_task": None if fsyncs is None else fsyncs / n,
           "store_tasks": kept["tasks"], "store_file_bytes": kept["file_bytes"],
           "output_tree_bytes_per_task": kept["output_tree_bytes"] / kept["tasks"],
           "output_lines_per_task": kept["output_lines"] / kept["tasks"],
           "output_line_bytes_per_task": kept["output_line_bytes"] / kept["tasks"]}
    shutil.rmtree(server.data, ignore_errors=True)
    print(f"  (a) round {rnd} {column:9s}: {row['tps']:7.0f} tasks/s, "
          f"{row['write_kib_per_task']:5.1f} KiB written/task, server {row['server_us_per_task']:4.0f} µs, "
          f"(writer {row['writer_us_per_task']:3.0f}, workers {row['workers_us_per_task']:3.0f}) "
          f"programs {row['programs_us_per_task']:4.0f} µs, attempt {fmt(row['attempt_ms'], 2)} ms, fsyncs/task "
          f"{'-' if fsyncs is None else '%.2f' % row['fsyncs_per_task']}, "
          f"output kept {row['output_tree_bytes_per_task']:.0f} B/task, load {load:.2f}",
          file=sys.stderr, flush=True)
    return row


# --- (c) ----------------------------------------------------------------------------

def token_config():
    return "".join(
        f'[[auth.tokens]]\nprincipal = "{who}"\n'
        f'sha256 = "{hashlib.sha256((who + "-token").encode()).hexdigest()}"\n'
        for who in ("flood", "other"))


class Pacer:
    """CLIENTS clients of `other`, each a tasks/get every INTERVAL_MS on its connection."""

    def __init__(self, port, ids, clients, interval):
        self.port, self.ids, self.clients, self.interval = port, ids, clients, interval

    def run(self, until):
        """Runs until `until()` is true; returns (latencies ms, lags ms, errors)."""
        samples, lags, errors = [], [], []
        stop = threading.Event()

        def client(index):
            c = Client(self.port, "other-token")
            rng = random.Random(index)
            next_at = time.perf_counter() + rng.random() * self.interval
            while not stop.is_set():
                now = time.perf_counter()
                if now < next_at:
                    time.sleep(next_at - now)
                sent = time.perf_counter()
                try:
                    task_id = rng.choice(self.ids)
                    if c.get(task_id).get("taskId") != task_id:
                        errors.append("another task")
                except Exception as e:  # noqa: BLE001 - counted, reported
                    errors.append(str(e)[:200])
                    c = Client(self.port, "other-token")
                done = time.perf_counter()
                samples.append((done - sent) * 1000)
                lags.append(max(0.0, sent - next_at) * 1000)
                next_at += self.interval
                if next_at < done - 1.0:  # more than a second behind: start over
                    next_at = done
        threads = [threading.Thread(target=client, args=(i,), daemon=True)
                   for i in range(self.clients)]
        for t in threads:
            t.start()
        while not until():
            time.sleep(0.01)
        stop.set()
        for t in threads:
            t.join()
        return samples, lags, errors


def pct(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def flood_server(args, column, binary, out):
    work = os.path.join(out, f"c-{column}")
    build = "before" if column == "before" else "after"
    config = (args.extra + '\n[builtin]\nsets = []\n' + token_config()
              + tool_config("chatty", [os.path.join(out, "chatty")], column)
              + tool_config("flood", [os.path.join(out, "flood"), str(args.flood_mb)], column)
              + tool_config("flood_long", [os.path.join(out, "flood"), str(args.flood_long_mb)],
                            column))
    return Server(binary, config, work, f"taskd-output-{build}")


def flood_rounds(args, column, binary, out, perf):
    server = flood_server(args, column, binary, out)
    rows = []
    try:
        other = Client(server.port, "other-token")
        ids = [other.create("chatty") for _ in range(64)]
        for task_id in ids:
            other.wait(task_id)
        pacer = Pacer(server.port, ids, args.clients, args.interval_ms / 1000)
        flooder = Client(server.port, "flood-token")
        # Warm-up: the clients' connections, the flood program's pages.
        t0 = time.perf_counter()
        pacer.run(lambda: time.perf_counter() - t0 > 1.0)
        flooder.wait(flooder.create("chatty"))
        time.sleep(SETTLE_S)
        plan = [("short", rnd, "flood") for rnd in range(1, args.flood_rounds + 1)]
        if column == "after" and args.flood_long_mb:
            plan += [("long", rnd, "flood_long") for rnd in range(1, args.flood_long_rounds + 1)]
        for kind, rnd, tool in plan:
            order = ("idle", "flood") if rnd % 2 else ("flood", "idle")
            for phase in order:
                load = load1()
                io0, (own0, kids0) = process_write_bytes(server.pid), cpu_ticks(server.pid)
                counter = Perf(server.pid, os.path.join(server.data, "..", f"perf-{rnd}-{phase}.txt"),
                               perf)
                started = time.perf_counter()
                if phase == "idle":
                    lat, lag, err = pacer.run(lambda: time.perf_counter() - started > args.idle_s)
                    duration, status, task_id = time.perf_counter() - started, None, None
                else:
                    task_id = flooder.create(tool)
                    result = {}

                    def watch():
                        result["status"] = Client(server.port, "flood-token").wait(task_id)
                        result["ended"] = time.perf_counter()
                    watcher = threading.Thread(target=watch, daemon=True)
                    watcher.start()
                    lat, lag, err = pacer.run(lambda: "ended" in result)
                    watcher.join()
                    duration, status = result["ended"] - started, result["status"]
                io_mid, (own1, kids1) = process_write_bytes(server.pid), cpu_ticks(server.pid)
                time.sleep(AFTER_S)
                io1 = process_write_bytes(server.pid)
                fsyncs = counter.stop()
                row = {"column": column, "set": kind, "round": rnd, "phase": phase, "load": load,
                       "task_id": task_id, "status": status, "duration_s": duration,
                       "gets": len(lat), "errors": len(err), "error_sample": err[:3],
                       "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "max_ms": max(lat),
                       "lag_p99_ms": pct(lag, 99), "latencies_ms": [round(x, 3) for x in lat],
                       "fsyncs_with_after": fsyncs,
                       "write_bytes_during": io_mid - io0, "write_bytes_with_after": io1 - io0,
                       "server_cpu_s": (own1 - own0) / HZ, "program_cpu_s": (kids1 - kids0) / HZ}
                rows.append(row)
                print(f"  (c) {column:9s} {kind} round {rnd} {phase:5s}: {len(lat)} gets p50 "
                      f"{row['p50_ms']:.2f} p99 {row['p99_ms']:.2f} max {row['max_ms']:.1f} ms, "
                      f"{duration:.2f} s, written {row['write_bytes_with_after'] / 2**20:.2f} MiB, "
                      f"server CPU {row['server_cpu_s']:.2f} s, {status or ''} load {load:.2f}",
                      file=sys.stderr, flush=True)
                time.sleep(0.5)
    finally:
        server.stop()
    # What the store kept of each flood.
    db = sqlite3.connect(f"file:{os.path.join(server.data, 'tasks.db')}?mode=ro", uri=True)
    has_output = db.execute(
        "SELECT count(*) FROM sqlite_schema WHERE name = 'task_output'").fetchone()[0]
    for row in rows:
        if row["phase"] != "flood":
            continue
        if has_output:
            lines, kept = db.execute(
                "SELECT count(*), coalesce(sum(length(CAST(line AS BLOB))), 0) FROM task_output "
                "WHERE task_id = ?", (row["task_id"],)).fetchone()
            dropped = db.execute("SELECT dropped FROM task_output_totals WHERE task_id = ?",
                                 (row["task_id"],)).fetchone()
            row.update(kept_lines=lines, kept_bytes=kept, dropped_lines=dropped[0] if dropped else 0)
        else:
            row.update(kept_lines=0, kept_bytes=0, dropped_lines=None)
    db.close()
    return rows


# --- report -------------------------------------------------------------------------

def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def spread(values):
    values = [v for v in values if v is not None]
    return f"{min(values):,.0f}–{max(values):,.0f}" if values else "–"


def fmt(v, digits=0):
    return "–" if v is None else f"{v:,.{digits}f}"


def throughput_tables(lines, rows_a, by, rounds, ratio_per_round, names):
    lines.append("| build | tasks/s end to end: median (spread) | / before: median of the rounds' ratios (spread) | / `output_max_bytes = 0`, same binary | KiB written / task: median (spread) | / before | fsyncs / task | server CPU µs / task (store writer, workers) | programs µs / task | attempt, ms (mean) | output kept / task |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for col in by:
        rs = by[col]
        if not rs:
            continue
        tr = ratio_per_round("tps", col)
        wr = ratio_per_round("write_kib_per_task", col)
        off = ratio_per_round("tps", col, "after_off") if col == "after" else []
        lines.append(
            f"| {names[col]} | **{fmt(med(r['tps'] for r in rs))}** ({spread([r['tps'] for r in rs])}) | "
            + ("1 | " if col == "before" else f"**{med(tr):.3f}** ({min(tr):.3f}–{max(tr):.3f}) | ")
            + (f"**{med(off):.3f}** ({min(off):.3f}–{max(off):.3f}) | " if off else "| ")
            + f"**{fmt(med(r['write_kib_per_task'] for r in rs), 1)}** "
              f"({min(r['write_kib_per_task'] for r in rs):.1f}–{max(r['write_kib_per_task'] for r in rs):.1f}) | "
            + ("1 | " if col == "before" else f"{med(wr):.2f} | ")
            + f"{fmt(med(r['fsyncs_per_task'] for r in rs), 2)} | "
              f"{fmt(med(r['server_us_per_task'] for r in rs))} "
              f"({fmt(med(r.get('writer_us_per_task') for r in rs))}, "
              f"{fmt(med(r.get('workers_us_per_task') for r in rs))}) | "
              f"{fmt(med(r['programs_us_per_task'] for r in rs))} | "
              f"{fmt(med(r.get('attempt_ms') for r in rs), 2)} | "
              f"{fmt(med(r['output_tree_bytes_per_task'] for r in rs))} B "
              f"({fmt(med(r['output_lines_per_task'] for r in rs), 1)} lines, "
              f"{fmt(med(r['output_line_bytes_per_task'] for r in rs))} B of text) |")
    lines.append("")
    lines.append("Every step, in the order run:")
    lines.append("")
    lines.append("| round | build | tasks/s | creations/s | KiB written / task | fsyncs / task | server µs / task (writer, workers) | programs µs / task | attempt, ms | load |")
    lines.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows_a:
        lines.append(f"| {r['round']} | {r['column']} | {r['tps']:,.0f} | {r['creations_per_s']:,.0f} | "
                     f"{r['write_kib_per_task']:.1f} | {fmt(r['fsyncs_per_task'], 2)} | "
                     f"{r['server_us_per_task']:.0f} ({fmt(r.get('writer_us_per_task'))}, "
                     f"{fmt(r.get('workers_us_per_task'))}) | {r['programs_us_per_task']:.0f} | "
                     f"{fmt(r.get('attempt_ms'), 2)} | {r['load']:.2f} |")


def report(meta, rows_a, rows_c, args):
    lines = []
    by = {c: [r for r in rows_a if r["column"] == c]
          for c in dict.fromkeys([*COLUMNS, *(r["column"] for r in rows_a)])}
    rounds = sorted({r["round"] for r in rows_a})

    def ratio_per_round(key, col, base="before"):
        out = []
        for rnd in rounds:
            a = [r for r in by[col] if r["round"] == rnd]
            b = [r for r in by[base] if r["round"] == rnd]
            if a and b and b[0][key]:
                out.append(a[0][key] / b[0][key])
        return out

    names = {"before": f"before (`{meta['before'][:7]}`)",
             "after": f"after (`{meta['after'][:7]}`), capture on",
             "after_off": f"after, `output_max_bytes = 0`"}
    for name in by:
        names.setdefault(name, f"{name}, capture on")
    built = "".join(
        f" (its binary built from `{meta[k + '_built'][:7]}`, the same sources)"
        if meta[k + "_built"] != meta[k] else "" for k in ("after",))
    lines.append(f"Run `{meta['out_name']}`, {meta['date']}, {meta['nproc']} cores, "
                 f"before = `{meta['before'][:7]}`, after = `{meta['after'][:7]}`{built}.")
    lines.append("")
    if rows_a:
        extra = f" Every configuration began with `{args.extra!r}`." if args.extra else ""
        lines.append(f"Throughput and bytes: {len(rounds)} rounds, the columns in a "
                     f"rotating order, each step on a fresh server and data dir; `chatty` (10 "
                     f"stderr lines a task), N = {args.n} tasks a step over c = {args.conc}, "
                     f"polled every {args.poll_ms} ms; load average (1 min) "
                     f"{min(r['load'] for r in rows_a):.2f}–{max(r['load'] for r in rows_a):.2f}.{extra}")
        lines.append("")
        throughput_tables(lines, rows_a, by, rounds, ratio_per_round, names)
    if rows_c:
        lines.append("")
        lines.append(f"Flood: a program writes {args.flood_mb} MiB of 100-byte lines to stderr "
                     f"({args.flood_mb * 1024 * 1024 // 100:,} lines) as fast as the pipe takes "
                     f"them; {args.clients} other clients each send a `tasks/get` every "
                     f"{args.interval_ms} ms (send to answer timed), idle for {args.idle_s} s, "
                     f"then for the flood's duration; {args.flood_rounds} rounds per build, "
                     "idle and flood alternating; then for `after`, "
                     f"{args.flood_long_rounds} rounds of a {args.flood_long_mb} MiB flood.")
        lines.append("")
        lines.append("| build | `tasks/get` p99 idle, ms (rounds) | p99 during the flood, ms (rounds) | flood / idle p99: median of the rounds' ratios; all samples pooled | p50 idle / flood, ms | flood's duration, s | server CPU, s | written during it (+1.5 s), MiB | fsyncs during it (+1.5 s) | bytes kept | lines kept + dropped |")
        lines.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for col, kind in (("after", "short"), ("after_off", "short"), ("before", "short"),
                          ("after", "long")):
            rs = [r for r in rows_c if r["column"] == col and r["set"] == kind]
            if not rs:
                continue
            idle = [r for r in rs if r["phase"] == "idle"]
            flood = [r for r in rs if r["phase"] == "flood"]
            ratios = [f["p99_ms"] / i["p99_ms"] for f in flood for i in idle if i["round"] == f["round"]]
            pooled = (pct([x for r in flood for x in r["latencies_ms"]], 99)
                      / pct([x for r in idle for x in r["latencies_ms"]], 99))
            kept = "–" if col == "before" else ", ".join(f"{r['kept_bytes']:,}" for r in flood)
            counted = "–" if col == "before" else ", ".join(
                f"{r['kept_lines']:,} + {r['dropped_lines']:,}" for r in flood)
            label = names[col] + (f", {args.flood_long_mb} MiB" if kind == "long" else "")
            lines.append(
                f"| {label} | {', '.join('%.2f' % r['p99_ms'] for r in idle)} | "
                f"{', '.join('%.2f' % r['p99_ms'] for r in flood)} | **{med(ratios):.2f}×**; {pooled:.2f}× | "
                f"{med(r['p50_ms'] for r in idle):.2f} / {med(r['p50_ms'] for r in flood):.2f} | "
                f"{', '.join('%.2f' % r['duration_s'] for r in flood)} | "
                f"{', '.join('%.2f' % r['server_cpu_s'] for r in flood)} | "
                f"{', '.join('%.2f' % (r['write_bytes_with_after'] / 2**20) for r in flood)} | "
                f"{', '.join(fmt(r['fsyncs_with_after']) for r in flood)} | "
                f"{kept} | {counted} |")
    return "\n".join(lines)


def main():
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=int(env("ROUNDS", "7")))
    p.add_argument("--n", type=int, default=int(env("N", "5000")))
    p.add_argument("--conc", type=int, default=int(env("CONC", "64")))
    p.add_argument("--poll-ms", type=int, default=int(env("POLL_MS", "100")))
    p.add_argument("--flood-rounds", type=int, default=int(env("FLOOD_ROUNDS", "5")))
    p.add_argument("--flood-mb", type=int, default=int(env("FLOOD_MB", "100")))
    p.add_argument("--flood-long-mb", type=int, default=int(env("FLOOD_LONG_MB", "1000")))
    p.add_argument("--flood-long-rounds", type=int, default=int(env("FLOOD_LONG_ROUNDS", "2")))
    p.add_argument("--clients", type=int, default=int(env("CLIENTS", "4")))
    p.add_argument("--interval-ms", type=int, default=int(env("INTERVAL_MS", "5")))
    p.add_argument("--idle-s", type=float, default=float(env("IDLE_S", "5")))
    p.add_argument("--flood-builds", default=env("FLOOD_BUILDS", "after,after_off,before"))
    p.add_argument("--before", default=env("BEFORE", "548ed17"))
    p.add_argument("--after", default=env("AFTER", "HEAD"))
    p.add_argument("--page", default=env("PAGE", os.path.join(REPO, "docs/benchmarks/output.md")))
    p.add_argument("--columns", default=env("COLUMNS", ",".join(COLUMNS)),
                   help="which of before,after,after_off the throughput steps run")
    p.add_argument("--extra", default=env("EXTRA", ""),
                   help="TOML put at the head of every configuration (tables, e.g. [workers])")
    p.add_argument("--also", action="append", default=[],
                   help="NAME=BINARY: another build as a column of the throughput steps, "
                        "capture on (a candidate fix, say)")
    p.add_argument("--skip-throughput", action="store_true")
    args = p.parse_args()

    cache = env("CACHE", os.path.expanduser("~/.cache/mcp-taskd-bench/output"))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = env("OUT", os.path.join(env("TMPDIR", "/tmp"), f"taskd-output-{stamp}"))
    os.makedirs(out, exist_ok=True)
    if sh("stat", "-f", "-c", "%T", out) == "tmpfs":
        raise SystemExit(f"{out} is on tmpfs, which writes nothing to count; set OUT")

    if env("BEFORE_BIN"):
        before_sha = sh("git", "-C", REPO, "rev-parse", args.before)
        before_built, before_bin = before_sha, env("BEFORE_BIN")
    else:
        before_sha, before_built, before_bin, _ = build(args.before, cache, False)
    if env("AFTER_BIN"):
        after_sha = sh("git", "-C", REPO, "rev-parse", args.after)
        after_built, after_bin, taskload = after_sha, env("AFTER_BIN"), env("TASKLOAD")
    else:
        after_sha, after_built, after_bin, taskload = build(args.after, cache, True)
    taskload = env("TASKLOAD") or taskload
    binaries = {"before": before_bin, "after": after_bin, "after_off": after_bin}
    for name, src in (("chatty", CHATTY_C), ("flood", FLOOD_C)):
        with open(os.path.join(out, name + ".c"), "w") as f:
            f.write(src)
        sh("cc", "-O2", "-o", os.path.join(out, name), os.path.join(out, name + ".c"))
    perf = perf_works()
    meta = {"before": before_sha, "after": after_sha, "before_built": before_built,
            "after_built": after_built, "also": dict(a.split("=", 1) for a in args.also), "out_name": os.path.basename(out),
            "date": time.strftime("%Y-%m-%d %H:%MZ", time.gmtime()), "nproc": os.cpu_count(),
            "perf": perf, "args": vars(args)}
    print(f"before {before_sha[:7]} (built from {before_built[:7]}) {before_bin}\n"
          f"after  {after_sha[:7]} (built from {after_built[:7]}) {after_bin}\n"
          f"taskload {taskload}\nresults {out}\nperf stat: {perf}", file=sys.stderr, flush=True)

    rows_a = []
    if not args.skip_throughput:
        also = dict(a.split("=", 1) for a in args.also)
        binaries.update(also)
        columns = [c for c in COLUMNS if c in args.columns.split(",")] + list(also)
        for rnd in range(1, args.rounds + 1):
            k = (rnd - 1) % len(columns)
            for column in columns[k:] + columns[:k]:
                rows_a.append(throughput_step(args, column, binaries[column], taskload, rnd,
                                              out, perf))
    rows_c = []
    for column in [c for c in args.flood_builds.split(",") if c]:
        rows_c.extend(flood_rounds(args, column, binaries[column], out, perf))

    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"meta": meta, "throughput": rows_a, "flood": rows_c}, f, indent=1)
    text = report(meta, rows_a, rows_c, args)
    section = f"<!-- output.py begin -->\n{text}\n<!-- output.py end -->"
    print(section)
    if args.page != "-" and rows_a:
        page = open(args.page).read() if os.path.exists(args.page) else "\n"
        pattern = re.compile(r"<!-- output\.py begin -->.*?<!-- output\.py end -->", re.S)
        page = (pattern.sub(lambda _: section, page) if pattern.search(page)
                else page.rstrip("\n") + "\n\n" + section + "\n")
        with open(args.page, "w") as f:
            f.write(page)
    print(f"results: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
