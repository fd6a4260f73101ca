"""A wiretap between mcp-taskd and an upstream stdio MCP server, for the interop run.

Usage (as an [[upstreams]] command): python upstream_tap.py LOG PROGRAM ARG...

Runs PROGRAM with its arguments, relays its stdin and stdout line by line unchanged
(its stderr is inherited) and appends one line per JSON-RPC message to LOG:
`> method id` for what mcp-taskd sent, `< method id` for what the upstream sent
(`-` for a missing method or id), plus the `requestId` of `notifications/cancelled`
and the tool name of `tools/call` (then `task` when it asks for a task).
This is how a driver sees what reached a server that does not show it itself, e.g.
that our cancel became the upstream's notifications/cancelled for the right request.
Exits when the upstream's stdout closes (so a killed upstream ends the session), with
its exit status."""

import json
import subprocess
import sys
import threading


def describe(line: bytes) -> str:
    try:
        message = json.loads(line)
    except ValueError:
        return "? ?"
    if not isinstance(message, dict):
        return "? ?"
    method = message.get("method", "-")
    words = [str(method), json.dumps(message.get("id", "-"))]
    params = message.get("params") or {}
    if method == "notifications/cancelled":
        words.append(json.dumps(params.get("requestId")))
    elif method == "tools/call":
        words.append(str(params.get("name")))
        if params.get("task") is not None:
            words.append("task")
    return " ".join(words)


def main() -> int:
    log_path, program = sys.argv[1], sys.argv[2:]
    log = open(log_path, "a", buffering=1)
    lock = threading.Lock()

    def record(direction: str, line: bytes) -> None:
        with lock:
            log.write(f"{direction} {describe(line)}\n")

    child = subprocess.Popen(program, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def downstream() -> None:
        try:
            for line in sys.stdin.buffer:
                record(">", line)
                child.stdin.write(line)
                child.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass
        try:
            child.stdin.close()
        except (BrokenPipeError, ValueError):
            pass

    threading.Thread(target=downstream, daemon=True).start()
    out = sys.stdout.buffer
    for line in child.stdout:
        record("<", line)
        try:
            out.write(line)
            out.flush()
        except BrokenPipeError:
            break
    child.stdout.close()
    try:
        return child.wait(timeout=5)
    except subprocess.TimeoutExpired:
        child.kill()
        return child.wait()


if __name__ == "__main__":
    sys.exit(main())
