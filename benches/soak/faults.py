#!/usr/bin/env python3
"""The fault-injection soak (issue 50): clients of both protocol eras keep a mix of
work going while faults arrive at random, then a checker proves the promise for every
acknowledged task (see check.py). benches/faults.sh builds the binary and runs this.

  faults.py --bin target/release/mcp-taskd [--backend sqlite|postgres] [--duration 600]
            [--seed N] [--gap 1.0] [--out DIR] [--drain 180] [--json FILE]

Faults, in lanes that run side by side (so faults of different lanes overlap), each
lane drawing its next fault's time (exponential, mean --gap seconds after the last one
recovered) and kind (in turns from a shuffled deck, so that kinds come equally often)
from the seeded schedule:

  node lane   kill9     kill -9 of a node, started again at once on its data dir
              stop      SIGSTOP of a node for longer than a lease, then SIGCONT
  env lane    disk      the small filesystem (tmpfs) that holds the store (SQLite) or
                        the database and the nodes' data dirs (PostgreSQL) filled to the
                        last byte for 1-4 s, then freed
              toolkill  the process group of a running command tool killed (SIGKILL)
                        from outside
  db lane     dbrestart PostgreSQL stopped (immediate or fast) for 0.5-3 s and started
  (postgres)  cut       a node's connections to PostgreSQL cut (silent both ways, new
                        ones held) for longer than a lease, then healed

After each fault the lane waits until a new task created on the affected node
completes: the recovery time, from the fault's end (the kill, the SIGCONT, the space
freed, the database started, the heal) to that task's completion. Two nodes on
PostgreSQL, each reaching the database through a proxy of its own (proxy.py).

At the end: every fault lifted, the clients stop creating and follow what they have
until it ends (--drain seconds at most), the nodes stop cleanly, and the checker reads
the histories and the store. Exit status 0 when nothing was lost, contradictory,
double-completed or over-retried, and no task was stuck; 1 otherwise.
"""

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import check  # noqa: E402
from clients import (Control, Http, Ledger, Node, RequestFailed, Task, TERMINAL,  # noqa: E402
                     modern_obs, now, rpc_result, start_clients)
from procs import (Postgres, Proxy, Server, Tmpfs, log, metric_sum, pg_bin,  # noqa: E402
                   unprivileged)

HERE = os.path.dirname(os.path.abspath(__file__))
DISCARDED = "an attempt finished after losing its lease; its outcome was discarded"


def config_text(args, run_id, node_name, store):
    tool = os.path.join(HERE, "tool.sh")
    return f"""# The fault soak's node {node_name} (benches/soak/faults.py)
[server]
endpoint = "/mcp"

[builtin]
sets = ["demo", "conformance", "testing"]

[workers]
threads = 8
lease_ms = {args.lease_ms}
janitor_interval_ms = 250
shutdown_grace_ms = 3000

[tasks]
ttl_ms = 86400000

{store}

[[tools]]
name = "soak_cmd"
description = "The soak's command tool: ok, print, crash, crash_once, hang, hang_once"
command = ["{tool}", "soak-{run_id}"]
task_policy = "optional"
timeout_ms = 3000
max_attempts = 3
backoff_ms = 200
env = {{ SOAK_RUN = "{run_id}", NODE = "{node_name}" }}
input_schema = {{ type = "object", properties = {{ mode = {{ type = "string" }}, seconds = {{ type = "number" }}, lines = {{ type = "integer" }}, tag = {{ type = "string" }} }} }}

[[tools]]
name = "soak_inline"
description = "The soak's command tool, inline"
command = ["{tool}", "soak-{run_id}"]
task_policy = "inline"
timeout_ms = 5000
env = {{ SOAK_RUN = "{run_id}", NODE = "{node_name}" }}
input_schema = {{ type = "object", properties = {{ mode = {{ type = "string" }}, seconds = {{ type = "number" }} }} }}
"""


class Fault:
    def __init__(self, kind, lane, target):
        self.kind, self.lane, self.target = kind, lane, target
        self.started = time.time()
        self.index = 0
        self.held = 0.0
        self.recovery = None
        self.note = ""

    def as_dict(self):
        return {"kind": self.kind, "lane": self.lane, "target": self.target,
                "at": round(self.started, 3), "held_s": round(self.held, 3),
                "recovery_s": None if self.recovery is None else round(self.recovery, 3),
                "note": self.note}


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.run_id = f"{os.getpid()}-{args.seed}"
        self.out = args.out
        os.makedirs(self.out, exist_ok=True)
        self.ledger = Ledger()
        self.control = Control()
        self.ending = threading.Event()
        self.faults = []
        self.faults_lock = threading.Lock()
        self.servers = []
        self.proxies = []
        self.pg = None
        self.disk = None
        self.disk_lock = threading.Lock()  # one disk fault at a time (one lane has them)
        self.probe_seq = 0
        self.probe_lock = threading.Lock()
        self.pg_restarts_after_disk = 0
        self.db_down = threading.Event()  # the db lane has PostgreSQL stopped

    # -- set-up ---------------------------------------------------------------------

    def setup(self):
        a = self.args
        disk = os.path.join(self.out, "disk")
        size = "160m" if a.backend == "sqlite" else "384m"
        self.disk = Tmpfs(disk, size)
        binary = os.path.join(self.out, "mcp-taskd")
        subprocess.run(["cp", a.bin, binary], check=True)
        if a.backend == "sqlite":
            data = os.path.join(disk, "data")
            config = os.path.join(self.out, "n1.toml")
            with open(config, "w") as f:
                f.write(config_text(a, self.run_id, "n1", "[store]\nbackend = \"sqlite\""))
            self.servers.append(Server("n1", binary, config, data, "127.0.0.1", a.port, self.out))
        else:
            bindir = pg_bin()
            if not bindir:
                sys.exit("faults.py: no PostgreSQL found (MCP_TASKD_PG_BIN, pg_config, "
                         "/usr/lib/postgresql/*/bin); .ci/postgres.sh installs it")
            pg_port = a.port + 10
            # Its log outside the tmpfs, which the disk fault fills (and the end removes).
            pg_log = os.path.join(self.out, "postgres.log")
            open(pg_log, "a").close()
            owner = unprivileged()
            if owner:
                os.chown(pg_log, *owner)
            self.pg = Postgres(bindir, os.path.join(disk, "pg"), "127.0.0.1", pg_port, log_path=pg_log)
            started = self.pg.start()
            if started.returncode != 0:
                sys.exit(f"PostgreSQL did not start: {started.stderr}")
            self.pg.sql("CREATE DATABASE soak")
            for i in range(2):
                name = f"n{i + 1}"
                proxy = Proxy(a.port + 20 + i, "127.0.0.1", pg_port)
                self.proxies.append(proxy)
                store = (f"[store]\nbackend = \"postgres\"\n"
                         f"url = \"{self.pg.url('soak', '127.0.0.1', proxy.port)}\"\npool_size = 8")
                config = os.path.join(self.out, f"{name}.toml")
                with open(config, "w") as f:
                    f.write(config_text(a, self.run_id, name, store))
                data = os.path.join(disk, name)
                self.servers.append(Server(name, binary, config, data, "127.0.0.1", a.port + i, self.out))
        for server in self.servers:
            took = server.start()
            if took is None:
                sys.exit(f"{server.name} did not start; see {server.log_path}")
            log(f"{server.name} serving on {server.host}:{server.port} ({took:.1f} s)")
        self.nodes = [Node(s.name, s.host, s.port) for s in self.servers]

    def teardown(self):
        for server in self.servers:
            try:
                server.terminate(grace=5)
            except Exception:  # noqa: BLE001 - best effort at the end
                pass
        for proxy in self.proxies:
            proxy.close()
        if self.pg is not None:
            self.pg.stop("immediate")
        if self.disk is not None:
            self.disk.free()
            # The store leaves with the tmpfs: keep a copy of SQLite's for a look later.
            for server in self.servers:
                for name in ("tasks.db", "tasks.db-wal"):
                    path = os.path.join(server.data_dir, name)
                    if os.path.exists(path):
                        subprocess.run(["cp", path, os.path.join(self.out, f"{server.name}-{name}")],
                                       check=False)
            self.disk.unmount()

    # -- faults ---------------------------------------------------------------------

    def record(self, fault):
        with self.faults_lock:
            self.faults.append(fault)
        with open(os.path.join(self.out, "faults.jsonl"), "a") as f:
            f.write(json.dumps(fault.as_dict()) + "\n")

    def probe(self, node, since, limit=120.0):
        """Seconds from `since` until a task created on `node` now completes (None past
        `limit`). The probe's task is acknowledged like any other, and checked."""
        with self.probe_lock:
            self.probe_seq += 1
            label = f"probe-{self.probe_seq}"
        http = Http([node])
        deadline = time.monotonic() + limit
        task = None
        while time.monotonic() < deadline and not self.control.stop.is_set():
            try:
                if task is None:
                    sent = now()
                    _, _, _, answer = http.modern(
                        "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": label}},
                        name="slow_compute")
                    result = rpc_result(answer)
                    if result.get("resultType") == "task" and result.get("taskId"):
                        task = Task(result["taskId"], "slow_compute", "probe", "2026", "probe",
                                    "complete", label, 3)
                        self.ledger.add(task)
                        self.ledger.observe(task, modern_obs(task, "create", sent, node, result))
                else:
                    sent = now()
                    _, _, _, answer = http.modern("tasks/get", {"taskId": task.id}, name=task.id)
                    obs = modern_obs(task, "get", sent, node, rpc_result(answer))
                    self.ledger.observe(task, obs)
                    if obs.status in TERMINAL:
                        http.close_all()
                        return time.monotonic() - since
            except RequestFailed:
                pass
            time.sleep(0.05)
        http.close_all()
        return None

    def server_of(self, name):
        return next(s for s in self.servers if s.name == name)

    def node_of(self, name):
        return next(n for n in self.nodes if n.name == name)

    def f_kill9(self, fault):
        server = self.server_of(fault.target)
        server.kill9()
        lifted = time.monotonic()
        took = server.start()
        fault.note = f"restarted in {took:.2f} s" if took is not None else "did not restart"
        return lifted

    def f_stop(self, fault):
        server = self.server_of(fault.target)
        hold = self.rng_for(fault).uniform(self.args.lease_ms / 1000 + 0.5, self.args.lease_ms / 1000 + 2.5)
        server.pause()
        self.control.stop.wait(hold)
        server.resume()
        fault.held = hold
        return time.monotonic()

    def f_disk(self, fault):
        hold = self.rng_for(fault).uniform(1.0, 4.0)
        with self.disk_lock:
            self.disk.fill()
            self.control.stop.wait(hold)
            self.disk.free()
        fault.held = hold
        lifted = time.monotonic()
        if self.pg is not None and not self.db_down.is_set() and not self.pg.running():
            # PostgreSQL may shut itself down when it cannot write its WAL; an operator
            # (or systemd) starts it again once there is room.
            self.pg_restarts_after_disk += 1
            fault.note = "PostgreSQL had stopped; started again"
            self.pg.ensure_running()
        return lifted

    def tool_groups(self):
        """Process groups of this run's command tools: processes whose environment
        carries SOAK_RUN=<this run> (set only in the soak's tool configuration)."""
        marker = f"SOAK_RUN={self.run_id}".encode()
        groups = set()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                if marker in env:
                    groups.add(os.getpgid(int(entry)))
            except (OSError, ProcessLookupError):
                continue
        groups.discard(os.getpgid(0))
        for server in self.servers:
            if server.alive():
                groups.discard(server.pid())
        return sorted(groups)

    def f_toolkill(self, fault):
        deadline = time.monotonic() + 20
        rng = self.rng_for(fault)
        while time.monotonic() < deadline and not self.control.stop.is_set():
            groups = self.tool_groups()
            if groups:
                group = rng.choice(groups)
                try:
                    os.killpg(group, signal.SIGKILL)
                    fault.note = f"{len(groups)} running"
                    return time.monotonic()
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        fault.note = "no command tool was running"
        return None

    def f_dbrestart(self, fault):
        rng = self.rng_for(fault)
        mode = rng.choice(["immediate", "fast"])
        hold = rng.uniform(0.5, 3.0)
        self.db_down.set()
        try:
            self.pg.stop(mode)
            self.control.stop.wait(hold)
            starts = self.pg.ensure_running()
        finally:
            self.db_down.clear()
        fault.held = hold
        fault.note = mode + ("" if starts <= 1 else f"; started at the {starts}th try (the disk was full)")
        return time.monotonic()

    def f_cut(self, fault):
        proxy = self.proxies[[s.name for s in self.servers].index(fault.target)]
        hold = self.rng_for(fault).uniform(self.args.lease_ms / 1000 + 0.5, self.args.lease_ms / 1000 + 3.5)
        proxy.cut()
        self.control.stop.wait(hold)
        proxy.heal()
        fault.held = hold
        return time.monotonic()

    def rng_for(self, fault):
        # Each fault's own draws (how long it holds, how) come from the schedule's seed
        # and the fault's place in its lane: the schedule is the seed's alone.
        return random.Random(f"{self.args.seed}/{fault.lane}/{fault.index}")

    def lane(self, name, kinds, rng):
        deck = []
        index = 0
        while not self.ending.is_set():
            self.ending.wait(rng.expovariate(1.0 / self.args.gap))
            if self.ending.is_set():
                break
            if not deck:
                deck = list(kinds)
                rng.shuffle(deck)
            kind = deck.pop()
            index += 1
            if kind in ("kill9", "stop", "cut"):
                target = rng.choice(self.servers).name
            else:
                target = "all"
            fault = Fault(kind, name, target)
            fault.index = index
            lifted = getattr(self, f"f_{kind}")(fault)
            if lifted is None:
                self.record(fault)
                continue
            probe_node = self.node_of(target) if target != "all" else self.rng_node(rng)
            if kind == "kill9" and not self.server_of(target).alive():
                self.server_of(target).start()
            recovered = self.probe(probe_node, lifted)
            fault.recovery = recovered
            self.record(fault)
            log(f"{name}: {kind} {target} held {fault.held:.1f} s, recovered in "
                f"{'-' if recovered is None else f'{recovered:.2f} s'} {fault.note}")

    def rng_node(self, rng):
        return rng.choice(self.nodes)

    # -- the run --------------------------------------------------------------------

    def run(self):
        a = self.args
        self.setup()
        lanes = {"node": ["kill9", "stop"], "env": ["disk", "toolkill"]}
        if a.backend == "postgres":
            lanes["db"] = ["dbrestart", "cut"]
        if a.kinds:
            wanted = set(a.kinds.split(","))
            lanes = {k: [x for x in v if x in wanted] for k, v in lanes.items()}
            lanes = {k: v for k, v in lanes.items() if v}
        clients = start_clients(self.nodes, self.ledger, self.control, a.seed,
                                modern=a.modern, legacy=a.legacy, listeners=a.listeners)
        log(f"{len(clients)} clients; faults {lanes}, mean gap {a.gap} s; seed {a.seed}; "
            f"{a.duration} s")
        schedule = random.Random(a.seed)
        threads = []
        for name, kinds in lanes.items():
            thread = threading.Thread(target=self.lane, args=(name, kinds, random.Random(schedule.random())),
                                      daemon=True)
            thread.start()
            threads.append(thread)
        began = time.monotonic()
        while time.monotonic() - began < a.duration:
            time.sleep(1)
            elapsed = time.monotonic() - began
            if int(elapsed) % 30 == 0:
                with self.faults_lock:
                    count = len(self.faults)
                log(f"{elapsed:.0f} s: {len(self.ledger.tasks)} tasks acknowledged, {count} faults")
        self.ending.set()
        for thread in threads:
            thread.join(timeout=180)
        # Every fault lifted: nodes running and not paused, disk freed, links healed.
        self.disk.free()
        for proxy in self.proxies:
            proxy.heal()
        if self.pg is not None:
            self.pg.ensure_running()
        for server in self.servers:
            if server.stopped:
                server.resume()
            if not server.alive():
                server.start()
        log("faults over; draining")
        self.control.draining.set()
        drain_began = time.monotonic()
        for client in clients:
            client.join(timeout=max(1.0, a.drain - (time.monotonic() - drain_began)))
        drained = time.monotonic() - drain_began
        self.control.stop.set()
        for client in clients:
            client.join(timeout=30)
        still_open = self.read_open()
        metrics = {s.name: s.metrics() for s in self.servers}
        clean = {s.name: s.terminate(grace=30) for s in self.servers}
        store = self.read_store()
        report = check.check(self.ledger, store)
        return self.summary(report, drained, still_open, metrics, clean)

    def read_open(self):
        """Tasks the clients left non-terminal, read once more before the stop."""
        open_tasks = [t for t in self.ledger.tasks.values() if t.last_status() not in TERMINAL]
        http = Http(self.nodes)
        states = {}
        for task in open_tasks:
            try:
                _, _, _, answer = http.modern("tasks/get", {"taskId": task.id}, name=task.id)
                states[task.id] = rpc_result(answer).get("status")
            except RequestFailed as failure:
                states[task.id] = failure.reason
        http.close_all()
        return states

    def read_store(self):
        if self.args.backend == "sqlite":
            return check.Store.sqlite(os.path.join(self.servers[0].data_dir, "tasks.db"))
        return check.Store.postgres(self.pg.psql_command("soak"))

    def summary(self, report, drained, still_open, metrics, clean):
        kinds = {}
        for fault in self.faults:
            k = kinds.setdefault(fault.kind, {"count": 0, "recoveries": [], "unrecovered": 0, "skipped": 0})
            if fault.recovery is None and fault.note.startswith("no command tool"):
                k["skipped"] += 1
                continue
            k["count"] += 1
            if fault.recovery is None:
                k["unrecovered"] += 1
            else:
                k["recoveries"].append(fault.recovery)
        faults = {}
        for kind, k in sorted(kinds.items()):
            rec = sorted(k["recoveries"])
            faults[kind] = {
                "count": k["count"],
                "recovery_p50_s": round(statistics.median(rec), 2) if rec else None,
                "recovery_max_s": round(rec[-1], 2) if rec else None,
                "unrecovered": k["unrecovered"],
                "skipped": k["skipped"],
            }
        discarded = sum(s.log_count(DISCARDED) for s in self.servers)
        panics = sum(s.log_count("panicked") for s in self.servers) - sum(
            s.log_count("tool always_panics panicked") for s in self.servers)
        result = {
            "backend": self.args.backend,
            "seed": self.args.seed,
            "duration_s": self.args.duration,
            "gap_s": self.args.gap,
            "lease_ms": self.args.lease_ms,
            "faults": faults,
            "faults_total": sum(f["count"] for f in faults.values()),
            "check": report.as_dict(),
            "drain_s": round(drained, 1),
            "open_at_end": still_open,
            "requests": self.ledger.requests,
            "request_failures": dict(sorted(self.ledger.failures.items(), key=lambda kv: -kv[1])),
            "inline": self.ledger.inline,
            "wrong_inline": self.ledger.wrong_inline,
            "outcomes_discarded_by_the_fence": discarded,
            "server_panics": panics,
            "server_starts": {s.name: s.starts for s in self.servers},
            "clean_stop": clean,
            "pg_restarts_after_disk": self.pg_restarts_after_disk,
            "metrics_reclaimed": {n: metric_sum(m, "mcp_taskd_leases_reclaimed_total") for n, m in metrics.items()},
        }
        return result


def print_summary(result):
    c = result["check"]
    print(f"\nfault soak: {result['backend']}, {result['duration_s']} s, seed {result['seed']}, "
          f"mean gap {result['gap_s']} s, lease {result['lease_ms']} ms")
    print(f"{'fault':<10} {'count':>6} {'recovery p50':>13} {'max':>8} {'unrecovered':>12}")
    for kind, f in result["faults"].items():
        p50 = "-" if f["recovery_p50_s"] is None else f"{f['recovery_p50_s']:.2f} s"
        mx = "-" if f["recovery_max_s"] is None else f"{f['recovery_max_s']:.2f} s"
        print(f"{kind:<10} {f['count']:>6} {p50:>13} {mx:>8} {f['unrecovered']:>12}")
    print(f"tasks acknowledged {c['acknowledged']}: lost {c['lost']}, contradictory "
          f"{c['contradictory']}, double-completed {c['double_completed']}, over-retried "
          f"{c['over_retried']}, stuck beyond their lease {c['stuck']}, waiting for input "
          f"{c['waiting_for_input']}")
    print(f"final states {c['final']}; notifications checked {c['notifications']}; attempts "
          f"ended as retry {c['retry_outcomes']}; outcomes discarded by the fence "
          f"{result['outcomes_discarded_by_the_fence']}")
    print(f"inline calls {result['inline']}; requests {result['requests']}; server panics "
          f"{result['server_panics']}; drain {result['drain_s']} s")
    for key in ("lost", "contradictory", "double_completed", "over_retried", "stuck"):
        for example in c["examples"][key]:
            print(f"  {key}: {example}")
    for example in result["wrong_inline"]:
        print(f"  wrong inline answer: {example}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--duration", type=float, default=600)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--gap", type=float, default=1.0, help="mean seconds between faults, per lane")
    parser.add_argument("--lease-ms", type=int, default=2000)
    parser.add_argument("--port", type=int, default=18600)
    parser.add_argument("--out", default=None)
    parser.add_argument("--drain", type=float, default=180)
    parser.add_argument("--modern", type=int, default=4)
    parser.add_argument("--legacy", type=int, default=2)
    parser.add_argument("--listeners", type=int, default=1)
    parser.add_argument("--kinds", default=None, help="only these fault kinds (comma-separated)")
    parser.add_argument("--json", default=None, help="write the result here too")
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1 << 31)
    if args.out is None:
        args.out = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                f"taskd-faults-{args.backend}-{time.strftime('%Y%m%dT%H%M%S')}")
    if os.geteuid() != 0:
        sys.exit("faults.py: needs root (it mounts a tmpfs for the full-disk fault)")
    soak = Soak(args)

    def interrupted(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    try:
        result = soak.run()
    finally:
        soak.teardown()
    result["out"] = args.out
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print_summary(result)
    c = result["check"]
    bad = c["lost"] or c["contradictory"] or c["double_completed"] or c["over_retried"] or c["stuck"]
    bad = bad or result["wrong_inline"] or result["server_panics"]
    print("FAIL" if bad else "PASS", f"(results in {args.out})")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
