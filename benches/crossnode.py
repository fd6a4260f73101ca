#!/usr/bin/env python3
"""Cross-node commit-to-notification latency for benches/postgres.sh (issue 18).

    crossnode.py A_HOST:PORT B_HOST:PORT N

N times, one after the other: creates an `approval_then_work` task on node A (it waits
for input, its job parked), waits until A says `input_required`, opens a
`subscriptions/listen` stream for it on node B, then cancels it on A (a parked task is
cancelled in the cancel's own commit) and times the `cancelled` notification on B.

Two latencies per sample: from the cancel request's last byte sent (an upper bound on
commit-to-notification: it includes the cancel's own handling) and from its answer
received (a lower bound: the commit came before the answer). Prints one JSON line with
p50/p90/p99/max of both, in milliseconds. Plain sockets, one request per connection.
"""
import json
import socket
import sys
import time

VERSION = "2026-07-28"
# approval_then_work asks for input with a form: the client must declare form elicitation.
CAPS = {"elicitation": {"form": {}}, "extensions": {"io.modelcontextprotocol/tasks": {}}}


def request(host, method, params, name=None):
    """One JSON-RPC request; returns (result, seconds when sent, seconds when answered)."""
    params = dict(params)
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": CAPS,
    }
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"MCP-Protocol-Version: {VERSION}\r\nMcp-Method: {method}\r\n"
        + (f"Mcp-Name: {name}\r\n" if name else "")
        + f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    address, port = host.rsplit(":", 1)
    with socket.create_connection((address, int(port))) as conn:
        conn.sendall(head + body)
        sent = time.perf_counter()
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    answered = time.perf_counter()
    head, _, payload = data.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1]
    if status != b"200":
        sys.exit(f"crossnode: {method}: HTTP {status.decode()}: {payload[:300]!r}")
    message = json.loads(payload)
    if "error" in message:
        sys.exit(f"crossnode: {method}: {message['error']}")
    return message["result"], sent, answered


class Listen:
    """A listen stream on `host` for one task id, read line by line."""

    def __init__(self, host, task_id):
        body = json.dumps({"jsonrpc": "2.0", "id": 77, "method": "subscriptions/listen",
                           "params": {"notifications": {"taskIds": [task_id]}, "_meta": {
                               "io.modelcontextprotocol/protocolVersion": VERSION,
                               "io.modelcontextprotocol/clientCapabilities": CAPS}}}).encode()
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            f"MCP-Protocol-Version: {VERSION}\r\nMcp-Method: subscriptions/listen\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        address, port = host.rsplit(":", 1)
        self.conn = socket.create_connection((address, int(port)))
        self.conn.settimeout(10)
        self.conn.sendall(head + body)
        self.file = self.conn.makefile("rb")

    def message(self):
        """The next JSON-RPC message on the stream, and when its line arrived."""
        while True:
            line = self.file.readline()
            if not line:
                sys.exit("crossnode: the listen stream ended")
            if line.startswith(b"data:"):
                return json.loads(line[5:]), time.perf_counter()

    def close(self):
        self.file.close()
        self.conn.close()


def percentiles(values):
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]
    return {"p50": round(pick(0.50), 2), "p90": round(pick(0.90), 2),
            "p99": round(pick(0.99), 2), "max": round(values[-1], 2)}


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: crossnode.py A_HOST:PORT B_HOST:PORT N")
    a, b, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    from_sent, from_answer = [], []
    for _ in range(n):
        created, _, _ = request(a, "tools/call", {
            "name": "approval_then_work",
            "arguments": {"prepare_seconds": 0, "work_seconds": 0}}, "approval_then_work")
        task_id = created["taskId"]
        deadline = time.monotonic() + 10
        while request(a, "tasks/get", {"taskId": task_id}, task_id)[0]["status"] != "input_required":
            if time.monotonic() > deadline:
                sys.exit("crossnode: the task never asked for input")
            time.sleep(0.005)
        listen = Listen(b, task_id)
        ack, _ = listen.message()
        assert ack["method"] == "notifications/subscriptions/acknowledged", ack
        _, sent, answered = request(a, "tasks/cancel", {"taskId": task_id}, task_id)
        while True:
            message, arrived = listen.message()
            if message.get("params", {}).get("status") == "cancelled":
                break
        listen.close()
        from_sent.append((arrived - sent) * 1000)
        from_answer.append(max(0.0, arrived - answered) * 1000)
    print(json.dumps({"n": n, "from_cancel_sent_ms": percentiles(from_sent),
                      "from_cancel_answered_ms": percentiles(from_answer)}))


main()
