"""Crash resume with a real host: Python SDK `mcp` 1.x `stdio_client` launches
`mcp-taskd stdio`, starts generate_report (ten sections, 6 s) plainly and gets its task
handle, then the server process is killed with SIGKILL mid-task, as a crash or an
out-of-memory kill would. The host launches the same command line again (same data
dir): task_status finds the task, and task_wait returns its completed result, because
the new process resumed the interrupted attempt.
Usage: python python_sdk1_stdio_resume.py COMMAND [ARG...] (py1 venv), the command line
of a local server whose inline wait is shorter than 6 s: `mcp-taskd stdio --config FILE
--data-dir DIR`."""

import os
import signal
import sys
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

NAME = "python-sdk-1.x-stdio-resume"


async def flow(command: list[str]) -> None:
    with anyio.fail_after(30):
        await steps(command)


async def steps(command: list[str]) -> None:
    server = StdioServerParameters(command=command[0], args=command[1:])

    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            answer = await session.call_tool("generate_report", {"topic": "crash", "sections": 10})
            handle = answer.structuredContent or {}
            assert handle.get("status") == "working", f"expected a running task's handle: {answer}"
            task_id = handle["taskId"]
            print(f"# handle {handle['status']}: {handle['statusMessage']}", file=sys.stderr)
            server_pid = only_child()
            os.kill(server_pid, signal.SIGKILL)
            print(f"# killed the server (pid {server_pid}) with SIGKILL", file=sys.stderr)
            # The SDK sees its server's stdout end; the session has nothing left to send.

    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            status = await session.call_tool("task_status", {"taskId": task_id})
            found = status.structuredContent or {}
            print(f"# after relaunch: {found.get('status')}: {found.get('statusMessage')}", file=sys.stderr)
            assert not status.isError and found.get("taskId", task_id) == task_id, (
                f"task_status after relaunch: {status}"
            )
            answer = status
            while "taskId" in (answer.structuredContent or {}):
                answer = await session.call_tool("task_wait", {"taskId": task_id})
                assert not answer.isError, f"task_wait: {answer}"
            report = answer.structuredContent or {}
            assert report.get("topic") == "crash", f"resumed result: {answer}"
            assert len(report.get("sections", [])) == 10, f"resumed result: {answer}"


def only_child() -> int:
    """The pid of the server stdio_client launched: this process's only child, read from
    /proc, so that nothing else on the machine is ever signalled."""
    me = str(os.getpid())
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The parent pid is the second field after the parenthesized command name.
            stat = (entry / "stat").read_text()
        except OSError:  # the process ended while we looked
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me:
            children.append(int(entry.name))
    assert len(children) == 1, f"expected one child process (the server), found {children}"
    return children[0]


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
