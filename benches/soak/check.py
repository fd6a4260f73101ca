"""The checker of the fault soak and the partition test: reads every client's history
(the Ledger of clients.py) and the store at the end, and proves, for every acknowledged
task:

- it exists in the store (else: lost);
- it reached exactly one terminal state, or is legitimately not there yet (waiting for
  an answer nobody gave); a task still working or queued once every fault was lifted
  and the drain ended is stuck;
- its terminal state never changed as clients saw it over time: every terminal
  observation (tasks/get, tasks/result, a notification) names the same status and the
  same result or error as the store; no answer sent after a terminal one was received
  says it is not terminal; on one listen stream, nothing follows a terminal
  notification of a task but the same; a result is the task's own (it names its label
  or its task id), a task that must fail never completes, and none is cancelled that
  no client cancelled (else: contradictory);
- no two attempts both committed a terminal outcome (the attempts table; else:
  double-completed), and its retries stayed within its tool's max_attempts.
"""

import json
import sqlite3
import subprocess

from clients import TERMINAL, error_digest, result_digest, result_text


class Store:
    """What the store holds at the end."""

    def __init__(self):
        self.tasks = {}  # id -> (status, result json text, error json text)
        self.attempts = {}  # id -> [(attempt, outcome)]
        self.jobs = {}  # id -> (state, attempt, lease_expires, lease_node or None)
        self.now_ms = None

    @staticmethod
    def sqlite(path):
        store = Store()
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            for task_id, status, result, error in db.execute(
                    "SELECT id, status, result, error FROM tasks"):
                store.tasks[task_id] = (status, result, error)
            for task_id, attempt, outcome in db.execute(
                    "SELECT task_id, attempt, outcome FROM attempts"):
                store.attempts.setdefault(task_id, []).append((attempt, outcome))
            for task_id, state, attempt, expires in db.execute(
                    "SELECT task_id, state, attempt, lease_expires FROM jobs"):
                store.jobs[task_id] = (state, attempt, expires, None)
        finally:
            db.close()
        return store

    @staticmethod
    def postgres(psql):
        """`psql`: the command line (a list) that runs psql on the database, to which
        -c SQL is appended."""

        def rows(sql):
            out = subprocess.run(psql + ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql],
                                 check=True, capture_output=True, text=True).stdout
            return [json.loads(line) for line in out.splitlines() if line.strip()]

        store = Store()
        for task_id, status, result, error in rows(
                "SELECT json_build_array(id, status, result, error) FROM tasks"):
            store.tasks[task_id] = (status, result, error)
        for task_id, attempt, outcome in rows(
                "SELECT json_build_array(task_id, attempt, outcome) FROM attempts"):
            store.attempts.setdefault(task_id, []).append((attempt, outcome))
        for task_id, state, attempt, expires, node in rows(
                "SELECT json_build_array(task_id, state, attempt, lease_expires, lease_node) FROM jobs"):
            store.jobs[task_id] = (state, attempt, expires, node)
        store.now_ms = rows("SELECT json_build_array(taskd_now_ms())")[0][0]
        return store


def stored_digest(status, result, error):
    try:
        if status == "completed" and result:
            return result_digest(json.loads(result))
        if status == "failed" and error:
            return error_digest(json.loads(error))
    except ValueError:
        return "unreadable"
    return None


class Report:
    def __init__(self):
        self.acknowledged = 0
        self.lost = []
        self.contradictory = []  # (task id, why)
        self.double = []
        self.over_retried = []
        self.stuck = []
        self.waiting = 0  # input_required with no answer given: legitimate
        self.by_final = {}
        self.by_tool = {}
        self.notifications = 0
        self.reclaimed_attempts = 0  # attempts whose outcome is "retry"

    def ok(self):
        return not (self.lost or self.contradictory or self.double or self.over_retried)

    def as_dict(self):
        return {
            "acknowledged": self.acknowledged,
            "lost": len(self.lost),
            "contradictory": len(self.contradictory),
            "double_completed": len(self.double),
            "over_retried": len(self.over_retried),
            "stuck": len(self.stuck),
            "waiting_for_input": self.waiting,
            "final": self.by_final,
            "by_tool": self.by_tool,
            "notifications": self.notifications,
            "retry_outcomes": self.reclaimed_attempts,
            "examples": {
                "lost": self.lost[:10],
                "contradictory": self.contradictory[:10],
                "double_completed": self.double[:10],
                "over_retried": self.over_retried[:10],
                "stuck": self.stuck[:10],
            },
        }


def check(ledger, store, still_open=()):
    """`still_open`: ids the drain left non-terminal (read just before the stop)."""
    report = Report()
    with ledger.lock:
        tasks = list(ledger.tasks.values())
    for task in tasks:
        report.acknowledged += 1
        report.by_tool[task.tool] = report.by_tool.get(task.tool, 0) + 1
        row = store.tasks.get(task.id)
        if row is None:
            report.lost.append(task.id)
            continue
        status, result, error = row
        report.by_final[status] = report.by_final.get(status, 0) + 1
        why = contradiction(task, status, result, error)
        if why:
            report.contradictory.append((task.id, task.tool, task.mode, why))
        report.notifications += sum(1 for o in task.obs if o.source == "listen")
        attempts = store.attempts.get(task.id, [])
        terminal_attempts = [a for a in attempts if a[1] in TERMINAL]
        if len(terminal_attempts) > 1:
            report.double.append((task.id, sorted(attempts)))
        retries = sum(1 for a in attempts if a[1] == "retry")
        report.reclaimed_attempts += retries
        if retries > task.max_attempts - 1 or any(a[0] > task.max_attempts + inputs(attempts)
                                                  for a in attempts):
            report.over_retried.append((task.id, task.tool, sorted(attempts)))
        if status not in TERMINAL:
            if status == "input_required" and not task.answered:
                report.waiting += 1
            else:
                job = store.jobs.get(task.id)
                report.stuck.append((task.id, task.tool, status, job))
    return report


def inputs(attempts):
    return sum(1 for a in attempts if a[1] == "input_required")


def contradiction(task, status, result, error):
    """Why the task's history contradicts itself or the store, or None."""
    terminal_obs = [o for o in task.obs if o.status in TERMINAL]
    statuses = {o.status for o in terminal_obs}
    if len(statuses) > 1:
        return f"clients saw terminal states {sorted(statuses)}"
    if statuses and status not in statuses:
        return f"clients saw {statuses.pop()}, the store holds {status}"
    digest = stored_digest(status, result, error)
    seen = {o.digest for o in terminal_obs if o.digest}
    # The legacy era's tasks/result of a failed task carries its error as the RPC
    # error, whose message is the stored one; compare digests of one kind only.
    if status == "completed" and seen and (len(seen) > 1 or digest not in seen):
        return "the completed result changed between reads (or differs from the store)"
    if status == "failed":
        modern = {o.digest for o in terminal_obs if o.digest and o.source != "result"}
        if modern and (len(modern) > 1 or digest not in modern):
            return "the error changed between reads (or differs from the store)"
    # No answer *sent* after a terminal answer was received may say otherwise.
    received = [o.received for o in terminal_obs if o.source != "listen"]
    if received:
        first = min(received)
        for o in task.obs:
            if o.source != "listen" and o.status not in TERMINAL and o.sent > first:
                return f"{o.source} sent after a terminal answer says {o.status}"
    # On one listen stream, a terminal notification is the last word.
    ended = {}
    for o in task.obs:
        if o.source != "listen":
            continue
        if o.stream in ended and o.status != ended[o.stream]:
            return f"stream {o.stream}: {o.status} after {ended[o.stream]}"
        if o.status in TERMINAL:
            ended[o.stream] = o.status
    # What the task is: its result is its own, and its outcome one it can have.
    if status == "cancelled" and not task.cancel_sent:
        return "cancelled, though no client cancelled it"
    if status == "completed":
        if task.expect == "fail":
            return "completed, though its tool can only fail"
        parsed = None
        try:
            parsed = json.loads(result) if result else None
        except ValueError:
            return "stored result unreadable"
        text = result_text(parsed) if parsed else ""
        if task.marker and task.marker not in text:
            return f"result {text[:120]!r} is not this task's (wants {task.marker!r})"
        if task.expect == "error" and not parsed.get("isError"):
            return "completed without isError, though its tool reports a tool error"
    return None
