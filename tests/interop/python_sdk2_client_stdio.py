"""Python SDK `mcp` 2.x high-level `Client` over stdio, launching `mcp-taskd stdio`.
Default mode "auto": probes `server/discover` and speaks 2026-07-28. tools/list, echo,
and generate_report, a task tool answered inline to a client without the Tasks extension.
Usage: python python_sdk2_client_stdio.py COMMAND [ARG...] (py2 venv), the command line
to launch (`mcp-taskd stdio --data-dir DIR`, or `mcp-taskd stdio --connect URL`)."""

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
        assert {"echo", "generate_report"} <= names, f"tools/list: {sorted(names)}"

        echo = await client.call_tool("echo", {"text": "hello"})
        assert not echo.is_error and echo.content[0].text == "hello", f"echo: {echo}"

        report = await client.call_tool("generate_report", {"topic": "interop", "sections": 1})
        assert not report.is_error, f"generate_report: {report}"
        assert report.structured_content["topic"] == "interop", f"generate_report: {report}"


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
