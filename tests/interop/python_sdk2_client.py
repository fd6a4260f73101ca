"""Python SDK `mcp` 2.x high-level `Client(url)`, default mode "auto": probes
`server/discover` and speaks 2026-07-28 to a server that offers it (else falls back to the
legacy handshake). tools/list and echo, then generate_report without declaring tasks:
its result, or a task handle and then the result through task_wait. Usage: python
python_sdk2_client.py URL (py2 venv). With MCP_TASKD_EXPECT_HANDLE=1 the call must answer
a handle."""

import os
import sys

import anyio
from mcp import Client

NAME = "python-sdk-2.x-client"


async def flow(url: str) -> None:
    with anyio.fail_after(30):
        await steps(url)


async def steps(url: str) -> None:
    async with Client(url) as client:
        print(f"# negotiated {client.protocol_version}", file=sys.stderr)

        tools = await client.list_tools()
        names = {tool.name for tool in tools.tools}
        assert "echo" in names, f"tools/list: {sorted(names)}"

        echo = await client.call_tool("echo", {"text": "hello"})
        assert not echo.is_error and echo.content[0].text == "hello", f"echo: {echo}"

        answer = await client.call_tool("generate_report", {"topic": "plain", "sections": 4})
        assert not answer.is_error, f"generate_report: {answer}"
        handle = answer.structured_content or {}
        if os.environ.get("MCP_TASKD_EXPECT_HANDLE") == "1":
            assert "taskId" in handle, f"expected a task handle: {answer}"
        while "taskId" in handle:
            print(f"# handle {handle['status']}: {handle['statusMessage']}", file=sys.stderr)
            answer = await client.call_tool("task_wait", {"taskId": handle["taskId"]})
            assert not answer.is_error, f"task_wait: {answer}"
            handle = answer.structured_content or {}
        assert handle.get("topic") == "plain", f"generate_report result: {answer}"


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
