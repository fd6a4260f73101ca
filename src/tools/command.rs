//! Command tools: any executable declared in `[[tools]]` served as an MCP tool, inline
//! or as a durable task, through the same [`Tool`] trait as the built-in tools.
//!
//! This module owns turning a declaration ([`CommandToolConfig`]) into a [`ToolSpec`]
//! plus a [`CommandTool`], and running the program: the language-neutral protocol
//! below, supervision of the process (and its process group), output limits and the
//! per-tool concurrency limit. Retries, leases and durability stay with the workers.
//!
//! # Protocol between server and program
//!
//! - **Start.** The program is started without a shell: `command[0]` with the rest of
//!   `command` as arguments, in `working_dir` (the configuration file's directory by
//!   default). Its environment is exactly `env` plus `PATH` (default
//!   `/usr/local/bin:/usr/bin:/bin` unless `env` sets it); nothing is inherited from
//!   the server. A task attempt also gets `MCP_TASK_ID` and `MCP_TASK_ATTEMPT` (1, 2, …);
//!   inline calls get neither. `MCP_TASK_ID` (one key per task) or
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
//! - On Linux the program is started with `PR_SET_PDEATHSIG = SIGKILL`, so it dies with
//!   the server even on `kill -9`. The signal follows the *thread* that started it;
//!   programs are started from worker and request threads, which live as long as the
//!   process. It covers the direct child only: grandchildren of a server killed with
//!   `kill -9` may outlive it (cancellation and timeouts do kill them). After such a
//!   crash, start-up recovery runs the attempt again.
//! - `max_concurrency` bounds the runs of one tool at once; a run beyond it waits for a
//!   slot (holding its worker thread, and its attempt's time keeps running) and stops
//!   waiting as soon as it is cancelled.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use serde_json::{json, Map, Value};

use super::{ExecutionPolicy, Invocation, InvocationHost, Outcome, TaskPolicy, Tool, ToolSpec};
use crate::config::CommandToolConfig;
use crate::protocol::{InputKind, RpcError};

/// `PATH` of a program whose `env` does not set one.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// Default `max_output_bytes`.
pub const DEFAULT_MAX_OUTPUT: usize = 4 * 1024 * 1024;
/// How much of stderr is kept for the log.
const STDERR_TAIL: usize = 64 * 1024;
/// Longest stderr line logged.
const STDERR_LINE: usize = 512;
/// Time between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long to wait for the output pipes to close after the program's group is gone.
const PIPE_GRACE: Duration = Duration::from_secs(2);
/// How often the program is checked on.
const POLL: Duration = Duration::from_millis(20);
/// Longest progress message kept.
const MAX_MESSAGE: usize = 1024;
/// Longer lines are never progress lines (so a large result is not parsed twice).
const MAX_PROGRESS_LINE: usize = 16 * 1024;

/// A declared program, ready to run.
pub struct CommandTool {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    working_dir: PathBuf,
    env: BTreeMap<String, String>,
    timeout: Duration,
    max_output: usize,
    slots: Option<Slots>,
}

impl CommandTool {
    /// Checks a declaration and builds the tool. Errors name the field; the caller adds
    /// the tool's name. Relative paths resolve against `base_dir`.
    pub fn build(
        config: &CommandToolConfig,
        base_dir: &Path,
    ) -> Result<(ToolSpec, CommandTool), String> {
        let input_schema = match &config.input_schema {
            None => json!({ "type": "object" }),
            Some(value) => json_field("input_schema", value)?,
        };
        if input_schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err("input_schema: must have \"type\": \"object\"".into());
        }
        let output_schema = match &config.output_schema {
            None => None,
            Some(value) => {
                let schema = json_field("output_schema", value)?;
                if schema.get("type").and_then(Value::as_str) != Some("object") {
                    return Err("output_schema: must have \"type\": \"object\"".into());
                }
                Some(schema)
            }
        };
        let annotations = match &config.annotations {
            None => None,
            Some(value) => {
                let annotations = json_field("annotations", value)?;
                if !annotations.is_object() {
                    return Err("annotations: must be a table".into());
                }
                Some(annotations)
            }
        };

        let mut env = BTreeMap::new();
        env.insert("PATH".to_owned(), DEFAULT_PATH.to_owned());
        for (key, value) in &config.env {
            if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
                return Err(format!(
                    "env: \"{key}\" is not a valid variable (no '=' or NUL in names, no NUL in values)"
                ));
            }
            env.insert(key.clone(), value.clone());
        }
        let Some((program, args)) = config.command.split_first() else {
            return Err(
                "command: must name a program (command = [\"/path/to/program\", …])".into(),
            );
        };
        if program.is_empty() {
            return Err("command: the program must not be empty".into());
        }
        let path_var = env.get("PATH").map(String::as_str).unwrap_or(DEFAULT_PATH);
        let program = resolve_program(program, base_dir, path_var)?;
        let working_dir = match &config.working_dir {
            None => base_dir.to_path_buf(),
            Some(dir) => base_dir.join(dir),
        };
        if !working_dir.is_dir() {
            return Err(format!(
                "working_dir: {} is not a directory",
                working_dir.display()
            ));
        }

        let positive = |field: &str, value: Option<u64>| match value {
            Some(0) => Err(format!("{field}: must be at least 1")),
            _ => Ok(value),
        };
        let defaults_policy = ExecutionPolicy::default();
        let timeout = positive("timeout_ms", config.timeout_ms)?
            .map_or(defaults_policy.timeout, Duration::from_millis);
        let max_attempts = match config.max_attempts {
            Some(0) => return Err("max_attempts: must be at least 1".into()),
            Some(attempts) => attempts,
            None => defaults_policy.max_attempts,
        };
        let backoff = config
            .backoff_ms
            .map_or(defaults_policy.backoff, Duration::from_millis);
        // Unset: the server's [tasks] defaults apply when a task is created.
        let ttl = positive("ttl_ms", config.ttl_ms)?.map(Duration::from_millis);
        let poll_interval =
            positive("poll_interval_ms", config.poll_interval_ms)?.map(Duration::from_millis);
        let slots = match config.max_concurrency {
            Some(0) => return Err("max_concurrency: must be at least 1".into()),
            Some(limit) => Some(Slots::new(limit)),
            None => None,
        };
        let max_output = match config.max_output_bytes {
            Some(0) => return Err("max_output_bytes: must be at least 1".into()),
            Some(bytes) => bytes,
            None => DEFAULT_MAX_OUTPUT,
        };
        if let Some(argument) = &config.idempotency_argument {
            if config.task_policy == TaskPolicy::Inline {
                return Err(
                    "idempotency_argument: only task tools (task_policy optional or required) \
                     create tasks"
                        .into(),
                );
            }
            let declared = input_schema
                .get("properties")
                .and_then(Value::as_object)
                .is_some_and(|properties| properties.contains_key(argument));
            if !declared {
                return Err(format!(
                    "idempotency_argument: \"{argument}\" is not a property of input_schema"
                ));
            }
        }

        let spec = ToolSpec {
            name: config.name.clone(),
            title: config.title.clone(),
            description: config.description.clone(),
            input_schema,
            output_schema,
            annotations,
            task_policy: config.task_policy,
            required_capabilities: None,
            execution: ExecutionPolicy {
                max_attempts,
                timeout,
                backoff,
                ttl,
                poll_interval,
            },
            idempotency_argument: config.idempotency_argument.clone(),
        };
        let tool = CommandTool {
            name: config.name.clone(),
            program,
            args: args.to_vec(),
            working_dir,
            env,
            timeout,
            max_output,
            slots,
        };
        Ok((spec, tool))
    }

    /// Starts the program: no shell, its own process group, a clean environment.
    fn spawn(&self, task: Option<(&str, i64)>) -> std::io::Result<Child> {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .current_dir(&self.working_dir)
            .env_clear()
            .envs(&self.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some((task_id, attempt)) = task {
            command
                .env("MCP_TASK_ID", task_id)
                .env("MCP_TASK_ATTEMPT", attempt.to_string());
        }
        #[cfg(target_os = "linux")]
        {
            let server = std::process::id() as libc::pid_t;
            // SAFETY: the hook runs between fork and exec and only makes
            // async-signal-safe system calls; it allocates nothing.
            unsafe {
                command.pre_exec(move || {
                    // Die with the server (or, precisely, with the spawning thread).
                    if libc::prctl(
                        libc::PR_SET_PDEATHSIG,
                        libc::SIGKILL as libc::c_ulong,
                        0 as libc::c_ulong,
                        0 as libc::c_ulong,
                        0 as libc::c_ulong,
                    ) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    // The server may have died before the line above took effect.
                    if libc::getppid() != server {
                        return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                    }
                    Ok(())
                });
            }
        }
        command.spawn()
    }

    /// Runs the program once and supervises it until it ends or must be stopped.
    fn execute(&self, call: &mut Invocation<'_>) -> Outcome {
        let input = json!({
            "arguments": call.arguments,
            "inputResponses": call.input_responses,
            "state": call.state.cloned().unwrap_or(Value::Null),
        });
        let payload = input.to_string().into_bytes();
        let task = call.host.task_attempt();
        let mut child = match self.spawn(task) {
            Ok(child) => child,
            Err(error) => {
                return Outcome::Retry(format!(
                    "could not start {}: {error}",
                    self.program.display()
                ))
            }
        };
        let pid = child.id() as libc::pid_t;
        let (events, received) = crossbeam_channel::unbounded();
        let helpers = start_helpers(&mut child, payload, self.max_output, events);
        let (stdout, stderr) = match helpers {
            Ok(helpers) => helpers,
            Err(error) => {
                terminate_group(pid);
                let _ = child.wait();
                return Outcome::Retry(format!("could not supervise the program: {error}"));
            }
        };

        let started = Instant::now();
        let ended = loop {
            let mut overflowed = false;
            for event in received.try_iter() {
                match event {
                    Event::Progress(progress) => forward(call.host, &progress),
                    Event::Overflow => overflowed = true,
                }
            }
            if overflowed {
                break Ended::Overflow;
            }
            if has_exited(pid) {
                break Ended::Exited;
            }
            let elapsed = started.elapsed();
            if elapsed >= self.timeout {
                break Ended::TimedOut;
            }
            if !call.host.sleep(POLL.min(self.timeout - elapsed)) && call.host.cancelled() {
                break Ended::Stopped;
            }
        };
        if ended == Ended::Exited {
            // Whatever the program left running in its group goes with it.
            kill_group(pid, libc::SIGKILL);
        } else {
            terminate_group(pid);
        }
        let status = child.wait();

        let captured = collect(stdout, PIPE_GRACE);
        let stderr_tail = collect(stderr, PIPE_GRACE);
        let outcome = match (ended, status, captured) {
            (Ended::Stopped, _, _) => Outcome::Cancelled,
            (Ended::TimedOut, _, _) => Outcome::Retry(format!(
                "the program ran past its timeout of {} ms and was killed",
                self.timeout.as_millis()
            )),
            (Ended::Overflow, _, _) => Outcome::Retry(format!(
                "the program wrote more than {} bytes to stdout and was killed",
                self.max_output
            )),
            (Ended::Exited, Err(error), _) => {
                Outcome::Retry(format!("could not read the program's exit status: {error}"))
            }
            (Ended::Exited, Ok(_), None) => Outcome::Retry(
                "the program exited but its stdout stayed open (a process outside its \
                 process group holds it)"
                    .into(),
            ),
            (Ended::Exited, Ok(status), Some(captured)) => {
                for event in received.try_iter() {
                    if let Event::Progress(progress) = event {
                        forward(call.host, &progress);
                    }
                }
                interpret(status, &captured.bytes)
            }
        };
        self.log_stderr(stderr_tail.as_deref(), &outcome);
        outcome
    }

    /// Logs the tail of stderr: at warn level when the attempt failed, debug otherwise.
    fn log_stderr(&self, tail: Option<&[u8]>, outcome: &Outcome) {
        let Some(tail) = tail.filter(|tail| !tail.is_empty()) else {
            return;
        };
        let level = match outcome {
            Outcome::Retry(_) => log::Level::Warn,
            _ => log::Level::Debug,
        };
        if !log::log_enabled!(level) {
            return;
        }
        let text = String::from_utf8_lossy(tail);
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            log::log!(
                level,
                "tool {} stderr: {}",
                self.name,
                truncate(line, STDERR_LINE)
            );
        }
    }
}

impl Tool for CommandTool {
    fn run(&self, call: &mut Invocation<'_>) -> Outcome {
        let _slot = match &self.slots {
            None => None,
            Some(slots) => match slots.acquire(call.host, self.timeout) {
                Ok(slot) => Some(slot),
                Err(NoSlot::Cancelled) => return Outcome::Cancelled,
                Err(NoSlot::TimedOut) => {
                    return Outcome::Retry(format!(
                        "no free slot (max_concurrency {}) within {} ms",
                        slots.limit,
                        self.timeout.as_millis()
                    ))
                }
            },
        };
        self.execute(call)
    }
}

/// A schema or annotations field: a TOML table, or a string holding JSON.
fn json_field(field: &str, value: &toml::Value) -> Result<Value, String> {
    match value {
        toml::Value::String(text) => {
            serde_json::from_str(text).map_err(|e| format!("{field}: not valid JSON: {e}"))
        }
        toml::Value::Table(table) => {
            serde_json::to_value(table).map_err(|e| format!("{field}: {e}"))
        }
        _ => Err(format!("{field}: must be a table or a string holding JSON")),
    }
}

/// The absolute path of the program: a path with a `/` resolves against `base_dir`, a
/// bare name is looked up in the program's `PATH` — once, at start-up.
fn resolve_program(program: &str, base_dir: &Path, path_var: &str) -> Result<PathBuf, String> {
    if program.contains('/') {
        let path = base_dir.join(program);
        return if is_executable_file(&path) {
            Ok(path)
        } else {
            Err(format!(
                "command: {} is not an executable file",
                path.display()
            ))
        };
    }
    path_var
        .split(':')
        .filter(|dir| dir.starts_with('/'))
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| is_executable_file(candidate))
        .ok_or_else(|| format!("command: \"{program}\" was not found in PATH ({path_var})"))
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Why supervision stopped watching the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// It exited (or died) on its own.
    Exited,
    /// The host asked the run to stop (cancellation, deadline, shutdown, lease lost).
    Stopped,
    TimedOut,
    Overflow,
}

/// What the stdout reader reports while the program runs.
enum Event {
    Progress(Progress),
    Overflow,
}

#[derive(Debug, PartialEq)]
struct Progress {
    progress: f64,
    total: Option<f64>,
    message: Option<String>,
}

fn forward(host: &mut dyn InvocationHost, progress: &Progress) {
    host.progress(
        progress.progress,
        progress.total,
        progress.message.as_deref(),
    );
}

/// A progress line: an object with a numeric `progress`, optional numeric `total` and
/// string `message`, and nothing else.
fn parse_progress(line: &[u8]) -> Option<Progress> {
    if line.len() > MAX_PROGRESS_LINE || line.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let object: Map<String, Value> = serde_json::from_slice(line).ok()?;
    if !object
        .keys()
        .all(|key| matches!(key.as_str(), "progress" | "total" | "message"))
    {
        return None;
    }
    let progress = object.get("progress")?.as_f64()?;
    let total = match object.get("total") {
        None | Some(Value::Null) => None,
        Some(total) => Some(total.as_f64()?),
    };
    let message = match object.get("message") {
        None | Some(Value::Null) => None,
        Some(message) => Some(truncate(message.as_str()?, MAX_MESSAGE).to_owned()),
    };
    Some(Progress {
        progress,
        total,
        message,
    })
}

/// At most `limit` bytes of `text`, cut at a character boundary.
fn truncate(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// What the program wrote to stdout (at most the limit).
struct Captured {
    bytes: Vec<u8>,
}

type Helpers = (JoinHandle<Captured>, JoinHandle<Vec<u8>>);

/// Starts the threads that feed stdin and drain stdout and stderr.
fn start_helpers(
    child: &mut Child,
    payload: Vec<u8>,
    limit: usize,
    events: Sender<Event>,
) -> std::io::Result<Helpers> {
    let missing = || std::io::Error::other("a pipe to the program is missing");
    let mut stdin = child.stdin.take().ok_or_else(missing)?;
    let stdout = child.stdout.take().ok_or_else(missing)?;
    let stderr = child.stderr.take().ok_or_else(missing)?;
    // A program that never reads stdin must not block anything: write on a thread and
    // ignore a closed pipe.
    std::thread::Builder::new()
        .name("command-stdin".into())
        .spawn(move || {
            let _ = stdin.write_all(&payload);
        })?;
    let stdout = std::thread::Builder::new()
        .name("command-stdout".into())
        .spawn(move || read_stdout(stdout, limit, &events))?;
    let stderr = std::thread::Builder::new()
        .name("command-stderr".into())
        .spawn(move || read_stderr(stderr))?;
    Ok((stdout, stderr))
}

/// Reads stdout to EOF, keeping at most `limit` bytes and reporting progress lines as
/// they complete. Past the limit it reports the overflow once and discards the rest.
fn read_stdout(mut pipe: impl Read, limit: usize, events: &Sender<Event>) -> Captured {
    let mut bytes = Vec::new();
    let mut line_start = 0;
    let mut overflowed = false;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let read = match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if overflowed {
            continue;
        }
        if bytes.len() + read > limit {
            overflowed = true;
            let _ = events.send(Event::Overflow);
            continue;
        }
        let fresh = bytes.len();
        bytes.extend_from_slice(&chunk[..read]);
        // Only the new bytes are searched: a long line costs one pass, not one per read.
        let mut from = fresh;
        while let Some(offset) = bytes[from..].iter().position(|&b| b == b'\n') {
            let end = from + offset;
            if let Some(progress) = parse_progress(&bytes[line_start..end]) {
                let _ = events.send(Event::Progress(progress));
            }
            line_start = end + 1;
            from = line_start;
        }
    }
    Captured { bytes }
}

/// Reads stderr to EOF, keeping the last [`STDERR_TAIL`] bytes.
fn read_stderr(mut pipe: impl Read) -> Vec<u8> {
    let mut tail = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(read) => {
                tail.extend_from_slice(&chunk[..read]);
                if tail.len() > 2 * STDERR_TAIL {
                    tail.drain(..tail.len() - STDERR_TAIL);
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    if tail.len() > STDERR_TAIL {
        tail.drain(..tail.len() - STDERR_TAIL);
    }
    tail
}

/// A helper thread's result, if it finishes within `grace`.
fn collect<T>(helper: JoinHandle<T>, grace: Duration) -> Option<T> {
    let deadline = Instant::now() + grace;
    while !helper.is_finished() && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    if helper.is_finished() {
        helper.join().ok()
    } else {
        None
    }
}

/// Whether the child has exited, without reaping it: while it is unreaped its pid
/// cannot be reused, so signalling its process group stays safe.
fn has_exited(pid: libc::pid_t) -> bool {
    // SAFETY: siginfo_t is plain data; waitid writes into the struct we own.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let options = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        if libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, options) != 0 {
            // Only ECHILD is possible here: nothing left to wait for.
            return true;
        }
        info.si_pid() != 0
    }
}

fn kill_group(pgid: libc::pid_t, signal: libc::c_int) {
    // SAFETY: plain system call; the group is the unreaped child's, so it is ours.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

/// SIGTERM to the whole group, SIGKILL after [`KILL_GRACE`] (or as soon as the program
/// itself is gone, for anything it left behind). The child is not reaped here.
fn terminate_group(pgid: libc::pid_t) {
    kill_group(pgid, libc::SIGTERM);
    let deadline = Instant::now() + KILL_GRACE;
    while !has_exited(pgid) && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    kill_group(pgid, libc::SIGKILL);
}

/// Turns an exited program's status and stdout into an outcome (see the module docs).
fn interpret(status: ExitStatus, stdout: &[u8]) -> Outcome {
    if let Some(signal) = status.signal() {
        return Outcome::Retry(format!("the program was killed by signal {signal}"));
    }
    let last = stdout
        .split(|&b| b == b'\n')
        .rfind(|line| !line.trim_ascii().is_empty());
    match last.and_then(final_message) {
        Some(Ok(outcome)) => outcome,
        Some(Err(why)) => Outcome::Retry(format!("the program's final line is malformed: {why}")),
        None if status.success() => {
            let text = String::from_utf8_lossy(stdout);
            let kept: Vec<&str> = text
                .lines()
                .filter(|line| parse_progress(line.as_bytes()).is_none())
                .collect();
            Outcome::Complete(super::text_result(kept.join("\n").trim_end()))
        }
        None => Outcome::Retry(format!(
            "the program exited with status {} without a final result line",
            status.code().unwrap_or(-1)
        )),
    }
}

/// The final message on `line`, if the line is one: `None` when it is not a JSON
/// object naming `result`, `error` or `inputRequired`; `Err` when it is one, malformed.
fn final_message(line: &[u8]) -> Option<Result<Outcome, String>> {
    if line.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let object: Map<String, Value> = serde_json::from_slice(line).ok()?;
    let kinds = ["result", "error", "inputRequired"];
    let kind = *kinds.iter().find(|kind| object.contains_key(**kind))?;
    if object.len() != 1 {
        return Some(Err(
            "a final message has exactly one member: result, error or inputRequired".into(),
        ));
    }
    let body = &object[kind];
    Some(match kind {
        "result" => final_result(body),
        "error" => final_error(body),
        _ => final_input_required(body),
    })
}

fn final_result(body: &Value) -> Result<Outcome, String> {
    let Some(result) = body.as_object() else {
        return Err("result must be an object".into());
    };
    let mut result = result.clone();
    result.remove("resultType");
    match result.get("structuredContent") {
        None | Some(Value::Object(_)) => {}
        Some(_) => return Err("result.structuredContent must be an object".into()),
    }
    match result.get("isError") {
        None | Some(Value::Bool(_)) => {}
        Some(_) => return Err("result.isError must be a boolean".into()),
    }
    match (result.get("content"), result.get("structuredContent")) {
        (Some(Value::Array(_)), _) => {}
        (Some(_), _) => return Err("result.content must be an array".into()),
        (None, Some(structured)) => {
            let text = structured.to_string();
            result.insert("content".into(), json!([{ "type": "text", "text": text }]));
        }
        (None, None) => return Err("result needs content or structuredContent".into()),
    }
    Ok(Outcome::Complete(Value::Object(result)))
}

fn final_error(body: &Value) -> Result<Outcome, String> {
    let code = body.get("code").and_then(Value::as_i64);
    let message = body.get("message").and_then(Value::as_str);
    let (Some(code), Some(message)) = (code, message) else {
        return Err("error needs an integer code and a string message".into());
    };
    let mut error = RpcError::new(code, message);
    if let Some(data) = body.get("data").filter(|data| !data.is_null()) {
        error = error.with_data(data.clone());
    }
    Ok(Outcome::Error(error))
}

fn final_input_required(body: &Value) -> Result<Outcome, String> {
    let requests = body
        .get("requests")
        .and_then(Value::as_object)
        .filter(|requests| !requests.is_empty())
        .ok_or("inputRequired.requests must be a non-empty object")?;
    for (key, request) in requests {
        if key.is_empty() || InputKind::of(request).is_none() {
            let methods: Vec<&str> = InputKind::ALL.iter().map(|kind| kind.method()).collect();
            return Err(format!(
                "inputRequired.requests[\"{}\"] must be {{\"method\": {}, \"params\": {{…}}}}",
                truncate(key, 64),
                methods.join(" | ")
            ));
        }
    }
    let state = body.get("state").filter(|state| !state.is_null()).cloned();
    Ok(Outcome::InputRequired {
        requests: requests.clone(),
        state,
    })
}

/// A counting semaphore bounding one tool's concurrent runs.
struct Slots {
    limit: usize,
    used: Mutex<usize>,
    freed: Condvar,
}

struct Slot<'a>(&'a Slots);

/// Why no slot was taken.
enum NoSlot {
    Cancelled,
    TimedOut,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut used = self.0.used.lock().unwrap_or_else(PoisonError::into_inner);
        *used = used.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

impl Slots {
    fn new(limit: usize) -> Slots {
        Slots {
            limit,
            used: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// Waits for a free slot; gives up when the run is cancelled or after `patience`
    /// (which bounds inline calls, whose host never cancels).
    fn acquire(
        &self,
        host: &mut dyn InvocationHost,
        patience: Duration,
    ) -> Result<Slot<'_>, NoSlot> {
        let started = Instant::now();
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if *used < self.limit {
                *used += 1;
                return Ok(Slot(self));
            }
            if host.cancelled() {
                return Err(NoSlot::Cancelled);
            }
            if started.elapsed() >= patience {
                return Err(NoSlot::TimedOut);
            }
            used = self
                .freed
                .wait_timeout(used, Duration::from_millis(50))
                .map(|(guard, _)| guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner().0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn progress_lines_are_recognised_strictly() {
        let line = br#"{"progress": 2, "total": 5, "message": "two"}"#;
        assert_eq!(
            parse_progress(line),
            Some(Progress {
                progress: 2.0,
                total: Some(5.0),
                message: Some("two".into())
            })
        );
        assert!(parse_progress(br#"{"progress": "2"}"#).is_none());
        assert!(parse_progress(br#"{"progress": 1, "extra": true}"#).is_none());
        assert!(parse_progress(b"progress 1").is_none());
    }

    /// Hands out a few bytes per read, so lines straddle reads.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.len().min(buf.len()).min(3);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn stdout_is_scanned_for_progress_across_reads_and_bounded() {
        let out = b"text\n{\"progress\": 1, \"message\": \"one\"}\n{\"progress\": 2}\ntail";
        let (events, received) = crossbeam_channel::unbounded();
        let captured = read_stdout(Trickle(out), 1000, &events);
        assert_eq!(captured.bytes, out);
        let seen: Vec<f64> = received
            .try_iter()
            .map(|event| match event {
                Event::Progress(progress) => progress.progress,
                Event::Overflow => panic!("no overflow expected"),
            })
            .collect();
        assert_eq!(seen, vec![1.0, 2.0]);

        let captured = read_stdout(Trickle(out), 10, &events);
        assert!(captured.bytes.len() <= 10);
        assert!(matches!(received.try_recv(), Ok(Event::Overflow)));
        assert!(received.try_recv().is_err(), "overflow is reported once");
    }

    #[test]
    fn final_line_shapes() {
        let ok = interpret(
            exit(0),
            b"{\"progress\":1}\n{\"result\":{\"content\":[]}}\n\n",
        );
        assert_eq!(ok, Outcome::Complete(json!({ "content": [] })));
        let structured = interpret(exit(3), br#"{"result":{"structuredContent":{"a":1}}}"#);
        assert_eq!(
            structured,
            Outcome::Complete(json!({
                "structuredContent": { "a": 1 },
                "content": [{ "type": "text", "text": "{\"a\":1}" }],
            }))
        );
        let error = interpret(exit(0), br#"{"error":{"code":-32602,"message":"no"}}"#);
        assert_eq!(error, Outcome::Error(RpcError::new(-32602, "no")));
        let ask = interpret(
            exit(0),
            br#"{"inputRequired":{"requests":{"k":{"method":"roots/list","params":{}}},"state":7}}"#,
        );
        assert!(matches!(ask, Outcome::InputRequired { state: Some(_), .. }));
    }

    #[test]
    fn plain_text_and_failures() {
        let text = interpret(exit(0), b"hello\n{\"progress\":1}\nworld\n");
        assert_eq!(
            text,
            Outcome::Complete(super::super::text_result("hello\nworld"))
        );
        assert!(matches!(interpret(exit(1), b"oops\n"), Outcome::Retry(_)));
        assert!(matches!(
            interpret(ExitStatus::from_raw(9), b""),
            Outcome::Retry(reason) if reason.contains("signal 9")
        ));
        assert!(matches!(
            interpret(exit(0), br#"{"result": 5}"#),
            Outcome::Retry(reason) if reason.contains("malformed")
        ));
        assert!(matches!(
            interpret(exit(0), br#"{"result": {"content": []}, "x": 1}"#),
            Outcome::Retry(_)
        ));
    }
}
