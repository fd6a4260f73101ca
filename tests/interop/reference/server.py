"""A known-good legacy-era MCP server, built on the Python SDK 1.x, for checking the drivers.

It is not mcp-taskd: it exists so that a driver in tests/interop/ can be proven right on its
own (`.ci/interop.sh --reference`), whatever era mcp-taskd speaks. It serves the same demo
tools the drivers call, with the same schemas as mcp-taskd's `demo` set: `echo` (inline) and
`generate_report` (2025-11-25 task support "optional", the SDK's in-memory task store).
Stateful Streamable HTTP (sessions, GET stream), the SDK's defaults.

Run with the py1 venv of .ci/interop-setup.sh; `--trace` logs each HTTP request a client
makes (method, MCP headers, JSON-RPC methods) to stderr. Prints
`reference listening on http://127.0.0.1:PORT/mcp` on its first line, like mcp-taskd.
"""

import contextlib
import json
import socket
import sys
import warnings
from collections.abc import AsyncIterator

import anyio
import mcp.types as types
import uvicorn
from mcp.server.experimental.task_context import ServerTaskContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.routing import Route

# The 1.x SDK marks its tasks API deprecated (tasks leave the core protocol after 2025-11-25).
warnings.filterwarnings("ignore", category=DeprecationWarning)
server = Server("interop-reference")
server.experimental.enable_tasks()

TOOLS = [
    types.Tool(
        name="echo",
        description="Returns the given text unchanged.",
        inputSchema={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="generate_report",
        description="Writes a short report on a topic, one section at a time.",
        inputSchema={
            "type": "object",
            "properties": {
                "topic": {"type": "string"},
                "sections": {"type": "integer", "minimum": 1, "maximum": 10, "default": 4},
            },
            "required": ["topic"],
            "additionalProperties": False,
        },
        outputSchema={
            "type": "object",
            "properties": {
                "topic": {"type": "string"},
                "sections": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["topic", "sections"],
        },
        execution=types.ToolExecution(taskSupport=types.TASK_OPTIONAL),
    ),
]


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    return TOOLS


def report(topic: str, count: int) -> types.CallToolResult:
    sections = [f"{index + 1}. Section on {topic}" for index in range(count)]
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="\n".join([f"Report: {topic}", *sections]))],
        structuredContent={"topic": topic, "sections": sections},
    )


@server.call_tool()
async def call_tool(name: str, arguments: dict) -> types.CallToolResult | types.CreateTaskResult:
    if name == "echo":
        return types.CallToolResult(content=[types.TextContent(type="text", text=arguments["text"])])
    if name != "generate_report":
        raise ValueError(f"unknown tool {name}")
    topic, count = arguments["topic"], int(arguments.get("sections", 4))
    context = server.request_context
    if not context.experimental.is_task:
        return report(topic, count)

    async def work(task: ServerTaskContext) -> types.CallToolResult:
        for index in range(count):
            await task.update_status(f"Writing section {index + 1} of {count}")
            await anyio.sleep(0.3)
        return report(topic, count)

    # A client may omit the ttl (the TypeScript SDK 1.x does). The SDK's store then keeps
    # ttl=None, which the SDK serializes by leaving `ttl` out, though the 2025-11-25 schema
    # requires it (`number | null`) and the TypeScript client rejects the task without it.
    if context.experimental.task_metadata.ttl is None:
        context.experimental.task_metadata.ttl = 60_000
    return await context.experimental.run_task(work)


async def traced(scope, receive):
    """Logs what a client sends (HTTP method, MCP headers, JSON-RPC methods, the version an
    `initialize` asks for) to stderr, and returns a `receive` that replays the body read."""
    messages, more = [], True
    while more:
        messages.append(await receive())
        more = messages[-1].get("more_body", False)
    body = b"".join(message.get("body", b"") for message in messages)
    headers = {key.decode(): value.decode() for key, value in scope["headers"]}
    shown = {key: value for key, value in headers.items() if key.startswith("mcp-") or key == "accept"}
    if "mcp-session-id" in shown:
        shown["mcp-session-id"] = "(set)"
    try:
        payload = json.loads(body) if body else []
    except ValueError:
        payload = []
    items = [item for item in (payload if isinstance(payload, list) else [payload]) if isinstance(item, dict)]
    line = f"trace {scope['method']} {[item.get('method', '(response)') for item in items]} {shown}"
    for item in items:
        if item.get("method") == "initialize":
            line += f" initialize.protocolVersion={item.get('params', {}).get('protocolVersion')}"
    print(line, file=sys.stderr, flush=True)

    async def replay():
        return messages.pop(0) if messages else await receive()

    return replay


def main() -> None:
    trace = "--trace" in sys.argv[1:]
    manager = StreamableHTTPSessionManager(app=server)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    class Endpoint:
        # A class instance, so Starlette hands it the raw ASGI call: /mcp, no redirect to /mcp/.
        async def __call__(self, scope, receive, send) -> None:
            if trace:
                receive = await traced(scope, receive)
            await manager.handle_request(scope, receive, send)

    route = Route("/mcp", endpoint=Endpoint(), methods=["GET", "POST", "DELETE"])
    app = Starlette(routes=[route], lifespan=lifespan)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    print(f"reference listening on http://127.0.0.1:{listener.getsockname()[1]}/mcp", flush=True)
    config = uvicorn.Config(app, log_level="warning")
    uvicorn.Server(config).run(sockets=[listener])


if __name__ == "__main__":
    sys.exit(main())
