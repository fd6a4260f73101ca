//! The task bridge: durable task tools for clients that do not speak tasks.
//!
//! A client that does not declare the Tasks extension (a 2026-07-28 request without it,
//! or a legacy session that declared no `tasks` capability) still gets every task tool
//! run as a durable task, but never sees a `CreateTaskResult`: its `tools/call` waits
//! up to the inline wait for the task, streaming `notifications/progress` from the
//! task's status message, and answers the tool's own result — or, when the task is not
//! done by then, an ordinary `CallToolResult` naming the task and the tool to call next.
//! The built-in tools `task_status`, `task_wait` and `task_cancel` serve those handles,
//! authorized exactly like `tasks/get` (one answer for unknown and foreign ids).
//!
//! Questions a task asks (elicitation, sampling, roots) reach such a client only where
//! the transport has a server-to-client channel ([`Emitter::ask`], legacy sessions);
//! elsewhere `task_status` shows the question and says where it can be answered. No
//! tool ever lets the model answer a question meant for a person.

mod handle;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use self::handle::{admitting_handle, render};
use super::{Emitter, Request, Service};
use crate::config::Config;
use taskd_base::later::Later;
use taskd_base::liveness;
use taskd_engine::output::OutputRead;
use taskd_engine::shares::Quota;
use taskd_protocol::{missing_for_input_requests, ClientCapabilities, RpcError, TaskStatus};
use taskd_protocol::{Identity, Scopes};
use taskd_tools::{error_result, text_result, TaskPolicy, ToolSpec};

pub const TASK_STATUS: &str = "task_status";
pub const TASK_WAIT: &str = "task_wait";
pub const TASK_CANCEL: &str = "task_cancel";

/// Whether `name` is one of the bridge's `task_*` tools.
pub fn is_task_tool(name: &str) -> bool {
    [TASK_STATUS, TASK_WAIT, TASK_CANCEL].contains(&name)
}

/// Longest wait for a task creation's commit.
const CREATION_WAIT: Duration = Duration::from_secs(30);

/// Longest sleep between two reads of a waited-for task. Changes wake the wait at once
/// (through the hub); this only bounds what a lost hint can cost.
const WAKE_AT_LEAST_EVERY: Duration = Duration::from_secs(1);

/// How long `task_cancel` waits for a running attempt to stop before answering.
const CANCEL_SETTLE: Duration = Duration::from_secs(5);

/// The bridge's settings and the count of calls waiting right now.
pub struct Bridge {
    pub enabled: bool,
    /// The server-wide inline wait (`tasks.inline_wait_ms`).
    pub inline_wait: Duration,
    /// Calls that may wait at once; beyond it a call answers its handle straight away,
    /// so that waiting calls can never take every request thread.
    pub max_waiting: usize,
    waiting: AtomicUsize,
    /// Calls waiting now, by identity key (each bounded by its share's
    /// `max_inline_waits`, so that one identity cannot take every waiting slot).
    waiting_by_identity: Mutex<HashMap<String, usize>>,
}

impl Bridge {
    pub fn new(enabled: bool, inline_wait: Duration, max_waiting: usize) -> Bridge {
        Bridge {
            enabled,
            inline_wait,
            max_waiting,
            waiting: AtomicUsize::new(0),
            waiting_by_identity: Mutex::default(),
        }
    }

    /// The bridge a configuration asks for, with at most `max_waiting` calls waiting
    /// for their task at once (beyond, a call gets its handle at once).
    pub fn from_config(config: &Config, max_waiting: usize) -> Bridge {
        Bridge::new(
            config.tasks.bridge,
            Duration::from_millis(config.tasks.inline_wait_ms),
            max_waiting,
        )
    }

    /// Whether a request from a client with `capabilities` is served by the bridge.
    pub fn serves(&self, capabilities: &ClientCapabilities) -> bool {
        self.enabled && !speaks_tasks(capabilities)
    }

    /// A slot to wait in for the identity keyed `owner`, which may have `share`
    /// calls waiting: `Err` says which bound is full (the server's, or the identity's).
    fn admit_waiter(&self, owner: &str, share: usize) -> Result<WaitSlot<'_>, Full> {
        let taken = self.waiting.fetch_add(1, Ordering::AcqRel);
        let mut slot = WaitSlot {
            bridge: self,
            owner: None,
        };
        if taken >= self.max_waiting {
            return Err(Full::Server);
        }
        let mut by_identity = self.lock_waiting_by_identity();
        let own = by_identity.entry(owner.to_owned()).or_insert(0);
        if *own >= share {
            return Err(Full::Identity);
        }
        *own += 1;
        slot.owner = Some(owner.to_owned());
        Ok(slot)
    }

    fn lock_waiting_by_identity(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        // Only counts: a poisoned lock still holds consistent ones.
        self.waiting_by_identity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

/// Which bound kept a call from waiting.
#[derive(Debug, PartialEq, Eq)]
enum Full {
    Server,
    Identity,
}

/// One waiting call, counted (in the server's total and its identity's) while it lives.
struct WaitSlot<'a> {
    bridge: &'a Bridge,
    /// Set once the identity's count holds this call too.
    owner: Option<String>,
}

impl Drop for WaitSlot<'_> {
    fn drop(&mut self) {
        self.bridge.waiting.fetch_sub(1, Ordering::AcqRel);
        if let Some(owner) = &self.owner {
            let mut by_identity = self.bridge.lock_waiting_by_identity();
            if let Some(own) = by_identity.get_mut(owner) {
                *own = own.saturating_sub(1);
                if *own == 0 {
                    by_identity.remove(owner);
                }
            }
        }
    }
}

/// Whether the client speaks tasks: the 2026 extension, or (legacy sessions) the
/// 2025-11-25 `tasks` capability, whose calls opt in one by one with `params.task`.
fn speaks_tasks(capabilities: &ClientCapabilities) -> bool {
    capabilities.tasks() || capabilities.0.get("tasks").is_some_and(Value::is_object)
}

/// Capabilities that let a task read show any question it asks: whether this client
/// can answer it is decided separately.
fn reading_capabilities() -> ClientCapabilities {
    ClientCapabilities(
        json!({ "elicitation": { "form": {}, "url": {} }, "sampling": {}, "roots": {} })
            .as_object()
            .cloned()
            .unwrap_or_default(),
    )
}

/// The `task_*` tools, as `tools/list` shows them.
fn task_tools(inline_wait: Duration) -> [Value; 3] {
    let task_id = json!({
        "type": "string",
        "description": "The task id from the earlier tool call's answer",
    });
    let seconds = inline_wait.as_secs().max(1);
    [
        json!({
            "name": TASK_STATUS,
            "title": "Check a background task",
            "description": "Reports how a background task started by an earlier tool call is \
                doing, without waiting: its status and progress message, and its result or \
                error once it has finished. Use it with the taskId a tool call answered \
                when its work continued in the background.",
            "inputSchema": {
                "type": "object",
                "properties": { "taskId": task_id },
                "required": ["taskId"],
                "additionalProperties": false,
            },
            "annotations": { "readOnlyHint": true, "idempotentHint": true },
        }),
        json!({
            "name": TASK_WAIT,
            "title": "Wait for a background task",
            "description": format!(
                "Waits for a background task started by an earlier tool call to finish, up \
                 to the given seconds (at most {seconds}), then answers like task_status: \
                 the result once finished, otherwise its status so that you can wait again \
                 or do something else meanwhile."
            ),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "taskId": task_id,
                    "seconds": {
                        "type": "number",
                        "minimum": 0,
                        "description": format!("How long to wait at most (default and limit {seconds})"),
                    },
                },
                "required": ["taskId"],
                "additionalProperties": false,
            },
            "annotations": { "readOnlyHint": true, "idempotentHint": true },
        }),
        json!({
            "name": TASK_CANCEL,
            "title": "Cancel a background task",
            "description": "Stops a background task started by an earlier tool call. Work it \
                has not finished is abandoned; a task that already finished is left as it is.",
            "inputSchema": {
                "type": "object",
                "properties": { "taskId": task_id },
                "required": ["taskId"],
                "additionalProperties": false,
            },
            "annotations": { "destructiveHint": true, "idempotentHint": true },
        }),
    ]
}

/// The answer for an id that is unknown, expired or another client's: one text for all.
fn no_such_task(task_id: &str) -> Value {
    error_result(format!(
        "No task {task_id} is visible to you: it does not exist, has expired, or was \
         started by another client."
    ))
}

impl Service {
    /// The `tools/list` entries a request sees: the registered tools, and for a bridged
    /// client task tools' output schemas that admit a handle, then the `task_*` tools.
    pub(super) fn listed_tools(&self, request: &Request<'_>) -> Vec<Value> {
        let tools = self.tools();
        let registered = tools.all();
        if !self.bridge.serves(&request.meta.capabilities) {
            return registered.iter().map(|tool| tool.spec.to_json()).collect();
        }
        let mut listed: Vec<Value> = registered
            .iter()
            .map(|tool| {
                let mut json = tool.spec.to_json();
                if tool.spec.task_policy != TaskPolicy::Inline {
                    if let Some(schema) = &tool.spec.output_schema {
                        json["outputSchema"] = admitting_handle(schema);
                    }
                }
                json
            })
            .collect();
        let any_task_tool = registered
            .iter()
            .any(|tool| tool.spec.task_policy != TaskPolicy::Inline);
        if any_task_tool {
            listed.extend(
                task_tools(self.bridge.inline_wait)
                    .into_iter()
                    .filter(|tool| tools.get(tool["name"].as_str().unwrap_or("")).is_none()),
            );
        }
        listed
    }

    /// Serves a `task_*` tool call from a bridged client; `None` when `name` is not one
    /// (or a registered tool of that name takes precedence).
    pub(super) fn task_tool_call(
        &self,
        request: &Request<'_>,
        name: &str,
        arguments: &Map<String, Value>,
        emitter: &mut dyn Emitter,
    ) -> Option<Result<Value, RpcError>> {
        if ![TASK_STATUS, TASK_WAIT, TASK_CANCEL].contains(&name)
            || self.tools().get(name).is_some()
            || !self.bridge.serves(&request.meta.capabilities)
        {
            return None;
        }
        let Some(task_id) = arguments.get("taskId").and_then(Value::as_str) else {
            return Some(Ok(error_result(
                "taskId must be a string: the id of a task",
            )));
        };
        let answer = match name {
            TASK_STATUS => self.task_answer(request, task_id, None, emitter),
            TASK_WAIT => {
                let limit = self.bridge.inline_wait;
                let wait = match arguments.get("seconds") {
                    None | Some(Value::Null) => limit,
                    Some(seconds) => match seconds.as_f64() {
                        Some(seconds) if seconds >= 0.0 => {
                            Duration::from_secs_f64(seconds.min(limit.as_secs_f64()))
                        }
                        _ => {
                            return Some(Ok(error_result(
                                "seconds must be a number of seconds, 0 or more",
                            )))
                        }
                    },
                };
                // Bounded by the inline wait: not a stall of this request thread.
                liveness::unwatched(|| self.wait_for_task(request, task_id, None, wait, emitter))
            }
            _ => {
                liveness::unwatched(|| self.cancel_task(request.identity, request.scopes, task_id))
            }
        };
        Some(answer)
    }

    /// Waits for the task a bridged `tools/call` just created, then answers its result
    /// or a handle.
    pub(super) fn bridged_call(
        &self,
        request: &Request<'_>,
        tool: &ToolSpec,
        creation: Later<Result<Value, RpcError>>,
        emitter: &mut dyn Emitter,
    ) -> Result<Value, RpcError> {
        let created = created(creation)?;
        let task_id = created["taskId"]
            .as_str()
            .ok_or_else(RpcError::internal)?
            .to_owned();
        let wait = tool.inline_wait.unwrap_or(self.bridge.inline_wait);
        // Bounded by the inline wait: not a stall of this request thread.
        liveness::unwatched(|| {
            self.wait_for_task(request, &task_id, Some(&tool.name), wait, emitter)
        })
    }

    /// Waits up to `wait` for the task to end, streaming its progress and serving its
    /// questions where the client has a channel for them; then answers like
    /// `task_status`.
    fn wait_for_task(
        &self,
        request: &Request<'_>,
        task_id: &str,
        tool: Option<&str>,
        wait: Duration,
        emitter: &mut dyn Emitter,
    ) -> Result<Value, RpcError> {
        let (identity, scopes) = (request.identity, request.scopes);
        let capabilities = &request.meta.capabilities;
        let owner = identity.key();
        let share = self.live.load().shares.of(identity).max_inline_waits;
        let _slot = match self.bridge.admit_waiter(&owner, share) {
            Ok(slot) => slot,
            Err(full) => {
                if full == Full::Identity {
                    self.tasks.record_quota_refusal(Quota::InlineWaits, &owner);
                }
                return self.task_answer(request, task_id, tool, emitter);
            }
        };
        // Watch before the first read: a change committed in between still wakes us.
        let watch = self.hub.watch_task(task_id);
        let deadline = Instant::now() + wait;
        let mut progress = Progress::new(request.meta.progress_token.clone());
        loop {
            let task = match self
                .tasks
                .get(identity, scopes, task_id, &reading_capabilities())
            {
                Ok(task) => task,
                Err(error) if error == RpcError::task_not_found() => {
                    return Ok(no_such_task(task_id))
                }
                Err(error) => return Err(error),
            };
            let status = TaskStatus::parse(task["status"].as_str().unwrap_or_default());
            if status.is_none_or(TaskStatus::is_terminal) {
                return Ok(self.rendered(request, &task, task_id, tool, false));
            }
            progress.report(&task, emitter);
            if status == Some(TaskStatus::InputRequired) {
                let requests = match task.get("inputRequests") {
                    Some(Value::Object(requests)) => requests.clone(),
                    _ => Map::new(),
                };
                let answerable = missing_for_input_requests(&requests, capabilities).is_none();
                match answerable
                    .then(|| emitter.ask(&requests, task_id))
                    .flatten()
                {
                    Some(responses) => {
                        self.tasks.update(identity, scopes, task_id, responses?)?;
                        continue;
                    }
                    // Nobody here can answer: waiting would only run the clock out.
                    None => return Ok(self.rendered(request, &task, task_id, tool, false)),
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || emitter.cancelled() || !watch.wait(left.min(WAKE_AT_LEAST_EVERY)) {
                return self.task_answer(request, task_id, tool, emitter);
            }
        }
    }

    /// `task_status`: the task now, as a bridged client sees it.
    fn task_answer(
        &self,
        request: &Request<'_>,
        task_id: &str,
        tool: Option<&str>,
        emitter: &dyn Emitter,
    ) -> Result<Value, RpcError> {
        match self.tasks.get(
            request.identity,
            request.scopes,
            task_id,
            &reading_capabilities(),
        ) {
            Ok(task) => {
                let requests = task["inputRequests"].as_object();
                // Whether task_wait can put the task's questions to this client.
                let can_ask = emitter.can_ask()
                    && requests.is_some_and(|requests| {
                        missing_for_input_requests(requests, &request.meta.capabilities).is_none()
                    });
                Ok(self.rendered(request, &task, task_id, tool, can_ask))
            }
            Err(error) if error == RpcError::task_not_found() => Ok(no_such_task(task_id)),
            Err(error) => Err(error),
        }
    }

    /// [`render`], with the end of the task's output where it has any and has not
    /// ended well (a read that fails leaves it out: the status is what was asked).
    fn rendered(
        &self,
        request: &Request<'_>,
        task: &Value,
        task_id: &str,
        tool: Option<&str>,
        can_ask: bool,
    ) -> Value {
        let status = TaskStatus::parse(task["status"].as_str().unwrap_or_default());
        let output = match status {
            Some(TaskStatus::Completed | TaskStatus::Cancelled) | None => Vec::new(),
            Some(_) => self
                .tasks
                .output(
                    request.identity,
                    request.scopes,
                    task_id,
                    OutputRead::tail(),
                )
                .map(|(_, page)| page.tail().into_iter().map(str::to_owned).collect())
                .unwrap_or_default(),
        };
        render(task, task_id, tool, can_ask, &output)
    }

    /// `task_cancel`: cancels, gives a running attempt a moment to stop, then reports.
    fn cancel_task(
        &self,
        identity: &Identity,
        scopes: &Scopes,
        task_id: &str,
    ) -> Result<Value, RpcError> {
        let watch = self.hub.watch_task(task_id);
        let before = match self
            .tasks
            .get(identity, scopes, task_id, &reading_capabilities())
        {
            Ok(task) => task,
            Err(error) if error == RpcError::task_not_found() => return Ok(no_such_task(task_id)),
            Err(error) => return Err(error),
        };
        let status = before["status"].as_str().unwrap_or_default();
        if TaskStatus::parse(status).is_none_or(TaskStatus::is_terminal) {
            return Ok(text_result(format!(
                "Task {task_id} had already finished ({status}); nothing was cancelled."
            )));
        }
        match self.tasks.cancel(identity, scopes, task_id) {
            Ok(_) => {}
            Err(error) if error == RpcError::task_not_found() => return Ok(no_such_task(task_id)),
            Err(error) => return Err(error),
        }
        let deadline = Instant::now() + CANCEL_SETTLE;
        loop {
            let now = self
                .tasks
                .get(identity, scopes, task_id, &reading_capabilities())?;
            let status = now["status"].as_str().unwrap_or_default().to_owned();
            let settled = TaskStatus::parse(&status).is_none_or(TaskStatus::is_terminal);
            let left = deadline.saturating_duration_since(Instant::now());
            if settled || left.is_zero() || !watch.wait(left.min(WAKE_AT_LEAST_EVERY)) {
                let text = match status.as_str() {
                    "cancelled" => format!("Task {task_id} is cancelled."),
                    "working" | "input_required" => format!(
                        "Cancellation of task {task_id} was requested; it stops at its next \
                         checkpoint. Call {TASK_STATUS} to confirm."
                    ),
                    other => format!(
                        "Task {task_id} finished ({other}) before the cancellation reached it."
                    ),
                };
                return Ok(json!({
                    "content": [{ "type": "text", "text": text }],
                    "structuredContent": { "taskId": task_id, "status": status },
                }));
            }
        }
    }
}

/// `notifications/progress` from a task's status message, when the client asked.
struct Progress {
    token: Option<Value>,
    step: u64,
    last_message: Option<String>,
}

impl Progress {
    fn new(token: Option<Value>) -> Progress {
        Progress {
            token,
            step: 0,
            last_message: None,
        }
    }

    fn report(&mut self, task: &Value, emitter: &mut dyn Emitter) {
        let Some(token) = &self.token else {
            return;
        };
        let message = task["statusMessage"].as_str().map(str::to_owned);
        if message.is_none() || message == self.last_message {
            return;
        }
        self.step += 1;
        let mut params = json!({ "progressToken": token, "progress": self.step });
        if let Some(message) = &message {
            params["message"] = json!(message);
        }
        self.last_message = message;
        emitter.notify("notifications/progress", params);
    }
}

/// The `CreateTaskResult` fields once the creation committed.
fn created(creation: Later<Result<Value, RpcError>>) -> Result<Value, RpcError> {
    creation
        .wait(CREATION_WAIT)
        .unwrap_or_else(|| Err(RpcError::internal()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_wait_slot_table_answers_at_once() {
        let bridge = Bridge::new(true, Duration::from_secs(1), 1);
        let first = bridge.admit_waiter("a", 9);
        assert!(first.is_ok());
        assert_eq!(bridge.admit_waiter("b", 9).err(), Some(Full::Server));
        drop(first);
        assert!(bridge.admit_waiter("b", 9).is_ok());
    }

    #[test]
    fn an_identity_waits_within_its_share_and_leaves_the_rest_to_others() {
        let bridge = Bridge::new(true, Duration::from_secs(1), 10);
        let a1 = bridge.admit_waiter("a", 2).expect("a's first");
        let a2 = bridge.admit_waiter("a", 2).expect("a's second");
        assert_eq!(bridge.admit_waiter("a", 2).err(), Some(Full::Identity));
        assert!(
            bridge.admit_waiter("b", 2).is_ok(),
            "another identity still waits"
        );
        drop(a1);
        let a3 = bridge.admit_waiter("a", 2).expect("a slot came back");
        drop((a2, a3));
        assert!(
            bridge.lock_waiting_by_identity().is_empty(),
            "nothing left behind"
        );
        assert_eq!(bridge.waiting.load(Ordering::Acquire), 0);
    }
}
