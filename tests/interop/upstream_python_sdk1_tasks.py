"""Python SDK `mcp` 1.x with its experimental tasks API (2025-11-25 tasks:
session.experimental.call_tool_as_task, get_task, cancel_task, get_task_result) against
server-everything behind mcp-taskd's [[upstreams]] (see .ci/interop.sh):
- its long-running operation as a task, its progress in statusMessage; tasks/cancel ends
  it `cancelled` at once, and the upstream is sent notifications/cancelled for that very
  tools/call (read from the harness's wiretap log, MCP_TASKD_UPSTREAM_TAP);
- its elicitation tool as a task: the task goes input_required, tasks/result puts the
  upstream's question to this client (elicitation_callback), the upstream's result shows
  the answer and the task completes; the same for its sampling tool (sampling_callback);
- get-structured-content as a task: the upstream's structuredContent comes back;
- simulate-research-query, which the upstream serves only as a task (2025-11-25 tasks):
  mcp-taskd calls it as one (the wiretap shows the task-augmented tools/call and the
  tasks/result that follows it), the upstream task's status messages become ours, its
  question reaches this client through our task, and its report shows the answer.
Usage: python upstream_python_sdk1_tasks.py URL (py1 venv)."""

import os
import re
import sys
import warnings

import anyio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

NAME = "upstream-python-sdk-1.x-tasks"
warnings.filterwarnings("ignore", category=DeprecationWarning)

ANSWER_NAME = "Grace Hopper (tasks)"
SAMPLED = "a sampled answer for a task"
INTERPRETATION = "programming"
asked: list[str] = []


async def elicit(context, params: types.ElicitRequestParams) -> types.ElicitResult:
    asked.append(f"elicitation: {params.message}")
    if "interpretation" in params.requestedSchema.get("properties", {}):
        return types.ElicitResult(action="accept", content={"interpretation": INTERPRETATION})
    return types.ElicitResult(action="accept", content={"name": ANSWER_NAME, "check": False})


async def sample(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    asked.append(f"sampling: {params.messages[0].content.text}")
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=SAMPLED),
        model="interop-model",
        stopReason="endTurn",
    )


def text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def tap() -> list[list[str]]:
    with open(os.environ["MCP_TASKD_UPSTREAM_TAP"]) as log:
        return [line.split() for line in log]


async def flow(url: str) -> None:
    with anyio.fail_after(60):
        await steps(url)


async def until(session: ClientSession, task_id: str, done, what: str, limit: float = 10):
    """Polls tasks/get (every 100 ms) until done(task); the last task seen."""
    with anyio.fail_after(limit):
        while True:
            task = await session.experimental.get_task(task_id)
            if done(task):
                return task
            assert task.status not in ("completed", "failed", "cancelled"), (
                f"waiting for {what}, the task ended {task.status}: {task.statusMessage}"
            )
            await anyio.sleep(0.1)


async def answered(session: ClientSession, tool: str, arguments: dict) -> CallToolResult:
    """Runs tool as a task that asks this client something, to its result."""
    created = await session.experimental.call_tool_as_task(tool, arguments)
    task_id = created.task.taskId
    task = await until(session, task_id, lambda t: t.status == "input_required", "input_required")
    print(f"# {tool}: {task.status} {task.statusMessage}", file=sys.stderr)
    # tasks/result: mcp-taskd asks on this request's stream, the callback answers.
    result = await session.experimental.get_task_result(task_id, CallToolResult)
    final = await session.experimental.get_task(task_id)
    assert final.status == "completed", f"{tool}: the task ended {final.status}: {final.statusMessage}"
    return result


async def steps(url: str) -> None:
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(
            read, write, elicitation_callback=elicit, sampling_callback=sample
        ) as session:
            await session.initialize()

            # Cancel: the task ends cancelled, and the upstream hears of it.
            created = await session.experimental.call_tool_as_task(
                "ev_trigger-long-running-operation", {"duration": 20, "steps": 20}
            )
            task_id = created.task.taskId
            task = await until(
                session,
                task_id,
                lambda t: re.fullmatch(r"\d+/20", t.statusMessage or "") is not None,
                "progress in statusMessage",
            )
            print(f"# long-running operation: {task.status} {task.statusMessage}", file=sys.stderr)
            calls = [
                line[2]
                for line in tap()
                if line[:2] == [">", "tools/call"] and line[3:] == ["trigger-long-running-operation"]
            ]
            assert calls, "the wiretap saw no tools/call of trigger-long-running-operation"
            call_id = calls[-1]
            await session.experimental.cancel_task(task_id)
            with anyio.fail_after(3):
                while (task := await session.experimental.get_task(task_id)).status != "cancelled":
                    assert task.status == "working", f"cancelled task: {task.status} {task.statusMessage}"
                    await anyio.sleep(0.1)
            with anyio.fail_after(3):
                while not any(
                    line[:2] == [">", "notifications/cancelled"] and line[3:4] == [call_id]
                    for line in tap()
                ):
                    await anyio.sleep(0.1)
            await anyio.sleep(1)
            task = await session.experimental.get_task(task_id)
            assert task.status == "cancelled", f"after cancel: {task.status} {task.statusMessage}"

            result = await answered(session, "ev_trigger-elicitation-request", {})
            assert not result.isError, f"elicitation task: {result}"
            assert f"- Name: {ANSWER_NAME}" in text(result), f"elicitation task: {result}"
            assert "- Agreed to terms: false" in text(result), f"elicitation task: {result}"
            assert any(a.startswith("elicitation") for a in asked), f"never asked: {asked}"

            result = await answered(
                session, "ev_trigger-sampling-request", {"prompt": "a question from a task"}
            )
            assert not result.isError, f"sampling task: {result}"
            assert SAMPLED in text(result), f"sampling task: {result}"
            assert any("a question from a task" in a for a in asked), f"never sampled: {asked}"

            created = await session.experimental.call_tool_as_task(
                "ev_get-structured-content", {"location": "Los Angeles"}
            )
            async for status in session.experimental.poll_task(created.task.taskId):
                pass
            assert status.status == "completed", f"structured task: {status.status}"
            result = await session.experimental.get_task_result(created.task.taskId, CallToolResult)
            assert result.structuredContent == {
                "temperature": 73,
                "conditions": "Sunny / Clear",
                "humidity": 48,
            }, f"structured task: {result}"

            # A tool the upstream serves only as a task: mcp-taskd follows the upstream's task.
            created = await session.experimental.call_tool_as_task(
                "ev_simulate-research-query", {"topic": "python", "ambiguous": True}
            )
            task_id = created.task.taskId
            messages: list[str] = []

            def asking(task) -> bool:
                if task.statusMessage and task.statusMessage not in messages:
                    messages.append(task.statusMessage)
                return task.status == "input_required"

            task = await until(session, task_id, asking, "the research's question", limit=20)
            stages = [m for m in messages if m.endswith("...")]
            assert stages, f"the upstream task's status messages never became ours: {messages}"
            print(f"# research: {task.status} after {stages}", file=sys.stderr)
            result = await session.experimental.get_task_result(task_id, CallToolResult)
            assert not result.isError, f"research task: {result}"
            assert f"python ({INTERPRETATION})" in text(result), f"research task: {text(result)[:200]}"
            related = (result.meta or {}).get("io.modelcontextprotocol/related-task")
            assert related in (None, {"taskId": task_id}), f"another task's id in the result: {related}"
            sent = [line for line in tap() if line[:2] == [">", "tools/call"] and line[3:4] == ["simulate-research-query"]]
            assert sent and sent[-1][4:] == ["task"], f"not called as a task: {sent}"
            assert any(line[:2] == [">", "tasks/result"] for line in tap()), "no tasks/result was sent upstream"


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
