//! Tools: what a tool is, how it is registered, and how one invocation talks to its host.
//!
//! A tool is a [`ToolSpec`] (what `tools/list` shows plus the server-side policy: inline
//! or task, retries, limits) and a [`Tool`] implementation. The same implementation runs
//! inline inside a `tools/call` or as a durable task on a worker; the difference is the
//! [`InvocationHost`] it is given. Built-in tools and command tools ([`command`]: any
//! executable declared in `[[tools]]`) register through [`Registry::register`] — there
//! are no special cases in the protocol layer. The [`catalog`] holds the resources and
//! prompts served beside the tools.
//!
//! May depend on: `taskd-protocol`, `taskd-telemetry` (a command tool's
//! program runs in a span). Must never know: tasks or their store (a tool sees only its
//! [`InvocationHost`]), transports, the configuration file (command tools are built from
//! their own [`command::CommandToolConfig`]).

pub mod catalog;
pub mod command;
pub mod flow;
pub mod panics;
mod registry;
pub mod schema;
pub mod slots;

use std::time::Duration;

use serde_json::{Map, Value};

use taskd_protocol::RpcError;
use taskd_protocol::{ClientCapabilities, LogLevel, TraceContext};

pub use registry::{Registered, RegistrationError, RegistrationProblem, Registry};

/// Longest inline wait a task tool may have (`tasks.inline_wait_ms`, or a tool's own):
/// hosts cut tool calls off at about 4 minutes.
pub const MAX_INLINE_WAIT_MS: u64 = 240_000;

/// Priorities a tool or a token may have (`priority`): a job's is the sum of both.
pub const PRIORITIES: std::ops::RangeInclusive<i32> = -100..=100;

/// Whether a tool runs inline in its `tools/call` or as a durable task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskPolicy {
    /// Always answered within the `tools/call` request.
    Inline,
    /// A task when the request declares the Tasks extension; otherwise inline, or with
    /// `tasks.bridge` on a task whose result (or handle) comes in a `CallToolResult`.
    Optional,
    /// Always a task; requests that do not declare the extension get -32021 (or, with
    /// `tasks.bridge` on, the task's result or a handle in a `CallToolResult`).
    Required,
}

/// How durable executions of a task tool are bounded and retried.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionPolicy {
    /// Attempts before a task that keeps crashing, timing out or losing its lease fails.
    pub max_attempts: u32,
    /// Hard deadline for one attempt.
    pub timeout: Duration,
    /// First retry delay; doubles per attempt (capped at 10 minutes).
    pub backoff: Duration,
    /// How long a task is kept after creation (`None`: the server's `[tasks]` default).
    pub ttl: Option<Duration>,
    /// Polling interval suggested to clients (`None`: the server's `[tasks]` default).
    pub poll_interval: Option<Duration>,
    /// Bytes of a task's output kept (`None`: the server's `output.max_bytes_per_task`;
    /// `0`: none is kept).
    pub output_max_bytes: Option<u64>,
}

impl Default for ExecutionPolicy {
    fn default() -> Self {
        ExecutionPolicy {
            max_attempts: 3,
            timeout: Duration::from_secs(15 * 60),
            backoff: Duration::from_secs(1),
            ttl: None,
            poll_interval: None,
            output_max_bytes: None,
        }
    }
}

/// Where a line of a run's output came from (see [`InvocationHost::output`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    /// A program's stdout, beyond its protocol lines (progress, the final message).
    Stdout,
    /// A program's stderr.
    Stderr,
    /// A status message the run reported (its progress).
    Status,
    /// A log message the run sent (an upstream's `notifications/message`).
    Log,
}

impl OutputStream {
    pub const ALL: [OutputStream; 4] = [
        OutputStream::Stdout,
        OutputStream::Stderr,
        OutputStream::Status,
        OutputStream::Log,
    ];

    /// The name clients and operators see (and the store keeps).
    pub fn as_str(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
            OutputStream::Status => "status",
            OutputStream::Log => "log",
        }
    }

    pub fn parse(name: &str) -> Option<OutputStream> {
        OutputStream::ALL
            .into_iter()
            .find(|stream| stream.as_str() == name)
    }
}

/// Longest line of output kept whole; longer ones are cut into lines of this length.
pub const MAX_OUTPUT_LINE: usize = 4096;

/// Everything the server knows about a tool before running it.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    /// Served exactly as given (key order preserved) and compiled for validation.
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    pub annotations: Option<Value>,
    pub task_policy: TaskPolicy,
    /// Client capabilities the tool cannot run without (e.g. `{"sampling":{}}`).
    pub required_capabilities: Option<Map<String, Value>>,
    pub execution: ExecutionPolicy,
    /// The argument whose value makes task submission idempotent, if any.
    pub idempotency_argument: Option<String>,
    /// Most runs at once, inline and as tasks together (`None`: unbounded).
    pub max_concurrency: Option<usize>,
    /// How long a call from a client that does not speak tasks waits for the task
    /// before it gets a handle (`None`: the server's `tasks.inline_wait_ms`).
    pub inline_wait: Option<Duration>,
    /// OAuth scopes an access token needs for this tool and its tasks (all of them).
    pub scopes: Vec<String>,
    /// Queued jobs of a higher priority are claimed first ([`PRIORITIES`]; the
    /// identity's priority is added): a quick interactive tool is not stuck behind a
    /// batch tool's backlog. Identities take turns within a priority.
    pub priority: i32,
    /// Concurrency by key, the rate limit, what a pause does (issue 48).
    pub flow: flow::FlowControl,
}

impl ToolSpec {
    /// An inline tool with the given input schema and defaults everywhere else.
    pub fn new(name: &str, description: &str, input_schema: Value) -> ToolSpec {
        ToolSpec {
            name: name.to_owned(),
            title: None,
            description: description.to_owned(),
            input_schema,
            output_schema: None,
            annotations: None,
            task_policy: TaskPolicy::Inline,
            required_capabilities: None,
            execution: ExecutionPolicy::default(),
            idempotency_argument: None,
            max_concurrency: None,
            inline_wait: None,
            scopes: Vec::new(),
            priority: 0,
            flow: flow::FlowControl::default(),
        }
    }

    pub fn task_policy(mut self, policy: TaskPolicy) -> ToolSpec {
        self.task_policy = policy;
        self
    }

    pub fn output_schema(mut self, schema: Value) -> ToolSpec {
        self.output_schema = Some(schema);
        self
    }

    pub fn requires(mut self, capabilities: Value) -> ToolSpec {
        self.required_capabilities = capabilities.as_object().cloned();
        self
    }

    pub fn execution(mut self, execution: ExecutionPolicy) -> ToolSpec {
        self.execution = execution;
        self
    }

    /// The `Tool` object of `tools/list`.
    pub fn to_json(&self) -> Value {
        let mut tool = Map::new();
        tool.insert("name".into(), Value::String(self.name.clone()));
        if let Some(title) = &self.title {
            tool.insert("title".into(), Value::String(title.clone()));
        }
        tool.insert(
            "description".into(),
            Value::String(self.description.clone()),
        );
        tool.insert("inputSchema".into(), self.input_schema.clone());
        if let Some(schema) = &self.output_schema {
            tool.insert("outputSchema".into(), schema.clone());
        }
        if let Some(annotations) = &self.annotations {
            tool.insert("annotations".into(), annotations.clone());
        }
        Value::Object(tool)
    }
}

/// What one run of a tool produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A `CallToolResult` (`content`, optional `structuredContent`, optional `isError`).
    /// A tool error (`isError: true`) is still a completed call.
    Complete(Value),
    /// The tool needs answers from the client first. `requests` is an MRTR
    /// `InputRequests` map; `state` is handed back to the tool on the next round.
    InputRequired {
        requests: Map<String, Value>,
        state: Option<Value>,
    },
    /// A JSON-RPC-level failure (inline: the error response; task: `failed`).
    Error(RpcError),
    /// The run stopped because cancellation was requested.
    Cancelled,
    /// The run failed in a way worth retrying (a crashed or timed-out program, malformed
    /// output). On a worker the attempt is retried with backoff, and the task fails after
    /// the last attempt with this reason in its error message; inline, the client gets a
    /// tool error (`isError: true`) saying why. Either way the end of the run's output
    /// follows the reason. The reason must not contain arguments or results.
    Retry(String),
    /// The run failed in a way not worth retrying (an upstream call that may have had
    /// its effect, cut off): on a worker the task fails at once with this reason in its
    /// error message; inline, as [`Outcome::Retry`]. The end of the run's output follows
    /// the reason; the reason must not contain arguments or results.
    Failed(String),
}

/// What a task tool decides synchronously, inside `tools/call`, before a task exists.
pub enum Admission {
    /// Create the task; the worker sees the input responses gathered so far.
    Proceed,
    /// Answer the `tools/call` directly (typically `InputRequired` to run an MRTR
    /// exchange before the task is created).
    Answer(Outcome),
}

/// The services a running invocation can use. Inline calls get one backed by the
/// request's response stream; task attempts get one backed by the store and the
/// worker's lease.
pub trait InvocationHost {
    /// Reports progress: a `notifications/progress` inline (when the request asked for
    /// it), the task's `statusMessage` on a worker.
    fn progress(&mut self, progress: f64, total: Option<f64>, message: Option<&str>);
    /// A log message, sent only when the request asked for this level or a lower one.
    fn log(&mut self, level: LogLevel, data: Value);
    /// Whether the run should stop (task cancelled, lease lost or deadline passed).
    fn cancelled(&self) -> bool;
    /// Sleeps up to `duration`; returns `false` early when the run should stop.
    fn sleep(&mut self, duration: Duration) -> bool;
    /// Whether the run stops while its task goes on: the server is shutting down or
    /// another worker took the lease over. What the run started elsewhere (an upstream's
    /// task) should then be left running for the attempt that follows, not cancelled.
    fn released(&self) -> bool {
        false
    }
    /// Whether the run stops because its deadline (the tool's timeout) passed: a task
    /// attempt's; an inline run has none of the host's (its tool bounds it).
    fn timed_out(&self) -> bool {
        false
    }
    /// Keeps `state` with the task for the attempts that follow, now rather than when
    /// the run ends (a task attempt; inline it goes nowhere). Returns `false` when the
    /// run no longer holds its task.
    fn save_state(&mut self, _state: &Value) -> bool {
        true
    }
    /// The task id and attempt number (1-based) when this run is a task attempt; `None`
    /// inline.
    fn task_attempt(&self) -> Option<(&str, i64)> {
        None
    }
    /// The trace context the run belongs to (a command tool's `TRACEPARENT`): the
    /// tool run's span when telemetry is on, else the caller's context as it came.
    fn trace(&self) -> Option<TraceContext> {
        None
    }
    /// A line of the run's output, without its line end (at most [`MAX_OUTPUT_LINE`]
    /// bytes): kept with a task (what `tasks logs`, the output resource and
    /// `task_status` show), and the tail of an inline call's failure.
    fn output(&mut self, _stream: OutputStream, _line: &str) {}
}

/// One call of a tool: its validated inputs plus the host it runs in.
pub struct Invocation<'a> {
    pub arguments: &'a Map<String, Value>,
    /// Responses to input requests, keyed as the tool asked for them.
    pub input_responses: &'a Map<String, Value>,
    /// The tool's own state from its previous round, if any.
    pub state: Option<&'a Value>,
    /// The capabilities of the client this run answers to.
    pub capabilities: &'a ClientCapabilities,
    /// Who called: the caller's identity key (`auth::Identity::key`). Upstream tools
    /// keep a session per identity by it; it is never shown to a program.
    pub caller: &'a str,
    pub host: &'a mut dyn InvocationHost,
}

impl Invocation<'_> {
    pub fn str_arg(&self, name: &str) -> Option<&str> {
        self.arguments.get(name).and_then(Value::as_str)
    }

    pub fn f64_arg(&self, name: &str) -> Option<f64> {
        self.arguments.get(name).and_then(Value::as_f64)
    }

    /// The `content` object of an accepted elicitation answer for `key`.
    pub fn accepted_elicitation(&self, key: &str) -> Option<&Map<String, Value>> {
        let answer = self.input_responses.get(key)?.as_object()?;
        if answer.get("action").and_then(Value::as_str) != Some("accept") {
            return None;
        }
        answer.get("content").and_then(Value::as_object)
    }
}

/// A tool implementation.
pub trait Tool: Send + Sync {
    fn run(&self, invocation: &mut Invocation<'_>) -> Outcome;

    /// Runs inside `tools/call` before a task is created. The default creates the task
    /// straight away.
    fn admit(&self, _invocation: &mut Invocation<'_>) -> Admission {
        Admission::Proceed
    }
}

/// Any `Fn(&mut Invocation) -> Outcome` is a tool.
impl<F> Tool for F
where
    F: Fn(&mut Invocation<'_>) -> Outcome + Send + Sync,
{
    fn run(&self, invocation: &mut Invocation<'_>) -> Outcome {
        self(invocation)
    }
}

/// A `CallToolResult` holding one text block.
pub fn text_result(text: impl Into<String>) -> Value {
    serde_json::json!({ "content": [{ "type": "text", "text": text.into() }] })
}

/// A `CallToolResult` with `isError: true` and one text block.
pub fn error_result(text: impl Into<String>) -> Value {
    serde_json::json!({ "content": [{ "type": "text", "text": text.into() }], "isError": true })
}
