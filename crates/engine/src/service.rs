// Over 600 lines: create/get/update/cancel share the authorized lookup and rendering.
//! [`TaskService`]: what the protocol handlers call — create, get, update, cancel —
//! with authorization inside each lookup, store errors mapped to `RpcError`, and the
//! `Task` / `DetailedTask` JSON rendered.

use std::sync::Arc;

use crossbeam_channel::Sender;
use serde_json::{json, Map, Value};

mod flow;
mod start;

pub use self::flow::{InlinePlace, NoPlace};
pub use self::start::{Start, StartError, Started};
use super::backend::{StoreError, TaskStore};
use super::flow::{Gate, Waiting};
use super::model::{
    arguments_digest, CancelEffect, Created, KeyConflict, NewTask, Origin, Stats, TaskRow,
    UpdateEffect, ORIGIN_VERSION,
};
use super::output::{OutputPage, OutputRead};
use super::payload_gate::{Admitted, PayloadGate};
use super::workers::Inflight;
use crate::settings::{QuotaCounter, SettingsSource};
use crate::shares::{LiveTaskEstimates, Pacer, Quota};
use opentelemetry::KeyValue;
use taskd_base::clock::{now_ms, rfc3339};
use taskd_base::later::Later;
use taskd_protocol::{
    missing_for_input_requests, ClientCapabilities, RpcError, TaskStatus, TraceContext,
};
use taskd_protocol::{Identity, Scopes};
use taskd_telemetry::{unix_ms, Kind, Span, OUTCOME, TASK_ID};
use taskd_tools::Registered;

/// Longest task id accepted from a client.
const MAX_TASK_ID: usize = 128;

/// A `tools/call` that becomes a task: validated, admitted, about to be stored.
pub struct Submission<'a> {
    pub identity: &'a Identity,
    pub tool: &'a Registered,
    pub arguments: &'a Map<String, Value>,
    pub protocol_version: &'a str,
    pub capabilities: &'a ClientCapabilities,
    /// Responses gathered by an MRTR exchange before creation.
    pub input_responses: &'a Map<String, Value>,
    pub idempotency_key: Option<String>,
    /// The trace context the task joins (stored with it).
    pub trace: Option<TraceContext>,
}

pub struct TaskService {
    /// The tools, the `[tasks]` defaults and the shares in force (swapped by a reload).
    settings: Arc<dyn SettingsSource>,
    store: Arc<dyn TaskStore>,
    inflight: Arc<Inflight>,
    /// Wakes the dispatcher when a job becomes ready.
    wake: Sender<()>,
    /// Large payloads being read into answers at once.
    payloads: PayloadGate,
    /// Each identity's creations a second.
    pacer: Pacer,
    /// Each identity's tasks not yet terminal, counted in the store now and then.
    live_tasks: LiveTaskEstimates,
    /// Counts the creations refused by a quota.
    quotas: Arc<dyn QuotaCounter>,
    /// The paused tools as last read (see [`flow`]).
    pauses: flow::PauseCache,
}

/// Seconds a client over its quota of tasks not yet terminal is asked to wait: tasks
/// end at their own pace, so this is a polling interval, not a promise.
const LIVE_TASKS_RETRY_AFTER_S: u16 = 5;

/// The answer to a creation beyond the identity's `quota`: HTTP 429 with `Retry-After`,
/// naming the quota (and its limit) in the message and in `data`. Nothing was stored.
fn over_quota(quota: Quota, limit: Value, detail: &str, retry_after_s: u16) -> RpcError {
    RpcError {
        retry_after_s: Some(retry_after_s),
        ..RpcError::new(
            taskd_protocol::error::code::INTERNAL_ERROR,
            format!(
                "Quota exceeded: {detail} (quota {}: {limit}); retry after {retry_after_s} s",
                quota.name()
            ),
        )
        .with_status(429)
        .with_data(json!({
            "quota": quota.name(),
            "limit": limit,
            "retryAfterSeconds": retry_after_s,
        }))
    }
}

/// The answer to a submission whose idempotency key is held by another tool's task, or
/// by a task with other arguments (it names the key, which the client chose).
fn key_in_use(key: &str, conflict: KeyConflict) -> RpcError {
    let key = Value::String(key.to_owned());
    RpcError::invalid_params(match conflict {
        KeyConflict::OtherTool(tool) => {
            format!("idempotency key {key} was already used for tool {tool:?}")
        }
        KeyConflict::OtherArguments => {
            format!("idempotency key {key} was already used with different arguments")
        }
    })
}

/// Seconds a client is asked to wait before retrying when the store cannot write.
const RETRY_AFTER_S: u16 = 5;

/// Logs a store failure and answers the client: a temporary one (no space, read-only
/// storage, the store unavailable) as a 503 that names the cause, with `Retry-After`;
/// anything else as a generic internal error.
fn internal(error: StoreError) -> RpcError {
    let Some(cause) = temporary_cause(&error) else {
        log::error!("task store: {error}");
        return RpcError::internal();
    };
    log::debug!("task store: {error}");
    RpcError::unavailable(
        format!("Service unavailable: {cause}; retry later"),
        RETRY_AFTER_S,
    )
}

/// What a client is told about a temporary store failure; `None` for the others.
fn temporary_cause(error: &StoreError) -> Option<&'static str> {
    match error {
        StoreError::Full(_) => Some("the task store is out of disk space"),
        StoreError::ReadOnly(_) => Some("the task store cannot be written (read-only storage)"),
        StoreError::Unavailable(_) | StoreError::NotCommitted(_) => {
            Some("the task store is temporarily unavailable")
        }
        StoreError::Corrupt(_) | StoreError::Other(_) => None,
    }
}

impl TaskService {
    pub fn new(
        settings: Arc<dyn SettingsSource>,
        store: Arc<dyn TaskStore>,
        inflight: Arc<Inflight>,
        wake: Sender<()>,
        quotas: Arc<dyn QuotaCounter>,
    ) -> TaskService {
        let payload_bytes = settings.current().tasks().max_payload_bytes_in_flight;
        TaskService {
            payloads: PayloadGate::new(payload_bytes),
            settings,
            store,
            inflight,
            wake,
            pacer: Pacer::default(),
            live_tasks: LiveTaskEstimates::default(),
            quotas,
            pauses: flow::PauseCache::default(),
        }
    }

    /// Creates a durable task. Its `CreateTaskResult` arrives once the task, its job and
    /// its outbox row are committed; the calling thread does not wait for that.
    pub fn create(&self, submission: Submission<'_>) -> Later<Result<Value, RpcError>> {
        let Submission {
            identity,
            tool,
            arguments,
            protocol_version,
            capabilities,
            input_responses,
            idempotency_key,
            trace,
        } = submission;
        if let Err(refused) = self.admit(identity) {
            return Later::ready(Err(refused));
        }
        let origin = Origin {
            v: ORIGIN_VERSION,
            tool: tool.spec.name.clone(),
            arguments: arguments.clone(),
            protocol_version: protocol_version.to_owned(),
            capabilities: capabilities.0.clone(),
        };
        let Ok(origin) = serde_json::to_vec(&origin) else {
            return Later::ready(Err(RpcError::internal()));
        };
        let responses = Value::Object(input_responses.clone()).to_string();
        // Kept only with a key: it tells a retry from a reuse with other arguments.
        let digest = idempotency_key
            .is_some()
            .then(|| arguments_digest(arguments));
        let key = idempotency_key.clone();
        let task = match self.new_task(identity, tool, origin, responses, idempotency_key, digest) {
            Ok(task) => NewTask {
                gate: Gate::of(&tool.spec.name, &tool.spec.flow, arguments),
                ..task
            },
            Err(error) => return Later::ready(Err(error)),
        };
        // The creation's span, from here to the commit: every later span of the task
        // hangs under it, so its context is what the task stores.
        let mut span = Span::start(Kind::Internal, trace.as_ref(), None, || {
            (
                format!("create_task {}", task.tool),
                vec![
                    KeyValue::new(TASK_ID, task.id.clone()),
                    KeyValue::new("gen_ai.tool.name", task.tool.clone()),
                ],
            )
        });
        let task = NewTask {
            trace: span.context().or(trace),
            ..task
        };
        let new_id = span.is_recording().then(|| task.id.clone());
        let wake = self.wake.clone();
        self.store.create(task).map(move |created| {
            let row = match created.map_err(internal) {
                Ok(Created::Task(row)) => row,
                Ok(Created::KeyInUse(conflict)) => {
                    span.fail("key_in_use", "idempotency key in use".into());
                    span.end();
                    return Err(key_in_use(key.as_deref().unwrap_or_default(), conflict));
                }
                // A client's task claims no schedule slot.
                Ok(Created::SlotTaken) => {
                    span.end();
                    return Err(RpcError::internal());
                }
                Err(error) => {
                    span.fail(error.code.to_string(), "not stored".into());
                    span.end();
                    return Err(error);
                }
            };
            if new_id.is_some_and(|id| id != row.id) {
                // An idempotent retry: the task that holds the key answers.
                span.set(TASK_ID, row.id.clone());
                span.set("mcp_taskd.deduplicated", true);
            }
            span.end();
            let _ = wake.try_send(());
            let mut result = task_fields(&row);
            result["resultType"] = json!("task");
            Ok(result)
        })
    }

    /// Counts a request of the identity keyed `owner` beyond its `quota` (one the
    /// caller enforced: the bridge's waiting calls).
    pub fn record_quota_refusal(&self, quota: Quota, owner: &str) {
        self.quotas.quota_refused(quota, owner);
    }

    /// Whether `identity` may create a task now: within its rate, and below its quota of
    /// tasks not yet terminal, as counted in the store at most a second ago plus the
    /// creations admitted since (so a restart forgets nothing; see
    /// [`LiveTaskEstimates`] for how far the estimate can be off, and which way).
    fn admit(&self, identity: &Identity) -> Result<(), RpcError> {
        let settings = self.settings.current();
        let share = settings.share(identity);
        let owner = identity.key();
        if let Err(wait_s) = self.pacer.take(&owner, share, std::time::Instant::now()) {
            self.quotas.quota_refused(Quota::TaskRate, &owner);
            let retry_after_s = wait_s.ceil().clamp(1.0, f64::from(u16::MAX)) as u16;
            return Err(over_quota(
                Quota::TaskRate,
                json!(share.creations_per_sec),
                "too many task creations a second from this client",
                retry_after_s,
            ));
        }
        let admitted = self
            .live_tasks
            .admit(
                &owner,
                share.max_live_tasks,
                std::time::Instant::now(),
                |at_most| self.store.live_tasks(&owner, at_most),
            )
            .map_err(internal)?;
        if !admitted {
            self.quotas.quota_refused(Quota::LiveTasks, &owner);
            return Err(over_quota(
                Quota::LiveTasks,
                json!(share.max_live_tasks),
                "too many tasks of this client are not finished yet",
                LIVE_TASKS_RETRY_AFTER_S,
            ));
        }
        Ok(())
    }

    /// A new task of `tool` for `identity`, with the tool's execution settings.
    fn new_task(
        &self,
        identity: &Identity,
        tool: &Registered,
        origin: Vec<u8>,
        input_responses: String,
        idempotency_key: Option<String>,
        arguments_digest: Option<Vec<u8>>,
    ) -> Result<NewTask, RpcError> {
        let execution = &tool.spec.execution;
        let settings = self.settings.current();
        let defaults = settings.tasks();
        let ttl_ms = execution
            .ttl
            .map_or(defaults.ttl_ms, |ttl| ttl.as_millis() as u64);
        let poll_interval_ms = execution
            .poll_interval
            .map_or(defaults.poll_interval_ms, |poll| poll.as_millis() as u64);
        let id = self.store.new_task_id(now_ms()).map_err(|error| {
            log::error!("the OS random source failed: {error}");
            RpcError::internal()
        })?;
        let share = settings.share(identity);
        Ok(NewTask {
            id,
            identity: identity.clone(),
            tool: tool.spec.name.clone(),
            origin,
            input_responses,
            now: now_ms(),
            ttl_ms: Some(ttl_ms as i64),
            poll_interval_ms: poll_interval_ms as i64,
            max_attempts: i64::from(execution.max_attempts),
            backoff_ms: execution.backoff.as_millis() as i64,
            timeout_ms: execution.timeout.as_millis() as i64,
            idempotency_key,
            arguments_digest,
            trace: None,
            priority: i64::from(tool.spec.priority) + i64::from(share.priority),
            stride: NewTask::stride(share.weight),
            gate: None,
            run_after: None,
            schedule: None,
            rerun_of: None,
        })
    }

    /// `tasks/get`: the authoritative snapshot, checked against the caller.
    pub fn get(
        &self,
        identity: &Identity,
        scopes: &Scopes,
        task_id: &str,
        capabilities: &ClientCapabilities,
    ) -> Result<Value, RpcError> {
        check_task_id(task_id)?;
        // Sized before it is read, in the same snapshot, so a large payload is loaded
        // only when the gate has room for it (else a quick 503 to retry). Task
        // notifications are not gated: dropping one would lose it, and the relay
        // delivers them one at a time.
        let admitted = self
            .store
            .find_authorized_admitted(identity, task_id, &self.payloads)
            .map_err(internal)?;
        match admitted {
            Admitted::Unknown => Err(RpcError::task_not_found()),
            Admitted::Refused(busy) => Err(busy),
            Admitted::Read(task, _permit) => {
                self.require_scopes(scopes, &task.tool)?;
                self.detailed(&task, capabilities)
            }
        }
    }

    /// 403 `insufficient_scope` when `scopes` lack what the tool `tool` needs: an
    /// access token reaches a tool's tasks only with the tool's scopes. (Asked only
    /// about the caller's own tasks: a foreign task is unknown before this.)
    pub fn require_scopes(&self, scopes: &Scopes, tool: &str) -> Result<(), RpcError> {
        let Scopes::Granted(_) = scopes else {
            return Ok(());
        };
        let tools = Arc::clone(self.settings.current().tools());
        let required = tools.get(tool).map_or(&[][..], |t| &t.spec.scopes[..]);
        if scopes.lacks(required) {
            return Err(RpcError::insufficient_scope(required));
        }
        Ok(())
    }

    /// Checks the caller's scopes against the task's tool before a change (read first:
    /// nothing changes for a caller without them). Free for static tokens.
    fn authorize_change(
        &self,
        identity: &Identity,
        scopes: &Scopes,
        task_id: &str,
    ) -> Result<(), RpcError> {
        if let Scopes::Granted(_) = scopes {
            let task = self.find(identity, task_id)?;
            self.require_scopes(scopes, &task.tool)?;
        }
        Ok(())
    }

    /// [`TaskService::get`] with the status it found, for callers that act on it.
    pub fn snapshot(
        &self,
        identity: &Identity,
        scopes: &Scopes,
        task_id: &str,
        capabilities: &ClientCapabilities,
    ) -> Result<(TaskStatus, Value), RpcError> {
        let task = self.find(identity, task_id)?;
        self.require_scopes(scopes, &task.tool)?;
        Ok((task.status, self.detailed(&task, capabilities)?))
    }

    /// One page of the caller's tasks after task id `after` (legacy `tasks/list`), as
    /// task fields without payloads.
    pub fn list(
        &self,
        identity: &Identity,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Value>, RpcError> {
        if let Some(after) = after {
            check_task_id(after).map_err(|_| RpcError::invalid_params("invalid cursor"))?;
        }
        let rows = self
            .store
            .list_authorized(identity, after.unwrap_or(""), limit)
            .map_err(internal)?;
        Ok(rows.iter().map(task_fields).collect())
    }

    /// Counts for the metrics page.
    pub fn stats(&self) -> Result<Stats, RpcError> {
        self.store.stats().map_err(internal)
    }

    /// Why the task store cannot write, if it cannot (as its last write found).
    /// The task store (legacy sessions are kept there too).
    pub fn store(&self) -> Arc<dyn TaskStore> {
        Arc::clone(&self.store)
    }

    pub fn store_problem(&self) -> Option<String> {
        let error = self.store.health().err()?;
        Some(
            temporary_cause(&error)
                .unwrap_or("the task store fails to write")
                .to_owned(),
        )
    }

    /// Attempts running in this process.
    pub fn running_attempts(&self) -> usize {
        self.inflight.len()
    }

    /// Size of the write-ahead log, if it can be read.
    pub fn wal_bytes(&self) -> Option<u64> {
        self.store.log_bytes()
    }

    /// The newest committed outbox row.
    pub fn outbox_position(&self) -> Result<i64, RpcError> {
        self.store.outbox_newest().map_err(internal)
    }

    /// Lines of the output of a task `identity` may read, with its status: authorized
    /// exactly as [`TaskService::get`] (a foreign, expired or unknown task is not found).
    pub fn output(
        &self,
        identity: &Identity,
        scopes: &Scopes,
        task_id: &str,
        read: OutputRead,
    ) -> Result<(TaskStatus, OutputPage), RpcError> {
        let task = self.find(identity, task_id)?;
        self.require_scopes(scopes, &task.tool)?;
        let page = self.store.read_output(task_id, read).map_err(internal)?;
        Ok((task.status, page))
    }

    /// Whether `identity` may see the task (exists, not expired, bound to it).
    pub fn is_visible(&self, identity: &Identity, task_id: &str) -> bool {
        self.find(identity, task_id).is_ok()
    }

    /// The task, when telemetry is on (a span of its trace follows); else nothing is
    /// read.
    fn traced_row(&self, identity: &Identity, task_id: &str) -> Option<TaskRow> {
        if !taskd_telemetry::enabled() {
            return None;
        }
        self.store.find_authorized(identity, task_id).ok().flatten()
    }

    fn find(&self, identity: &Identity, task_id: &str) -> Result<TaskRow, RpcError> {
        check_task_id(task_id)?;
        self.store
            .find_authorized(identity, task_id)
            .map_err(internal)?
            .ok_or_else(RpcError::task_not_found)
    }

    /// The `DetailedTask` of a row, as `tasks/get` and task notifications carry it.
    fn detailed(
        &self,
        task: &TaskRow,
        capabilities: &ClientCapabilities,
    ) -> Result<Value, RpcError> {
        let mut detailed = task_fields(task);
        detailed["resultType"] = json!("complete");
        let stored = |text: &Option<String>| -> Result<Value, RpcError> {
            text.as_deref()
                .and_then(|text| serde_json::from_str(text).ok())
                .ok_or_else(|| {
                    log::error!("a stored task payload is missing or corrupt");
                    RpcError::internal()
                })
        };
        match task.status {
            TaskStatus::Completed => {
                // Re-check the stored result against the tool's current contract: a
                // result is never delivered through a contract it does not meet. A tool
                // no longer served (a reload removed it) has no contract left; its
                // result met the one it ran under, checked before it was stored.
                let mut result = stored(&task.result)?;
                if let Some(tool) = self.settings.current().tools().get(&task.tool) {
                    result = tool.check_result(result)?;
                }
                result["resultType"] = json!("complete");
                detailed["result"] = result;
            }
            TaskStatus::Failed => detailed["error"] = stored(&task.error)?,
            TaskStatus::InputRequired => {
                let requests = stored(&task.input_requests)?;
                if let Some(requests) = requests.as_object() {
                    if let Some(missing) = missing_for_input_requests(requests, capabilities) {
                        return Err(RpcError::missing_capability(missing));
                    }
                }
                detailed["inputRequests"] = requests;
            }
            _ => {}
        }
        Ok(detailed)
    }

    /// `tasks/update`: accepts matching responses durably; the ack is bare.
    pub fn update(
        &self,
        identity: &Identity,
        scopes: &Scopes,
        task_id: &str,
        responses: Map<String, Value>,
    ) -> Result<Value, RpcError> {
        check_task_id(task_id)?;
        self.authorize_change(identity, scopes, task_id)?;
        // Traced: the task as it waited, for the span of its wait.
        let before = self.traced_row(identity, task_id);
        let effect = self
            .store
            .update(identity, task_id, responses)
            .map_err(internal)?;
        match effect {
            UpdateEffect::NotFound => Err(RpcError::task_not_found()),
            UpdateEffect::Accepted { requeued } => {
                if requeued {
                    let _ = self.wake.try_send(());
                    if let Some(task) = before.filter(|t| t.status == TaskStatus::InputRequired) {
                        // Since the task last changed: when it asked, or the answer
                        // before this one of a round answered in parts.
                        Span::start(
                            Kind::Internal,
                            task.trace.as_ref(),
                            Some(unix_ms(task.updated_at)),
                            || {
                                (
                                    format!("task_input_required {}", task.tool),
                                    vec![KeyValue::new(TASK_ID, task.id.clone())],
                                )
                            },
                        )
                        .end();
                    }
                }
                Ok(json!({ "resultType": "complete" }))
            }
        }
    }

    /// `tasks/cancel`: records durable intent; queued and waiting tasks end at once,
    /// running attempts are told and end as soon as they notice.
    pub fn cancel(
        &self,
        identity: &Identity,
        scopes: &Scopes,
        task_id: &str,
    ) -> Result<Value, RpcError> {
        check_task_id(task_id)?;
        self.authorize_change(identity, scopes, task_id)?;
        let before = self.traced_row(identity, task_id);
        let effect = self.store.cancel(identity, task_id).map_err(internal)?;
        if let Some(task) = before {
            trace_cancel(&task, &effect);
        }
        match effect {
            CancelEffect::NotFound => Err(RpcError::task_not_found()),
            CancelEffect::SignalRunning => {
                self.inflight.cancel(task_id);
                Ok(json!({ "resultType": "complete" }))
            }
            CancelEffect::Done => Ok(json!({ "resultType": "complete" })),
        }
    }
}

/// The span of a client's cancellation, in the task's trace.
fn trace_cancel(task: &TaskRow, effect: &CancelEffect) {
    let mut span = Span::start(Kind::Internal, task.trace.as_ref(), None, || {
        (
            format!("task_cancel {}", task.tool),
            vec![KeyValue::new(TASK_ID, task.id.clone())],
        )
    });
    span.set(OUTCOME, cancel_outcome(effect));
    span.end();
}

/// What a cancellation did, as its span says.
fn cancel_outcome(effect: &CancelEffect) -> &'static str {
    match effect {
        CancelEffect::NotFound => "not_found",
        CancelEffect::Done => "done",
        CancelEffect::SignalRunning => "signalled_running_attempt",
    }
}

/// Why an operator's rerun did not create a task.
#[derive(Debug, thiserror::Error)]
pub enum RerunError {
    #[error("no such task")]
    NotFound,
    /// Only its history summary is left, without arguments (`[history] keep_arguments`).
    #[error(
        "only a summary of the task is kept (it is past its TTL): its arguments were not \
         kept (history.keep_arguments)"
    )]
    NoArguments,
    #[error("the task's tool {0:?} is not served by this configuration")]
    ToolGone(String),
    #[error("the task could not be created: {0}")]
    Refused(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Operator actions (`mcp-taskd tasks cancel`, `rerun`): no identity binding, the
/// operator interface is trusted. They keep every invariant a client's action keeps.
impl TaskService {
    /// `tasks/cancel` on any task: the same effects, and a running attempt is told.
    pub fn admin_cancel(&self, task_id: &str) -> Result<CancelEffect, StoreError> {
        let effect = self.store.admin_cancel(task_id)?;
        if taskd_telemetry::enabled() {
            if let Some(detail) = self.store.task_detail(task_id)? {
                let mut span = Span::start(Kind::Internal, detail.trace.as_ref(), None, || {
                    (
                        format!("task_cancel {}", detail.summary.tool),
                        vec![KeyValue::new(TASK_ID, task_id.to_owned())],
                    )
                });
                span.set("mcp_taskd.operator", true);
                span.set(OUTCOME, cancel_outcome(&effect));
                span.end();
            }
        }
        if effect == CancelEffect::SignalRunning {
            self.inflight.cancel(task_id);
        }
        Ok(effect)
    }

    /// Lines of any task's output (`mcp-taskd tasks logs`); `None` for an unknown task.
    pub fn admin_output(
        &self,
        task_id: &str,
        read: OutputRead,
    ) -> Result<Option<(TaskStatus, OutputPage)>, StoreError> {
        let Some(detail) = self.store.task_detail(task_id)? else {
            return Ok(None);
        };
        let page = self.store.read_output(task_id, read)?;
        Ok(Some((detail.summary.status, page)))
    }

    /// A new task with the same tool, arguments (its origin) and binding as `task_id`,
    /// which itself never changes, and a link to it (`rerun_of`). A task past its TTL
    /// is re-run from its history summary when that kept its arguments. Returns the
    /// new task's id once it is committed.
    pub fn rerun(&self, task_id: &str) -> Result<String, RerunError> {
        let Some(source) = self.store.rerun_source(task_id)? else {
            return Err(match self.store.history_record(task_id)? {
                Some(_) => RerunError::NoArguments,
                None => RerunError::NotFound,
            });
        };
        let tools = Arc::clone(self.settings.current().tools());
        let tool = tools
            .get(&source.tool)
            .ok_or_else(|| RerunError::ToolGone(source.tool.clone()))?;
        // A stored origin that no longer reads has no key: the rerun takes none.
        let gate = serde_json::from_slice::<Origin>(&source.origin)
            .ok()
            .and_then(|origin| Gate::of(&tool.spec.name, &tool.spec.flow, &origin.arguments));
        let task = self
            .new_task(
                &source.identity,
                tool,
                source.origin,
                "{}".into(),
                None,
                None,
            )
            .map_err(|error| RerunError::Refused(error.to_json().to_string()))?;
        let task = NewTask {
            gate,
            rerun_of: Some(task_id.to_owned()),
            ..task
        };
        let (sender, created) = crossbeam_channel::bounded(1);
        self.store.create(task).then(move |row| {
            let _ = sender.send(row);
        });
        let created = created
            .recv()
            .map_err(|_| StoreError::NotCommitted("the writer stopped".into()))??;
        let _ = self.wake.try_send(());
        match created {
            Created::Task(row) => Ok(row.id),
            // A rerun carries no idempotency key, so no key can be in use, and no slot.
            Created::KeyInUse(_) | Created::SlotTaken => {
                Err(RerunError::Refused("idempotency key in use".into()))
            }
        }
    }
}

/// Task ids are opaque to clients, but absurd ones are refused before any lookup (with
/// the same neutral error as an unknown id).
fn check_task_id(task_id: &str) -> Result<(), RpcError> {
    if task_id.is_empty() || task_id.len() > MAX_TASK_ID || task_id.chars().any(char::is_control) {
        return Err(RpcError::task_not_found());
    }
    Ok(())
}

/// The `Task` fields shared by `CreateTaskResult` and `DetailedTask`.
fn task_fields(task: &TaskRow) -> Value {
    let mut fields = json!({
        "taskId": task.id,
        "status": task.status.as_str(),
        "createdAt": rfc3339(task.created_at),
        "lastUpdatedAt": rfc3339(task.updated_at),
        "ttlMs": task.ttl_ms,
        "pollIntervalMs": task.poll_interval_ms,
    });
    // A queued task says why it waits (a pause, its key, its rate) rather than what
    // its last attempt said.
    let waiting = task.waiting.as_deref().map(Waiting::message);
    if let Some(message) = waiting.as_ref().or(task.status_message.as_ref()) {
        fields["statusMessage"] = json!(message);
    }
    fields
}
