#!/usr/bin/env python3
"""Test program for flow control: a deploy to arguments["environment"].

Touches $WORK/started-<task id>-<attempt> when it starts, then runs for
arguments["seconds"] (default 0), or, with arguments["hold"], until $WORK/go exists
(at most 60 s); then answers which environment it deployed to.
"""
import json
import os
import sys
import time

request = json.load(sys.stdin)
arguments = request["arguments"]
work = os.environ.get("WORK", ".")
task = os.environ.get("MCP_TASK_ID", "inline")
attempt = os.environ.get("MCP_TASK_ATTEMPT", "0")
open(os.path.join(work, f"started-{task}-{attempt}"), "w").close()
if arguments.get("hold"):
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(work, "go")) and time.time() < deadline:
        time.sleep(0.02)
else:
    time.sleep(arguments.get("seconds", 0))
environment = arguments.get("environment", "")
print(json.dumps({"result": {"content": [{"type": "text", "text": f"deployed to {environment}"}]}}))
