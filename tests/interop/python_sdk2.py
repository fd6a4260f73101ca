"""Python SDK `mcp` 2.x with `ClientSession.initialize()`: the legacy handshake (2025-11-25),
then tools/list and echo. Usage: python python_sdk2.py URL (py2 venv of .ci/interop-setup.sh)."""

import sys

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

NAME = "python-sdk-2.x"


async def flow(url: str) -> None:
    with anyio.fail_after(30):
        await steps(url)


async def steps(url: str) -> None:
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            print(f"# negotiated {init.protocol_version}", file=sys.stderr)

            tools = await session.list_tools()
            names = {tool.name for tool in tools.tools}
            assert "echo" in names, f"tools/list: {sorted(names)}"

            echo = await session.call_tool("echo", {"text": "hello"})
            assert not echo.is_error and echo.content[0].text == "hello", f"echo: {echo}"


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
