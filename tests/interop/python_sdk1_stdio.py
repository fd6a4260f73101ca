"""Python SDK `mcp` 1.x `stdio_client` launching `mcp-taskd stdio` (legacy era,
2025-11-25), as a desktop host does: initialize, tools/list, echo, and generate_report,
a task tool that a client not asking for a task gets answered inline.
Usage: python python_sdk1_stdio.py COMMAND [ARG...] (py1 venv of .ci/interop-setup.sh),
the command line the host launches: `mcp-taskd stdio --data-dir DIR`, or
`mcp-taskd stdio --connect URL` for the relay."""

import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

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
            assert {"echo", "generate_report"} <= names, f"tools/list: {sorted(names)}"

            echo = await session.call_tool("echo", {"text": "hello"})
            assert not echo.isError and echo.content[0].text == "hello", f"echo: {echo}"

            report = await session.call_tool("generate_report", {"topic": "interop", "sections": 1})
            assert not report.isError, f"generate_report: {report}"
            assert report.structuredContent["topic"] == "interop", f"generate_report: {report}"


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
