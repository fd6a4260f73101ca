"""Clients of both protocol eras for the fault soak (faults.py) and the partition test
(partitions.py), and the ledger of what each of them saw.

Every client speaks raw HTTP/1.1 (http.client, one keep-alive connection per node), as
benches/restart.py and tests/interop do, and records in the `Ledger`:

- each task it was *acknowledged* (a creation answered with a task id): its tool, mode,
  what it should end as, and every observation of it afterwards — the source
  (`create`, `get`, `result`, `listen`), when the request was sent and when its answer
  came, the status, and a digest of the result or error when the answer carried one;
- requests that failed, by reason (a refused connection, a 503, a timeout …): not
  acknowledged, so not the checker's business, but counted.

Clients:

- `ModernClient` (2026-07-28, stateless, declares the Tasks extension): keeps a few
  tasks in flight, polls them with tasks/get, answers input requests with tasks/update,
  cancels some, and makes inline calls (echo, greet, an inline command tool) whose
  answers must be right;
- `LegacyClient` (2025-11-25 session): initialize, tools/call with `task`, tasks/get,
  tasks/result once terminal, tasks/cancel, inline echo in the session;
- `Listener`: creates a few tasks and follows them on a subscriptions/listen stream
  (notifications/tasks), reopening it (and reading each task once) when it breaks.

A client follows the nodes it is given: a request that cannot reach one node goes to
the next (as a client behind a load balancer would be sent elsewhere).
"""

import hashlib
import http.client
import json
import random
import socket
import threading
import time

VERSION = "2026-07-28"
LEGACY = "2025-11-25"
TASKS_EXT = "io.modelcontextprotocol/tasks"
TASK_CAPS = {"elicitation": {"form": {}}, "extensions": {TASKS_EXT: {}}}
TERMINAL = ("completed", "failed", "cancelled")
REQUEST_TIMEOUT = 20.0


def now():
    return time.monotonic()


def result_digest(result):
    """What must never change about a completed task's result: its content, isError
    and structuredContent (not the envelope's resultType or _meta)."""
    if not isinstance(result, dict):
        return None
    core = {
        "content": result.get("content"),
        "isError": bool(result.get("isError")),
        "structured": result.get("structuredContent"),
    }
    return hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()[:16]


def error_digest(error):
    if not isinstance(error, dict):
        return None
    core = {"code": error.get("code"), "message": error.get("message")}
    return hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()[:16]


def result_text(result):
    try:
        return "".join(block.get("text", "") for block in result.get("content", []))
    except (AttributeError, TypeError):
        return ""


class Node:
    """An HTTP endpoint of a server (one node)."""

    def __init__(self, name, host, port):
        self.name, self.host, self.port = name, host, port

    def __repr__(self):
        return f"{self.name}@{self.host}:{self.port}"


class Obs:
    __slots__ = ("source", "sent", "received", "status", "digest", "stream", "node")

    def __init__(self, source, sent, received, status, digest=None, stream=None, node=None):
        self.source, self.sent, self.received = source, sent, received
        self.status, self.digest, self.stream, self.node = status, digest, stream, node


class Task:
    """An acknowledged task and everything its clients saw of it."""

    def __init__(self, task_id, tool, mode, era, client, expect, marker, max_attempts):
        self.id = task_id
        self.tool, self.mode, self.era, self.client = tool, mode, era, client
        # "complete": should complete (unless every attempt is cut short, or cancelled);
        # "fail": must never complete; "error": completes with isError.
        self.expect = expect
        self.marker = marker  # text its completed result must contain
        self.max_attempts = max_attempts
        self.obs = []
        self.cancel_sent = False
        self.answered = False
        self.created = now()

    def last_status(self):
        return self.obs[-1].status if self.obs else None

    def terminal(self):
        return any(o.status in TERMINAL for o in self.obs)


class Ledger:
    def __init__(self):
        self.lock = threading.Lock()
        self.tasks = {}
        self.failures = {}  # reason -> count (requests not acknowledged)
        self.inline = {"ok": 0, "failed": 0, "wrong": 0}
        self.wrong_inline = []
        self.requests = 0

    def add(self, task):
        with self.lock:
            self.tasks[task.id] = task

    def observe(self, task, obs):
        with self.lock:
            task.obs.append(obs)

    def failed(self, reason):
        with self.lock:
            self.failures[reason] = self.failures.get(reason, 0) + 1

    def count_request(self):
        with self.lock:
            self.requests += 1

    def inline_answer(self, ok, wrong_detail=None):
        with self.lock:
            if wrong_detail is not None:
                self.inline["wrong"] += 1
                if len(self.wrong_inline) < 20:
                    self.wrong_inline.append(wrong_detail)
            elif ok:
                self.inline["ok"] += 1
            else:
                self.inline["failed"] += 1


class RequestFailed(Exception):
    """A request that got no usable answer: not acknowledged."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


def parse_answer(response, data, rid):
    """The JSON-RPC answer with id `rid` in a JSON or SSE body."""
    text = data.decode("utf-8", "replace")
    ctype = (response.getheader("Content-Type") or "").lower()
    if "text/event-stream" in ctype or text.startswith("event:") or text.startswith("data:"):
        found = None
        for line in text.splitlines():
            if line.startswith("data:"):
                try:
                    message = json.loads(line[5:].strip())
                except ValueError:
                    continue
                if message.get("id") == rid:
                    found = message
        if found is None:
            raise RequestFailed("sse without answer")
        return found
    try:
        return json.loads(text)
    except ValueError:
        raise RequestFailed(f"HTTP {response.status} not JSON") from None


class Http:
    """Keep-alive connections to the nodes, one each, with fail-over between them."""

    def __init__(self, nodes, home=0, timeout=REQUEST_TIMEOUT):
        self.nodes = nodes
        self.home = home % len(nodes)
        self.timeout = timeout
        self.conns = {}
        self.rid = 0
        self.turn = 0

    def pick(self, node=None):
        if node is not None:
            return node
        return self.nodes[(self.home + self.turn) % len(self.nodes)]

    def close(self, node):
        conn = self.conns.pop(node.name, None)
        if conn is not None:
            conn.close()

    def close_all(self):
        for node in list(self.nodes):
            self.close(node)

    def post(self, body, headers, node=None):
        """Sends `body`; returns (node, http status, response headers, answer). Raises
        RequestFailed when no answer came (the next request tries the next node)."""
        node = self.pick(node)
        conn = self.conns.get(node.name)
        if conn is None:
            conn = http.client.HTTPConnection(node.host, node.port, timeout=self.timeout)
            self.conns[node.name] = conn
        try:
            conn.request("POST", "/mcp", json.dumps(body), headers)
            response = conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as error:
            self.close(node)
            self.turn += 1
            if isinstance(error, socket.timeout):
                raise RequestFailed("timeout") from None
            if isinstance(error, ConnectionRefusedError):
                raise RequestFailed("connection refused") from None
            raise RequestFailed(type(error).__name__) from None
        if (response.getheader("Connection") or "").lower() == "close":
            self.close(node)
        if response.status in (502, 503, 504):
            # The clear "try again": this node cannot serve now; maybe another can.
            self.turn += 1
            raise RequestFailed(f"HTTP {response.status}")
        if response.status != 200:
            raise RequestFailed(f"HTTP {response.status}")
        return node, response.status, response, parse_answer(response, data, body.get("id"))

    def next_id(self):
        self.rid += 1
        return self.rid

    def modern(self, method, params, caps=None, name=None, node=None):
        rid = self.next_id()
        params = dict(params)
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": TASK_CAPS if caps is None else caps,
        }
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": VERSION,
            "Mcp-Method": method,
        }
        if name:
            headers["Mcp-Name"] = name
        body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        return self.post(body, headers, node)


def rpc_result(answer):
    """The answer's result, or RequestFailed naming its JSON-RPC error."""
    if "error" in answer:
        error = answer["error"]
        raise RequestFailed(f"error {error.get('code')}")
    return answer.get("result", {})


def modern_obs(task, source, sent, node, result):
    status = result.get("status")
    digest = None
    if status == "completed":
        digest = result_digest(result.get("result"))
    elif status == "failed":
        digest = error_digest(result.get("error"))
    return Obs(source, sent, now(), status, digest, node=node.name)


# What a client creates: (weight, tool, mode, arguments builder, expect, marker kind,
# max_attempts). The marker kinds: "label" (the label argument), "task" (the task id),
# "text" (a fixed text), None.
def _slow(rng, label):
    return {"seconds": round(rng.uniform(0.2, 3.0), 2), "label": label}


def _cmd(mode, seconds=(0.2, 2.0), lines=0):
    def build(rng, label):
        args = {"mode": mode, "seconds": round(rng.uniform(*seconds), 2), "tag": label}
        if lines:
            args["lines"] = lines
        return args

    return build


MODERN_MIX = [
    (5, "slow_compute", "slow", _slow, "complete", "label", 3),
    (2, "soak_cmd", "ok", _cmd("ok"), "complete", "task", 3),
    (1, "soak_cmd", "print", _cmd("print", (0.2, 1.0), lines=200), "complete", "task", 3),
    (1, "soak_cmd", "crash_once", _cmd("crash_once"), "complete", "task", 3),
    (1, "soak_cmd", "hang_once", _cmd("hang_once"), "complete", "task", 3),
    (0.4, "soak_cmd", "crash", _cmd("crash"), "fail", None, 3),
    (0.2, "soak_cmd", "hang", _cmd("hang"), "fail", None, 3),
    (2, "approval_then_work", "input",
     lambda rng, label: {"prepare_seconds": 0.1, "work_seconds": round(rng.uniform(0.2, 1.5), 2)},
     "complete", "text:approved=true", 3),
    (1, "confirm_delete", "input", lambda rng, label: {"filename": f"{label}.txt"},
     "complete", "label", 3),
    (0.7, "failing_job", "tool_error", lambda rng, label: {}, "error", "text:input data is invalid", 3),
    (0.4, "always_panics", "panic", lambda rng, label: {}, "fail", None, 3),
    (0.3, "stubborn_sleep", "stubborn", lambda rng, label: {"seconds": 0.3}, "any", None, 2),
]

LEGACY_MIX = [
    (4, "slow_compute", "slow", _slow, "complete", "label", 3),
    (2, "soak_cmd", "ok", _cmd("ok"), "complete", "task", 3),
    (1, "soak_cmd", "crash_once", _cmd("crash_once"), "complete", "task", 3),
    (0.3, "soak_cmd", "crash", _cmd("crash"), "fail", None, 3),
    (0.7, "failing_job", "tool_error", lambda rng, label: {}, "error", "text:input data is invalid", 3),
]


def choose(rng, mix):
    total = sum(entry[0] for entry in mix)
    pick = rng.uniform(0, total)
    for entry in mix:
        pick -= entry[0]
        if pick <= 0:
            return entry
    return mix[-1]


def marker_of(kind, label):
    if kind is None:
        return None
    if kind == "label":
        return label
    if kind.startswith("text:"):
        return kind[5:]
    return "task"  # resolved to "task=<id>" once the id is known


class Base(threading.Thread):
    def __init__(self, name, nodes, ledger, rng, control, home=0, timeout=REQUEST_TIMEOUT):
        super().__init__(name=name, daemon=True)
        self.ledger, self.rng, self.control = ledger, rng, control
        self.http = Http(nodes, home, timeout)
        self.label_seq = 0

    def label(self):
        self.label_seq += 1
        return f"{self.name}-{self.label_seq}-{self.rng.randrange(1 << 30):x}"

    def pause(self, seconds):
        self.control.stop.wait(seconds)


class Control:
    """Shared switches: `active` (create new work) ends, then `stop` (give up)."""

    def __init__(self):
        self.draining = threading.Event()
        self.stop = threading.Event()


class ModernClient(Base):
    """2026-07-28 client with the Tasks extension: tasks in flight, polls, answers,
    cancels, plus inline calls."""

    def __init__(self, *args, inflight=3, cancel_rate=0.12, inline_rate=0.3, **kw):
        super().__init__(*args, **kw)
        self.inflight_max = inflight
        self.cancel_rate = cancel_rate
        self.inline_rate = inline_rate
        self.mine = []  # [task, next poll time, cancel at or None]

    def create(self):
        entry = choose(self.rng, MODERN_MIX)
        _, tool, mode, build, expect, marker_kind, max_attempts = entry
        label = self.label()
        args = build(self.rng, label)
        sent = now()
        self.ledger.count_request()
        try:
            node, _, _, answer = self.http.modern(
                "tools/call", {"name": tool, "arguments": args}, name=tool)
            result = rpc_result(answer)
        except RequestFailed as failure:
            self.ledger.failed(f"create: {failure.reason}")
            return False
        task_id = result.get("taskId")
        if result.get("resultType") != "task" or not task_id:
            self.ledger.failed("create: not a task")
            return False
        marker = marker_of(marker_kind, label)
        if marker == "task":
            marker = f"task={task_id}"
        task = Task(task_id, tool, mode, "2026", self.name, expect, marker, max_attempts)
        self.ledger.add(task)
        self.ledger.observe(task, modern_obs(task, "create", sent, node, result))
        cancel_at = None
        if self.rng.random() < self.cancel_rate:
            cancel_at = now() + self.rng.uniform(0.05, 2.5)
        self.mine.append([task, now() + 0.2, cancel_at])
        return True

    def poll(self, slot):
        task, _, cancel_at = slot
        sent = now()
        self.ledger.count_request()
        try:
            node, _, _, answer = self.http.modern("tasks/get", {"taskId": task.id}, name=task.id)
            result = rpc_result(answer)
        except RequestFailed as failure:
            self.ledger.failed(f"get: {failure.reason}")
            slot[1] = now() + 0.5
            return
        obs = modern_obs(task, "get", sent, node, result)
        self.ledger.observe(task, obs)
        if obs.status == "input_required" and result.get("inputRequests"):
            self.answer(task, result["inputRequests"])
        if cancel_at is not None and now() >= cancel_at and obs.status not in TERMINAL:
            self.cancel(task)
            slot[2] = None
        slot[1] = now() + self.rng.uniform(0.15, 0.6)

    def answer(self, task, requests):
        responses = {}
        for key, request in requests.items():
            schema = (request.get("params") or {}).get("requestedSchema") or {}
            props = schema.get("properties") or {}
            content = {}
            for prop, spec in props.items():
                content[prop] = True if spec.get("type") == "boolean" else "soak"
            responses[key] = {"action": "accept", "content": content}
        self.ledger.count_request()
        try:
            _, _, _, answer = self.http.modern(
                "tasks/update", {"taskId": task.id, "inputResponses": responses}, name=task.id)
            rpc_result(answer)
            task.answered = True
        except RequestFailed as failure:
            self.ledger.failed(f"update: {failure.reason}")

    def cancel(self, task):
        task.cancel_sent = True  # sent: whether it lands or not, cancelled is legitimate
        self.ledger.count_request()
        try:
            _, _, _, answer = self.http.modern("tasks/cancel", {"taskId": task.id}, name=task.id)
            rpc_result(answer)
        except RequestFailed as failure:
            self.ledger.failed(f"cancel: {failure.reason}")

    def inline(self):
        which = self.rng.random()
        text = self.label()
        self.ledger.count_request()
        try:
            if which < 0.5:
                _, _, _, answer = self.http.modern(
                    "tools/call", {"name": "echo", "arguments": {"text": text}}, caps={}, name="echo")
                want = text
            elif which < 0.8:
                _, _, _, answer = self.http.modern(
                    "tools/call", {"name": "greet", "arguments": {"name": text}}, caps={}, name="greet")
                want = f"Hello, {text}!"
            else:
                _, _, _, answer = self.http.modern(
                    "tools/call", {"name": "soak_inline", "arguments": {"mode": "ok", "seconds": 0}},
                    caps={}, name="soak_inline")
                want = "ok task=inline"
            result = rpc_result(answer)
        except RequestFailed as failure:
            self.ledger.failed(f"inline: {failure.reason}")
            self.ledger.inline_answer(False)
            return
        got = result_text(result)
        if result.get("isError"):
            # A command tool whose program was killed answers isError inline: no retry.
            self.ledger.inline_answer(False)
        elif want not in got:
            self.ledger.inline_answer(False, f"{want!r} -> {got[:200]!r}")
        else:
            self.ledger.inline_answer(True)

    def run(self):
        while not self.control.stop.is_set():
            draining = self.control.draining.is_set()
            if draining and not self.mine:
                break
            if not draining and len(self.mine) < self.inflight_max:
                if not self.create():
                    self.pause(0.3)
            if not draining and self.rng.random() < self.inline_rate:
                self.inline()
            t = now()
            for slot in list(self.mine):
                if slot[1] <= t:
                    self.poll(slot)
                    if slot[0].last_status() in TERMINAL:
                        self.mine.remove(slot)
            self.pause(0.05)
        self.http.close_all()


class LegacyClient(Base):
    """2025-11-25 session client: task-augmented tools/call, tasks/get, tasks/result,
    tasks/cancel, inline echo."""

    CAPS = {"elicitation": {}, "tasks": {"requests": {"elicitation": {"create": {}}}}}

    def __init__(self, *args, inflight=2, cancel_rate=0.1, inline_rate=0.3, **kw):
        super().__init__(*args, **kw)
        self.session = None
        self.inflight_max = inflight
        self.cancel_rate = cancel_rate
        self.inline_rate = inline_rate
        self.mine = []

    def headers(self):
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.session:
            h["MCP-Protocol-Version"] = LEGACY
            h["Mcp-Session-Id"] = self.session
        return h

    def connect(self):
        rid = self.http.next_id()
        body = {"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": self.CAPS,
            "clientInfo": {"name": "fault-soak", "version": "1"}}}
        self.ledger.count_request()
        node, _, response, answer = self.http.post(body, self.headers())
        rpc_result(answer)
        self.session = response.getheader("Mcp-Session-Id")
        if not self.session:
            raise RequestFailed("no session id")
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        try:
            self.http.post(note, self.headers(), node)
        except RequestFailed as failure:
            if failure.reason != "HTTP 202":
                raise

    def call(self, method, params):
        if self.session is None:
            self.connect()
        rid = self.http.next_id()
        body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        self.ledger.count_request()
        try:
            return self.http.post(body, self.headers())
        except RequestFailed as failure:
            if failure.reason in ("HTTP 404", "HTTP 400"):
                # The session is unknown here: open another (a client does).
                self.session = None
            raise

    def create(self):
        entry = choose(self.rng, LEGACY_MIX)
        _, tool, mode, build, expect, marker_kind, max_attempts = entry
        label = self.label()
        sent = now()
        try:
            node, _, _, answer = self.call(
                "tools/call", {"name": tool, "arguments": build(self.rng, label), "task": {}})
            result = rpc_result(answer)
        except RequestFailed as failure:
            self.ledger.failed(f"legacy create: {failure.reason}")
            return False
        created = result.get("task") or {}
        task_id = created.get("taskId")
        if not task_id:
            self.ledger.failed("legacy create: not a task")
            return False
        marker = marker_of(marker_kind, label)
        if marker == "task":
            marker = f"task={task_id}"
        task = Task(task_id, tool, mode, "2025", self.name, expect, marker, max_attempts)
        self.ledger.add(task)
        self.ledger.observe(task, Obs("create", sent, now(), created.get("status"), node=node.name))
        cancel_at = now() + self.rng.uniform(0.05, 2.0) if self.rng.random() < self.cancel_rate else None
        self.mine.append([task, now() + 0.2, cancel_at])
        return True

    def poll(self, slot):
        task, _, cancel_at = slot
        sent = now()
        try:
            node, _, _, answer = self.call("tasks/get", {"taskId": task.id})
            result = rpc_result(answer)
        except RequestFailed as failure:
            self.ledger.failed(f"legacy get: {failure.reason}")
            slot[1] = now() + 0.5
            return
        status = result.get("status")
        self.ledger.observe(task, Obs("get", sent, now(), status, node=node.name))
        if status in ("completed", "failed"):
            self.fetch_result(task)
        elif cancel_at is not None and now() >= cancel_at:
            task.cancel_sent = True
            try:
                node, _, _, answer = self.call("tasks/cancel", {"taskId": task.id})
                cancelled = answer.get("result") or {}
                if cancelled.get("status"):
                    self.ledger.observe(task, Obs("cancel", sent, now(), cancelled["status"], node=node.name))
            except RequestFailed as failure:
                self.ledger.failed(f"legacy cancel: {failure.reason}")
            slot[2] = None
        slot[1] = now() + self.rng.uniform(0.2, 0.7)

    def fetch_result(self, task):
        sent = now()
        try:
            node, _, _, answer = self.call("tasks/result", {"taskId": task.id})
        except RequestFailed as failure:
            self.ledger.failed(f"legacy result: {failure.reason}")
            return
        if "error" in answer:
            digest = error_digest(answer["error"])
            self.ledger.observe(task, Obs("result", sent, now(), "failed", digest, node=node.name))
        else:
            result = answer.get("result") or {}
            self.ledger.observe(task, Obs("result", sent, now(), "completed",
                                          result_digest(result), node=node.name))

    def inline(self):
        text = self.label()
        try:
            _, _, _, answer = self.call("tools/call", {"name": "echo", "arguments": {"text": text}})
            result = rpc_result(answer)
        except RequestFailed as failure:
            self.ledger.failed(f"legacy inline: {failure.reason}")
            self.ledger.inline_answer(False)
            return
        got = result_text(result)
        if text != got:
            self.ledger.inline_answer(False, f"legacy {text!r} -> {got[:200]!r}")
        else:
            self.ledger.inline_answer(True)

    def run(self):
        while not self.control.stop.is_set():
            draining = self.control.draining.is_set()
            if draining and not self.mine:
                break
            try:
                if not draining and len(self.mine) < self.inflight_max:
                    if not self.create():
                        self.pause(0.3)
                if not draining and self.rng.random() < self.inline_rate:
                    self.inline()
            except RequestFailed as failure:
                self.ledger.failed(f"legacy session: {failure.reason}")
                self.pause(0.3)
            t = now()
            for slot in list(self.mine):
                if slot[1] <= t:
                    try:
                        self.poll(slot)
                    except RequestFailed as failure:
                        self.ledger.failed(f"legacy session: {failure.reason}")
                        slot[1] = now() + 0.5
                    if slot[0].terminal() and (
                        slot[0].last_status() == "cancelled"
                        or any(o.source == "result" for o in slot[0].obs)
                        or self.control.stop.is_set()
                    ):
                        self.mine.remove(slot)
            self.pause(0.05)
        self.http.close_all()


class Listener(Base):
    """Creates a few tasks and follows them on a listen stream only, reopening the
    stream (then reading each task once, as a client that resubscribes does) whenever
    it breaks."""

    def __init__(self, *args, batch=3, **kw):
        super().__init__(*args, **kw)
        self.batch = batch
        self.streams = 0

    def create_batch(self):
        tasks = []
        for _ in range(self.batch):
            label = self.label()
            args = {"seconds": round(self.rng.uniform(0.5, 4.0), 2), "label": label}
            sent = now()
            try:
                node, _, _, answer = self.http.modern(
                    "tools/call", {"name": "slow_compute", "arguments": args}, name="slow_compute")
                result = rpc_result(answer)
            except RequestFailed as failure:
                self.ledger.failed(f"listener create: {failure.reason}")
                continue
            if result.get("resultType") != "task" or not result.get("taskId"):
                continue
            task = Task(result["taskId"], "slow_compute", "listen", "2026", self.name,
                        "complete", label, 3)
            self.ledger.add(task)
            self.ledger.observe(task, modern_obs(task, "create", sent, node, result))
            tasks.append(task)
        return tasks

    def listen(self, tasks):
        """One stream: returns when every task is terminal, the stream breaks, or it
        has been silent for long."""
        open_ids = [t.id for t in tasks if not t.terminal()]
        if not open_ids:
            return
        self.streams += 1
        stream = f"{self.name}#{self.streams}"
        node = self.http.pick()
        self.http.turn += 1
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {
            "notifications": {"taskIds": open_ids},
            "_meta": {"io.modelcontextprotocol/protocolVersion": VERSION,
                      "io.modelcontextprotocol/clientCapabilities": TASK_CAPS}}})
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": VERSION, "Mcp-Method": "subscriptions/listen"}
        conn = http.client.HTTPConnection(node.host, node.port, timeout=8)
        by_id = {t.id: t for t in tasks}
        try:
            conn.request("POST", "/mcp", body, headers)
            response = conn.getresponse()
            if response.status != 200:
                response.read()
                self.ledger.failed(f"listen: HTTP {response.status}")
                return
            acknowledged = False
            while not self.control.stop.is_set():
                line = response.readline()
                if not line:
                    self.ledger.failed("listen: stream ended")
                    return
                line = line.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:].strip())
                method = message.get("method")
                if method == "notifications/subscriptions/acknowledged" and not acknowledged:
                    acknowledged = True
                    # Whatever ended while no stream was open is read once.
                    self.read_each(tasks)
                elif method == "notifications/tasks":
                    params = message.get("params") or {}
                    task = by_id.get(params.get("taskId"))
                    if task is not None:
                        obs = modern_obs(task, "listen", now(), node, params)
                        obs.stream = stream
                        self.ledger.observe(task, obs)
                if all(t.terminal() for t in tasks):
                    return
        except (OSError, http.client.HTTPException, ValueError) as error:
            self.ledger.failed(f"listen: {type(error).__name__}")
        finally:
            conn.close()

    def read_each(self, tasks):
        for task in tasks:
            if task.terminal():
                continue
            sent = now()
            try:
                node, _, _, answer = self.http.modern("tasks/get", {"taskId": task.id}, name=task.id)
                self.ledger.observe(task, modern_obs(task, "get", sent, node, rpc_result(answer)))
            except RequestFailed as failure:
                self.ledger.failed(f"listener get: {failure.reason}")

    def run(self):
        while not self.control.stop.is_set() and not self.control.draining.is_set():
            tasks = self.create_batch()
            if not tasks:
                self.pause(0.5)
                continue
            while not self.control.stop.is_set() and not all(t.terminal() for t in tasks):
                self.listen(tasks)
                if not all(t.terminal() for t in tasks):
                    self.pause(0.2)
        self.http.close_all()


def start_clients(nodes, ledger, control, seed, modern=4, legacy=2, listeners=1,
                  timeout=REQUEST_TIMEOUT):
    """The workload: clients of both eras spread over the nodes."""
    clients = []
    for i in range(modern):
        clients.append(ModernClient(f"m{i}", nodes, ledger, random.Random(seed * 1000 + i),
                                    control, home=i, timeout=timeout))
    for i in range(legacy):
        clients.append(LegacyClient(f"l{i}", nodes, ledger, random.Random(seed * 1000 + 100 + i),
                                    control, home=i, timeout=timeout))
    for i in range(listeners):
        clients.append(Listener(f"s{i}", nodes, ledger, random.Random(seed * 1000 + 200 + i),
                                control, home=i, timeout=timeout))
    for client in clients:
        client.start()
    return clients
