"""Python SDK `mcp` 1.x ClientSession (no tasks declared) across a kill -9 of mcp-taskd
during two upstream calls (see .ci/interop.sh, run_upstream_driver):
- ev_trigger-long-running-operation: idempotent (server-everything annotates it
  readOnlyHint and idempotentHint), so it is run again after the restart and completes;
- once_trigger-long-running-operation: the same upstream tool, marked
  `idempotent = false` in [upstreams.tools]: its task fails with a message saying the
  call was interrupted and not repeated.
Both are started as plain calls (each answers a task handle after the 1 s inline wait),
both are seen in flight at their upstream (progress in statusMessage), then KILL9: the
harness kill -9's the server, checks that its upstream processes died with it and
restarts it on the same port and data dir. Then, on the same ClientSession: task_wait
for both tasks.
Usage: python upstream_python_sdk1_kill9.py URL (py1 venv)."""

import re
import sys
import time
import warnings

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

NAME = "upstream-server-kill9"
warnings.filterwarnings("ignore", category=DeprecationWarning)


def text(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


async def flow(url: str) -> None:
    with anyio.fail_after(45):
        await steps(url)


async def steps(url: str) -> None:
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            arguments = {"duration": 6, "steps": 6}
            handles = {}
            for tool in ("ev_trigger-long-running-operation", "once_trigger-long-running-operation"):
                answer = await session.call_tool(tool, arguments)
                handle = answer.structuredContent or {}
                assert "taskId" in handle, f"{tool}: expected a task handle: {answer}"
                handles[tool] = handle["taskId"]
            # Both calls in flight at their upstreams: their progress is in statusMessage.
            with anyio.fail_after(8):
                for tool, task_id in handles.items():
                    while True:
                        answer = await session.call_tool("task_status", {"taskId": task_id})
                        status = answer.structuredContent or {}
                        assert status.get("status") == "working", f"{tool} before the kill: {answer}"
                        if re.fullmatch(r"\d/6", status.get("statusMessage") or ""):
                            break
                        await anyio.sleep(0.2)

            print("KILL9", flush=True)
            answer = await anyio.to_thread.run_sync(sys.stdin.readline)
            assert answer.startswith("go"), f"the harness answered {answer!r}"
            survivors = answer.split()[1:]
            restarted = time.monotonic()

            # A task handle's own tool, on the same session after the restart.
            results = {}
            for tool, task_id in handles.items():
                while True:
                    answer = await session.call_tool("task_wait", {"taskId": task_id})
                    handle = answer.structuredContent or {}
                    if answer.isError or "taskId" not in handle:
                        results[tool] = answer
                        break
                    print(f"# {tool}: {handle['status']} {handle.get('statusMessage')}", file=sys.stderr)
            took = time.monotonic() - restarted

            done = results["ev_trigger-long-running-operation"]
            assert not done.isError and text(done) == (
                "Long running operation completed. Duration: 6 seconds, Steps: 6."
            ), f"the idempotent call after the kill -9: {done}"
            print(f"# the idempotent call completed {took:.1f} s after the restart", file=sys.stderr)

            failed = results["once_trigger-long-running-operation"]
            message = text(failed)
            assert failed.isError, f"the call that is not idempotent after the kill -9: {failed}"
            assert "interrupted" in message and "not repeated" in message, (
                f"the call that is not idempotent after the kill -9: {message}"
            )
            print(f"# the call that is not idempotent: {message}", file=sys.stderr)
            assert not survivors, f"upstream processes outlived mcp-taskd's kill -9: {survivors}"


def main() -> int:
    try:
        anyio.run(flow, sys.argv[1])
    except BaseException as error:  # a timeout, an assertion, or the SDK's own error group
        print(f"FAIL {NAME}: {describe(error)}")
        return 1
    print(f"PASS {NAME}")
    return 0


def describe(error: BaseException) -> str:
    """The innermost cause, on one line: SDK failures arrive wrapped in exception groups."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}".replace("\n", " ")[:300]


if __name__ == "__main__":
    sys.exit(main())
