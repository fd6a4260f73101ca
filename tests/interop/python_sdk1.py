"""Python SDK `mcp` 1.x (legacy era, 2025-11-25): initialize, tools/list, echo, then
generate_report as a 2025-11-25 task through the SDK's experimental tasks API, polled to
its result, and the task's output read as a resource (resources/templates/list names
mcp-taskd://tasks/{taskId}/output; resources/read gives its progress lines, then nothing
new from the URI its answer names next); then generate_report as a plain call_tool (no tasks declared): its result, or
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

            # The task's output, as a resource of this session.
            templates = await session.list_resource_templates()
            listed = [t.uriTemplate for t in templates.resourceTemplates]
            assert "mcp-taskd://tasks/{taskId}/output" in listed, f"templates: {listed}"
            read = await session.read_resource(f"mcp-taskd://tasks/{task_id}/output")
            output = read.contents[0]
            assert "Writing section 1 of 2" in output.text, f"output: {output}"
            follow = (output.meta or {}).get("dev.mcp-taskd/output", {})
            assert follow.get("final") is True, f"output meta: {output.meta}"
            again = await session.read_resource(follow["next"])
            assert again.contents[0].text == "", f"after the last line: {again}"

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
