"""Python SDK `mcp` 1.x `stdio_client` launching `mcp-taskd stdio` (legacy era,
2025-11-25), as a desktop host does: initialize, tools/list, echo, then generate_report
called plainly (no tasks declared): its result, or a task handle (text naming task_wait,
structuredContent passing the SDK's outputSchema check) and then the result through
task_wait.
Usage: python python_sdk1_stdio.py COMMAND [ARG...] (py1 venv of .ci/interop-setup.sh),
the command line the host launches: `mcp-taskd stdio --config FILE --data-dir DIR`, or
`mcp-taskd stdio --connect URL` for the relay. With MCP_TASKD_EXPECT_HANDLE=1 (a config
whose inline wait is shorter than the report) the call must answer a handle. Through the
relay, a direct HTTP client of the same identity (anonymous) finds the task too."""

import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

NAME = "python-sdk-1.x-relay" if "--connect" in sys.argv else "python-sdk-1.x-stdio"


async def flow(command: list[str]) -> None:
    with anyio.fail_after(30):
        await steps(command)


async def steps(command: list[str]) -> None:
    server = StdioServerParameters(command=command[0], args=command[1:])
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            print(f"# negotiated {init.protocolVersion}", file=sys.stderr)

            tools = await session.list_tools()
            names = {tool.name for tool in tools.tools}
            expected = {"echo", "generate_report", "task_status", "task_wait", "task_cancel"}
            assert expected <= names, f"tools/list: {sorted(names)}"

            echo = await session.call_tool("echo", {"text": "hello"})
            assert not echo.isError and echo.content[0].text == "hello", f"echo: {echo}"

            # The SDK checks every answer against the listed outputSchema, handle included.
            answer = await session.call_tool("generate_report", {"topic": "stdio", "sections": 4})
            assert not answer.isError, f"generate_report: {answer}"
            handle = answer.structuredContent or {}
            if os.environ.get("MCP_TASKD_EXPECT_HANDLE") == "1":
                assert "taskId" in handle, f"expected a task handle: {answer}"
            if "--connect" in command and "taskId" in handle:
                await found_directly(command[command.index("--connect") + 1], handle["taskId"])
            while "taskId" in handle:
                print(f"# handle {handle['status']}: {handle['statusMessage']}", file=sys.stderr)
                assert "task_wait" in answer.content[0].text, f"handle text: {answer}"
                answer = await session.call_tool("task_wait", {"taskId": handle["taskId"]})
                assert not answer.isError, f"task_wait: {answer}"
                handle = answer.structuredContent or {}
            assert handle.get("topic") == "stdio", f"generate_report result: {answer}"
            assert len(handle.get("sections", [])) == 4, f"generate_report result: {answer}"


async def found_directly(url: str, task_id: str) -> None:
    """The relay shares the server's tasks: a direct HTTP client sees the relayed task."""
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            status = await session.call_tool("task_status", {"taskId": task_id})
            assert not status.isError, f"task_status over HTTP: {status}"
            assert (status.structuredContent or {}).get("taskId", task_id) == task_id, (
                f"task_status over HTTP: {status}"
            )
            print("# the relayed task is found over HTTP", file=sys.stderr)


def main() -> int:
    try:
        anyio.run(flow, sys.argv[1:])
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
