#!/usr/bin/env python3
"""Test program for a task's output: prints as a build does, as arguments["mode"] says.

- "hold": a line to stderr, a progress line and a plain line to stdout, then touches
  $WORK/printed-<attempt> and waits for $WORK/go before its last line and result;
- "lines": `count` numbered lines of `width` bytes to stderr, then a result;
- "secrets": lines carrying tokens to stderr, then a result;
- "flood": `megabytes` MB of 100-byte lines to stderr as fast as it can, then a result;
- "fail": a line to stderr, then exits 2 without a result;
- "tail" (the dashboard's live tail): attempt 1 prints two lines to stderr and exits 2;
  a later attempt prints a line of markup to stderr and `count` (3) numbered lines to
  stdout, touches $WORK/printed-<attempt>, waits for $WORK/go, then prints `more` (3)
  numbered lines and "build finished" to stderr, and a result.
"""
import json
import os
import sys
import time

request = json.load(sys.stdin)
arguments = request["arguments"]
mode = arguments["mode"]
work = os.environ.get("WORK", ".")
attempt = os.environ.get("MCP_TASK_ATTEMPT", "0")


def result(text):
    print(json.dumps({"result": {"content": [{"type": "text", "text": text}]}}), flush=True)


if mode == "hold":
    print(f"compiling alpha (attempt {attempt})", file=sys.stderr, flush=True)
    print(json.dumps({"progress": 1, "total": 2, "message": "building"}), flush=True)
    print("linking beta", flush=True)
    open(os.path.join(work, f"printed-{attempt}"), "w").close()
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(work, "go")) and time.time() < deadline:
        time.sleep(0.02)
    print("done gamma", file=sys.stderr, flush=True)
    result("built")
elif mode == "lines":
    width = arguments.get("width", 20)
    for number in range(1, arguments["count"] + 1):
        print(f"line {number:06d} ".ljust(width, "."), file=sys.stderr)
    sys.stderr.flush()
    result("printed")
elif mode == "secrets":
    print("cloning with token ghp_abcdefgh12345678 into /src", file=sys.stderr)
    print("Authorization: Bearer eyJhbGciOi.payload.sig", file=sys.stderr)
    print("nothing secret here", file=sys.stderr, flush=True)
    result("cloned")
elif mode == "flood":
    line = b"x" * 99 + b"\n"
    chunk = line * 10_000
    for _ in range(arguments["megabytes"] * 1_000_000 // len(chunk)):
        os.write(2, chunk)
    result("flooded")
elif mode == "fail":
    print("error: disk quota exceeded on /var/build", file=sys.stderr, flush=True)
    sys.exit(2)
elif mode == "tail":
    if attempt == "1":
        print("fetching sources (attempt 1)", file=sys.stderr, flush=True)
        print("error: mirror unreachable", file=sys.stderr, flush=True)
        sys.exit(2)
    print('<img src=x onerror="document.title=\'injected\'"> stays text', file=sys.stderr, flush=True)
    for number in range(1, arguments.get("count", 3) + 1):
        print(f"step {number:03d} of the build", flush=True)
    open(os.path.join(work, f"printed-{attempt}"), "w").close()
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(work, "go")) and time.time() < deadline:
        time.sleep(0.02)
    for number in range(1, arguments.get("more", 3) + 1):
        print(f"finishing {number:03d}", file=sys.stderr)
    print("build finished", file=sys.stderr, flush=True)
    result("tailed")
else:
    print(f"unknown mode {mode}", file=sys.stderr)
    sys.exit(2)
