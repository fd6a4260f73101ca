"""Python SDK `mcp` 2.x high-level `Client` over stdio, launching `mcp-taskd stdio`.
Default mode "auto": probes `server/discover` and speaks 2026-07-28. tools/list, echo,
then generate_report without declaring the Tasks extension: its result, or a task handle
and then the result through task_wait.
Usage: python python_sdk2_client_stdio.py COMMAND [ARG...] (py2 venv), the command line
to launch (`mcp-taskd stdio --config FILE --data-dir DIR`, or `mcp-taskd stdio --connect
URL`). With MCP_TASKD_EXPECT_HANDLE=1 the call must answer a handle."""

import os
import sys

import anyio
from mcp import Client, StdioServerParameters

NAME = "python-sdk-2.x-client-relay" if "--connect" in sys.argv else "python-sdk-2.x-client-stdio"


async def flow(command: list[str]) -> None:
    with anyio.fail_after(30):
        await steps(command)


async def steps(command: list[str]) -> None:
    server = StdioServerParameters(command=command[0], args=command[1:])
    async with Client(server) as client:
        print(f"# negotiated {client.protocol_version}", file=sys.stderr)

        tools = await client.list_tools()
        names = {tool.name for tool in tools.tools}
        expected = {"echo", "generate_report", "task_status", "task_wait", "task_cancel"}
        assert expected <= names, f"tools/list: {sorted(names)}"

        echo = await client.call_tool("echo", {"text": "hello"})
        assert not echo.is_error and echo.content[0].text == "hello", f"echo: {echo}"

        answer = await client.call_tool("generate_report", {"topic": "stdio", "sections": 4})
        assert not answer.is_error, f"generate_report: {answer}"
        handle = answer.structured_content or {}
        if os.environ.get("MCP_TASKD_EXPECT_HANDLE") == "1":
            assert "taskId" in handle, f"expected a task handle: {answer}"
        while "taskId" in handle:
            print(f"# handle {handle['status']}: {handle['statusMessage']}", file=sys.stderr)
            assert "task_wait" in answer.content[0].text, f"handle text: {answer}"
            answer = await client.call_tool("task_wait", {"taskId": handle["taskId"]})
            assert not answer.is_error, f"task_wait: {answer}"
            handle = answer.structured_content or {}
        assert handle.get("topic") == "stdio", f"generate_report result: {answer}"
        assert len(handle.get("sections", [])) == 4, f"generate_report result: {answer}"


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
