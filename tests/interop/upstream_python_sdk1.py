"""Python SDK `mcp` 1.x ClientSession (legacy era, no tasks declared) against upstream MCP
servers that no one here wrote, behind mcp-taskd's [[upstreams]] (see .ci/interop.sh):
- tools/list shows the prefixed tools of server-everything (ev_), of its second instance
  limited by `include` (once_), of server-filesystem (fs_) and of mcp-server-time (time_);
- fs_list_directory and fs_read_text_file read the folder the harness filled;
  time_get_current_time answers the time now in the zone asked; ev_get-structured-content
  answers structuredContent that the SDK checks against the listed outputSchema;
- server-everything's long-running operation (10 s) outlives this session's 5 s read
  timeout through the bridge: the plain call answers a task handle after the 1 s inline
  wait, followed with task_wait to the upstream's result, its progress in statusMessage;
- its elicitation and sampling tools, as plain calls: mcp-taskd puts the upstream's
  question to this client (elicitation_callback, sampling_callback) and the upstream's
  result shows the answers;
- time_convert_time, whose outputSchema holds `$defs` that its `$ref`s point to: the SDK
  resolves them to check the result.
Usage: python upstream_python_sdk1.py URL (py1 venv; MCP_TASKD_UPSTREAM_FILES is the
folder the filesystem server was given)."""

import os
import re
import sys
import time
import warnings
from datetime import datetime, timedelta, timezone

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

NAME = "upstream-python-sdk-1.x"
warnings.filterwarnings("ignore", category=DeprecationWarning)

ANSWER_NAME = "Ada Lovelace (interop)"
SAMPLED = "forty-two, says the interop client"
asked: list[str] = []


async def elicit(context, params: types.ElicitRequestParams) -> types.ElicitResult:
    asked.append(f"elicitation: {params.message}")
    assert "name" in params.requestedSchema["properties"], f"elicitation schema: {params}"
    return types.ElicitResult(action="accept", content={"name": ANSWER_NAME, "check": True})


async def sample(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    asked.append(f"sampling: {params.messages[0].content.text}")
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=SAMPLED),
        model="interop-model",
        stopReason="endTurn",
    )


async def flow(url: str) -> None:
    with anyio.fail_after(30):
        await steps(url)


def text(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


async def follow(session: ClientSession, answer: types.CallToolResult, seen: list[str]):
    """Follows a bridged task handle with task_wait to the tool's own result."""
    handle = answer.structuredContent or {}
    while "taskId" in handle:
        seen.append(handle.get("statusMessage") or "")
        print(f"# handle {handle['status']}: {handle.get('statusMessage')}", file=sys.stderr)
        answer = await session.call_tool("task_wait", {"taskId": handle["taskId"]})
        assert not answer.isError, f"task_wait: {answer}"
        handle = answer.structuredContent or {}
    return answer


async def steps(url: str) -> None:
    files = os.environ["MCP_TASKD_UPSTREAM_FILES"]
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(
            read,
            write,
            read_timeout_seconds=timedelta(seconds=5),
            elicitation_callback=elicit,
            sampling_callback=sample,
        ) as session:
            await session.initialize()

            tools = await session.list_tools()
            names = {tool.name for tool in tools.tools}
            wanted = {
                "ev_trigger-long-running-operation",
                "ev_trigger-elicitation-request",
                "ev_trigger-sampling-request",
                "ev_get-structured-content",
                "once_trigger-long-running-operation",
                "fs_list_directory",
                "fs_read_text_file",
                "time_get_current_time",
                "time_convert_time",
            }
            assert wanted <= names, f"tools/list lacks {sorted(wanted - names)}: {sorted(names)}"
            once = sorted(name for name in names if name.startswith("once_"))
            assert once == ["once_trigger-long-running-operation"], f"include of once: {once}"

            listing = await session.call_tool("fs_list_directory", {"path": files})
            assert not listing.isError, f"fs_list_directory: {listing}"
            assert "[FILE] hello.txt" in text(listing), f"fs_list_directory: {listing}"
            assert "[DIR] notes" in text(listing), f"fs_list_directory: {listing}"
            content = await session.call_tool(
                "fs_read_text_file", {"path": os.path.join(files, "hello.txt")}
            )
            assert text(content).strip() == "written by interop.sh", f"fs_read_text_file: {content}"
            outside = await session.call_tool("fs_list_directory", {"path": "/etc"})
            assert outside.isError, f"fs_list_directory outside its folder: {outside}"

            now = await session.call_tool("time_get_current_time", {"timezone": "Asia/Tokyo"})
            assert not now.isError, f"time_get_current_time: {now}"
            clock = now.structuredContent or {}
            assert clock.get("timezone") == "Asia/Tokyo", f"time_get_current_time: {now}"
            stamp = datetime.fromisoformat(clock["datetime"])
            assert stamp.utcoffset() == timedelta(hours=9), f"time_get_current_time: {now}"
            drift = abs((stamp - datetime.now(timezone.utc)).total_seconds())
            assert drift < 300, f"time_get_current_time is {drift} s off: {now}"

            weather = await session.call_tool("ev_get-structured-content", {"location": "Chicago"})
            assert not weather.isError, f"ev_get-structured-content: {weather}"
            assert weather.structuredContent == {
                "temperature": 36,
                "conditions": "Light rain / drizzle",
                "humidity": 82,
            }, f"ev_get-structured-content: {weather}"

            # 10 s upstream, a 5 s read timeout here: only the bridge's handle gets it through.
            started = time.monotonic()
            answer = await session.call_tool(
                "ev_trigger-long-running-operation", {"duration": 10, "steps": 5}
            )
            assert not answer.isError, f"long-running operation: {answer}"
            assert "taskId" in (answer.structuredContent or {}), f"expected a task handle: {answer}"
            seen: list[str] = []
            answer = await follow(session, answer, seen)
            took = time.monotonic() - started
            assert not answer.isError, f"long-running operation: {answer}"
            assert text(answer) == (
                "Long running operation completed. Duration: 10 seconds, Steps: 5."
            ), f"long-running operation: {answer}"
            assert took >= 9.5, f"the 10 s operation answered in {took:.1f} s"
            progress = [message for message in seen if re.fullmatch(r"[1-4]/5", message)]
            assert progress, f"no upstream progress in statusMessage: {seen}"
            print(f"# long-running operation: {took:.1f} s, statusMessages {seen}", file=sys.stderr)

            # The upstream's elicitation/create reaches this client as mcp-taskd's own.
            answer = await follow(
                session, await session.call_tool("ev_trigger-elicitation-request", {}), []
            )
            assert not answer.isError, f"elicitation tool: {answer}"
            assert f"- Name: {ANSWER_NAME}" in text(answer), f"elicitation tool: {answer}"
            assert "- Agreed to terms: true" in text(answer), f"elicitation tool: {answer}"
            assert any(a.startswith("elicitation") for a in asked), f"never asked: {asked}"

            answer = await follow(
                session,
                await session.call_tool("ev_trigger-sampling-request", {"prompt": "six times seven"}),
                [],
            )
            assert not answer.isError, f"sampling tool: {answer}"
            assert SAMPLED in text(answer), f"sampling tool: {answer}"
            assert "interop-model" in text(answer), f"sampling tool: {answer}"
            assert any("six times seven" in a for a in asked), f"sampling never asked: {asked}"

            # An outputSchema with $defs (pydantic's, for nested models), which the SDK
            # resolves to check the result.
            converted = await session.call_tool(
                "time_convert_time",
                {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
            )
            assert not converted.isError, f"time_convert_time: {converted}"
            target = (converted.structuredContent or {}).get("target") or {}
            assert target.get("datetime", "").endswith("T21:00:00+09:00"), f"time_convert_time: {converted}"


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
