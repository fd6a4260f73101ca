//! Command tools: any executable declared in `[[tools]]` served as an MCP tool, inline
//! or as a durable task, through the same [`Tool`] trait as the built-in tools. This file
//! holds [`CommandTool`]; the files below hold its declaration, process and output, the
//! reaper of descendants that leave the program's process group, and the run guard that
//! kills programs when the server dies.
//!
//! The rest of this comment is long on purpose: it is the one statement of the contract
//! with programs, which every file below implements a part of (docs/command-tools.md repeats it).
//! Retries, leases and durability stay with the workers.
//!
//! # Protocol between server and program
//!
//! - **Start.** The program is started without a shell: `command[0]` with the rest of
//!   `command` as arguments, in `working_dir` (the configuration file's directory by
//!   default). Its environment is exactly `env` plus `PATH` (default
//!   `/usr/local/bin:/usr/bin:/bin` unless `env` sets it); nothing is inherited from
//!   the server. A task attempt also gets `MCP_TASK_ID` and `MCP_TASK_ATTEMPT` (1, 2, …);
//!   inline calls get neither. A run whose call carried a W3C trace context gets
//!   `TRACEPARENT` (and `TRACESTATE`): the tool run's span with telemetry on, else the
//!   caller's context. Every run also gets `MCP_TASKD_RUN`, an opaque marker
//!   that tells the run's descendants apart (leave it in their environment). `MCP_TASK_ID` (one key per task) or
//!   `$MCP_TASK_ID:$MCP_TASK_ATTEMPT` (one per attempt) make good idempotency keys for
//!   side effects, since an attempt may run again after a crash.
//! - **stdin** carries one JSON document, then EOF:
//!   `{"arguments": {…}, "inputResponses": {…}, "state": <its state or null>}` — the
//!   arguments, already validated against `input_schema`; the input responses gathered
//!   so far (task runs: every round's; inline runs: the client's latest round); and the
//!   opaque `state` the program returned with its last `inputRequired`.
//! - **stdout** carries JSON lines. While running, progress lines
//!   `{"progress": n, "total": m, "message": "…"}` (`total` and `message` optional;
//!   lines over 16 KiB are never progress; messages are cut to 1 KiB) become the task's
//!   `statusMessage` (or `notifications/progress` inline, when the client sent a
//!   progress token). The last non-blank line is the **final message**,
//!   exactly one of:
//!   - `{"result": <CallToolResult>}` — `content` and/or `structuredContent`, optional
//!     `isError` (a tool error is `{"result": {"isError": true, "content": […]}}`);
//!     with only `structuredContent`, a text block holding its JSON is added as
//!     `content`;
//!   - `{"error": {"code": <int>, "message": <string>, "data": <optional>}}` — a
//!     JSON-RPC-level failure: the task fails (inline: the error response);
//!   - `{"inputRequired": {"requests": {<key>: <request>}, "state": <any>}}` — an input
//!     round; each request is an `elicitation/create`, `sampling/createMessage` or
//!     `roots/list` request (`{"method": …, "params": {…}}`). As a task, the task goes
//!     `input_required`; once the client answers every request (`tasks/update`) the
//!     program runs again with the responses and `state`. Keys must be new in each
//!     round. Inline, the client gets an MRTR `input_required` result and calls again.
//! - **Plain text convenience.** A program that exits 0 and whose last line is not a
//!   final message answers with a text result: all of stdout except progress lines.
//! - **Failed attempts** (retried with backoff up to `max_attempts`, then the task fails
//!   naming the reason; inline, `-32603`): a non-zero exit without a final message, death
//!   by a signal, a malformed final message, more than `max_output_bytes` on stdout, a
//!   run past `timeout_ms`, or a program that cannot be started. A final message is
//!   honoured whatever the exit status. A result that breaks the tool's `output_schema`
//!   is not retried: the task fails with `-32603`.
//! - **stderr** goes to the server log (debug level, warn for failed attempts): the last
//!   64 KiB, each line cut to 512 bytes. Arguments, results and stdout are never logged.
//!
//! # Supervision guarantees
//!
//! - The program runs in its own process group. Cancellation (`tasks/cancel`), the
//!   attempt's deadline, the tool's timeout, too much output and a graceful server
//!   shutdown all send SIGTERM to the whole group, then SIGKILL after 2 s. When the
//!   program exits by itself, whatever it left running in its group is killed.
//! - Descendants that left the group (`setsid`, `setpgid`, a double fork) are killed
//!   with SIGKILL when the run ends, however it ends, and reaped, before the run's
//!   output is read (so one holding stdout no longer stalls it): on Linux the server is
//!   a child subreaper, so they are re-parented to it, and each run carries
//!   `MCP_TASKD_RUN` in its environment, which they inherit (see `reaper` for how a
//!   run's orphans are told apart, and the limits: a descendant that replaced its
//!   environment, let go of the run's pipes and was orphaned before the run ended is
//!   only killed at the next graceful shutdown). Orphans of runs still running are
//!   never touched, and no process that is not a child of the server is signalled.
//! - On Linux programs die with the server even on `kill -9`: a run guard ([`guard`],
//!   one helper process per server, started with it) sees the server die and kills,
//!   with SIGKILL, every process carrying the server's run markers, with their process
//!   groups — the program, what it left in its group, and descendants that left the
//!   group but kept the marker. Programs themselves start the way `posix_spawn`
//!   starts them (`clone(CLONE_VM | CLONE_VFORK)`: no `fork` of the server, nothing of
//!   ours before `exec`; see `spawn`). If the guard dies while the
//!   server runs, the server logs it and starts another, which covers the runs already
//!   going. After such a crash, start-up recovery runs the attempt again.
//! - `max_concurrency` bounds the runs of one tool at once, inline and as tasks together
//!   ([`crate::slots`]). A task beyond it stays queued, holding no worker thread,
//!   while other tools' tasks run; its attempt starts (and its time starts running) once
//!   a slot is free. An inline call beyond it waits for a slot up to `timeout_ms`.

pub mod daemon;
mod declaration;
mod exit;
pub mod guard;
mod output;
mod process;
mod reaper;
// Public for benches/spawncost.rs, which measures the server's way of starting a program.
#[doc(hidden)]
pub mod spawn;

use std::path::PathBuf;
use std::time::Duration;

use super::{Invocation, Outcome, Tool, ToolSpec};

pub use declaration::{
    check_env, resolve_program, CommandToolConfig, DeclarationError, DEFAULT_MAX_OUTPUT,
    DEFAULT_PATH,
};
pub use reaper::{become_subreaper, sweep_all, MARKER};

/// Blocks SIGCHLD in the calling thread and so in every thread it starts: call it first
/// thing in `main`, before any thread exists.
///
/// Why: nothing here handles SIGCHLD (exits are seen through pidfds and `waitid`), and
/// its default disposition normally makes the kernel drop it. But starting a program
/// (`spawn`, as glibc's `posix_spawn` does) blocks every signal in the spawning thread
/// until the child has `exec`ed; a program
/// that exits before the mask is restored (a no-op program on a loaded box) raises a
/// SIGCHLD that is then *not* dropped, and is delivered to some other thread. A thread
/// blocked in a socket read with a timeout (every HTTP connection's, see
/// vendor/tiny_http patch 9) returns `EINTR` — socket calls with a timeout are never
/// restarted — and tiny_http closes that client's connection. Blocked in every
/// thread, SIGCHLD just stays pending and interrupts nothing. Programs do not inherit
/// the mask: the child clears it before its `exec`.
pub fn block_child_exit_signal() {
    // SAFETY: plain calls on a signal set we own; pthread_sigmask cannot fail with
    // these arguments.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// A declared program, checked and ready to run: built once, when the configuration is
/// loaded, and registered from there.
#[derive(Debug)]
pub struct CommandTool {
    /// What `tools/list` shows and how runs are bounded (`execution.timeout` is the
    /// hard limit of one run).
    spec: ToolSpec,
    program: PathBuf,
    /// The program, its arguments, working directory and environment as `execve` takes
    /// them, built once (or why they cannot be: each run fails with it).
    launch: Result<spawn::Launch, String>,
    max_output: usize,
}

impl CommandTool {
    /// The spec to register this tool under.
    pub fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn timeout(&self) -> Duration {
        self.spec.execution.timeout
    }
}

impl Tool for CommandTool {
    fn run(&self, call: &mut Invocation<'_>) -> Outcome {
        // The caller holds a concurrency slot for this run already (see `slots`).
        self.execute(call)
    }
}
