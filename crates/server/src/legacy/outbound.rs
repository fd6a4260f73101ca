//! Server-to-client requests inside a legacy call: each is written on the call's own
//! SSE stream, and the client's JSON-RPC response arrives as a separate POST that the
//! session routes back here by request id.
//!
//! This is how a tool's MRTR input requests (which a 2026-07-28 client answers by
//! retrying with `inputResponses`) reach a legacy client: the server asks, collects the
//! answers, and re-runs the tool itself.

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::sessions::Session;
use super::stream::CallSink;
use crate::handlers::Emitter;
use taskd_protocol::error::code;
use taskd_protocol::RpcError;

/// The `_meta` key that ties a server-to-client message to the task it is for.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// How often a waiting call checks whether it was cancelled.
const CANCEL_POLL: Duration = Duration::from_millis(100);

/// Sends `method` to the client and waits for its result; a request made for a task
/// carries the task's id in `_meta`.
pub fn ask(
    session: &Session,
    sink: &mut CallSink,
    method: &str,
    params: &Value,
    timeout: Duration,
    related_task: Option<&str>,
) -> Result<Value, RpcError> {
    let (answer, answers) = crossbeam_channel::bounded(1);
    let id = session.await_answer(answer);
    let mut params = params.clone();
    if let (Some(task_id), Some(fields)) = (related_task, params.as_object_mut()) {
        let meta = fields.entry("_meta").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(RELATED_TASK.into(), json!({ "taskId": task_id }));
        }
    }
    let request = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    if !sink.send(&request) {
        session.forget_answer(id);
        return Err(RpcError::internal());
    }
    let deadline = Instant::now() + timeout;
    // Waiting for a person (an approval form) has a deadline of its own and is not a
    // stuck request thread: the watchdog does not count it.
    let outcome = taskd_base::liveness::unwatched(|| loop {
        if sink.cancelled() {
            break Err(RpcError::new(code::INTERNAL_ERROR, "Request cancelled"));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break Err(RpcError::new(
                code::INTERNAL_ERROR,
                format!("The client did not answer {method} in time"),
            ));
        }
        match answers.recv_timeout(left.min(CANCEL_POLL)) {
            Ok(message) => break answer_of(method, message),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                break Err(RpcError::new(code::INTERNAL_ERROR, "The session ended"))
            }
        }
    });
    session.forget_answer(id);
    outcome
}

/// The client's response: its `result`, or its error passed on to our caller.
fn answer_of(method: &str, message: Value) -> Result<Value, RpcError> {
    if let Some(result) = message.get("result") {
        return Ok(result.clone());
    }
    let error = message.get("error").and_then(Value::as_object);
    let text = error
        .and_then(|error| error.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("no message");
    Err(RpcError::new(
        code::INTERNAL_ERROR,
        format!("The client refused {method}: {text}"),
    ))
}

/// A legacy call's emitter: its response stream, plus the server-to-client requests
/// through which a bridged task's questions reach the client (see `handlers::bridge`).
pub struct SessionEmitter<'a> {
    pub session: &'a Session,
    pub sink: &'a mut CallSink,
    pub timeout: Duration,
}

impl Emitter for SessionEmitter<'_> {
    fn notify(&mut self, method: &str, params: Value) {
        self.sink.notify(method, params);
    }

    fn cancelled(&self) -> bool {
        self.sink.cancelled()
    }

    fn can_ask(&self) -> bool {
        true
    }

    fn ask(
        &mut self,
        requests: &Map<String, Value>,
        task_id: &str,
    ) -> Option<Result<Map<String, Value>, RpcError>> {
        Some(ask_all(
            self.session,
            self.sink,
            requests,
            self.timeout,
            Some(task_id),
        ))
    }
}

/// Asks every MRTR input request of one round and returns the `inputResponses` map.
pub fn ask_all(
    session: &Session,
    sink: &mut CallSink,
    requests: &Map<String, Value>,
    timeout: Duration,
    related_task: Option<&str>,
) -> Result<Map<String, Value>, RpcError> {
    let mut responses = Map::new();
    for (key, request) in requests {
        let method = request
            .get("method")
            .and_then(Value::as_str)
            .ok_or_else(RpcError::internal)?;
        let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
        let answer = ask(session, sink, method, &params, timeout, related_task)?;
        responses.insert(key.clone(), answer);
    }
    Ok(responses)
}
