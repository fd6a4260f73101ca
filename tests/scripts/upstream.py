#!/usr/bin/env python3
"""A small stdio MCP server (2025-11-25, plain JSON-RPC, no SDK) for tests/upstreams.rs.

Its tools exercise what an upstream can do to mcp-taskd: report progress, ask its
client (elicitation), be cancelled, record each call it receives (so that a test can
count repeats after a kill -9), crash, and change its tool list. Every event the tests
look at is appended to $WORK/events.log as one line. Real upstream servers that no one
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


if __name__ == "__main__":
    main()
