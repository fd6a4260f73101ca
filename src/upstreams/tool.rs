//! An upstream's tool as one of ours: each run is one `tools/call` to the upstream, held
//! by whoever runs it (a worker for a task, the request's thread inline).
//!
//! - Upstream progress becomes the run's progress (a task's `statusMessage`).
//! - Our cancellation sends the upstream `notifications/cancelled`.
//! - A request of the upstream during the call (elicitation, sampling) parks the call
//!   and ends the run with `input_required` holding that request; the run that
//!   follows the caller's answer sends the answer to the upstream and goes on waiting
//!   for the same call. A parked call lives in this process only: one whose session or
//!   server is gone by then counts as interrupted.
//!
//! # Re-running after an interruption
//!
//! A call interrupted by a crash (ours or the upstream's), a lost lease, a shutdown or
//! its deadline may or may not have had its effect upstream. It is called again only
//! when the tool is idempotent (`idempotent = true` in its settings, or annotated
//! `idempotentHint` or `readOnlyHint` by the upstream). Otherwise the task fails with
//! an error saying the call was interrupted, its outcome is unknown and it was not
//! repeated. How it is told: such a tool never asks for a retry, so an attempt after
//! the first with no parked call to resume is one whose predecessor was interrupted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::{json, Map, Value};

use super::session::{lock, Event, SessionError};
use super::supervisor::{InFlight, SessionUse, Supervisor};
use crate::protocol::{code, ClientCapabilities, RpcError};
use crate::tools::{error_result, Invocation, Outcome, Tool};

/// How often a waiting run looks at its cancellation and deadline.
const TICK: Duration = Duration::from_millis(50);

pub struct UpstreamTool {
    pub supervisor: Arc<Supervisor>,
    pub parked: Arc<ParkedCalls>,
    /// The tool's name at the upstream.
    pub name: String,
    pub idempotent: bool,
    pub timeout: Duration,
}

/// A call waiting for its caller's answer to the upstream's request.
struct ParkedCall {
    caller: String,
    session: SessionUse,
    id: u64,
    events: Receiver<Event>,
    /// The input request keys given to the caller, and the upstream's request ids.
    asked: Vec<(String, Value)>,
    deadline: Instant,
}

/// Every parked call of the server, by the handle in its tool state.
#[derive(Default)]
pub struct ParkedCalls(Mutex<HashMap<String, ParkedCall>>);

impl ParkedCalls {
    /// Gives up the parked calls past their deadline: the upstream hears they are
    /// cancelled.
    pub fn expire(&self) {
        let now = Instant::now();
        lock(&self.0).retain(|_, call| {
            let keep = call.deadline > now;
            if !keep {
                call.session
                    .session
                    .cancel_call(call.id, "no answer came in time");
            }
            keep
        });
    }
}

/// A call on its way: what a run waits on.
struct Flight {
    /// The call's place among the upstream's `max_concurrency` (not held while parked).
    _place: Option<InFlight>,
    session: SessionUse,
    id: u64,
    events: Receiver<Event>,
    deadline: Instant,
}

impl Tool for UpstreamTool {
    fn run(&self, call: &mut Invocation<'_>) -> Outcome {
        let resumed = call
            .state
            .and_then(|state| state.get("upstream_call"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let flight = match resumed {
            Some(handle) => match self.resume(&handle, call) {
                Some(flight) => flight,
                None if self.idempotent => match self.send(call) {
                    Ok(flight) => flight,
                    Err(why) => return self.unavailable(why, call),
                },
                None => {
                    return self.interrupted(
                        "while it waited for input, the server restarted, the upstream \
                         session ended, or the tool's timeout passed",
                    )
                }
            },
            None => {
                let rerun = call
                    .host
                    .task_attempt()
                    .is_some_and(|(_, attempt)| attempt > 1);
                if rerun && !self.idempotent {
                    return self.interrupted("its attempt ended before the upstream answered");
                }
                match self.send(call) {
                    Ok(flight) => flight,
                    Err(why) => return self.unavailable(why, call),
                }
            }
        };
        self.wait(flight, call)
    }
}

impl UpstreamTool {
    /// Sends a fresh `tools/call`; the error says why the upstream could not take it.
    fn send(&self, call: &mut Invocation<'_>) -> Result<Flight, String> {
        let deadline = Instant::now() + self.timeout;
        let place = self.place(deadline)?;
        let mut meta = Map::new();
        if let Some(trace) = call.host.trace() {
            meta.insert("traceparent".into(), json!(trace.traceparent()));
            if let Some(state) = trace.tracestate() {
                meta.insert("tracestate".into(), json!(state));
            }
        }
        // A session whose upstream died a moment ago (before its reader noticed) refuses
        // the call unsent: the call goes to a new session once, whatever the tool.
        let mut sent = None;
        for fresh in [false, true] {
            let session = self
                .supervisor
                .session_for(call.caller)
                .map_err(|why| why.0)?;
            match session
                .session
                .call_tool(&self.name, call.arguments, meta.clone())
            {
                Ok((id, events)) => {
                    sent = Some((session, id, events));
                    break;
                }
                Err(SessionError::Closed) if !fresh => continue,
                Err(error) => {
                    return Err(format!(
                        "the upstream MCP server \"{}\" could not take the call: {error}",
                        self.supervisor.upstream.name
                    ))
                }
            }
        }
        let Some((session, id, events)) = sent else {
            return Err(format!(
                "the upstream MCP server \"{}\" could not take the call",
                self.supervisor.upstream.name
            ));
        };
        self.supervisor
            .counters
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Flight {
            _place: place,
            session,
            id,
            events,
            deadline,
        })
    }

    /// What a call the upstream could not take ends as: a retry of an idempotent task
    /// (the upstream may be back by then), else a tool error saying why.
    fn unavailable(&self, why: String, call: &Invocation<'_>) -> Outcome {
        self.count_error();
        if self.idempotent && call.host.task_attempt().is_some() {
            Outcome::Retry(why)
        } else {
            Outcome::Complete(error_result(why))
        }
    }

    /// A place among the upstream's calls in flight, when it limits them.
    fn place(&self, deadline: Instant) -> Result<Option<InFlight>, String> {
        let Some(limit) = self.supervisor.upstream.max_concurrency else {
            return Ok(None);
        };
        match self.supervisor.enter(deadline) {
            Some(place) => Ok(Some(place)),
            None => Err(format!(
                "the upstream MCP server \"{}\" had {limit} calls in flight (its \
                 max_concurrency) until this call's timeout",
                self.supervisor.upstream.name
            )),
        }
    }

    /// Takes the parked call the state names back, if it is the caller's and still
    /// there, and sends the upstream the caller's answers.
    fn resume(&self, handle: &str, call: &Invocation<'_>) -> Option<Flight> {
        let parked = {
            let mut parked = lock(&self.parked.0);
            if parked.get(handle)?.caller != call.caller {
                return None;
            }
            parked.remove(handle)?
        };
        for (key, request_id) in &parked.asked {
            let answer = match call.input_responses.get(key) {
                Some(response) => Ok(response.clone()),
                None => Err((code::INTERNAL_ERROR, "the caller gave no answer".to_owned())),
            };
            parked.session.session.answer(request_id, answer);
        }
        Some(Flight {
            _place: self.place(parked.deadline).ok().flatten(),
            session: parked.session,
            id: parked.id,
            events: parked.events,
            deadline: parked.deadline,
        })
    }

    fn wait(&self, flight: Flight, call: &mut Invocation<'_>) -> Outcome {
        let session = &flight.session.session;
        loop {
            if call.host.cancelled() {
                session.cancel_call(flight.id, "cancelled by the caller");
                return if self.idempotent {
                    Outcome::Cancelled
                } else {
                    self.interrupted(
                        "it was stopped (cancelled, past its deadline, or the server is stopping)",
                    )
                };
            }
            if Instant::now() >= flight.deadline {
                session.cancel_call(flight.id, "timed out");
                return if self.idempotent {
                    Outcome::Retry(format!(
                        "the upstream did not answer within {} ms",
                        self.timeout.as_millis()
                    ))
                } else {
                    self.interrupted("the upstream did not answer within the tool's timeout")
                };
            }
            let event = match flight.events.recv_timeout(TICK) {
                Ok(event) => event,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Event::Closed,
            };
            match event {
                Event::Progress {
                    progress,
                    total,
                    message,
                } => call.host.progress(progress, total, message.as_deref()),
                Event::Request { id, method, params } => {
                    if let Err(why) = answerable(&method, &params, call.capabilities) {
                        session.answer(&id, Err((code::METHOD_NOT_FOUND, why)));
                        continue;
                    }
                    return self.park(flight, call, id, method, without_upstream_task(params));
                }
                Event::Response(Ok(result)) => {
                    session.end_call(flight.id);
                    self.supervisor.succeeded();
                    return Outcome::Complete(call_tool_result(result));
                }
                Event::Response(Err(error)) => {
                    session.end_call(flight.id);
                    self.count_error();
                    let code = error
                        .get("code")
                        .and_then(Value::as_i64)
                        .unwrap_or(code::INTERNAL_ERROR);
                    let message = error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("the upstream failed the call");
                    return Outcome::Error(RpcError::new(code, message));
                }
                Event::Closed => {
                    self.count_error();
                    let why = "the upstream MCP server exited during the call";
                    return if self.idempotent && call.host.task_attempt().is_some() {
                        Outcome::Retry(why.into())
                    } else if self.idempotent {
                        Outcome::Complete(error_result(why))
                    } else {
                        self.interrupted(why)
                    };
                }
            }
        }
    }

    /// Parks the call and asks the caller the upstream's question.
    fn park(
        &self,
        flight: Flight,
        call: &Invocation<'_>,
        request_id: Value,
        method: String,
        params: Value,
    ) -> Outcome {
        let handle = uuid::Uuid::new_v4().simple().to_string();
        let key = format!("upstream-{}-{}", &handle[..12], flight.id);
        let mut requests = Map::new();
        requests.insert(key.clone(), json!({ "method": method, "params": params }));
        lock(&self.parked.0).insert(
            handle.clone(),
            ParkedCall {
                caller: call.caller.to_owned(),
                session: flight.session,
                id: flight.id,
                events: flight.events,
                asked: vec![(key, request_id)],
                deadline: flight.deadline,
            },
        );
        Outcome::InputRequired {
            requests,
            state: Some(json!({ "upstream_call": handle })),
        }
    }

    fn count_error(&self) {
        self.supervisor
            .counters
            .errors
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The honest failure of a call that may or may not have had its effect.
    fn interrupted(&self, why: &str) -> Outcome {
        self.count_error();
        Outcome::Error(RpcError::new(
            code::INTERNAL_ERROR,
            format!(
                "The call to tool \"{}\" of upstream \"{}\" was interrupted ({why}). Its outcome \
                 is unknown, and it was not repeated: the tool is not marked idempotent \
                 (set idempotent = true in its [upstreams.tools] settings if repeating it is \
                 safe).",
                self.name, self.supervisor.upstream.name
            ),
        ))
    }
}

/// A request's params without the upstream's own task id (its related-task `_meta`),
/// which means nothing to our caller.
fn without_upstream_task(mut params: Value) -> Value {
    if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove("io.modelcontextprotocol/related-task");
        if meta.is_empty() {
            if let Some(params) = params.as_object_mut() {
                params.remove("_meta");
            }
        }
    }
    params
}

/// Whether the caller's client can answer this request of the upstream.
fn answerable(method: &str, params: &Value, client: &ClientCapabilities) -> Result<(), String> {
    let supported = match method {
        "elicitation/create" => {
            if params.get("mode").and_then(Value::as_str) == Some("url") {
                client.elicitation_url()
            } else {
                client.elicitation_form()
            }
        }
        "sampling/createMessage" => client.sampling(),
        _ => {
            return Err(format!(
                "mcp-taskd does not pass {method} requests on to its callers"
            ))
        }
    };
    if supported {
        Ok(())
    } else {
        Err(format!("the caller's client does not support {method}"))
    }
}

/// The upstream's result as a `CallToolResult`: a result with only
/// `structuredContent` gets its JSON as a text block, as command tools' do.
fn call_tool_result(mut result: Value) -> Value {
    if !result.is_object() {
        return error_result("the upstream answered the call with something other than a result");
    }
    if result.get("content").is_none() {
        let text = result
            .get("structuredContent")
            .map(Value::to_string)
            .unwrap_or_default();
        result["content"] = json!([{ "type": "text", "text": text }]);
    }
    result
}
