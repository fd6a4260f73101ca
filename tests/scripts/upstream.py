#!/usr/bin/env python3
"""A small stdio MCP server (2025-11-25, plain JSON-RPC, no SDK) for tests/upstreams.rs.

Its tools exercise what an upstream can do to mcp-taskd: report progress and log
messages, ask its client (elicitation), be cancelled, record each call it receives (so
that a test can count repeats after a kill -9), crash, fail in each way a call can
(exit mid-call, never answer, answer too much, refuse the arguments), and change its
tool list. Every event the tests look at is appended to $WORK/events.log as one line. Real upstream servers that no one
here wrote are exercised by .ci/interop.sh; this one makes each case deterministic.
"""

import json
import os
import sys
import threading
import time

WORK = os.environ.get("WORK", ".")
write_lock = threading.Lock()
pending = {}  # our request id -> (event, [answer])
cancelled = set()
extra_tools = []
memory = {}  # what `remember` kept in this process (this session)
next_id = [1]


def event(line):
    with open(os.path.join(WORK, "events.log"), "a") as log:
        log.write(line + "\n")


def send(message):
    with write_lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def ask(method, params, timeout=120):
    with write_lock:
        request_id = "up-%d" % next_id[0]
        next_id[0] += 1
    done = threading.Event()
    pending[request_id] = (done, [])
    send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    if not done.wait(timeout):
        return None
    return pending.pop(request_id)[1][0]


def text(value):
    return {"content": [{"type": "text", "text": value}]}


def log(level, data):
    send({"jsonrpc": "2.0", "method": "notifications/message",
          "params": {"level": level, "logger": "upstream.py", "data": data}})


# What `fail` says before it fails: a status message, a log message, a stderr line.
FAIL_STATUS = "writing section 4 of 10"
FAIL_LOG = "disk quota exceeded on /var/build"
FAIL_STDERR = "Traceback: OSError in /srv/upstream/build.py"


TOOLS = [
    {"name": "echo", "description": "Returns the text.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                     "required": ["text"]}},
    {"name": "slow", "description": "Reports progress every step, then answers.",
     "inputSchema": {"type": "object", "properties": {
         "steps": {"type": "integer"}, "step_ms": {"type": "integer"}}}},
    {"name": "ask", "description": "Asks its client to approve, then says what it heard.",
     "inputSchema": {"type": "object"}},
    {"name": "record", "description": "Records the call, then waits (not idempotent).",
     "inputSchema": {"type": "object", "properties": {
         "key": {"type": "string"}, "wait_ms": {"type": "integer"}}}},
    {"name": "lookup", "description": "Records the call, then waits (read-only).",
     "inputSchema": {"type": "object", "properties": {
         "key": {"type": "string"}, "wait_ms": {"type": "integer"}}},
     "annotations": {"readOnlyHint": True}},
    {"name": "crash", "description": "Exits the server at once.",
     "inputSchema": {"type": "object"}},
    {"name": "fail", "description": "Reports, logs and prints to stderr, then fails as "
     "`how` says: exit (status 3), hang (until cancelled), flood (an answer over 64 MiB) "
     "or refuse (a JSON-RPC -32602 error).",
     "inputSchema": {"type": "object", "properties": {"how": {"type": "string"}},
                     "required": ["how"]}},
    {"name": "grow", "description": "Adds the tool 'extra' and says the list changed.",
     "inputSchema": {"type": "object"}},
    {"name": "structured", "description": "Returns structured content.",
     "inputSchema": {"type": "object"},
     "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}},
                      "required": ["n"]}},
    {"name": "remember", "description": "Keeps a value in this session.",
     "inputSchema": {"type": "object", "properties": {"value": {"type": "string"}}}},
    {"name": "recall", "description": "Says what this session keeps.",
     "inputSchema": {"type": "object"}},
    {"name": "hidden_one", "description": "Excluded by the tests' filter.",
     "inputSchema": {"type": "object"}},
]


def run(request_id, name, arguments, meta):
    token = meta.get("progressToken")
    if name == "echo":
        return text(arguments.get("text", ""))
    if name == "slow":
        steps = arguments.get("steps", 5)
        for step in range(1, steps + 1):
            if request_id in cancelled:
                event("cancelled %s" % request_id)
                return None
            time.sleep(arguments.get("step_ms", 100) / 1000)
            log("info", "working on step %d" % step)
            if token is not None:
                send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
                    "progressToken": token, "progress": step, "total": steps,
                    "message": "step %d of %d" % (step, steps)}})
        if request_id in cancelled:
            event("cancelled %s" % request_id)
            return None
        return text("done after %d steps" % steps)
    if name == "ask":
        answer = ask("elicitation/create", {
            "message": "Approve?",
            "requestedSchema": {"type": "object",
                                "properties": {"ok": {"type": "boolean"}}}})
        return text("heard " + json.dumps(answer, sort_keys=True))
    if name in ("record", "lookup"):
        event("call %s %s" % (name, arguments.get("key", "")))
        time.sleep(arguments.get("wait_ms", 0) / 1000)
        return text("recorded")
    if name == "crash":
        event("crash")
        os._exit(3)
    if name == "fail":
        how = arguments.get("how")
        if how == "refuse":
            return {"error": {"code": -32602, "message": "how must be exit, hang or flood"}}
        if token is not None:
            send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {
                "progressToken": token, "progress": 4, "total": 10,
                "message": FAIL_STATUS}})
        log("error", FAIL_LOG)
        sys.stderr.write(FAIL_STDERR + "\n")
        sys.stderr.flush()
        event("fail %s" % how)
        if how == "exit":
            os._exit(3)
        if how == "hang":
            while request_id not in cancelled:
                time.sleep(0.05)
            event("cancelled %s" % request_id)
            return None
        if how == "flood":
            return text("x" * (65 * 1024 * 1024))
        return None
    if name == "grow":
        extra_tools.append({"name": "extra", "description": "Appeared later.",
                            "inputSchema": {"type": "object"}})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return text("grown")
    if name == "remember":
        memory["value"] = arguments.get("value", "")
        return text("kept")
    if name == "recall":
        return text(memory.get("value", "nothing"))
    if name == "extra":
        return text("extra")
    if name == "structured":
        return {"structuredContent": {"n": 7}}
    return None


def call(request_id, params):
    name = params.get("name")
    result = run(request_id, name, params.get("arguments") or {}, params.get("_meta") or {})
    if result is None and request_id in cancelled:
        return  # a cancelled request gets no response
    if result is None:
        send({"jsonrpc": "2.0", "id": request_id,
              "error": {"code": -32602, "message": "Unknown tool: %s" % name}})
        return
    if "error" in result:
        send({"jsonrpc": "2.0", "id": request_id, "error": result["error"]})
        return
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def main():
    event("start %d" % os.getpid())
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method = message.get("method")
        request_id = message.get("id")
        if method is None:
            entry = pending.get(request_id)
            if entry:
                entry[1].append(message.get("result", message.get("error")))
                entry[0].set()
            continue
        params = message.get("params") or {}
        if method == "initialize":
            event("initialize %s" % json.dumps(params.get("capabilities"), sort_keys=True))
            send({"jsonrpc": "2.0", "id": request_id, "result": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {"listChanged": True}, "resources": {},
                                 "prompts": {}},
                "serverInfo": {"name": "test-upstream", "version": "1"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id,
                  "result": {"tools": TOOLS + extra_tools}})
        elif method == "resources/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"resources": [
                {"uri": "note://readme", "name": "readme", "mimeType": "text/plain"}]}})
        elif method == "resources/templates/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"resourceTemplates": [
                {"uriTemplate": "note://items/{id}", "name": "item"}]}})
        elif method == "resources/read":
            uri = params.get("uri", "")
            if uri == "note://readme" or uri.startswith("note://items/"):
                send({"jsonrpc": "2.0", "id": request_id, "result": {"contents": [
                    {"uri": uri, "mimeType": "text/plain", "text": "text of " + uri}]}})
            else:
                send({"jsonrpc": "2.0", "id": request_id,
                      "error": {"code": -32002, "message": "Resource not found"}})
        elif method == "prompts/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"prompts": [
                {"name": "greet", "description": "Greets someone.",
                 "arguments": [{"name": "who", "required": True}]}]}})
        elif method == "prompts/get":
            who = (params.get("arguments") or {}).get("who", "")
            send({"jsonrpc": "2.0", "id": request_id, "result": {"messages": [
                {"role": "user", "content": {"type": "text", "text": "Hello, " + who}}]}})
        elif method == "tools/call":
            threading.Thread(target=call, args=(request_id, params), daemon=True).start()
        elif method == "notifications/cancelled":
            cancelled.add(params.get("requestId"))
            event("cancel-notice %s" % params.get("requestId"))
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        elif request_id is not None and not method.startswith("notifications/"):
            send({"jsonrpc": "2.0", "id": request_id,
                  "error": {"code": -32601, "message": "Method not found"}})
    event("stdin closed")


def serve_http(port_file):
    """`--http PORT_FILE`: the same server's `fail` and `echo` over Streamable HTTP
    (2025-11-25 sessions), where a call fails as an HTTP upstream's can: an SSE answer
    that carries a log message and then a message over 64 MiB (flood) or then breaks
    off as the server exits (exit), a JSON answer over 64 MiB (flood_json), an HTTP
    502 (status). Its port is written to PORT_FILE."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    tools = [tool for tool in TOOLS if tool["name"] in ("echo", "fail")]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def answer_json(self, message, headers=()):
            body = json.dumps(message).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def start_events(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()

        def event(self, message):
            self.wfile.write(("data: %s\n\n" % json.dumps(message)).encode())
            self.wfile.flush()

        def do_GET(self):
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_DELETE(self):
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            message = json.loads(self.rfile.read(length) or b"{}")
            method = message.get("method")
            request_id = message.get("id")
            params = message.get("params") or {}
            if request_id is None:
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if method == "initialize":
                event("initialize http")
                self.answer_json({"jsonrpc": "2.0", "id": request_id, "result": {
                    "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                    "serverInfo": {"name": "test-upstream-http", "version": "1"}}},
                    [("Mcp-Session-Id", "s-%d" % os.getpid())])
            elif method == "tools/list":
                self.answer_json({"jsonrpc": "2.0", "id": request_id,
                                  "result": {"tools": tools}})
            elif method == "ping":
                self.answer_json({"jsonrpc": "2.0", "id": request_id, "result": {}})
            elif method == "tools/call" and params.get("name") == "echo":
                text_ = (params.get("arguments") or {}).get("text", "")
                self.answer_json({"jsonrpc": "2.0", "id": request_id, "result": text(text_)})
            elif method == "tools/call" and params.get("name") == "fail":
                self.fail(request_id, (params.get("arguments") or {}).get("how"))
            else:
                self.answer_json({"jsonrpc": "2.0", "id": request_id, "error": {
                    "code": -32601, "message": "Method not found"}})

        def fail(self, request_id, how):
            event("fail %s" % how)
            if how == "status":
                body = b"bad gateway"
                self.send_response(502)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if how == "flood_json":
                self.answer_json({"jsonrpc": "2.0", "id": request_id,
                                  "result": text("x" * (65 * 1024 * 1024))})
                return
            self.start_events()
            self.event({"jsonrpc": "2.0", "method": "notifications/message",
                        "params": {"level": "error", "data": FAIL_LOG}})
            if how == "exit":
                os._exit(3)
            self.event({"jsonrpc": "2.0", "id": request_id,
                        "result": text("x" * (65 * 1024 * 1024))})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as out:
        out.write(str(server.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    event("start %d" % os.getpid())
    server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        serve_http(sys.argv[2])
    else:
        main()
