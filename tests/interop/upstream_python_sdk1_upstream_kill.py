"""Python SDK `mcp` 1.x ClientSession (no tasks declared) while upstream processes die
(see .ci/interop.sh, run_upstream_driver): mcp-taskd restarts a killed upstream, and
- the next call to it succeeds (at once, or through the bridge's task handle if it met
  the dead process before mcp-taskd saw it die): server-filesystem and mcp-server-time
  are each kill -9'd between two calls (KILL_UPSTREAM: the harness kills the server's child
  process whose command line matches);
- a call in flight when its upstream dies is a task run again, as the tool is
  idempotent (readOnlyHint): server-everything's long-running operation (3 s) is
  followed through the bridge's handle to the upstream's result while the harness
  kill -9's the wiretap that holds it, about 1.5 s in.
Usage: python upstream_python_sdk1_upstream_kill.py URL (py1 venv)."""

import os
import sys
import time
import warnings

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

NAME = "upstream-upstream-kill9"
warnings.filterwarnings("ignore", category=DeprecationWarning)


def text(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


async def kill_upstream(pattern: str) -> None:
    """Has the harness kill -9 the upstream process whose command line matches."""
    print(f"KILL_UPSTREAM {pattern}", flush=True)
    answer = await anyio.to_thread.run_sync(sys.stdin.readline)
    pids = answer.split()[1:]
    assert answer.startswith("killed") and pids, f"no process matched {pattern!r}: {answer!r}"
    print(f"# killed {pattern}: {pids}", file=sys.stderr)


async def flow(url: str) -> None:
    with anyio.fail_after(30):
        await steps(url)


async def steps(url: str) -> None:
    files = os.environ["MCP_TASKD_UPSTREAM_FILES"]
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()

            async def call(tool: str, arguments: dict, when: str) -> types.CallToolResult:
                """The tool's result: answered at once, or after the bridge's handle (a
                call that met the dead process before mcp-taskd saw it die is a task
                run again, as these tools are idempotent)."""
                started = time.monotonic()
                answer = await session.call_tool(tool, arguments)
                while "taskId" in (answer.structuredContent or {}):
                    task_id = answer.structuredContent["taskId"]
                    answer = await session.call_tool("task_wait", {"taskId": task_id})
                assert not answer.isError, f"{tool} {when}: {answer}"
                print(f"# {tool} {when}: {time.monotonic() - started:.1f} s", file=sys.stderr)
                return answer

            async def listing(when: str) -> None:
                answer = await call("fs_list_directory", {"path": files}, when)
                assert "[FILE] hello.txt" in text(answer), f"fs_list_directory {when}: {answer}"

            async def clock(when: str) -> None:
                answer = await call("time_get_current_time", {"timezone": "UTC"}, when)
                assert (answer.structuredContent or {}).get("timezone") == "UTC", (
                    f"time_get_current_time {when}: {answer}"
                )

            await listing("before the kill")
            await kill_upstream("server-filesystem")
            await listing("after the filesystem server's kill -9")

            await clock("before the kill")
            await kill_upstream("mcp_server_time")
            await clock("after the time server's kill -9")

            started = time.monotonic()
            answer = await session.call_tool(
                "ev_trigger-long-running-operation", {"duration": 3, "steps": 3}
            )
            handle = answer.structuredContent or {}
            assert "taskId" in handle, f"expected a task handle: {answer}"
            await anyio.sleep(max(0.0, 1.5 - (time.monotonic() - started)))
            await kill_upstream("upstream_tap.py")
            while "taskId" in handle:
                print(f"# handle {handle['status']}: {handle.get('statusMessage')}", file=sys.stderr)
                answer = await session.call_tool("task_wait", {"taskId": handle["taskId"]})
                assert not answer.isError, f"task_wait: {answer}"
                handle = answer.structuredContent or {}
            took = time.monotonic() - started
            assert text(answer) == (
                "Long running operation completed. Duration: 3 seconds, Steps: 3."
            ), f"after the upstream's kill -9 mid-call: {answer}"
            # Killed 1.5 s into 3 s: only a second run can have answered.
            assert took >= 4.4, f"answered in {took:.1f} s: the call was not run again"
            print(f"# run again to completion in {took:.1f} s", file=sys.stderr)


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
