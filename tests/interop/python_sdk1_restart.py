"""Python SDK `mcp` 1.x across a restart of the server (issue 28): initialize, start
generate_report as a plain call_tool (after the 1 s inline wait it answers a task
handle), then print RESTART and wait for a line on stdin while the harness restarts the
server (SIGTERM, then the same port and data dir, as `systemctl restart` does); then, on
the same ClientSession: echo, and task_wait for the task started before the restart.
Usage: python python_sdk1_restart.py URL (with the py1 venv of .ci/interop-setup.sh)."""

import sys
import warnings

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

NAME = "python-sdk-1.x-restart"
warnings.filterwarnings("ignore", category=DeprecationWarning)


async def flow(url: str) -> None:
    with anyio.fail_after(45):
        await steps(url)


async def steps(url: str) -> None:
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            answer = await session.call_tool("generate_report", {"topic": "restart", "sections": 4})
            handle = answer.structuredContent or {}
            assert "taskId" in handle, f"expected a task handle: {answer}"

            print("RESTART", flush=True)
            await anyio.to_thread.run_sync(sys.stdin.readline)

            echo = await session.call_tool("echo", {"text": "after the restart"})
            assert not echo.isError and echo.content[0].text == "after the restart", f"echo: {echo}"
            while "taskId" in handle:
                answer = await session.call_tool("task_wait", {"taskId": handle["taskId"]})
                assert not answer.isError, f"task_wait: {answer}"
                handle = answer.structuredContent or {}
            assert handle.get("topic") == "restart", f"result: {answer}"


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
