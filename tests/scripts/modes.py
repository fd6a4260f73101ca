#!/usr/bin/env python3
"""Test program for command tools: behaves as arguments["mode"] says.

Appends one line per run to $WORK/runs when WORK is set.
"""
import json
import os
import sys

request = json.load(sys.stdin)
arguments = request["arguments"]
mode = arguments.get("mode", "text")

work = os.environ.get("WORK")
if work:
    with open(os.path.join(work, "runs"), "a") as runs:
        runs.write(f"{os.environ.get('MCP_TASK_ID', '-')}:{os.environ.get('MCP_TASK_ATTEMPT', '-')}\n")


def emit(message):
    print(json.dumps(message), flush=True)


if mode == "text":
    print(f"hello {arguments.get('name', 'world')}")
    print("second line")
elif mode == "result":
    emit({"result": {"content": [{"type": "text", "text": "a JSON result"}]}})
elif mode == "tool_error":
    emit({"result": {"isError": True, "content": [{"type": "text", "text": "bad input: name is empty"}]}})
elif mode == "structured":
    emit({"result": {"structuredContent": {"count": 3, "label": "three"}}})
elif mode == "bad_structured":
    emit({"result": {"structuredContent": {"count": "not a number"}}})
elif mode == "rpc_error":
    emit({"error": {"code": -32602, "message": "the widget does not exist", "data": {"widget": 7}}})
elif mode == "crash":
    print("modes.py: simulated crash", file=sys.stderr)
    sys.exit(3)
elif mode == "malformed":
    emit({"result": "not an object"})
elif mode == "flood":
    sys.stdout.write("x" * 5000 + "\n")
elif mode == "env":
    names = ["PATH", "HOME", "CUSTOM", "MCP_TASK_ID", "MCP_TASK_ATTEMPT", "TRACEPARENT",
             "TRACESTATE"]
    emit({"result": {"content": [{"type": "text", "text": "env"}],
                     "structuredContent": {name: os.environ.get(name) for name in names}}})
elif mode == "ask":
    answer = request["inputResponses"].get("confirm")
    if answer is None:
        emit({"inputRequired": {
            "requests": {"confirm": {"method": "elicitation/create", "params": {
                "message": "Proceed?",
                "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}},
                                    "required": ["ok"]}}}},
            "state": {"round": 1, "note": "kept by the server"}}})
    else:
        state = request["state"]
        text = f"answer={answer['action']} ok={answer.get('content', {}).get('ok')} state={state['round']}:{state['note']}"
        emit({"result": {"content": [{"type": "text", "text": text}]}})
else:
    print(f"unknown mode {mode}", file=sys.stderr)
    sys.exit(2)
