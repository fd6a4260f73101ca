"""Python SDK `mcp` 2.x high-level `Client(url)`, default mode "auto": probes
`server/discover` and speaks 2026-07-28 to a server that offers it (else falls back to the
legacy handshake). tools/list and echo, then generate_report without declaring tasks:
its result, or a task handle and then the result through task_wait; with a handle, the
task's output is followed as a resource (resources/read of
mcp-taskd://tasks/{taskId}/output, then of the URI each answer names next, until it is
final), and holds every section's progress line once. Usage: python
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
        task_id = handle.get("taskId")
        while "taskId" in handle:
            print(f"# handle {handle['status']}: {handle['statusMessage']}", file=sys.stderr)
            answer = await client.call_tool("task_wait", {"taskId": handle["taskId"]})
            assert not answer.is_error, f"task_wait: {answer}"
            handle = answer.structured_content or {}
        assert handle.get("topic") == "plain", f"generate_report result: {answer}"
        if task_id:
            await follow_output(client, task_id)


async def follow_output(client: Client, task_id: str) -> None:
    """Reads the task's output from the start, page after page, until it is final."""
    uri, text = f"mcp-taskd://tasks/{task_id}/output", ""
    for _ in range(100):
        read = await client.read_resource(uri)
        output = read.contents[0]
        text += output.text
        follow = (output.meta or {}).get("dev.mcp-taskd/output", {})
        if follow.get("final"):
            break
        uri = follow["next"]
    else:
        raise AssertionError(f"the output never became final: {text!r}")
    for section in range(1, 5):
        line = f"Writing section {section} of 4"
        assert text.count(line) == 1, f"{line!r} not once in the output: {text!r}"


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
