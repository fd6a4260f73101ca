// Over 600 lines: the records every store shares, one after another.
//! The engine's records in plain Rust types: what a [`super::TaskStore`] takes and
//! returns, whatever database is behind it. Pure data, plus the rules about it that
//! involve no storage (how an attempt's outcome resolves, what a new task looks like).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::flow::{Gate, Waiting};
pub use schedule::{NewSlot, ScheduleMark, ScheduleSlot, SlotOutcome};
use taskd_protocol::input::response_matches;
use taskd_protocol::Identity;
use taskd_protocol::{code, RpcError, TaskStatus, TraceContext};

/// The opaque origin persisted with a task: everything a worker needs to run it again,
/// in any process, after any restart. Sensitive: never logged.
///
/// Version 2 ([`ORIGIN_VERSION`]) leaves out `protocol_version` and `capabilities`
/// when they are [`ORIGIN_PROTOCOL_VERSION`] and [`origin_capabilities`], which is what
/// most clients send. That saves 98 of a no-op task's 140 origin bytes (issue 19;
/// docs/benchmarks/store-scale.md, "Where a stored no-op task's bytes go"). A missing field reads
/// as that value. Version 1 origins always carry both fields and read as before.
#[derive(Debug, Serialize, Deserialize)]
pub struct Origin {
    pub v: u32,
    pub tool: String,
    pub arguments: Map<String, Value>,
    #[serde(
        default = "origin_protocol_version",
        skip_serializing_if = "is_origin_protocol_version"
    )]
    pub protocol_version: String,
    #[serde(
        default = "origin_capabilities",
        skip_serializing_if = "is_origin_capabilities"
    )]
    pub capabilities: Map<String, Value>,
}

/// The origin format new tasks are stored in (see [`Origin`]).
pub const ORIGIN_VERSION: u32 = 2;

/// What an origin without `protocol_version` means. This is part of the stored format,
/// not the current protocol: it must never change, or stored tasks would change meaning.
pub const ORIGIN_PROTOCOL_VERSION: &str = "2026-07-28";

fn origin_protocol_version() -> String {
    ORIGIN_PROTOCOL_VERSION.to_owned()
}

fn is_origin_protocol_version(version: &str) -> bool {
    version == ORIGIN_PROTOCOL_VERSION
}

/// What an origin without `capabilities` means: a client that declares the tasks
/// extension and nothing else. Part of the stored format, like [`ORIGIN_PROTOCOL_VERSION`].
pub fn origin_capabilities() -> Map<String, Value> {
    let mut extensions = Map::new();
    extensions.insert(
        "io.modelcontextprotocol/tasks".to_owned(),
        Value::Object(Map::new()),
    );
    let mut capabilities = Map::new();
    capabilities.insert("extensions".to_owned(), Value::Object(extensions));
    capabilities
}

fn is_origin_capabilities(capabilities: &Map<String, Value>) -> bool {
    *capabilities == origin_capabilities()
}

/// A task as `tasks/get` renders it.
#[derive(Debug, Clone)]
pub struct TaskRow {
    pub id: String,
    pub tool: String,
    pub status: TaskStatus,
    pub status_message: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub ttl_ms: Option<i64>,
    pub poll_interval_ms: i64,
    pub result: Option<String>,
    pub error: Option<String>,
    pub input_requests: Option<String>,
    pub version: i64,
    /// The trace context the task was created in (see [`NewTask::trace`]).
    pub trace: Option<TraceContext>,
    /// Why its queued job is not running, where `tasks/get` reads it (else `None`).
    /// Boxed: rarely there, and every task row would carry its room.
    pub waiting: Option<Box<Waiting>>,
}

/// How far one job moves its identity along the queue at weight 1 (see [`NewTask::stride`]).
///
/// Fair claiming (issue 29), the same on every backend: each ready job holds a *turn*,
/// and a claim takes the job of the highest priority, then of the smallest turn (then
/// the oldest). A job that joins the queue takes its identity's next turn at its
/// priority: one stride after the identity's last queued job there, and never before
/// the first turn still queued there (start-time fair queuing). So identities with
/// queued jobs take turns, `weight` times as often for an identity of that weight; an
/// identity that arrives behind a long backlog of another's starts at the head of the
/// queue; and jobs of one identity keep their order. A claim reads one index entry
/// whatever the number of identities; giving a turn reads two.
///
/// A job that returns to the queue (a task answered after asking for input; a retry,
/// once its backoff has passed) takes a turn again the same way: behind its identity's
/// queued jobs. A job released at shutdown keeps its turn, and runs first.
pub const TURN: i64 = 1 << 20;

/// Most `weight` an identity may have: its stride is still over a thousand.
pub const MAX_WEIGHT: u32 = 1000;

/// A task to create, with its first job.
pub struct NewTask {
    pub id: String,
    pub identity: Identity,
    pub tool: String,
    pub origin: Vec<u8>,
    pub input_responses: String,
    pub now: i64,
    pub ttl_ms: Option<i64>,
    pub poll_interval_ms: i64,
    pub max_attempts: i64,
    pub backoff_ms: i64,
    pub timeout_ms: i64,
    pub idempotency_key: Option<String>,
    /// [`arguments_digest`] of the arguments, with an idempotency key only.
    pub arguments_digest: Option<Vec<u8>>,
    /// The trace context every later span of the task joins (and its command tools
    /// see): the span of its creation when telemetry is on, else the caller's context
    /// as it came. Stored as `tasks.trace_context`.
    pub trace: Option<TraceContext>,
    /// The job's priority: its tool's plus its identity's (higher runs first).
    pub priority: i64,
    /// How far each job of this identity moves it along the queue: [`TURN`] divided by
    /// its weight (see [`NewTask::stride`]).
    pub stride: i64,
    /// Its gate, when its tool has a concurrency key (see [`crate::flow`]).
    pub gate: Option<Gate>,
    /// When its job may first run (Unix ms), when later than `now`: it waits in the
    /// queue without a turn until then, as a retry waits for its backoff.
    pub run_after: Option<i64>,
    /// The schedule slot it is the task of (see [`crate::schedules`]): unique in the
    /// store, so that no slot ever gets two tasks.
    pub schedule: Option<NewSlot>,
    /// The task it repeats, when an operator re-ran one (`mcp-taskd tasks rerun`).
    pub rerun_of: Option<String>,
}

impl NewTask {
    /// The stride of an identity of `weight` (1 to [`MAX_WEIGHT`]; others are clamped).
    pub fn stride(weight: u32) -> i64 {
        TURN / i64::from(weight.clamp(1, MAX_WEIGHT))
    }

    /// Whether the store creates it alone rather than with others in one statement: it
    /// has an idempotency key to check, a slot to claim, a later start, or a link to the
    /// task it re-runs.
    pub fn creates_alone(&self) -> bool {
        self.idempotency_key.is_some()
            || self.schedule.is_some()
            || self.run_after.is_some()
            || self.rerun_of.is_some()
    }

    /// Saturating: the longest `ttl_ms` a configuration accepts is `i64::MAX`.
    pub fn expires_at(&self) -> Option<i64> {
        self.ttl_ms.map(|ttl| self.now.saturating_add(ttl))
    }

    /// The task as `tasks/get` renders it, right after its creation.
    pub fn created(&self) -> TaskRow {
        TaskRow {
            id: self.id.clone(),
            tool: self.tool.clone(),
            status: TaskStatus::Working,
            status_message: None,
            created_at: self.now,
            updated_at: self.now,
            ttl_ms: self.ttl_ms,
            poll_interval_ms: self.poll_interval_ms,
            result: None,
            error: None,
            input_requests: None,
            version: 1,
            trace: self.trace.clone(),
            waiting: None,
        }
    }
}

/// What a creation did.
#[derive(Debug)]
pub enum Created {
    /// The new task, or the live task that already holds the idempotency key for the
    /// same tool and arguments.
    Task(TaskRow),
    /// A live task of the same identity holds the key for another tool or other
    /// arguments: nothing was stored.
    KeyInUse(KeyConflict),
    /// The schedule slot has its task already (made by another node, or before a
    /// restart): nothing was stored.
    SlotTaken,
}

/// What an idempotency key was already used for.
#[derive(Debug, PartialEq, Eq)]
pub enum KeyConflict {
    /// A task of this tool.
    OtherTool(String),
    /// A task of the same tool with different arguments.
    OtherArguments,
}

/// The SHA-256 of `arguments` in a canonical form (object keys sorted at every level),
/// which tells whether a reused idempotency key comes with the same arguments. Key
/// order does not matter to a tool, so it must not matter here either.
pub fn arguments_digest(arguments: &Map<String, Value>) -> Vec<u8> {
    use sha2::{Digest, Sha256};

    fn object(entries: &Map<String, Value>, out: &mut Vec<u8>) {
        let mut sorted: Vec<(&String, &Value)> = entries.iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        out.push(b'{');
        for (index, (key, value)) in sorted.into_iter().enumerate() {
            if index > 0 {
                out.push(b',');
            }
            // A string serializes infallibly.
            out.extend_from_slice(serde_json::to_string(key).unwrap_or_default().as_bytes());
            out.push(b':');
            canonical(value, out);
        }
        out.push(b'}');
    }

    fn canonical(value: &Value, out: &mut Vec<u8>) {
        match value {
            Value::Object(entries) => object(entries, out),
            Value::Array(items) => {
                out.push(b'[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(b',');
                    }
                    canonical(item, out);
                }
                out.push(b']');
            }
            scalar => out.extend_from_slice(scalar.to_string().as_bytes()),
        }
    }

    let mut text = Vec::new();
    object(arguments, &mut text);
    Sha256::digest(&text).to_vec()
}

/// What `tasks/cancel` did.
#[derive(Debug, PartialEq, Eq)]
pub enum CancelEffect {
    NotFound,
    /// Terminal already, or cancelled now.
    Done,
    /// Running: intent recorded; the running attempt must be told.
    SignalRunning,
}

/// What `tasks/update` did.
#[derive(Debug, PartialEq, Eq)]
pub enum UpdateEffect {
    NotFound,
    /// Acknowledged; `requeued` when the round is complete and the job runs again.
    Accepted {
        requeued: bool,
    },
}

/// A job handed to a worker.
#[derive(Debug, Clone)]
pub struct Claim {
    pub task_id: String,
    pub token: String,
    pub attempt: i64,
    pub deadline: i64,
    /// How long the job had been ready to run (since `run_after`) when it was claimed.
    pub queue_wait_ms: i64,
    pub tool: String,
    /// The task's identity (`auth::Identity::key`).
    pub owner: String,
    pub origin: Vec<u8>,
    pub input_responses: String,
    pub tool_state: Option<String>,
    /// The task's stored trace context.
    pub trace: Option<TraceContext>,
    /// The job's gate's id, when its tool has a concurrency key.
    pub gate: Option<String>,
}

#[cfg(any(test, feature = "test-support"))]
impl Claim {
    /// A first attempt of `task_id`'s job of `tool`, leased with `<task_id>-token`, as
    /// a claimant sees it in unit tests.
    pub fn of(task_id: &str, tool: &str) -> Claim {
        Claim {
            task_id: task_id.into(),
            token: format!("{task_id}-token"),
            attempt: 1,
            deadline: i64::MAX,
            queue_wait_ms: 0,
            tool: tool.into(),
            owner: String::new(),
            origin: Vec::new(),
            input_responses: "{}".into(),
            tool_state: None,
            trace: None,
            gate: None,
        }
    }
}

/// A job's lease: whose attempt it is (the claim's fencing token).
#[derive(Debug, Clone)]
pub struct Lease {
    pub task_id: String,
    pub token: String,
}

/// How an attempt ended, as the worker reports it.
#[derive(Debug, Clone)]
pub enum Finish {
    Completed {
        result: String,
    },
    Failed {
        error: String,
    },
    InputRequired {
        requests: Map<String, Value>,
        state: Option<String>,
    },
    Cancelled,
    /// A crash-like failure: retried with backoff, or `failed` after the last attempt.
    Retry {
        reason: String,
    },
    /// Graceful shutdown: back to the queue, the attempt not counted.
    Release,
}

impl Finish {
    /// A failure with `error` as the task's JSON-RPC error.
    pub fn failed(error: &RpcError) -> Finish {
        Finish::Failed {
            error: error.to_json().to_string(),
        }
    }

    /// The task's error when its tool asks again for an input request key it used
    /// before in the task.
    pub fn reused_input_key_error() -> String {
        RpcError::new(code::INTERNAL_ERROR, "The tool reused an input request key")
            .to_json()
            .to_string()
    }

    /// What the store records for attempt `attempt` of `max_attempts`: a requested
    /// cancellation overrides anything but a result, and the last retry fails the task.
    pub fn resolve(self, attempt: i64, max_attempts: i64, cancel_requested: bool) -> Finish {
        self.overridden(attempt, max_attempts, cancel_requested)
            .unwrap_or(self)
    }

    /// What [`Finish::resolve`] records instead of this outcome, if anything: the
    /// outcome itself is not copied (a result can be megabytes).
    pub fn overridden(
        &self,
        attempt: i64,
        max_attempts: i64,
        cancel_requested: bool,
    ) -> Option<Finish> {
        match self {
            Finish::Completed { .. } => None,
            _ if cancel_requested => Some(Finish::Cancelled),
            Finish::Retry { reason } if attempt >= max_attempts => {
                Some(Finish::failed(&RpcError::new(
                    code::INTERNAL_ERROR,
                    format!(
                        "Task failed after {attempt} attempt{}: {reason}",
                        if attempt == 1 { "" } else { "s" }
                    ),
                )))
            }
            _ => None,
        }
    }

    /// The attempt's recorded outcome.
    pub fn label(&self) -> &'static str {
        match self {
            Finish::Completed { .. } => TaskStatus::Completed.as_str(),
            Finish::Failed { .. } => TaskStatus::Failed.as_str(),
            Finish::InputRequired { .. } => TaskStatus::InputRequired.as_str(),
            Finish::Cancelled => TaskStatus::Cancelled.as_str(),
            Finish::Retry { .. } => "retry",
            Finish::Release => "released",
        }
    }
}

/// Counts for the metrics page.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub tasks: Vec<(String, u64)>,
    pub jobs: Vec<(String, u64)>,
    /// Per tool, since the database was created.
    pub totals: Vec<ToolTotals>,
    pub oldest_ready_age_ms: u64,
    pub outbox_rows: u64,
}

/// Tasks of one tool created, and ended in each terminal status, since the database was
/// created (counters: deleting a task past its TTL does not decrement them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolTotals {
    pub tool: String,
    pub created: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
}

/// Which tasks an operator lists; every condition is optional.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TaskFilter {
    pub status: Option<TaskStatus>,
    pub tool: Option<String>,
    pub principal: Option<String>,
    /// Only tasks created at or after this time (Unix ms).
    pub created_since: Option<i64>,
    /// Only tasks not finished yet (working or waiting for input; with `status`, both
    /// must hold).
    #[serde(default)]
    pub unfinished: bool,
    /// Only tasks whose id sorts at or below this one (created no later than it): a
    /// bulk action acts on the tasks it counted, not on those created since (its own
    /// re-runs among them).
    #[serde(default)]
    pub through: Option<String>,
}

impl TaskFilter {
    /// Whether the filter names anything: a bulk action needs it to.
    pub fn is_empty(&self) -> bool {
        self.status.is_none()
            && self.tool.is_none()
            && self.principal.is_none()
            && self.created_since.is_none()
            && !self.unfinished
    }

    /// Whether only unfinished tasks match, which the history never holds.
    pub fn live_only(&self) -> bool {
        self.unfinished || self.status.is_some_and(|status| !status.is_terminal())
    }

    /// Whether `task` matches (for rows read in other ways than the store's filter).
    pub fn matches(&self, task: &TaskSummary) -> bool {
        self.status.is_none_or(|status| status == task.status)
            && self.tool.as_deref().is_none_or(|tool| tool == task.tool)
            && self
                .principal
                .as_deref()
                .is_none_or(|principal| principal == task.principal)
            && self
                .created_since
                .is_none_or(|since| task.created_at >= since)
            && (!self.unfinished || !task.status.is_terminal())
            && self
                .through
                .as_deref()
                .is_none_or(|through| task.id.as_str() <= through)
    }
}

/// One page of an operator's task list.
#[derive(Debug, Clone, Default)]
pub struct TaskPage {
    /// Matching tasks, newest first.
    pub tasks: Vec<TaskSummary>,
    /// Set when the page examined as many rows as it may before it found a full page:
    /// the id to continue below (as `before`). `None` with a short page: nothing older
    /// matches.
    pub resume: Option<String>,
}

/// A task as an operator's list shows it: no contents.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskSummary {
    pub id: String,
    pub tool: String,
    pub status: TaskStatus,
    pub endpoint: String,
    pub tenant: String,
    pub principal: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub status_message: Option<String>,
    /// The schedule slot that started it, if one did.
    #[serde(default)]
    pub schedule: Option<ScheduleSlot>,
    /// The task this one re-runs (`mcp-taskd tasks rerun`), if any.
    #[serde(default)]
    pub rerun_of: Option<String>,
    /// Set on a history row (see [`crate::history`]): when the task was deleted past
    /// its TTL, leaving only this summary.
    #[serde(default)]
    pub removed_at: Option<i64>,
}

/// One attempt of a task (the `attempts` record).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub attempt: i64,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    /// A terminal status, `input_required`, `retry` or `released`; none while running.
    pub outcome: Option<String>,
}

/// The dispatch record of a live task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    pub state: String,
    pub attempt: i64,
    pub max_attempts: i64,
    pub run_after: i64,
    pub lease_expires: Option<i64>,
    pub last_error: Option<String>,
}

/// Everything stored about a task, for `tasks show`. Sensitive: the caller decides
/// what of `origin`, `result` and `input_responses` to show.
#[derive(Debug, Clone)]
pub struct TaskDetail {
    pub summary: TaskSummary,
    pub ttl_ms: Option<i64>,
    pub expires_at: Option<i64>,
    pub cancel_requested: bool,
    pub error: Option<String>,
    pub input_requests: Option<String>,
    pub job: Option<JobRecord>,
    pub attempts: Vec<AttemptRecord>,
    pub origin: Vec<u8>,
    pub result: Option<String>,
    pub input_responses: String,
    /// The trace the task's spans belong to (not sensitive: ids only).
    pub trace: Option<TraceContext>,
}

/// What a rerun copies from its source task.
#[derive(Debug, Clone)]
pub struct RerunSource {
    pub identity: Identity,
    pub tool: String,
    pub origin: Vec<u8>,
}

/// Counts for `mcp-taskd stats`. On demand only: some of them scan (`/metrics` uses
/// [`Stats`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatsDetail {
    /// (tool, status, count), every pair that has tasks.
    pub by_tool_status: Vec<(String, TaskStatus, u64)>,
    /// Jobs by state: queued, running, waiting.
    pub jobs: Vec<(String, u64)>,
    /// Age of the oldest job ready to run.
    pub oldest_ready_age_ms: u64,
    pub created_last_minute: u64,
    pub created_last_hour: u64,
    /// Attempts ended in the window, by outcome.
    pub ended_last_minute: Vec<(String, u64)>,
    pub ended_last_hour: Vec<(String, u64)>,
    /// The identities with the most jobs (tasks not yet terminal), most first, at most
    /// [`STATS_IDENTITIES`].
    pub by_identity: Vec<IdentityJobs>,
}

/// How many identities `mcp-taskd stats` lists by their jobs.
pub const STATS_IDENTITIES: i64 = 20;

/// One identity's jobs, by state (`mcp-taskd stats`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IdentityJobs {
    /// The jobs' `owner`: the identity's key (`auth::Identity::key`).
    pub owner: String,
    pub queued: u64,
    pub running: u64,
    pub waiting: u64,
}

/// What a `tasks/update` does to a task's round of input requests: the same on every
/// store, which only reads the round and writes its outcome.
pub struct InputRound {
    /// The responses that answer outstanding requests (the rest are ignored: unknown,
    /// answered, superseded or mismatched keys).
    accepted: Map<String, Value>,
    /// The requests still unanswered after them.
    outstanding: Map<String, Value>,
}

impl InputRound {
    /// The round after `responses`, given the task's stored `input_requests`; `None`
    /// when none of them answers an outstanding request.
    pub fn answer(input_requests: Option<&str>, responses: &Map<String, Value>) -> Option<Self> {
        let mut outstanding: Map<String, Value> = input_requests
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default();
        let accepted: Map<String, Value> = responses
            .iter()
            .filter(|(key, response)| {
                outstanding
                    .get(key.as_str())
                    .is_some_and(|request| response_matches(request, response))
            })
            .map(|(key, response)| (key.clone(), response.clone()))
            .collect();
        if accepted.is_empty() {
            return None;
        }
        outstanding.retain(|key, _| !accepted.contains_key(key));
        Some(InputRound {
            accepted,
            outstanding,
        })
    }

    /// Whether every request of the round is answered: the task works again.
    pub fn done(&self) -> bool {
        self.outstanding.is_empty()
    }

    /// The task's status and stored `input_requests` after the round.
    pub fn next(&self) -> (TaskStatus, Option<String>) {
        if self.done() {
            (TaskStatus::Working, None)
        } else {
            (
                TaskStatus::InputRequired,
                Some(Value::Object(self.outstanding.clone()).to_string()),
            )
        }
    }

    /// The task's stored `input_responses` (JSON text) with the accepted ones added.
    pub fn responses_after(&self, stored: &str) -> String {
        let mut all: Map<String, Value> = serde_json::from_str(stored).unwrap_or_default();
        all.extend(self.accepted.clone());
        Value::Object(all).to_string()
    }
}

/// A legacy session as the store keeps it (issue 28): what `initialize` negotiated and
/// what the client set since, so that a restarted server, or another node, serves the
/// session as the one that opened it would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The `Mcp-Session-Id`: random, unguessable.
    pub id: String,
    /// The identity it is bound to (`auth::Identity::key`); never a credential.
    pub owner: String,
    /// The negotiated revision.
    pub version: String,
    /// JSON: the client's capabilities, and its `clientInfo` (`null` if it sent none).
    pub capabilities: String,
    pub client_info: String,
    /// `logging/setLevel`'s level, if the client set one.
    pub log_level: Option<String>,
    /// JSON arrays: the resource URIs subscribed to, the task ids followed.
    pub subscriptions: String,
    pub followed: String,
    /// Unix ms of its last recorded use (recorded lazily: see `legacy::sessions`).
    pub last_used: i64,
}

mod schedule;
#[cfg(test)]
mod tests;
