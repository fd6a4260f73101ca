// Over 600 lines: one call parked and resumed across rounds; task following is apart.
//! An upstream's tool as one of ours: each run is one `tools/call` to the upstream, held
//! by whoever runs it (a worker for a task, the request's thread inline).
//!
//! - Upstream progress becomes the run's progress (a task's `statusMessage`), and its
//!   log messages about the call, and the program's output in a session of the caller's,
//!   the run's output (kept with a task; the end of it shown when the call fails).
//! - Our cancellation sends the upstream `notifications/cancelled`.
//! - A request of the upstream during the call (elicitation, sampling) parks the call
//!   and ends the run with `input_required` holding that request; the run that
//!   follows the caller's answer sends the answer to the upstream and goes on waiting
//!   for the same call. A parked call lives in this process only: one whose session or
//!   server is gone by then counts as interrupted.
//!
//! # Upstreams that serve tasks
//!
//! A tool the upstream serves as a task (it declares the `tasks.requests.tools.call`
//! capability and the tool's `execution.taskSupport` is `optional` or `required`) is
//! called as one (2025-11-25 tasks, SEP-1686). The run follows the upstream task it
//! became: `tasks/result` for its outcome and for the requests it has for our caller
//! (they go through `input_required` as above), `tasks/get` for its status message, and
//! `tasks/cancel` when our task is cancelled or times out. The upstream task's id is
//! written with our task (its tool state) before the run waits on it, so an attempt
//! after a restart, a lost lease or a lost upstream session follows the same upstream
//! task again instead of calling anew. A run that stops because the server shuts down
//! or another worker took its lease leaves the upstream task running for that attempt.
//! Only an upstream that still knows the task can be followed again: a stdio server's
//! tasks usually die with its process, and what follows is the re-run rule below.
//!
//! # A call that ends badly
//!
//! The upstream timed out, exited or was killed, sent a message too large to read,
//! could not be reached or started, or forgot its session: each ends the call with a
//! reason naming what happened (the session records why it ended, see
//! [`crate::session::Ending`]). Inline, the caller gets a tool error (`isError: true`)
//! with that reason and the end of the run's output; a task fails with the same in its
//! error. The upstream's own JSON-RPC error for the call (its `-32602` for bad
//! arguments) is passed on as it is: it is about the request.
//!
//! # Re-running after an interruption
//!
//! A call interrupted by a crash (ours or the upstream's), a lost lease, a shutdown or
//! its deadline may or may not have had its effect upstream. It is called again only
//! when the tool is idempotent (`idempotent = true` in its settings, or annotated
//! `idempotentHint` or `readOnlyHint` by the upstream). Otherwise the task fails with
//! an error saying the call was interrupted and why, that its outcome is unknown and
//! that it was not repeated. How it is told: such a tool never asks for a retry, so an
//! attempt after the first with no parked call to resume is one whose predecessor was
//! interrupted.

mod follow;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};
use serde_json::{json, Map, Value};

use super::session::{lock, too_large, Ending, Event, Session, SessionError};
use super::supervisor::{InFlight, SessionUse, Supervisor};
use taskd_protocol::headers::param_headers;
use taskd_protocol::headers::HeaderParam;
use taskd_protocol::TASKS_EXTENSION;
use taskd_protocol::{code, ClientCapabilities, RpcError};
use taskd_tools::{error_result, Invocation, InvocationHost, Outcome, Tool};

/// How often a waiting run looks at its cancellation and deadline.
const TICK: Duration = Duration::from_millis(50);
/// How often an upstream task's status is read, unless its `pollInterval` says
/// otherwise (within the bounds below).
const POLL_INTERVAL: Duration = Duration::from_secs(1);
const POLL_BOUNDS: (Duration, Duration) = (Duration::from_millis(250), Duration::from_secs(10));
/// Longest wait for the upstream's `tasks/get` when an upstream task is followed again.
const REATTACH_TIMEOUT: Duration = Duration::from_secs(10);
/// The tool-state keys: the parked call's handle, the upstream task's id (and, for a
/// task of the Tasks extension, that it is one and whether our caller was asked its
/// questions), a stateless call's input round (and whether its retry was sent).
const PARKED_KEY: &str = "upstream_call";
const TASK_KEY: &str = "upstream_task";
const EXTENSION_KEY: &str = "extension";
const ASKED_KEY: &str = "asked";
const ROUND_KEY: &str = "upstream_round";
const SENT_KEY: &str = "sent";
/// Consecutive failed `tasks/get` of a followed Tasks-extension task before the run
/// gives up on it.
const POLL_FAILURES: u32 = 5;

pub struct UpstreamTool {
    pub supervisor: Arc<Supervisor>,
    pub parked: Arc<ParkedCalls>,
    /// The tool's name at the upstream.
    pub name: String,
    pub idempotent: bool,
    pub timeout: Duration,
    /// The upstream serves the tool as a task (its `execution.taskSupport`).
    pub task_support: bool,
    /// Its `x-mcp-header` arguments, mirrored into a stateless call's headers.
    pub header_params: Vec<HeaderParam>,
}

/// A call waiting for its caller's answer to the upstream's request.
struct ParkedCall {
    caller: String,
    flight: Flight,
    /// The input request keys given to the caller, and the upstream's request ids.
    asked: Vec<(String, Value)>,
}

/// Every parked call of the server, by the handle in its tool state.
#[derive(Default)]
pub struct ParkedCalls(Mutex<HashMap<String, ParkedCall>>);

impl ParkedCalls {
    /// Gives up the parked calls past their deadline: the upstream hears they are
    /// cancelled.
    pub fn expire(&self) {
        let now = Instant::now();
        lock(&self.0).retain(|_, parked| {
            let keep = parked.flight.deadline > now;
            if !keep {
                parked.flight.cancel("no answer came in time");
            }
            keep
        });
    }
}

/// A call on its way: what a run waits on.
struct Flight {
    /// The call's place among the upstream's `max_concurrency` (not held while parked).
    place: Option<InFlight>,
    session: SessionUse,
    /// The request waited on (`tools/call`, or `tasks/result` of the task it became).
    id: u64,
    /// The call's progress token, which names it at the session.
    token: String,
    events: Receiver<Event>,
    deadline: Instant,
    /// The upstream task the call became, once it did.
    task: Option<FollowedTask>,
    /// When the call was sent, while its whole time is the upstream's: not once it
    /// waited for our caller, nor for a call followed again after an interruption.
    timed_from: Option<Instant>,
}

/// A Tasks-extension task a run polls: no request is waited on.
struct Polling {
    /// The call's place among the upstream's `max_concurrency`.
    _place: Option<InFlight>,
    session: SessionUse,
    deadline: Instant,
    /// As [`Flight::timed_from`].
    timed_from: Option<Instant>,
}

/// An upstream task a run follows (2025-11-25: waiting on its `tasks/result`).
struct FollowedTask {
    id: String,
    /// The `tasks/get` in flight, and when the next one is due.
    poll: Option<Receiver<Event>>,
    next_poll: Instant,
    interval: Duration,
    status: StatusRelay,
}

/// Passes an upstream task's status messages on as the run's progress (a task's
/// `statusMessage`), each new one once.
#[derive(Default)]
struct StatusRelay {
    /// The last message passed on, and how many were (the progress value).
    last: Option<String>,
    updates: f64,
}

impl StatusRelay {
    fn relay(&mut self, task: &Value, host: &mut dyn InvocationHost) {
        let message = task.get("statusMessage").and_then(Value::as_str);
        if message.is_some() && message != self.last.as_deref() {
            self.updates += 1.0;
            host.progress(self.updates, None, message);
            self.last = message.map(str::to_owned);
        }
    }
}

/// How often to poll: the upstream's `key` (milliseconds) within [`POLL_BOUNDS`], else
/// `current`.
fn poll_interval(task: &Value, key: &str, current: Duration) -> Duration {
    task.get(key).and_then(Value::as_u64).map_or(current, |ms| {
        Duration::from_millis(ms).clamp(POLL_BOUNDS.0, POLL_BOUNDS.1)
    })
}

impl FollowedTask {
    fn new(id: &str) -> FollowedTask {
        FollowedTask {
            id: id.to_owned(),
            poll: None,
            next_poll: Instant::now() + POLL_INTERVAL,
            interval: POLL_INTERVAL,
            status: StatusRelay::default(),
        }
    }

    /// Reads the task's status now and then: a new status message becomes the run's
    /// progress (a task's `statusMessage`).
    fn poll(&mut self, session: &Session, host: &mut dyn InvocationHost) {
        if let Some(answer) = &self.poll {
            match answer.try_recv() {
                Ok(Event::Response(Ok(task))) => {
                    self.poll = None;
                    self.interval = poll_interval(&task, "pollInterval", self.interval);
                    self.status.relay(&task, host);
                }
                Ok(_) | Err(TryRecvError::Disconnected) => self.poll = None,
                Err(TryRecvError::Empty) => return,
            }
        }
        if Instant::now() >= self.next_poll {
            let (answer, answers) = crossbeam_channel::bounded(1);
            if session
                .request("tasks/get", json!({ "taskId": self.id }), answer)
                .is_ok()
            {
                self.poll = Some(answers);
            }
            self.next_poll = Instant::now() + self.interval;
        }
    }
}

impl Flight {
    /// Gives the call up: the upstream task is cancelled, or the request.
    fn cancel(&self, reason: &str) {
        let session = &self.session.session;
        match &self.task {
            Some(task) => {
                session.tell("tasks/cancel", json!({ "taskId": task.id }));
                session.end_call(self.id, &self.token);
            }
            None => session.cancel_call(self.id, &self.token, reason),
        }
    }

    /// Stops following the call, leaving the upstream task running.
    fn leave(&self) {
        self.session.session.end_call(self.id, &self.token);
    }
}

impl Tool for UpstreamTool {
    fn run(&self, call: &mut Invocation<'_>) -> Outcome {
        let saved = |key: &str| {
            call.state
                .and_then(|state| state.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let (parked, task) = (saved(PARKED_KEY), saved(TASK_KEY));
        let flag = |key: &str| {
            call.state
                .and_then(|state| state.get(key))
                .and_then(Value::as_bool)
                == Some(true)
        };
        if let (Some(task), true) = (&task, flag(EXTENSION_KEY)) {
            return self.follow_extension_again(task, flag(ASKED_KEY), call);
        }
        let round = call.state.and_then(|state| state.get(ROUND_KEY)).cloned();
        if let Some(round) = round {
            if flag(SENT_KEY) && !self.idempotent {
                return self.broke(
                    "its attempt ended before the upstream answered".into(),
                    call,
                );
            }
            let mut sent = Map::new();
            sent.insert(ROUND_KEY.into(), round.clone());
            sent.insert(SENT_KEY.into(), json!(true));
            call.host.save_state(&Value::Object(sent));
            return match self.send(call, Some(&round)) {
                Ok(flight) => self.wait(flight, call),
                Err(why) => self.unavailable(why, call),
            };
        }
        let mut flight = parked
            .as_deref()
            .and_then(|handle| self.resume(handle, call));
        if flight.is_none() {
            flight = task.as_deref().and_then(|task| self.reattach(task, call));
        }
        let flight = match flight {
            Some(flight) => flight,
            None => {
                let rerun = call
                    .host
                    .task_attempt()
                    .is_some_and(|(_, attempt)| attempt > 1);
                let lost = if task.is_some() {
                    Some("the upstream no longer has the task the call became")
                } else if parked.is_some() {
                    Some(
                        "while it waited for input, the server restarted, the upstream \
                         session ended, or the tool's timeout passed",
                    )
                } else if rerun {
                    Some("its attempt ended before the upstream answered")
                } else {
                    None
                };
                if let (Some(why), false) = (lost, self.idempotent) {
                    return self.broke(why.into(), call);
                }
                match self.send(call, None) {
                    Ok(flight) => flight,
                    Err(why) => return self.unavailable(why, call),
                }
            }
        };
        self.wait(flight, call)
    }
}

impl UpstreamTool {
    /// Sends a fresh `tools/call` (as a task when the upstream serves the tool as
    /// one), or a stateless call's retry with the caller's answers for `round`; the
    /// error says why the upstream could not take it.
    fn send(&self, call: &mut Invocation<'_>, round: Option<&Value>) -> Result<Flight, String> {
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
            if Instant::now() >= deadline {
                // Its start (or its restart's backoff) took the call's whole time.
                return Err(self.said(&format!(
                    "was not ready to take the call within the tool's timeout of {} ms (it \
                     was being started)",
                    self.timeout.as_millis()
                )));
            }
            let mut params = Map::new();
            params.insert("name".into(), json!(self.name));
            params.insert("arguments".into(), Value::Object(call.arguments.clone()));
            let mut meta = meta.clone();
            let mut headers = Vec::new();
            if session.session.is_modern() {
                // What the upstream may ask: what our caller can answer.
                meta.insert(
                    "io.modelcontextprotocol/clientCapabilities".into(),
                    askable(call.capabilities),
                );
                if let Some(round) = round {
                    params.insert(
                        "inputResponses".into(),
                        Value::Object(call.input_responses.clone()),
                    );
                    if let Some(state) = round.get("requestState") {
                        params.insert("requestState".into(), state.clone());
                    }
                }
                headers = param_headers(&self.header_params, call.arguments);
            } else if self.task_support && session.session.serves_tool_tasks() {
                let ttl = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
                params.insert("task".into(), json!({ "ttl": ttl }));
            }
            params.insert("_meta".into(), Value::Object(meta));
            match session.session.call("tools/call", params, None, headers) {
                Ok((id, token, events)) => {
                    sent = Some((session, id, token, events));
                    break;
                }
                Err(SessionError::Closed(_)) if !fresh => continue,
                Err(error) => {
                    return Err(format!(
                        "the upstream MCP server \"{}\" could not take the call: {error}",
                        self.supervisor.upstream.name
                    ))
                }
            }
        }
        let Some((session, id, token, events)) = sent else {
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
            place,
            session,
            id,
            token,
            events,
            deadline,
            task: None,
            timed_from: Some(Instant::now()),
        })
    }

    /// What a call the upstream could not take ends as: a retry of an idempotent task
    /// (the upstream may be back by then), else a failure saying why (nothing was sent:
    /// the call had no effect).
    fn unavailable(&self, why: String, call: &Invocation<'_>) -> Outcome {
        self.count_error();
        if self.idempotent && call.host.task_attempt().is_some() {
            Outcome::Retry(why)
        } else {
            Outcome::Failed(why)
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
            parked.flight.session.session.answer(request_id, answer);
        }
        let mut flight = parked.flight;
        flight.place = self.place(flight.deadline).ok().flatten();
        Some(flight)
    }

    fn wait(&self, mut flight: Flight, call: &mut Invocation<'_>) -> Outcome {
        loop {
            if call.host.cancelled() {
                if flight.task.is_some() && call.host.released() {
                    // The attempt that follows takes the upstream task up again.
                    flight.leave();
                    return Outcome::Cancelled;
                }
                flight.cancel(if call.host.timed_out() {
                    "timed out"
                } else if call.host.released() {
                    "mcp-taskd is stopping"
                } else {
                    "cancelled by the caller"
                });
                return self.stopped(call);
            }
            if Instant::now() >= flight.deadline {
                flight.cancel("timed out");
                return self.timed_out(call);
            }
            if let Some(task) = &mut flight.task {
                task.poll(&flight.session.session, call.host);
            }
            let event = match flight.events.recv_timeout(TICK) {
                Ok(event) => event,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    Event::Closed(flight.session.session.ending())
                }
            };
            match event {
                Event::Progress {
                    progress,
                    total,
                    message,
                } => call.host.progress(progress, total, message.as_deref()),
                Event::Output(stream, line) => call.host.output(stream, &line),
                Event::Log { level, data } => call.host.log(level, data),
                Event::Request { id, method, params } => {
                    if let Err(why) = answerable(&method, &params, call.capabilities) {
                        flight
                            .session
                            .session
                            .answer(&id, Err((code::METHOD_NOT_FOUND, why)));
                        continue;
                    }
                    return self.park(flight, call, id, method, without_upstream_task(params));
                }
                Event::Response(Ok(result)) if flight.session.session.is_modern() => {
                    flight.leave();
                    match result.get("resultType").and_then(Value::as_str) {
                        Some("input_required") => return self.ask_caller(&result, call),
                        Some("task") => {
                            let Some(task_id) = result.get("taskId").and_then(Value::as_str) else {
                                return self.broke(
                                    self.said("answered with a task that has no taskId"),
                                    call,
                                );
                            };
                            let task_id = task_id.to_owned();
                            let mut state = Map::new();
                            state.insert(TASK_KEY.into(), json!(task_id));
                            state.insert(EXTENSION_KEY.into(), json!(true));
                            if !call.host.save_state(&Value::Object(state))
                                && call.host.task_attempt().is_some()
                            {
                                flight
                                    .session
                                    .session
                                    .tell("tasks/cancel", json!({ "taskId": task_id }));
                                return self.unfollowable(call);
                            }
                            let polling = Polling {
                                _place: flight.place,
                                session: flight.session,
                                deadline: flight.deadline,
                                timed_from: flight.timed_from,
                            };
                            return self.follow_extension(polling, &task_id, call);
                        }
                        _ => {
                            self.answered(flight.timed_from);
                            self.supervisor.succeeded();
                            return Outcome::Complete(call_tool_result(result));
                        }
                    }
                }
                Event::Response(Ok(result)) => {
                    if flight.task.is_none() {
                        if let Some(task_id) = created_task(&result) {
                            match self.follow(flight, &task_id, call) {
                                Some(next) => {
                                    flight = next;
                                    continue;
                                }
                                None => {
                                    return self.unfollowable(call);
                                }
                            }
                        }
                    }
                    flight.leave();
                    self.answered(flight.timed_from);
                    self.supervisor.succeeded();
                    return Outcome::Complete(call_tool_result(result));
                }
                Event::Response(Err(error)) => {
                    flight.leave();
                    self.answered(flight.timed_from);
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
                Event::Failed(_) | Event::Closed(_) => {
                    flight.leave();
                    if let Some(task) = &flight.task {
                        // The session (or the request's answer) ended, not necessarily
                        // the upstream's task (an HTTP upstream's outlives its session):
                        // follow it on another.
                        if let Some(next) = self.reattach(&task.id.clone(), call) {
                            flight = next;
                            continue;
                        }
                    }
                    let why = match event {
                        Event::Failed(why) => self.said(&why),
                        Event::Closed(Ending::TooLarge) => self.said(&too_large()),
                        Event::Closed(ending) => {
                            self.said(&format!("{ending} before it answered the call"))
                        }
                        _ => unreachable!("matched above"),
                    };
                    return self.broke(why, call);
                }
            }
        }
    }

    /// `what` (a phrase) said of the upstream: "the upstream MCP server \"x\" {what}".
    fn said(&self, what: &str) -> String {
        format!(
            "the upstream MCP server \"{}\" {what}",
            self.supervisor.upstream.name
        )
    }

    /// A stateless upstream's questions for our caller (an `input_required` result):
    /// our run asks them as its own, and its next round sends the answers back with the
    /// upstream's `requestState`.
    fn ask_caller(&self, result: &Value, call: &Invocation<'_>) -> Outcome {
        let Some(requests) = result.get("inputRequests").and_then(Value::as_object) else {
            return self.broke(self.said("asked for input without inputRequests"), call);
        };
        for request in requests.values() {
            let method = request.get("method").and_then(Value::as_str).unwrap_or("");
            let params = request.get("params").cloned().unwrap_or_default();
            if let Err(why) = answerable(method, &params, call.capabilities) {
                self.count_error();
                return Outcome::Complete(error_result(format!(
                    "the upstream MCP server \"{}\" asked something the caller cannot answer: {why}",
                    self.supervisor.upstream.name
                )));
            }
        }
        let mut round = Map::new();
        if let Some(state) = result.get("requestState") {
            round.insert("requestState".into(), state.clone());
        }
        let mut state = Map::new();
        state.insert(ROUND_KEY.into(), Value::Object(round));
        Outcome::InputRequired {
            requests: requests.clone(),
            state: Some(Value::Object(state)),
        }
    }

    /// Parks the call and asks the caller the upstream's question.
    fn park(
        &self,
        mut flight: Flight,
        call: &Invocation<'_>,
        request_id: Value,
        method: String,
        params: Value,
    ) -> Outcome {
        let handle = uuid::Uuid::new_v4().simple().to_string();
        let key = format!("upstream-{}-{}", &handle[..12], flight.id);
        let mut requests = Map::new();
        requests.insert(key.clone(), json!({ "method": method, "params": params }));
        let mut state = Map::new();
        state.insert(PARKED_KEY.into(), json!(handle));
        if let Some(task) = &flight.task {
            state.insert(TASK_KEY.into(), json!(task.id));
        }
        flight.place = None;
        flight.timed_from = None;
        lock(&self.parked.0).insert(
            handle,
            ParkedCall {
                caller: call.caller.to_owned(),
                flight,
                asked: vec![(key, request_id)],
            },
        );
        Outcome::InputRequired {
            requests,
            state: Some(Value::Object(state)),
        }
    }

    /// Records how long the upstream took, when the call's whole time was its own
    /// (`timed_from`: when it was sent).
    fn answered(&self, timed_from: Option<Instant>) {
        if let Some(sent) = timed_from {
            self.supervisor.counters.latency.observe(sent.elapsed());
        }
    }

    fn count_error(&self) {
        self.supervisor
            .counters
            .errors
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// What a call given up because its run was stopped ends as (the upstream was
    /// told): its deadline passing is a timeout; a cancellation is one; a shutdown or a
    /// lost lease is a retry of an idempotent tool's task (the next attempt calls
    /// again), an interruption of another's.
    fn stopped(&self, call: &Invocation<'_>) -> Outcome {
        if call.host.timed_out() {
            return self.timed_out(call);
        }
        if self.idempotent || !call.host.released() {
            return Outcome::Cancelled;
        }
        self.broke(
            "mcp-taskd stopped waiting for the answer: the server is stopping, or another \
             worker took the task over"
                .into(),
            call,
        )
    }

    /// What a call given up at the tool's timeout ends as (the upstream was told).
    fn timed_out(&self, call: &Invocation<'_>) -> Outcome {
        self.broke(
            self.said(&format!(
                "did not answer within {} ms (the tool's timeout)",
                self.timeout.as_millis()
            )),
            call,
        )
    }

    /// What a call that ended badly (`why`: what happened) ends as: an idempotent
    /// tool's task attempt is retried; another task fails saying the call was
    /// interrupted, its outcome unknown and not repeated; inline, the caller gets a tool
    /// error saying why (and, for a tool that is not idempotent, that its effect is
    /// unknown). Each with the end of the run's output.
    fn broke(&self, why: String, call: &Invocation<'_>) -> Outcome {
        self.count_error();
        match (call.host.task_attempt().is_some(), self.idempotent) {
            (true, true) => Outcome::Retry(why),
            (true, false) => Outcome::Failed(format!(
                "the call to tool \"{}\" of upstream \"{}\" was interrupted ({why}); its \
                 outcome is unknown, and it was not repeated: the tool is not marked \
                 idempotent (set idempotent = true in its [upstreams.tools] settings if \
                 repeating it is safe)",
                self.name, self.supervisor.upstream.name
            )),
            (false, true) => Outcome::Failed(why),
            (false, false) => Outcome::Failed(format!(
                "{why}; whether the call had its effect upstream is unknown"
            )),
        }
    }
}

fn task_params(task_id: &str) -> Map<String, Value> {
    let mut params = Map::new();
    params.insert("taskId".into(), json!(task_id));
    params
}

/// The upstream task a `tools/call` answer says the call became (a
/// `CreateTaskResult`), if it did.
fn created_task(result: &Value) -> Option<String> {
    if result.get("content").is_some() {
        return None;
    }
    result
        .get("task")?
        .get("taskId")?
        .as_str()
        .map(str::to_owned)
}

/// A request's params (or a result) without the upstream's own task id (its
/// related-task `_meta`), which means nothing to our caller.
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

/// The capabilities a stateless upstream is told of: what our caller can answer
/// (elicitation, sampling, roots: asked per call, so they are the caller's), and the
/// Tasks extension (we follow its tasks).
fn askable(caller: &ClientCapabilities) -> Value {
    let mut capabilities = Map::new();
    for key in ["elicitation", "sampling", "roots"] {
        if let Some(value) = caller.0.get(key) {
            capabilities.insert(key.into(), value.clone());
        }
    }
    capabilities.insert("extensions".into(), json!({ TASKS_EXTENSION: {} }));
    Value::Object(capabilities)
}

/// `params` with the `_meta` saying what our caller can answer: a stateless upstream
/// shows a task's questions only to a client that can.
fn with_caller_capabilities(mut params: Value, caller: &ClientCapabilities) -> Value {
    params["_meta"] = json!({ "io.modelcontextprotocol/clientCapabilities": askable(caller) });
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
        // Only a stateless upstream asks for roots (per call, by input_required): a
        // session is never told of roots, which would be some caller's at start-up.
        "roots/list" => client.roots(),
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
/// `structuredContent` gets its JSON as a text block, as command tools' do; the
/// upstream task's id (related-task `_meta`, on a `tasks/result`) is dropped.
fn call_tool_result(result: Value) -> Value {
    if !result.is_object() {
        return error_result("the upstream answered the call with something other than a result");
    }
    let mut result = without_upstream_task(result);
    if result.get("content").is_none() {
        let text = result
            .get("structuredContent")
            .map(Value::to_string)
            .unwrap_or_default();
        result["content"] = json!([{ "type": "text", "text": text }]);
    }
    result
}
