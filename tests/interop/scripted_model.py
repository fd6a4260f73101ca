"""A scripted stand-in for a coding agent's model API, on loopback (issue 46).

Speaks the three dialects the hosts use, streaming (SSE) where the host asks for it:
  anthropic  POST .../v1/messages (Claude Code; ANTHROPIC_BASE_URL), count_tokens
  responses  POST .../responses (Codex CLI; a model provider's base_url, OpenAI Responses)
  gemini     POST .../models/M:streamGenerateContent?alt=sse and :generateContent,
             :countTokens (Gemini CLI; GOOGLE_GEMINI_BASE_URL)
Every request is recorded (path and JSON body; no headers, so no key) in `requests`, and
appended to a JSON Lines file when one is given. Each dialect turns a request into the
conversation so far, as a list of `Call(name, arguments, id)`, `Result(id, text,
is_error)` and `Note(text)` (a host's own task notification) in order, and asks the
scenario, a function of that list and the names of the tools on offer, what the model
does next: `Use(tool, arguments)` (a tool call, `tool` the MCP tool's own name, matched to
the host's qualified name), `Say(text)` (the final answer), or None. Requests without
tools (a title, a router's question) get a short answer, or one that fits the JSON schema
they ask for. Where a host defers MCP tools behind a search tool (Claude Code's
ToolSearch, Codex's client-side tool_search), the model searches for them first.
Standard library only.
"""

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Call:
    name: str
    arguments: dict
    id: str


@dataclass
class Result:
    id: str
    text: str
    is_error: bool = False
    raw: object = None


@dataclass
class Note:
    """A message of the host's own in the conversation, such as Claude Code's
    <task-notification> when a background task ends."""
    text: str


@dataclass
class Use:
    tool: str
    arguments: dict = field(default_factory=dict)


@dataclass
class Say:
    text: str


BASE_NAMES = {"echo", "generate_report", "approve_deployment", "noop_task", "task_status",
              "task_wait", "task_cancel", "run_migrations"}


def host_tool_name(tool, names):
    """The host's name for the MCP tool `tool` among `names` (e.g. mcp__mcp-taskd__echo,
    mcp-taskd__echo, mcp_mcp-taskd_echo or echo), or None."""
    if tool in names:
        return tool
    for name in names:
        if re.search(r"(^|[_.:-])" + re.escape(tool) + r"$", name) and re.search(
            r"taskd", name
        ):
            return name
    return None


def base_tool_name(name):
    """The MCP tool's own name in a host-qualified one (the part after the server's)."""
    match = re.search(r"taskd(?:__|_|\.|:)(.+)$", name)
    return match.group(1) if match else name


def text_of(value):
    """The text in a tool-result payload, as the model reads it: strings as they are,
    content blocks' text joined, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(text_of(item) for item in value)
    if isinstance(value, dict):
        if value.get("type") in ("text", "input_text", "output_text") and "text" in value:
            return value["text"]
        if set(value) == {"text"}:
            return value["text"]
    return json.dumps(value)


def filling(schema):
    """A small value that fits a (Gemini-style) JSON schema: the first enum value, or
    "user" when offered, 10 for numbers, and every property of an object."""
    kind = str(schema.get("type", "object")).lower()
    if schema.get("enum"):
        return "user" if "user" in schema["enum"] else schema["enum"][0]
    if kind == "object":
        return {key: filling(value) for key, value in (schema.get("properties") or {}).items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 10
    if kind == "boolean":
        return False
    return "Scripted."


class ScriptedModel:
    def __init__(self, scenario, record_path=None):
        self.scenario = scenario
        self.record_path = record_path
        self.requests = []
        self.lock = threading.Lock()
        self.listeners = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                model.record("GET", self.path, None)
                self.reply_json(404, {"error": {"message": "not here"}})

            def do_HEAD(self):
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else self.read_chunked()
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"unparsed": raw.decode("utf-8", "replace")}
                model.record("POST", self.path, body)
                try:
                    model.serve(self, self.path, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def read_chunked(self):
                if "chunked" not in (self.headers.get("Transfer-Encoding") or ""):
                    return b""
                data = b""
                while True:
                    size = int(self.rfile.readline().strip().split(b";")[0], 16)
                    if size == 0:
                        self.rfile.readline()
                        return data
                    data += self.rfile.read(size)
                    self.rfile.readline()

            def reply_json(self, status, value):
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def start_sse(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

            def sse(self, data, event=None):
                chunk = (f"event: {event}\n" if event else "") + f"data: {json.dumps(data)}\n\n"
                self.wfile.write(chunk.encode())
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def record(self, method, path, body):
        entry = {"t": time.time(), "method": method, "path": path, "body": body}
        with self.lock:
            self.requests.append(entry)
            if self.record_path:
                with open(self.record_path, "a") as out:
                    out.write(json.dumps(entry) + "\n")

    def on_answer(self, listener):
        """listener(history, tools, action) runs after each scripted answer is decided."""
        self.listeners.append(listener)

    def decide(self, history, tools):
        action = self.scenario(history, tools)
        for listener in self.listeners:
            listener(history, tools, action)
        return action

    # --- dialect dispatch -------------------------------------------------------------

    def serve(self, handler, path, body):
        route = path.split("?")[0]
        if route.endswith("/messages/count_tokens"):
            return handler.reply_json(200, {"input_tokens": 1000})
        if route.endswith("/messages"):
            return self.anthropic(handler, body)
        if route.endswith("/responses"):
            return self.responses(handler, body)
        if ":countTokens" in route:
            return handler.reply_json(200, {"totalTokens": 1000})
        if ":streamGenerateContent" in route or ":generateContent" in route:
            return self.gemini(handler, body, stream=":stream" in route)
        handler.reply_json(404, {"error": {"message": f"no {route} here"}})

    # --- Anthropic Messages (Claude Code) -----------------------------------------------

    def anthropic(self, handler, body):
        history = []
        for message in body.get("messages", []):
            content = message.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            if not isinstance(content, list):
                continue
            for block in content:
                if block.get("type") == "tool_use":
                    history.append(
                        Call(base_tool_name(block["name"]), block.get("input") or {}, block["id"])
                    )
                elif block.get("type") == "tool_result":
                    history.append(
                        Result(
                            block["tool_use_id"],
                            text_of(block.get("content")),
                            bool(block.get("is_error")),
                            block.get("content"),
                        )
                    )
                elif block.get("type") == "text" and "<task-notification>" in block.get("text", ""):
                    history.append(Note(block["text"]))
        tools = [tool.get("name", "") for tool in body.get("tools") or []]
        # Only the MCP server's tools are the scenario's business: a ToolSearch of the
        # host's own (below) and its result are left out of the history.
        ours = {c.id for c in history if isinstance(c, Call) and c.name in BASE_NAMES}
        history = [h for h in history if isinstance(h, Note) or h.id in ours]
        deferred = sorted(set(re.findall(r"mcp__[\w-]*taskd[\w-]*__\w+", json.dumps(body))))
        action = self.decide(history, sorted(set(tools) | set(deferred))) if tools else None
        blocks = []
        if (isinstance(action, Use) and not host_tool_name(action.tool, tools)
                and "ToolSearch" in tools and host_tool_name(action.tool, deferred)):
            # Claude Code defers MCP tools behind its ToolSearch tool: the model loads
            # their schemas first, as the system prompt tells it to.
            blocks.append(
                {
                    "type": "tool_use",
                    "id": "toolu_" + uuid.uuid4().hex[:24],
                    "name": "ToolSearch",
                    "input": {"query": "select:" + ",".join(deferred),
                              "max_results": len(deferred)},
                }
            )
            stop = "tool_use"
        elif isinstance(action, Use) and host_tool_name(action.tool, tools):
            blocks.append(
                {
                    "type": "tool_use",
                    "id": "toolu_" + uuid.uuid4().hex[:24],
                    "name": host_tool_name(action.tool, tools),
                    "input": action.arguments,
                }
            )
            stop = "tool_use"
        else:
            text = action.text if isinstance(action, Say) else "OK."
            if isinstance(action, Use):
                text = f"(the host offers no tool named {action.tool})"
            blocks.append({"type": "text", "text": text})
            stop = "end_turn"
        message = {
            "id": "msg_" + uuid.uuid4().hex[:24],
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "scripted"),
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        if not body.get("stream"):
            return handler.reply_json(200, message)
        handler.start_sse()
        start = dict(message, content=[], stop_reason=None)
        start["usage"] = {"input_tokens": 10, "output_tokens": 1}
        handler.sse({"type": "message_start", "message": start}, "message_start")
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                handler.sse(
                    {"type": "content_block_start", "index": index,
                     "content_block": {"type": "text", "text": ""}},
                    "content_block_start",
                )
                handler.sse(
                    {"type": "content_block_delta", "index": index,
                     "delta": {"type": "text_delta", "text": block["text"]}},
                    "content_block_delta",
                )
            else:
                handler.sse(
                    {"type": "content_block_start", "index": index,
                     "content_block": dict(block, input={})},
                    "content_block_start",
                )
                handler.sse(
                    {"type": "content_block_delta", "index": index,
                     "delta": {"type": "input_json_delta",
                               "partial_json": json.dumps(block["input"])}},
                    "content_block_delta",
                )
            handler.sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        handler.sse(
            {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
             "usage": {"output_tokens": 5}},
            "message_delta",
        )
        handler.sse({"type": "message_stop"}, "message_stop")

    # --- OpenAI Responses (Codex CLI) ---------------------------------------------------

    def responses(self, handler, body):
        history = []
        items = body.get("input")
        for item in items if isinstance(items, list) else []:
            kind = item.get("type")
            if kind == "function_call":
                try:
                    arguments = json.loads(item.get("arguments") or "{}")
                except ValueError:
                    arguments = {}
                history.append(Call(base_tool_name(item.get("name", "")), arguments,
                                    item.get("call_id")))
            elif kind == "function_call_output":
                output = item.get("output")
                is_error = False
                if isinstance(output, dict):
                    is_error = output.get("success") is False
                    output = output.get("content", output)
                history.append(Result(item.get("call_id"), text_of(output), is_error,
                                      item.get("output")))
        # Codex groups an MCP server's tools in a namespace (mcp__<server>), and a call
        # names the tool and its namespace apart. With a model that supports it, it defers
        # them behind its `tool_search` tool: they come in a tool_search_output.
        definitions = list(body.get("tools") or [])
        for item in items if isinstance(items, list) else []:
            if item.get("type") == "tool_search_output":
                definitions += item.get("tools") or []
        tools, namespaces = [], []
        for tool in definitions:
            if tool.get("type") == "function":
                tools.append(tool.get("name") or tool.get("function", {}).get("name", ""))
            elif tool.get("type") == "namespace":
                namespaces.append(tool.get("name", ""))
                for inner in tool.get("tools") or []:
                    tools.append(tool.get("name", "") + "__" + inner.get("name", ""))
        searchable = any(t.get("type") == "tool_search" for t in body.get("tools") or [])
        action = self.decide(history, tools + (["tool_search"] if searchable else [])) \
            if definitions else None
        response_id = "resp_" + uuid.uuid4().hex[:24]
        if isinstance(action, Use) and not host_tool_name(action.tool, tools) and searchable:
            item = {
                "type": "tool_search_call",
                "id": "ts_" + uuid.uuid4().hex[:24],
                "call_id": "search_" + uuid.uuid4().hex[:24],
                "status": "completed",
                "execution": "client",
                "arguments": {"query": "mcp-taskd " + " ".join(sorted(BASE_NAMES)), "limit": 20},
            }
        elif isinstance(action, Use) and host_tool_name(action.tool, tools):
            name = host_tool_name(action.tool, tools)
            item = {
                "type": "function_call",
                "id": "fc_" + uuid.uuid4().hex[:24],
                "call_id": "call_" + uuid.uuid4().hex[:24],
                "name": name,
                "arguments": json.dumps(action.arguments),
                "status": "completed",
            }
            for namespace in namespaces:
                if name.startswith(namespace + "__"):
                    item["namespace"] = namespace
                    item["name"] = name[len(namespace) + 2:]
        else:
            text = action.text if isinstance(action, Say) else "OK."
            if isinstance(action, Use):
                text = f"(the host offers no tool named {action.tool})"
            item = {
                "type": "message",
                "id": "msg_" + uuid.uuid4().hex[:24],
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        response = {
            "id": response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": body.get("model", "scripted"),
            "output": [item],
            "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": 15},
        }
        if not body.get("stream"):
            return handler.reply_json(200, response)
        handler.start_sse()
        created = dict(response, status="in_progress", output=[])
        handler.sse({"type": "response.created", "response": created}, "response.created")
        handler.sse({"type": "response.output_item.added", "output_index": 0, "item": item},
                    "response.output_item.added")
        if item["type"] == "message":
            handler.sse({"type": "response.output_text.delta", "item_id": item["id"],
                         "output_index": 0, "content_index": 0,
                         "delta": item["content"][0]["text"]},
                        "response.output_text.delta")
        handler.sse({"type": "response.output_item.done", "output_index": 0, "item": item},
                    "response.output_item.done")
        handler.sse({"type": "response.completed", "response": response}, "response.completed")

    # --- Gemini generateContent (Gemini CLI) --------------------------------------------

    def gemini(self, handler, body, stream):
        history = []
        pending = []
        for content in body.get("contents") or []:
            for part in content.get("parts") or []:
                if "functionCall" in part:
                    call = part["functionCall"]
                    call_id = call.get("id") or f"{call.get('name')}#{len(history)}"
                    history.append(Call(base_tool_name(call.get("name", "")),
                                        call.get("args") or {}, call_id))
                    pending.append(history[-1])
                elif "functionResponse" in part:
                    response = part["functionResponse"]
                    call_id = response.get("id")
                    if not call_id:
                        match = [c for c in pending if c.name == base_tool_name(response.get("name", ""))]
                        call_id = match[0].id if match else response.get("name")
                    pending = [c for c in pending if c.id != call_id]
                    payload = response.get("response")
                    is_error = isinstance(payload, dict) and "error" in payload and len(payload) == 1
                    if isinstance(payload, dict) and set(payload) <= {"output", "content", "error"}:
                        inner = payload.get("output", payload.get("content", payload.get("error")))
                    else:
                        inner = payload
                    history.append(Result(call_id, text_of(inner), is_error, payload))
        tools = []
        for group in body.get("tools") or []:
            for declaration in group.get("functionDeclarations") or []:
                tools.append(declaration.get("name", ""))
        action = self.decide(history, tools) if tools else None
        if isinstance(action, Use) and host_tool_name(action.tool, tools):
            parts = [{"functionCall": {"name": host_tool_name(action.tool, tools),
                                       "args": action.arguments}}]
        else:
            text = action.text if isinstance(action, Say) else "OK."
            if isinstance(action, Use):
                text = f"(the host offers no tool named {action.tool})"
            config = body.get("generationConfig") or {}
            schema = config.get("responseJsonSchema") or config.get("responseSchema")
            if not tools and schema:
                # a structured side question of the host's own (which model to route
                # to, who speaks next): an answer that fits its schema
                text = json.dumps(filling(schema))
            parts = [{"text": text}]
        answer = {
            "candidates": [{"content": {"role": "model", "parts": parts},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                              "totalTokenCount": 15},
            "modelVersion": "scripted",
        }
        if not stream:
            return handler.reply_json(200, answer)
        handler.start_sse()
        handler.sse(answer)
