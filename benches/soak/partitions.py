#!/usr/bin/env python3
"""Partitions on PostgreSQL (issue 50): two mcp-taskd nodes and PostgreSQL, each in a
network namespace this script creates (plus one for the clients), joined by a bridge
in a fifth, and faults cut into the links between them with nftables rules *inside*
the namespaces. Only the addresses of those namespaces are ever a target; nothing of
the host's network is touched, and everything is removed at the end (and, should a
run die, by the next run's sweep, or `partitions.py --sweep`).

    namespace   address        runs
    <p>db       10.251.X.1     PostgreSQL
    <p>n1       10.251.X.11    node n1 (mcp-taskd serve)
    <p>n2       10.251.X.12    node n2
    <p>cl       10.251.X.100   this script's clients (the whole process moves there)
    <p>sw       -              the bridge

The clients of the soak (clients.py: both eras, inline calls, tasks with retries and
input, cancels, listen streams) run through every scenario, against both nodes with
fail-over. The scenarios, in order:

  A  leader elsewhere   n1 cut from PostgreSQL (both ways) while its attempts run; the
                        leases expire and n2 (the upkeep leader) reclaims them and runs
                        them again; then healed while n1's attempts are still finishing.
                        n1's late outcomes must be refused by the fence and n2's stand.
  A' leader cut         the same with n1 leading upkeep, cut for longer than TCP gives
                        an unanswered connection (45 s): does n2 take over the upkeep
                        (and reclaim n1's attempts) while n1 is cut?
  B1 one-way, out       n1 -> PostgreSQL dropped (n1's requests vanish)
  B2 one-way, in        PostgreSQL -> n1 dropped (n1's requests run, their answers vanish)
  C  clients cut        n1 cut from the clients, not from PostgreSQL

Then the soak's checker over every history and the store, and the fence's evidence from
the store: for every attempt that ran on the cut node and whose task another attempt
finished, the attempts table's outcome of the stale attempt (retry: its lease was taken)
against the committed one, with the stale attempt's own trace (its program wrote
TASK.ATTEMPT.NODE when it printed its result) and the nodes' count of outcomes the
fence discarded (/metrics).

Needs root, `ip` (iproute2) with network namespaces, `nft` (nftables) and PostgreSQL.
Where any is missing it prints a loud SKIPPED line and exits 0, unless
MCP_TASKD_REQUIRE_PARTITIONS=1 (then it fails). Exit 1 when a check fails.

  partitions.py --bin target/release/mcp-taskd [--out DIR] [--seed N] [--json FILE]
"""

import argparse
import ctypes
import json
import os
import random
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import check  # noqa: E402
from clients import (Control, Http, Ledger, Node, RequestFailed, TERMINAL, Task,  # noqa: E402
                     modern_obs, now, rpc_result, start_clients)
from procs import Postgres, Server, log, metric_sum, pg_bin, unprivileged  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "tdp"  # namespaces: tdp<pid><role>
ROLES = ("sw", "db", "n1", "n2", "cl")
LEASE_MS = 2000
DISCARDED_METRIC = "mcp_taskd_attempt_outcomes_discarded_total"
DISCARDED_LOG = "an attempt finished after losing its lease; its outcome was discarded"


def sh(*argv, check_=True):
    return subprocess.run(list(argv), check=check_, capture_output=True, text=True)


def ns_exec(ns):
    return ["ip", "netns", "exec", ns]


def skip(why):
    if os.environ.get("MCP_TASKD_REQUIRE_PARTITIONS"):
        sys.exit(f"partitions: MCP_TASKD_REQUIRE_PARTITIONS is set and {why}")
    print(f"SKIPPED partitions: {why}", flush=True)
    sys.exit(0)


def sweep():
    """Removes the namespaces (and what runs in them) of runs whose process is gone."""
    try:
        names = sh("ip", "netns", "list").stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return
    for name in names:
        if not name.startswith(PREFIX):
            continue
        for role in ROLES + ("probe",):
            if name.endswith(role):
                digits = name[len(PREFIX):-len(role)]
                if digits.isdigit() and not os.path.exists(f"/proc/{digits}"):
                    remove_namespace(name)
                break


def remove_namespace(name):
    pids = sh("ip", "netns", "pids", name, check_=False).stdout.split()
    for pid in pids:
        if pid == str(os.getpid()):
            continue  # this process, in the clients' namespace: it leaves with us
        try:
            os.kill(int(pid), 9)
        except (ProcessLookupError, ValueError):
            pass
    sh("ip", "netns", "del", name, check_=False)


class Net:
    """The namespaces, the bridge, the addresses, and the cuts."""

    def __init__(self):
        self.tag = f"{PREFIX}{os.getpid()}"
        self.subnet = f"10.251.{os.getpid() % 200 + 20}"
        self.ns = {role: f"{self.tag}{role}" for role in ROLES}
        self.addr = {"db": f"{self.subnet}.1", "n1": f"{self.subnet}.11", "n2": f"{self.subnet}.12",
                     "cl": f"{self.subnet}.100"}
        self.made = []

    def create(self):
        for role in ROLES:
            sh("ip", "netns", "add", self.ns[role])
            self.made.append(self.ns[role])
            sh("ip", "-n", self.ns[role], "link", "set", "lo", "up")
        sw = self.ns["sw"]
        sh("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", sw, "link", "set", "br0", "up")
        for role in ("db", "n1", "n2", "cl"):
            sh("ip", "-n", sw, "link", "add", f"p{role}", "type", "veth", "peer", "name", "eth0",
               "netns", self.ns[role])
            sh("ip", "-n", sw, "link", "set", f"p{role}", "master", "br0", "up")
            sh("ip", "-n", self.ns[role], "addr", "add", f"{self.addr[role]}/24", "dev", "eth0")
            sh("ip", "-n", self.ns[role], "link", "set", "eth0", "up")
            sh(*ns_exec(self.ns[role]), "nft", "add", "table", "inet", "part")
            sh(*ns_exec(self.ns[role]), "nft", "add", "chain", "inet", "part", "in",
               "{ type filter hook input priority 0 ; }")
            sh(*ns_exec(self.ns[role]), "nft", "add", "chain", "inet", "part", "out",
               "{ type filter hook output priority 0 ; }")

    def drop(self, role, chain, field, peer):
        """In `role`'s namespace, drops packets of `chain` (in/out) whose `field`
        (saddr/daddr) is `peer`'s address."""
        sh(*ns_exec(self.ns[role]), "nft", "add", "rule", "inet", "part", chain, "ip", field,
           self.addr[peer], "drop")

    def heal(self, role):
        for chain in ("in", "out"):
            sh(*ns_exec(self.ns[role]), "nft", "flush", "chain", "inet", "part", chain)

    def destroy(self):
        for name in reversed(self.made):
            remove_namespace(name)
        self.made = []


def enter(ns):
    """Moves this process (its only thread, so far) into network namespace `ns`."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), "setns")
    finally:
        os.close(fd)


def config_text(node, host, url, done_dir):
    tool = os.path.join(HERE, "tool.sh")
    return f"""# The partition test's node {node} (benches/soak/partitions.py)
[server]
endpoint = "/mcp"
# Its address is in a network namespace of the test's own, reached by its clients only.
allow_unauthenticated_remote = true
allowed_hosts = ["{host}"]

[builtin]
sets = ["demo", "conformance", "testing"]

[workers]
threads = 8
lease_ms = {LEASE_MS}
janitor_interval_ms = 250
shutdown_grace_ms = 3000

[tasks]
ttl_ms = 86400000

[store]
backend = "postgres"
url = "{url}"
pool_size = 8

[[tools]]
name = "soak_cmd"
description = "The soak's command tool"
command = ["{tool}", "partitions"]
task_policy = "optional"
timeout_ms = 30000
max_attempts = 3
backoff_ms = 200
env = {{ SOAK_RUN = "partitions", NODE = "{node}", DONE_DIR = "{done_dir}" }}
input_schema = {{ type = "object", properties = {{ mode = {{ type = "string" }}, seconds = {{ type = "number" }}, lines = {{ type = "integer" }}, tag = {{ type = "string" }} }} }}

[[tools]]
name = "soak_inline"
description = "The soak's command tool, inline"
command = ["{tool}", "partitions"]
task_policy = "inline"
timeout_ms = 5000
env = {{ SOAK_RUN = "partitions", NODE = "{node}" }}
input_schema = {{ type = "object", properties = {{ mode = {{ type = "string" }}, seconds = {{ type = "number" }} }} }}
"""


class Partitions:
    def __init__(self, args, net):
        self.args, self.net = args, net
        self.out = args.out
        self.done_dir = os.path.join(self.out, "runs")
        os.makedirs(self.done_dir, exist_ok=True)
        os.chmod(self.out, 0o755)
        self.ledger = Ledger()
        self.control = Control()
        self.scenarios = []
        self.servers = {}

    # -- set-up -------------------------------------------------------------------

    def setup(self):
        net = self.net
        bindir = pg_bin()
        pg_log = os.path.join(self.out, "postgres.log")
        open(pg_log, "a").close()
        owner = unprivileged()
        if owner:
            os.chown(pg_log, *owner)
        self.pg = Postgres(bindir, os.path.join(self.out, "pg"), net.addr["db"], 5432,
                           prefix=ns_exec(net.ns["db"]), log_path=pg_log,
                           trust=f"{net.subnet}.0/24")
        started = self.pg.start()
        if started.returncode != 0:
            raise RuntimeError(f"PostgreSQL did not start in its namespace: {started.stderr}")
        self.pg.sql("CREATE DATABASE part")
        binary = os.path.join(self.out, "mcp-taskd")
        shutil.copy(self.args.bin, binary)
        url = self.pg.url("part", net.addr["db"], 5432)
        # n2 first: it takes the upkeep lead, so that scenario A cuts a node that is not
        # the leader.
        for node in ("n2", "n1"):
            config = os.path.join(self.out, f"{node}.toml")
            with open(config, "w") as f:
                f.write(config_text(node, net.addr[node], url, self.done_dir))
            server = Server(node, binary, config, os.path.join(self.out, f"{node}-data"),
                            net.addr[node], 8080, self.out, prefix=ns_exec(net.ns[node]))
            self.servers[node] = server
        for node in ("n2", "n1"):
            if self.servers[node].start(limit=30) is None:
                raise RuntimeError(f"{node} did not start; see {self.servers[node].log_path}")
            if node == "n2":
                self.wait_leader("n2", 30)
        self.nodes = [Node(name, s.host, s.port) for name, s in sorted(self.servers.items())]

    def teardown(self):
        for server in self.servers.values():
            try:
                server.terminate(grace=5)
            except Exception:  # noqa: BLE001 - best effort at the end
                pass
        if getattr(self, "pg", None) is not None:
            self.pg.stop("immediate")

    # -- the store ----------------------------------------------------------------

    def sql_rows(self, sql):
        text = subprocess.run(self.pg.psql_command("part") + ["-X", "-q", "-A", "-t", "-c", sql],
                              check=True, capture_output=True, text=True).stdout
        return [line for line in text.splitlines() if line.strip()]

    def leader(self):
        """The node whose session holds the upkeep lock (by its client address)."""
        rows = self.sql_rows(
            "SELECT host(a.client_addr) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.classid = 1952542059 AND l.objid = 3 AND l.granted")
        by_addr = {self.net.addr[n]: n for n in ("n1", "n2")}
        return [by_addr.get(row.strip(), row.strip()) for row in rows]

    def wait_leader(self, node, limit):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.leader() == [node]:
                return True
            time.sleep(0.25)
        return False

    def attempts_of(self, task_id):
        rows = self.sql_rows(
            f"SELECT attempt || ' ' || coalesce(outcome, '-') FROM attempts WHERE task_id = '{task_id}' "
            "ORDER BY attempt")
        return [(int(r.split()[0]), r.split()[1]) for r in rows]

    def job_of(self, task_id):
        rows = self.sql_rows(
            f"SELECT state || ' ' || attempt || ' ' || coalesce(lease_node, '-') FROM jobs "
            f"WHERE task_id = '{task_id}'")
        return rows[0].split() if rows else None

    def taken_over(self, task_id):
        """Whether the task's first attempt is no longer the one the store runs: its job
        was put back in the queue (reclaimed), is on a later attempt, or is gone (the
        task ended)."""
        job = self.job_of(task_id)
        return job is None or job[0] != "running" or job[1] != "1"

    # -- victims: attempts running on the node to cut ------------------------------

    def start_victims(self, count, seconds, http):
        """Creates `count` soak_cmd tasks of `seconds` each (through n2) and waits until
        each one's first attempt runs; returns those whose first attempt runs on n1."""
        created = []
        for i in range(count):
            secs = seconds[i % len(seconds)]
            sent = now()
            try:
                node, _, _, answer = http.modern(
                    "tools/call", {"name": "soak_cmd", "arguments": {"mode": "ok", "seconds": secs}},
                    name="soak_cmd")
                result = rpc_result(answer)
            except RequestFailed as failure:
                log(f"victim creation failed: {failure.reason}")
                continue
            task = Task(result["taskId"], "soak_cmd", f"victim-{secs}s", "2026", "partitions",
                        "complete", f"task={result['taskId']}", 3)
            self.ledger.add(task)
            self.ledger.observe(task, modern_obs(task, "create", sent, node, result))
            created.append(task)
        deadline = time.monotonic() + 30
        on = {}
        while time.monotonic() < deadline and len(on) < len(created):
            for task in created:
                for node in ("n1", "n2"):
                    if os.path.exists(os.path.join(self.done_dir, f"{task.id}.1.{node}.start")):
                        on[task.id] = node
            time.sleep(0.05)
        return [t for t in created if on.get(t.id) == "n1"], created

    def follow(self, tasks, http, limit):
        """Polls `tasks` (through any node) until each is terminal."""
        deadline = time.monotonic() + limit
        pending = list(tasks)
        while pending and time.monotonic() < deadline:
            for task in list(pending):
                sent = now()
                try:
                    node, _, _, answer = http.modern("tasks/get", {"taskId": task.id}, name=task.id)
                    obs = modern_obs(task, "get", sent, node, rpc_result(answer))
                    self.ledger.observe(task, obs)
                    if obs.status in TERMINAL:
                        pending.remove(task)
                except RequestFailed:
                    pass
            time.sleep(0.3)
        return pending

    def discarded(self):
        """The nodes' count of outcomes the fence discarded: /metrics (since each node
        started), and their logs."""
        return {name: {"metric": metric_sum(s.metrics(), DISCARDED_METRIC),
                       "log": s.log_count(DISCARDED_LOG)} for name, s in self.servers.items()}

    def fence_evidence(self, victims):
        """For each victim: which attempts ran where, which finished (their program
        printed a result), what the store recorded for each, and the result it holds."""
        rows = []
        for task in victims:
            attempts = self.attempts_of(task.id)
            ran = {}
            for name in os.listdir(self.done_dir):
                if name.startswith(task.id + "."):
                    _, attempt, node, *rest = name.split(".")
                    entry = ran.setdefault(int(attempt), {"node": node, "finished": False})
                    if not rest:
                        entry["finished"] = True
            final = self.sql_rows(f"SELECT status || ' ' || coalesce(result, '') FROM tasks WHERE id = '{task.id}'")
            status = final[0].split(" ", 1)[0] if final else "missing"
            result = final[0].split(" ", 1)[1] if final and " " in final[0] else ""
            stale = ran.get(1, {})
            stale_outcome = dict(attempts).get(1)
            committed = [a for a, o in attempts if o in TERMINAL]
            rows.append({
                "task": task.id, "status": status, "attempts": attempts, "ran": ran,
                "stale_finished": stale.get("node") == "n1" and stale.get("finished", False),
                "stale_outcome": stale_outcome,
                "committed_attempt": committed[0] if len(committed) == 1 else committed,
                "result_names_stale": "attempt=1 node=n1" in result,
            })
        return rows

    # -- scenarios ----------------------------------------------------------------

    def scenario(self, name, what, act):
        before = dict(self.ledger.failures)
        began = time.monotonic()
        log(f"scenario {name}: {what}")
        detail = act() or {}
        seen = {k: v - before.get(k, 0) for k, v in self.ledger.failures.items() if v - before.get(k, 0)}
        entry = {"name": name, "what": what, "seconds": round(time.monotonic() - began, 1),
                 "client_failures": dict(sorted(seen.items(), key=lambda kv: -kv[1])), **detail}
        self.scenarios.append(entry)
        log(f"scenario {name}: {json.dumps(detail)[:600]}")
        return entry

    def cut_while_running(self, hold, leader_expected):
        """Scenario A / A': n1 cut both ways while its attempts run, healed after `hold`
        seconds while some of them still run."""
        http = Http(self.nodes[1:], timeout=10)  # through n2
        leader_before = self.leader()
        discarded_before = self.discarded()
        victims, created = self.start_victims(12, [hold / 2, hold + 6], http)
        if not victims:
            return {"error": "no attempt ran on n1"}
        cut_at = time.monotonic()
        self.net.drop("n1", "out", "daddr", "db")
        self.net.drop("n1", "in", "saddr", "db")
        # While cut: when (if ever) does another node take the victims' attempts?
        reclaimed_after = None
        leaders_during = set()
        while time.monotonic() - cut_at < hold:
            leaders_during.update(self.leader())
            if reclaimed_after is None and all(self.taken_over(t.id) for t in victims):
                reclaimed_after = time.monotonic() - cut_at
            time.sleep(0.25)
        self.net.heal("n1")
        healed_at = time.monotonic()
        left = self.follow(created, http, 90)
        settle = time.monotonic()
        while time.monotonic() - settle < 3:
            time.sleep(0.25)
        evidence = self.fence_evidence(victims)
        discarded_after = self.discarded()
        return {
            "leader_before": leader_before,
            "leader_expected": leader_expected,
            "leaders_during_cut": sorted(leaders_during),
            "victims": len(victims),
            "tasks": len(created),
            "cut_s": round(hold, 1),
            "victims_reclaimed_during_cut_after_s": None if reclaimed_after is None else round(reclaimed_after, 1),
            "ended_after_heal_s": round(time.monotonic() - healed_at, 1),
            "not_ended": [t.id for t in left],
            "stale_attempts_finished": sum(1 for e in evidence if e["stale_finished"]),
            "stale_outcomes_in_store": sorted({str(e["stale_outcome"]) for e in evidence}),
            "committed_by_attempt": sorted({str(e["committed_attempt"]) for e in evidence}),
            "refused_by_fence": sum(1 for e in evidence
                                    if e["stale_outcome"] == "retry" and e["committed_attempt"] not in (1, [])
                                    and not e["result_names_stale"]),
            "stale_result_stored": sum(1 for e in evidence if e["result_names_stale"]),
            "discarded_n1": discarded_after["n1"]["metric"] - discarded_before["n1"]["metric"],
            "discarded_n1_log": discarded_after["n1"]["log"] - discarded_before["n1"]["log"],
            "evidence": evidence,
        }

    def one_way(self, chain, field, hold):
        http = Http(self.nodes[1:], timeout=10)
        victims, created = self.start_victims(8, [hold / 2, hold + 4], http)
        probe = self.probe_during(lambda: self.net.drop("n1", chain, field, "db"), hold)
        self.net.heal("n1")
        left = self.follow(created, http, 90)
        evidence = self.fence_evidence(victims)
        return {"victims": len(victims), "tasks": len(created), "not_ended": [t.id for t in left],
                "committed_by_attempt": sorted({str(e["committed_attempt"]) for e in evidence}),
                "stale_outcomes_in_store": sorted({str(e["stale_outcome"]) for e in evidence}),
                **probe}

    def probe_during(self, cut, hold):
        """What a client sees of each node while cut: one tasks/get and one task
        creation a second on each, and /healthz."""
        seen = {"n1": {}, "n2": {}}
        cut()
        began = time.monotonic()
        while time.monotonic() - began < hold:
            for node in self.nodes:
                http = Http([node], timeout=4)
                t0 = time.monotonic()
                try:
                    _, _, _, answer = http.modern(
                        "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0}},
                        name="slow_compute")
                    rpc_result(answer)
                    what = "created"
                except RequestFailed as failure:
                    what = failure.reason
                took = time.monotonic() - t0
                key = f"{what} ({'<1 s' if took < 1 else '1-4 s' if took < 4.5 else 'timeout'})"
                seen[node.name][key] = seen[node.name].get(key, 0) + 1
                http.close_all()
            time.sleep(0.5)
        return {"create_on_each_node": seen}

    def clients_cut(self, hold):
        http = Http(self.nodes[1:], timeout=10)
        victims, created = self.start_victims(6, [hold / 2], http)
        probe = self.probe_during(lambda: (self.net.drop("n1", "in", "saddr", "cl"),
                                           self.net.drop("n1", "out", "daddr", "cl")), hold)
        ran_on_n1 = sum(1 for t in victims
                        if os.path.exists(os.path.join(self.done_dir, f"{t.id}.1.n1")))
        self.net.heal("n1")
        left = self.follow(created, http, 60)
        evidence = self.fence_evidence(victims)
        return {"victims": len(victims), "finished_on_n1_while_cut_from_clients": ran_on_n1,
                "committed_by_attempt": sorted({str(e["committed_attempt"]) for e in evidence}),
                "not_ended": [t.id for t in left], **probe}

    def hand_lead_to_n1(self):
        """Restarts n2 so that n1 takes the upkeep lead."""
        self.servers["n2"].kill9()
        ok = self.wait_leader("n1", 30)
        self.servers["n2"].start()
        return ok

    def run(self):
        a = self.args
        self.setup()
        log(f"nodes {self.nodes}, database {self.net.addr['db']}; leader {self.leader()}")
        clients = start_clients(self.nodes, self.ledger, self.control, a.seed,
                                modern=2, legacy=1, listeners=1, timeout=6)
        time.sleep(3)
        self.scenario("A", "n1 cut from PostgreSQL both ways while its attempts run (n2 leads upkeep)",
                      lambda: self.cut_while_running(8.0, "n2"))
        if not self.hand_lead_to_n1():
            log("n1 did not take the upkeep lead")
        self.scenario("A'", "n1 cut from PostgreSQL both ways for 45 s while it leads upkeep",
                      lambda: self.cut_while_running(45.0, "n1"))
        self.scenario("B1", "one-way: n1 -> PostgreSQL dropped for 8 s",
                      lambda: self.one_way("out", "daddr", 8.0))
        self.scenario("B2", "one-way: PostgreSQL -> n1 dropped for 8 s",
                      lambda: self.one_way("in", "saddr", 8.0))
        self.scenario("C", "n1 cut from the clients (not from PostgreSQL) for 10 s",
                      lambda: self.clients_cut(10.0))
        log("scenarios over; draining")
        self.control.draining.set()
        for client in clients:
            client.join(timeout=120)
        self.control.stop.set()
        for client in clients:
            client.join(timeout=30)
        clean = {name: s.terminate(grace=30) for name, s in self.servers.items()}
        store = check.Store.postgres(self.pg.psql_command("part"))
        report = check.check(self.ledger, store)
        return {"scenarios": self.scenarios, "check": report.as_dict(), "clean_stop": clean,
                "requests": self.ledger.requests, "inline": self.ledger.inline,
                "wrong_inline": self.ledger.wrong_inline,
                "server_panics": sum(s.log_count("panicked") - s.log_count("tool always_panics panicked")
                                     for s in self.servers.values())}


def verdict(result):
    """The checks the partition test must pass."""
    failures = []
    c = result["check"]
    for key in ("lost", "contradictory", "double_completed", "over_retried", "stuck"):
        if c[key]:
            failures.append(f"{key}: {c[key]} ({c['examples'].get(key, [])[:3]})")
    if result["wrong_inline"] or result["server_panics"]:
        failures.append(f"wrong inline answers {result['wrong_inline']}, panics {result['server_panics']}")
    for s in result["scenarios"]:
        if s.get("error"):
            failures.append(f"{s['name']}: {s['error']}")
        if s.get("not_ended"):
            failures.append(f"{s['name']}: tasks never ended: {s['not_ended'][:5]}")
        if s["name"] in ("A", "A'"):
            if s.get("stale_result_stored"):
                failures.append(f"{s['name']}: a stale attempt's result was stored")
            if not s.get("refused_by_fence"):
                failures.append(f"{s['name']}: no stale outcome was shown refused by the fence")
            if s.get("victims_reclaimed_during_cut_after_s") is None:
                failures.append(f"{s['name']}: n1's attempts were not reclaimed while it was cut")
    return failures


def print_summary(result):
    c = result["check"]
    print("\npartitions on PostgreSQL (two nodes, network namespaces)")
    for s in result["scenarios"]:
        keys = ("victims", "victims_reclaimed_during_cut_after_s", "stale_attempts_finished",
                "refused_by_fence", "discarded_n1", "stale_outcomes_in_store",
                "committed_by_attempt", "leaders_during_cut", "create_on_each_node",
                "finished_on_n1_while_cut_from_clients", "client_failures")
        shown = {k: s[k] for k in keys if k in s}
        print(f"  {s['name']:<3} {s['what']}\n      {json.dumps(shown)}")
    print(f"tasks acknowledged {c['acknowledged']}: lost {c['lost']}, contradictory {c['contradictory']}, "
          f"double-completed {c['double_completed']}, over-retried {c['over_retried']}, stuck {c['stuck']}; "
          f"final {c['final']}; notifications {c['notifications']}")
    for key in ("lost", "contradictory", "double_completed", "over_retried", "stuck"):
        for example in c["examples"][key]:
            print(f"  {key}: {example}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin")
    parser.add_argument("--out", default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--sweep", action="store_true", help="only remove what dead runs left")
    args = parser.parse_args()
    if os.geteuid() != 0:
        skip("needs root (network namespaces, nftables)")
    for tool in ("ip", "nft", "setpriv"):
        if shutil.which(tool) is None:
            skip(f"no {tool} found (iproute2, nftables, util-linux)")
    sweep()
    if args.sweep:
        return
    if not args.bin:
        parser.error("--bin is required")
    if pg_bin() is None:
        skip("no PostgreSQL found (.ci/postgres.sh installs it)")
    probe = f"{PREFIX}{os.getpid()}probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        skip(f"cannot create a network namespace: {made.stderr.strip()}")
    nft = subprocess.run(ns_exec(probe) + ["nft", "add", "table", "inet", "probe"], capture_output=True,
                         text=True)
    remove_namespace(probe)
    if nft.returncode != 0:
        skip(f"nftables does not work in a network namespace here: {nft.stderr.strip()}")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1 << 31)
    if args.out is None:
        args.out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"taskd-partitions-{time.strftime('%Y%m%dT%H%M%S')}")
    os.makedirs(args.out, exist_ok=True)
    net = Net()
    run = None
    try:
        net.create()
        enter(net.ns["cl"])
        run = Partitions(args, net)
        result = run.run()
    finally:
        if run is not None:
            run.teardown()
        net.destroy()
    result["seed"] = args.seed
    result["out"] = args.out
    failures = verdict(result)
    result["failures"] = failures
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print_summary(result)
    for failure in failures:
        print(f"FAILED: {failure}")
    print("FAIL" if failures else "PASS", f"(results in {args.out})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    ctypes.CDLL(None)  # libc is there
    main()
