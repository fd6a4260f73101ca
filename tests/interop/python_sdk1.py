"""Python SDK `mcp` 1.x (legacy era, 2025-11-25): initialize, tools/list, echo, then
generate_report as a 2025-11-25 task through the SDK's experimental tasks API, polled to
its result; then generate_report as a plain call_tool (no tasks declared): its result, or
a task handle (which must pass the SDK's outputSchema check) and then the result through
task_wait. Usage: python python_sdk1.py URL (with the py1 venv of .ci/interop-setup.sh).
With MCP_TASKD_EXPECT_HANDLE=1 the plain call must answer a handle."""

import os
import sys
import warnings

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

NAME = "python-sdk-1.x"
# 1.x marks its tasks API deprecated (tasks move to an extension in 2.x); it still works.
warnings.filterwarnings("ignore", category=DeprecationWarning)


async def flow(url: str) -> None:
    with anyio.fail_after(30):
        await steps(url)


async def steps(url: str) -> None:
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            print(f"# negotiated {init.protocolVersion}", file=sys.stderr)

            tools = await session.list_tools()
            names = {tool.name for tool in tools.tools}
            assert {"echo", "generate_report"} <= names, f"tools/list: {sorted(names)}"

            echo = await session.call_tool("echo", {"text": "hello"})
            assert not echo.isError and echo.content[0].text == "hello", f"echo: {echo}"

            created = await session.experimental.call_tool_as_task(
                "generate_report", {"topic": "interop", "sections": 2}
            )
            task_id = created.task.taskId
            async for status in session.experimental.poll_task(task_id):
                print(f"# task {status.status}: {status.statusMessage}", file=sys.stderr)
            assert status.status == "completed", f"task ended {status.status}: {status.statusMessage}"
            report = await session.experimental.get_task_result(task_id, CallToolResult)
            assert not report.isError, f"task result: {report}"
            assert report.structuredContent["topic"] == "interop", f"task result: {report}"

            # The same tool for a client that does not speak tasks: the SDK checks every
            # answer against the listed outputSchema (the handle included).
            answer = await session.call_tool("generate_report", {"topic": "plain", "sections": 4})
            assert not answer.isError, f"plain call: {answer}"
            handle = answer.structuredContent or {}
            if os.environ.get("MCP_TASKD_EXPECT_HANDLE") == "1":
                assert "taskId" in handle, f"expected a task handle: {answer}"
            while "taskId" in handle:
                print(f"# handle {handle['status']}: {handle['statusMessage']}", file=sys.stderr)
                assert "task_wait" in answer.content[0].text, f"handle text: {answer}"
                answer = await session.call_tool("task_wait", {"taskId": handle["taskId"]})
                assert not answer.isError, f"task_wait: {answer}"
                handle = answer.structuredContent or {}
            assert handle.get("topic") == "plain", f"plain result: {answer}"


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
