#!/usr/bin/env python3
"""One identity floods, another is served: resident memory and the other's latency
during each flood (issue 29), for benches/floods.sh.

    floods.py BINARY WORKDIR

Starts BINARY (`serve`) on a fresh data dir with two tokens (`flood`, `other`) and the
default quotas, except a live-task quota of 2,000 and a `hold` tool whose tasks never
end (so that the creation flood reaches its quota). Then, one after the other:

- initialize: `flood` opens 10,000 legacy sessions (16 connections at a time);
- listen: `flood` opens 2,000 `subscriptions/listen` streams and holds those accepted;
- inline waits: `flood` makes 200 bridged `generate_report` calls at once (its client
  speaks no tasks, so each may wait 2.4 s for its task);
- creations: `flood` creates 20,000 `hold` tasks (16 connections at a time).

During each, `other` makes the same kind of request once the flood is under way, and
its latency is timed; the server's resident memory (VmRSS) is sampled every 20 ms.
Prints one JSON line per flood: requests, accepted, refused (by HTTP status),
other's status and latency (ms), RSS before, at peak and after (MiB).
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time

VERSION = "2026-07-28"
LEGACY = "2025-11-25"
TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


def sha256(text):
    import hashlib
    return hashlib.sha256(text.encode()).hexdigest()


def config(port, data):
    tokens = "".join(
        f'[[auth.tokens]]\nprincipal = "{who}"\nsha256 = "{sha256(who + "-token")}"\n'
        for who in ("flood", "other"))
    return (
        f'[server]\nlisten = "127.0.0.1:{port}"\ndata_dir = "{data}"\n'
        '[builtin]\nsets = ["demo"]\n'
        "[tasks]\nmax_live_tasks_per_identity = 2000\n"
        f"{tokens}"
        '[[tools]]\nname = "hold"\ndescription = "never ends"\ntask_policy = "required"\n'
        'command = ["/bin/sleep", "3600"]\nmax_concurrency = 1\n')


def post(port, who, body, headers, read=True):
    """One POST on a new connection; (status, payload) or, unread, the socket."""
    payload = json.dumps(body).encode()
    head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            f"Authorization: Bearer {who}-token\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            + f"Content-Length: {len(payload)}\r\n\r\n").encode()
    conn = socket.create_connection(("127.0.0.1", port))
    conn.sendall(head + payload)
    if not read:
        return conn
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    conn.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), rest


def status_line(conn):
    """The status of a response whose body may never end (a listen stream)."""
    conn.settimeout(10)
    data = b""
    while b"\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0


def initialize(port, who):
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {},
        "clientInfo": {"name": "flood", "version": "1"}}}
    return post(port, who, body, {})[0]


def meta(caps):
    return {"io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": caps}


def headers(method, name=None):
    h = {"MCP-Protocol-Version": VERSION, "Mcp-Method": method}
    if name:
        h["Mcp-Name"] = name
    return h


def listen(port, who):
    body = {"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {
        "notifications": {"toolsListChanged": True}, "_meta": meta({})}}
    conn = post(port, who, body, headers("subscriptions/listen"), read=False)
    return conn, status_line(conn)


def bridged(port, who):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "generate_report", "arguments": {"topic": who, "sections": 4}, "_meta": meta({})}}
    return post(port, who, body, headers("tools/call", "generate_report"))[0]


def create(port, who, tool):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": {}, "_meta": meta(TASKS)}}
    return post(port, who, body, headers("tools/call", tool))[0]


class Rss:
    """Samples the server's VmRSS every 20 ms while running."""

    def __init__(self, pid):
        self.pid, self.peak, self.running = pid, 0, True
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def now(self):
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
        return 0

    def sample(self):
        while self.running:
            self.peak = max(self.peak, self.now())
            time.sleep(0.02)

    def stop(self):
        self.running = False
        self.thread.join()
        return self.peak


def run_flood(name, pid, requests, flood_one, other_one, threads=16, hold=False):
    before = Rss(pid).now()
    rss = Rss(pid)
    statuses, held, lock = {}, [], threading.Lock()
    remaining = iter(range(requests))
    started = threading.Event()

    def worker():
        while True:
            with lock:
                if next(remaining, None) is None:
                    return
            result = flood_one()
            status = result[1] if hold else result
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
                if hold and status == 200:
                    held.append(result[0])
                elif hold:
                    result[0].close()
                if sum(statuses.values()) >= min(requests // 4, 500):
                    started.set()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    started.wait(120)
    t0 = time.perf_counter()
    other = other_one()
    other_ms = (time.perf_counter() - t0) * 1000
    if hold:
        other[0].close()
        other = other[1]
    for thread in pool:
        thread.join()
    peak = rss.stop()
    for conn in held:
        conn.close()
    time.sleep(0.5)
    after = Rss(pid).now()
    print(json.dumps({"flood": name, "requests": requests,
                      "statuses": {str(k): v for k, v in sorted(statuses.items())},
                      "other_status": other, "other_ms": round(other_ms, 1),
                      "rss_before_mib": before, "rss_peak_mib": peak,
                      "rss_after_mib": after}), flush=True)


def main():
    binary, work = sys.argv[1], sys.argv[2]
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    path = os.path.join(work, "floods.toml")
    with open(path, "w") as out:
        out.write(config(port, os.path.join(work, "data")))
    server = subprocess.Popen([binary, "serve", "--config", path],
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port)).close()
                break
            except OSError:
                if time.time() > deadline:
                    sys.exit("floods: the server did not start")
                time.sleep(0.05)
        pid = server.pid
        run_flood("initialize", pid, 10_000, lambda: initialize(port, "flood"),
                  lambda: initialize(port, "other"))
        run_flood("listen", pid, 2_000, lambda: listen(port, "flood"),
                  lambda: listen(port, "other"), hold=True)
        run_flood("inline_waits", pid, 200, lambda: bridged(port, "flood"),
                  lambda: bridged(port, "other"), threads=200)
        run_flood("creations", pid, 20_000, lambda: create(port, "flood", "hold"),
                  lambda: create(port, "other", "hold"))
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
