//! 2025-11-25 native tasks (SEP-1686) for legacy sessions, served from the same durable
//! store, workers and authorization binding as the 2026 Tasks extension.
//!
//! A task belongs to the authenticated identity, never to the session: a client that
//! reconnects (new session, same token) finds its tasks, and so does a 2026 client with
//! the same token. This module only translates: `params.task` becomes the 2026 opt-in,
//! the 2026 task fields become a 2025-11-25 `Task`, and `tasks/result` waits for a
//! terminal status, asking the client for input through server-to-client requests
//! (tagged `io.modelcontextprotocol/related-task`) when the task needs it. It also
//! renders the `notifications/tasks/status` a session's GET stream gets when a task it
//! follows changes status.

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::era::strip_modern_fields;
use super::outbound::{self, RELATED_TASK};
use super::sessions::Session;
use super::stream::CallSink;
use super::Legacy;
use crate::handlers::{Emitter, Service};
use taskd_auth::Caller;
use taskd_protocol::error::code;
use taskd_protocol::RpcError;
use taskd_protocol::TASKS_EXTENSION;
use taskd_protocol::{ClientCapabilities, Envelope, TaskStatus};
use taskd_protocol::{Identity, Scopes};
use taskd_tools::{Registry, TaskPolicy};

/// The revision that introduced native tasks; older sessions get none of this.
pub const TASKS_VERSION: &str = "2025-11-25";

/// How long `tasks/cancel` waits for a running attempt to notice before answering.
const CANCEL_SETTLE: Duration = Duration::from_secs(5);

/// `capabilities.tasks` of the initialize result.
pub fn capabilities() -> Value {
    json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } })
}

fn task_support(policy: TaskPolicy) -> &'static str {
    match policy {
        TaskPolicy::Inline => "forbidden",
        TaskPolicy::Optional => "optional",
        TaskPolicy::Required => "required",
    }
}

/// Adds each tool's `execution.taskSupport` (from its `task_policy`) to a `tools/list`
/// result. A session served by the task bridge may call every task tool without
/// `params.task`, so no tool is `required` for it.
pub fn annotate_tools(result: &mut Value, tools: &Registry, bridged: bool) {
    let Some(listed) = result.get_mut("tools").and_then(Value::as_array_mut) else {
        return;
    };
    for tool in listed {
        let policy = tool
            .get("name")
            .and_then(Value::as_str)
            .and_then(|name| tools.get(name))
            .map(|registered| registered.spec.task_policy);
        let policy = match policy {
            Some(TaskPolicy::Required) if bridged => Some(TaskPolicy::Optional),
            policy => policy,
        };
        if let (Some(policy), Some(fields)) = (policy, tool.as_object_mut()) {
            fields.insert(
                "execution".into(),
                json!({ "taskSupport": task_support(policy) }),
            );
        }
    }
}

/// The session's capabilities plus the 2026 Tasks extension, which is how the shared
/// handlers are told that this call (or task read) opted in.
pub fn with_tasks_extension(capabilities: &ClientCapabilities) -> ClientCapabilities {
    let mut extended = capabilities.clone();
    let extensions = extended.0.entry("extensions").or_insert_with(|| json!({}));
    if !extensions.is_object() {
        *extensions = json!({});
    }
    if let Some(extensions) = extensions.as_object_mut() {
        extensions.insert(TASKS_EXTENSION.into(), json!({}));
    }
    extended
}

/// A 2025-11-25 `Task` from the 2026 task fields.
pub fn legacy_task(fields: &Value) -> Value {
    let mut task = json!({
        "taskId": fields["taskId"],
        "status": fields["status"],
        "createdAt": fields["createdAt"],
        "lastUpdatedAt": fields["lastUpdatedAt"],
        "ttl": fields.get("ttlMs").cloned().unwrap_or(Value::Null),
    });
    if let Some(poll) = fields.get("pollIntervalMs") {
        task["pollInterval"] = poll.clone();
    }
    if let Some(message) = fields.get("statusMessage") {
        task["statusMessage"] = message.clone();
    }
    task
}

fn is_terminal(status: &str) -> bool {
    TaskStatus::parse(status).is_some_and(TaskStatus::is_terminal)
}

/// Starts announcing status changes of a task the session created or read, unless it
/// already ended.
pub fn follow(session: &Session, task: &Value) {
    let (Some(task_id), Some(status)) = (task["taskId"].as_str(), task["status"].as_str()) else {
        return;
    };
    if !is_terminal(status) {
        session.follow_task(task_id, status);
    }
}

/// Puts `notifications/tasks/status` on the session's GET stream if the task's status
/// changed since the client last saw it. The hint that led here only names the task:
/// it is re-read with the session's own identity, and a task that cannot be read (gone,
/// or never this identity's) is no longer followed.
pub fn announce_status(service: &Service, session: &Session, task_id: &str, keep: usize) {
    let capabilities = with_tasks_extension(&session.capabilities);
    let fields = match service
        .tasks
        // Status changes carry no result; the session follows the tasks its own
        // requests read, which checked their scopes then.
        .snapshot(
            &session.identity,
            &Scopes::Unrestricted,
            task_id,
            &capabilities,
        ) {
        Ok((_, fields)) => fields,
        Err(_) => {
            session.forget_task(task_id);
            return;
        }
    };
    // The full task as `tasks/get` renders it, with no related-task metadata.
    let task = legacy_task(&fields);
    let status = task["status"].as_str().unwrap_or_default();
    if session.note_task_status(task_id, status, is_terminal(status)) {
        let message = json!({
            "jsonrpc": "2.0",
            "method": "notifications/tasks/status",
            "params": task,
        });
        session.push_event(message, keep);
    }
}

/// The error a failed task stored, as the JSON-RPC error `tasks/result` returns.
fn stored_error(error: &Value) -> RpcError {
    let code = error["code"].as_i64().unwrap_or(code::INTERNAL_ERROR);
    let message = error["message"].as_str().unwrap_or("The task failed");
    let mut rpc = RpcError::new(code, message);
    if let Some(data) = error.get("data") {
        rpc = rpc.with_data(data.clone());
    }
    rpc
}

impl Legacy {
    /// Whether a legacy `tools/call` is refused before it runs: `-32601` when it asks
    /// for a task the tool forbids, or omits one the tool requires (SEP-1686) — unless
    /// the session does not speak tasks and the task bridge serves it.
    pub(super) fn task_gate(
        &self,
        session: &Session,
        envelope: &Envelope,
    ) -> Result<bool, RpcError> {
        let bridged = self.service.bridge.serves(&session.capabilities);
        let wants_task = envelope.params.get("task").is_some_and(Value::is_object);
        let policy = envelope
            .str_param("name")
            .and_then(|name| self.service.tools().get(name).cloned())
            .map(|tool| tool.spec.task_policy);
        match (policy, wants_task) {
            (Some(TaskPolicy::Inline), true) => Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                "This tool cannot run as a task (execution.taskSupport is \"forbidden\")",
            )),
            (Some(TaskPolicy::Required), false) if !bridged => Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                "This tool only runs as a task: send params.task (execution.taskSupport is \"required\")",
            )),
            _ => Ok(wants_task),
        }
    }

    /// `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel`.
    pub(super) fn task_method(
        &self,
        session: &Session,
        caller: &Caller,
        envelope: &Envelope,
        sink: &mut CallSink,
    ) -> Result<Value, RpcError> {
        let (identity, scopes) = (&caller.identity, &caller.scopes);
        if envelope.method == "tasks/list" {
            return self.list_tasks(identity, envelope);
        }
        let task_id = envelope
            .str_param("taskId")
            .ok_or_else(|| RpcError::invalid_params("taskId must be a string"))?;
        let capabilities = with_tasks_extension(&session.capabilities);
        let read = || {
            self.service
                .tasks
                .get(identity, scopes, task_id, &capabilities)
        };
        match envelope.method.as_str() {
            "tasks/get" => {
                let task = legacy_task(&read()?);
                follow(session, &task);
                Ok(task)
            }
            "tasks/cancel" => {
                let before = read()?;
                if is_terminal(before["status"].as_str().unwrap_or_default()) {
                    return Err(RpcError::invalid_params(
                        "Cannot cancel a task in a terminal status",
                    ));
                }
                self.service.tasks.cancel(identity, scopes, task_id)?;
                let deadline = Instant::now() + CANCEL_SETTLE;
                loop {
                    let now = read()?;
                    let settled = is_terminal(now["status"].as_str().unwrap_or_default());
                    if settled || Instant::now() >= deadline {
                        return Ok(legacy_task(&now));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            _ => self.task_result(session, caller, task_id, sink, &read),
        }
    }

    /// `tasks/result`: blocks until the task is terminal, serving its input rounds.
    fn task_result(
        &self,
        session: &Session,
        caller: &Caller,
        task_id: &str,
        sink: &mut CallSink,
        read: &dyn Fn() -> Result<Value, RpcError>,
    ) -> Result<Value, RpcError> {
        let timeout = Duration::from_millis(self.sessions.limits().client_request_timeout_ms);
        let mut pause = Duration::from_millis(20);
        loop {
            let task = read()?;
            match TaskStatus::parse(task["status"].as_str().unwrap_or_default()) {
                Some(TaskStatus::Completed) => {
                    let mut result = task["result"].clone();
                    if let Some(fields) = result.as_object_mut() {
                        strip_modern_fields(fields);
                        let meta = fields.entry("_meta").or_insert_with(|| json!({}));
                        if let Some(meta) = meta.as_object_mut() {
                            meta.insert(RELATED_TASK.into(), json!({ "taskId": task_id }));
                        }
                    }
                    return Ok(result);
                }
                Some(TaskStatus::Failed) => return Err(stored_error(&task["error"])),
                Some(TaskStatus::Cancelled) => {
                    return Err(RpcError::new(
                        code::INTERNAL_ERROR,
                        "The task was cancelled",
                    ))
                }
                Some(TaskStatus::InputRequired) => {
                    let requests = match task.get("inputRequests") {
                        Some(Value::Object(requests)) => requests.clone(),
                        _ => Map::new(),
                    };
                    let responses =
                        outbound::ask_all(session, sink, &requests, timeout, Some(task_id))?;
                    self.service.tasks.update(
                        &caller.identity,
                        &caller.scopes,
                        task_id,
                        responses,
                    )?;
                    pause = Duration::from_millis(20);
                }
                _ => {
                    if sink.cancelled() {
                        return Err(RpcError::new(code::INTERNAL_ERROR, "Request cancelled"));
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
            }
        }
    }

    /// `tasks/list`: the caller's tasks only, oldest first; the cursor is the last
    /// task id of the previous page.
    fn list_tasks(&self, identity: &Identity, envelope: &Envelope) -> Result<Value, RpcError> {
        let cursor = match envelope.params.get("cursor") {
            None | Some(Value::Null) => None,
            Some(Value::String(cursor)) => Some(cursor.as_str()),
            Some(_) => return Err(RpcError::invalid_params("cursor must be a string")),
        };
        let page_size = self.service.live.load().config.limits.page_size;
        let mut tasks = self.service.tasks.list(identity, cursor, page_size + 1)?;
        let more = tasks.len() > page_size;
        tasks.truncate(page_size);
        let mut result = json!({ "tasks": tasks.iter().map(legacy_task).collect::<Vec<_>>() });
        if more {
            if let Some(last) = tasks.last() {
                result["nextCursor"] = last["taskId"].clone();
            }
        }
        Ok(result)
    }
}
