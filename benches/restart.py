#!/usr/bin/env python3
"""restart.py BINARY: what restarts cost clients (issue 46).

Clients keep calling a server while it is restarted the way `systemctl restart` does
(SIGTERM, wait for its exit, start it again on the same address and data dir), in two
setups measured in the same run:

  socket   the listening socket is held by this harness and passed to each process as
           systemd passes a socket unit's (descriptor 3, LISTEN_FDS=1,
           LISTEN_FDNAMES=http, LISTEN_PID); connections that arrive while no process
           runs wait in the kernel's queue;
  bind     each process binds the address itself (no socket activation).

Clients (CLIENTS, default 8, each on one keep-alive connection like an SDK's, and no
retries: a request that fails is counted): inline `echo` calls, task creations
(`noop_task`), `tasks/get` of created tasks, and a legacy (2025-11-25) session calling
`echo`. Each legacy session also holds its standalone GET stream open, as Codex CLI and
Gemini CLI do, and opens it again (with `Last-Event-ID`) as soon as it ends. For each
setup: requests, failed requests (by reason), the latency a restart added to the
requests it caught (p99 and max, against the median of requests that caught none), how
long each stop took (SIGTERM to exit), and how the GET streams ended (with the end of
their response, or broken off). A client whose request failed waits 50 ms before its
next one.

  RESTARTS=10 GAP=1.0 CLIENTS=8 python3 benches/restart.py target/release/mcp-taskd
"""

import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

RESTARTS = int(os.environ.get("RESTARTS", "10"))
GAP = float(os.environ.get("GAP", "1.0"))  # seconds of serving between restarts
CLIENTS = int(os.environ.get("CLIENTS", "8"))
FAILURE_PAUSE = 0.05  # seconds a client waits after a failed request
VERSION = "2026-07-28"
TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


def body(rid, method, params, capabilities=None):
    params = dict(params)
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities or {},
    }
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def headers(method, name=None):
    h = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
    }
    if name:
        h["Mcp-Name"] = name
    return h


class Client(threading.Thread):
    """One client on one keep-alive connection, doing one kind of request."""

    def __init__(self, kind, port, shared):
        super().__init__(daemon=True)
        self.kind, self.port, self.shared = kind, port, shared
        self.conn = None
        self.samples = []  # (start, end, ok, reason)
        self.rid = 0
        self.session = None
        self.stream = None  # the legacy session's GET stream
        self.task_ids = []

    def connection(self):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        return self.conn

    def post(self, message, extra):
        conn = self.connection()
        conn.request("POST", "/mcp", json.dumps(message), extra)
        response = conn.getresponse()
        data = response.read()
        if response.getheader("Connection", "").lower() == "close":
            conn.close()
            self.conn = None
        return response, data

    def one(self):
        self.rid += 1
        rid = self.rid
        if self.kind == "inline":
            msg = body(rid, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
            h = headers("tools/call", "echo")
        elif self.kind == "create":
            msg = body(rid, "tools/call", {"name": "noop_task", "arguments": {}}, TASKS)
            h = headers("tools/call", "noop_task")
        elif self.kind == "get":
            if not self.task_ids:
                msg = body(rid, "tools/call", {"name": "noop_task", "arguments": {}}, TASKS)
                h = headers("tools/call", "noop_task")
            else:
                task = self.task_ids[rid % len(self.task_ids)]
                msg = body(rid, "tasks/get", {"taskId": task}, TASKS)
                h = headers("tasks/get", task)
        else:  # legacy
            if self.session is None:
                msg = {"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "restart-bench", "version": "1"}}}
                h = {"Content-Type": "application/json",
                     "Accept": "application/json, text/event-stream"}
            else:
                msg = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {"text": "hi"}}}
                h = {"Content-Type": "application/json",
                     "Accept": "application/json, text/event-stream",
                     "MCP-Protocol-Version": "2025-11-25", "Mcp-Session-Id": self.session}
        response, data = self.post(msg, h)
        if response.status != 200:
            return f"HTTP {response.status}"
        text = data.decode("utf-8", "replace")
        if text.startswith("event:") or text.startswith("data:") or "\ndata:" in text:
            lines = [l[5:].strip() for l in text.splitlines() if l.startswith("data:")]
            text = lines[-1] if lines else "{}"
        answer = json.loads(text)
        if answer.get("id") != rid:
            return f"id {answer.get('id')!r} for {rid}"
        if "error" in answer:
            return f"error {answer['error'].get('code')}: {answer['error'].get('message')}"
        result = answer.get("result", {})
        if self.kind == "legacy" and self.session is None:
            self.session = response.getheader("Mcp-Session-Id")
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            self.post(note, {**h, "MCP-Protocol-Version": "2025-11-25",
                             "Mcp-Session-Id": self.session})
            self.stream = GetStream(self.port, self.session, self.shared)
            self.stream.start()
        task_id = result.get("taskId") or result.get("task", {}).get("taskId")
        if task_id and len(self.task_ids) < 64:
            self.task_ids.append(task_id)
        return None

    def run(self):
        while not self.shared["stop"]:
            start = time.monotonic()
            try:
                reason = self.one()
            except (OSError, http.client.HTTPException, ValueError) as error:
                reason = type(error).__name__
                if self.conn is not None:
                    self.conn.close()
                    self.conn = None
            self.samples.append((start, time.monotonic(), reason is None, reason))
            if reason is not None:
                # A client that failed tries again a little later, not in a tight loop.
                time.sleep(FAILURE_PAUSE)


class GetStream(threading.Thread):
    """A legacy session's standalone GET stream, on a keep-alive connection of its own:
    held open, and opened again as soon as it ends."""

    def __init__(self, port, session, shared):
        super().__init__(daemon=True)
        self.port, self.session, self.shared = port, session, shared
        self.opened = 0
        self.ended = 0  # with the end of the response (its last chunk)
        self.broken = 0  # broken off mid-stream
        self.refused = {}  # failed to open, by reason

    def run(self):
        conn = None
        last_id = None
        while not self.shared["stop"]:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            h = {"Accept": "text/event-stream", "MCP-Protocol-Version": "2025-11-25",
                 "Mcp-Session-Id": self.session}
            if last_id is not None:
                h["Last-Event-ID"] = last_id
            streaming = False
            try:
                conn.request("GET", "/mcp", headers=h)
                response = conn.getresponse()
                if response.status != 200:
                    response.read()
                    raise ValueError(f"HTTP {response.status}")
                streaming = True
                self.opened += 1
                while True:
                    line = response.readline()
                    if not line:
                        break
                    if line.startswith(b"id:"):
                        last_id = line[3:].strip().decode()
                self.ended += 1
                if response.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException, ValueError) as error:
                if streaming:
                    self.broken += 1
                else:
                    reason = str(error) if isinstance(error, ValueError) else type(error).__name__
                    self.refused[reason] = self.refused.get(reason, 0) + 1
                conn.close()
                conn = None
                time.sleep(FAILURE_PAUSE)


def wait_healthy(port, limit=30.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                conn.close()
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise SystemExit("the server did not become healthy")


def run_setup(binary, setup):
    work = tempfile.mkdtemp(prefix=f"mcp-taskd-restart-{setup}-")
    data = os.path.join(work, "data")
    held = None
    if setup == "socket":
        held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", 0))
        held.listen(4096)
        port = held.getsockname()[1]
    else:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
    log = open(os.path.join(work, "server.log"), "ab")

    def start():
        if held is not None:
            fd = held.fileno()
            # The shell's process id is the server's (it execs it); the socket moves to
            # descriptor 3, where systemd puts the first passed socket.
            moved = "" if fd == 3 else f" 3<&{fd} {fd}<&-"
            script = f'LISTEN_PID=$$ exec "$0" "$@"{moved}'
            command = ["sh", "-c", script, binary, "serve",
                       "--listen", "127.0.0.1:0", "--data-dir", data]
            env = dict(os.environ, LISTEN_FDS="1", LISTEN_FDNAMES="http")
            return subprocess.Popen(command, env=env, pass_fds=(fd,),
                                    stdout=subprocess.DEVNULL, stderr=log)
        command = [binary, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data]
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)

    server = start()
    wait_healthy(port)
    shared = {"stop": False}
    kinds = ["inline", "create", "get", "legacy"]
    clients = [Client(kinds[i % len(kinds)], port, shared) for i in range(CLIENTS)]
    for client in clients:
        client.start()
    windows = []
    stops = []
    time.sleep(GAP)
    for _ in range(RESTARTS):
        began = time.monotonic()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        exited = time.monotonic()
        server = start()
        wait_healthy(port)
        windows.append((began, time.monotonic()))
        stops.append(exited - began)
        time.sleep(GAP)
    shared["stop"] = True
    for client in clients:
        client.join(timeout=90)
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=60)
    if held is not None:
        held.close()

    samples = [s for c in clients for s in c.samples]
    failed = [s for s in samples if not s[2]]
    reasons = {}
    for s in failed:
        reasons[s[3]] = reasons.get(s[3], 0) + 1
    caught = [s for s in samples if s[2] and any(s[0] < w[1] and s[1] > w[0] for w in windows)]
    quiet = [s[1] - s[0] for s in samples if s[2] and s not in caught]
    base = statistics.median(quiet) if quiet else 0.0
    added = sorted(max(0.0, (s[1] - s[0]) - base) for s in caught)

    def pick(q):
        if not added:
            return 0.0
        return added[min(len(added) - 1, int(q * len(added)))]

    restart_s = [w[1] - w[0] for w in windows]
    streams = [c.stream for c in clients if c.stream is not None]
    refused = {}
    for stream in streams:
        for reason, count in stream.refused.items():
            refused[reason] = refused.get(reason, 0) + count
    return {
        "setup": setup, "requests": len(samples), "failed": len(failed),
        "reasons": reasons, "caught": len(caught), "median_ms": base * 1000,
        "added_p99_ms": pick(0.99) * 1000, "added_max_ms": (added[-1] if added else 0) * 1000,
        "restart_median_s": statistics.median(restart_s) if restart_s else 0,
        "stop_median_s": statistics.median(stops) if stops else 0,
        "stop_max_s": max(stops) if stops else 0,
        "streams": len(streams), "streams_opened": sum(s.opened for s in streams),
        "streams_ended": sum(s.ended for s in streams),
        "streams_broken": sum(s.broken for s in streams), "streams_refused": refused,
    }


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    binary = os.path.realpath(sys.argv[1])
    results = [run_setup(binary, setup) for setup in ("socket", "bind")]
    print(f"{RESTARTS} restarts, {CLIENTS} clients (inline, create, get, legacy), "
          f"{GAP} s between restarts")
    print(f"{'setup':<8} {'requests':>9} {'failed':>7} {'caught':>7} {'median ms':>10} "
          f"{'added p99 ms':>13} {'added max ms':>13} {'restart s':>10} {'stop s':>7} "
          f"{'stop max s':>11}")
    for r in results:
        print(f"{r['setup']:<8} {r['requests']:>9} {r['failed']:>7} {r['caught']:>7} "
              f"{r['median_ms']:>10.2f} {r['added_p99_ms']:>13.1f} {r['added_max_ms']:>13.1f} "
              f"{r['restart_median_s']:>10.2f} {r['stop_median_s']:>7.2f} "
              f"{r['stop_max_s']:>11.2f}")
        for reason, count in sorted(r["reasons"].items(), key=lambda x: -x[1]):
            print(f"    {count:>6}  {reason}")
        print(f"    GET streams ({r['streams']}): opened {r['streams_opened']}, ended with "
              f"their response {r['streams_ended']}, broken off {r['streams_broken']}")
        for reason, count in sorted(r["streams_refused"].items(), key=lambda x: -x[1]):
            print(f"    {count:>6}  GET not opened: {reason}")


if __name__ == "__main__":
    main()
