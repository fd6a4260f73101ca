// Over 600 lines: handshake, requests and both wires share one session's state.
//! One session with an upstream MCP server: its process (or its URL, [`super::http`]),
//! the `initialize` handshake, and the routing of every message it sends.
//!
//! The session speaks the 2025-11-25 revision as a client: newline-delimited JSON-RPC
//! on a program's stdin and stdout, or POSTs to a URL. Every message that comes back (a
//! stdout line, read by one thread; a POST's answer) is routed the same way:
//! - a response goes to whoever sent the request (`pending`, by id); a POST that brought
//!   none says why ([`Event::Failed`]);
//! - `notifications/progress` goes to the call whose progress token it names;
//! - a log message (`notifications/message`) goes to the call following the upstream
//!   task its related-task `_meta` names, else to the request whose answer carried it
//!   (an HTTP upstream's), else, in a session of one caller's (`per_call`,
//!   `per_identity`), to that caller's calls in flight, and in a shared one to the one
//!   call in flight, as a request does; with several, it is nobody's and is dropped;
//! - a request of the upstream (`elicitation/create`, `sampling/createMessage`, …) goes
//!   to the call following the upstream task its related-task `_meta` names, else to
//!   the one call in flight; with none or several in flight it cannot be told whose it
//!   is, and the upstream gets an error rather than another caller's attention (`ping`
//!   is answered here);
//! - a list change (`notifications/{tools,prompts,resources}/list_changed`) and the
//!   session's end go to the supervisor;
//!
//! an HTTP upstream's messages outside any request come on its GET stream, which a
//! thread of the session keeps open ([`listen`]).
//!
//! A program's stderr, and what it prints on stdout that is not JSON, is its output: in
//! a session of one caller's it goes to that caller's calls in flight (kept with their
//! tasks, shown when they fail); a shared session's, and any printed while no call is
//! in flight, goes to the log at debug level, since it is no single caller's.
//!
//! Nothing the upstream sends on its protocol stream is logged: arguments, results and
//! questions are the callers'. When the session ends, why is recorded ([`Ending`]):
//! every call it cuts off says so.

pub(crate) mod ending;
mod route;

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use serde_json::{json, Map, Value};

use super::config::{Era, SessionScope, Transport, Upstream};
use super::http::{Delivery, HttpWire, Listened, MODERN_VERSION};
pub use ending::{too_large, Ending, MAX_MESSAGE};
use taskd_protocol::{LogLevel, TASKS_EXTENSION};
use taskd_tools::command::daemon::Daemon;
use taskd_tools::OutputStream;

/// The revision this client asks for; older ones the upstream answers with are spoken
/// too (what this client uses of them did not change).
const PROTOCOL_VERSION: &str = "2025-11-25";
const ACCEPTED_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// How long a closing upstream gets after its stdin closes, then after SIGTERM.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// How long a program whose stdout closed gets to exit by itself (its exit status is
/// then why it ended), and its stderr to be read to its end.
const EXIT_WAIT: Duration = Duration::from_secs(1);
/// Most output lines and log messages queued for one call (a parked call reads none):
/// beyond, they are dropped.
const MAX_QUEUED: usize = 1000;

/// What the session tells one call.
#[derive(Debug)]
pub enum Event {
    /// The response to the call's request: its `result`, or its `error` object.
    Response(Result<Value, Value>),
    Progress {
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// A request of the upstream made during the call.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A line of the program's output (stderr, or stdout that is not JSON) while the
    /// call was in flight on a session of its caller's, at most
    /// [`taskd_tools::MAX_OUTPUT_LINE`] bytes.
    Output(OutputStream, String),
    /// A log message of the upstream's about the call (`notifications/message`).
    Log { level: LogLevel, data: Value },
    /// The request's answer could not be had (an HTTP upstream: no connection, an error
    /// status, an answer too large, not JSON or without a response): a phrase saying
    /// so, after the upstream's name.
    Failed(String),
    /// The session ended before the response came, and why.
    Closed(Ending),
}

/// What the session tells its supervisor.
pub enum Notice {
    /// Its tools, prompts or resources changed: list them again.
    ListsChanged,
    /// The session ended; `expected` when it was closed on purpose.
    Closed { expected: bool, ending: Ending },
}

/// Why a session could not start or answer.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("could not start {program}: {source}")]
    Start {
        program: String,
        source: std::io::Error,
    },
    #[error("it did not answer {method} within {} ms", timeout.as_millis())]
    Timeout {
        method: &'static str,
        timeout: Duration,
    },
    #[error("it {0}")]
    Closed(Ending),
    #[error("{method} failed: it {why}")]
    Failed { method: &'static str, why: String },
    #[error("{method} failed: {message}")]
    Refused {
        method: &'static str,
        /// The upstream's JSON-RPC error code.
        code: i64,
        message: String,
    },
    #[error("it speaks protocol version {0}, which mcp-taskd does not")]
    Version(String),
}

/// How messages reach the upstream.
enum Wire {
    /// A program we started: its stdin, and the program until it is stopped.
    Stdio {
        stdin: Mutex<Option<File>>,
        daemon: Mutex<Option<Daemon>>,
    },
    Http(HttpWire),
}

/// A live session (until [`Session::close`] or the upstream's exit).
pub struct Session {
    upstream: String,
    wire: Wire,
    notices: NoticeFn,
    /// Itself, for the threads that read an HTTP upstream's answers.
    this: Weak<Session>,
    next_id: AtomicU64,
    /// Requests sent, by id: where their response goes.
    pending: Mutex<HashMap<u64, Sender<Event>>>,
    /// Calls in flight, by progress token.
    calls: Mutex<HashMap<String, Sender<Event>>>,
    /// The upstream tasks calls follow, by task id: their progress token.
    tasks: Mutex<HashMap<String, String>>,
    closing: AtomicBool,
    closed: AtomicBool,
    /// Why it ended, once it did (the first cause recorded; see [`Session::ending`]).
    ending: Mutex<Option<Ending>>,
    /// All its calls are one caller's (`per_call`, `per_identity`): the program's output
    /// and its log messages are theirs.
    private: bool,
    /// Disconnected once the program's stderr has been read to its end.
    stderr_read: Mutex<Option<Receiver<()>>>,
    /// The server's `instructions`, `serverInfo` and `capabilities`.
    pub initialized: Mutex<Value>,
}

type NoticeFn = Arc<dyn Fn(Notice) + Send + Sync>;

impl Session {
    /// Starts the upstream's program (or reaches its URL) and runs the `initialize`
    /// handshake.
    pub fn start(upstream: &Upstream, notices: NoticeFn) -> Result<Arc<Session>, SessionError> {
        let session = match &upstream.transport {
            Transport::Stdio { launch, program } => {
                let (daemon, pipes) =
                    Daemon::start(launch).map_err(|source| SessionError::Start {
                        program: program.display().to_string(),
                        source,
                    })?;
                let session = Session::new(
                    upstream,
                    Wire::Stdio {
                        stdin: Mutex::new(Some(pipes.stdin)),
                        daemon: Mutex::new(Some(daemon)),
                    },
                    notices,
                );
                let stderr = pipes.stderr;
                let (read, stderr_read) = crossbeam_channel::bounded(0);
                *lock(&session.stderr_read) = Some(stderr_read);
                let passer = Arc::downgrade(&session);
                spawn_thread(&format!("upstream-err-{}", upstream.name), move || {
                    route::pass_stderr(&passer, stderr, read)
                });
                let reader = Arc::clone(&session);
                spawn_thread(&format!("upstream-{}", upstream.name), move || {
                    reader.read(pipes.stdout)
                });
                session
            }
            Transport::Http { url, bearer, era } => {
                let session = Session::new(
                    upstream,
                    Wire::Http(HttpWire::new(url, bearer.as_deref())),
                    notices,
                );
                if *era != Era::Legacy && session.discover(upstream, *era)? {
                    session.keep_listening(upstream);
                    return Ok(session);
                }
                session
            }
        };
        let handshake = session.ask(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                // No roots: a server that asks for them outside a call would get
                // nobody's roots. Elicitation and sampling reach the caller.
                "capabilities": { "elicitation": {}, "sampling": {} },
                "clientInfo": { "name": "mcp-taskd", "version": env!("CARGO_PKG_VERSION") },
            }),
            upstream.startup_timeout,
        );
        let result = match handshake {
            Ok(result) => result,
            Err(error) => {
                session.close("its start-up failed");
                return Err(error);
            }
        };
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !ACCEPTED_VERSIONS.contains(&version) {
            session.close("its start-up failed");
            return Err(SessionError::Version(version.to_owned()));
        }
        if let Wire::Http(http) = &session.wire {
            http.set_version(version);
        }
        *lock(&session.initialized) = result;
        session
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .map_err(|_| SessionError::Closed(session.ending()))?;
        session.keep_listening(upstream);
        Ok(session)
    }

    /// Starts the thread that hears an HTTP upstream outside requests ([`listen`]): for
    /// a 2025-11-25 session unless it is `per_call` (it lives for one call; closing a
    /// session ends its GET stream), for a stateless upstream in its `shared` session
    /// only (its subscription ends only when the upstream ends it, so sessions that come
    /// and go would leave theirs open; the lists are the upstream's, not a caller's).
    fn keep_listening(self: &Arc<Self>, upstream: &Upstream) {
        let listens = if self.is_modern() {
            upstream.session == SessionScope::Shared
        } else {
            upstream.session != SessionScope::PerCall
        };
        if matches!(self.wire, Wire::Http(_)) && listens {
            let listener = Arc::downgrade(self);
            spawn_thread(&format!("upstream-get-{}", upstream.name), move || {
                listen(&listener)
            });
        }
    }

    /// Asks an HTTP upstream with `server/discover` whether it serves the stateless
    /// revision: `true` (and the session is ready) when it does. One that does not is
    /// spoken to in 2025-11-25 sessions, unless the configuration says 2026-07-28.
    fn discover(&self, upstream: &Upstream, era: Era) -> Result<bool, SessionError> {
        let Wire::Http(http) = &self.wire else {
            return Ok(false);
        };
        http.set_modern(true);
        let answer = self.ask("server/discover", json!({}), upstream.startup_timeout);
        let serves = answer.as_ref().is_ok_and(|result| {
            result
                .get("supportedVersions")
                .and_then(Value::as_array)
                .is_some_and(|versions| versions.iter().any(|v| v == MODERN_VERSION))
        });
        match (answer, serves) {
            (Ok(result), true) => {
                *lock(&self.initialized) = json!({
                    "protocolVersion": MODERN_VERSION,
                    "capabilities": result.get("capabilities").cloned().unwrap_or_default(),
                    "instructions": result.get("instructions").cloned().unwrap_or_default(),
                    "serverInfo": result
                        .pointer("/_meta/io.modelcontextprotocol~1serverInfo")
                        .cloned()
                        .unwrap_or_default(),
                });
                Ok(true)
            }
            (answer, _) if era == Era::Modern => {
                self.close("its start-up failed");
                Err(match answer {
                    Err(error) => error,
                    Ok(_) => SessionError::Version("none of 2026-07-28".into()),
                })
            }
            _ => {
                http.set_modern(false);
                Ok(false)
            }
        }
    }

    fn new(upstream: &Upstream, wire: Wire, notices: NoticeFn) -> Arc<Session> {
        Arc::new_cyclic(|this| Session {
            upstream: upstream.name.clone(),
            wire,
            notices,
            this: this.clone(),
            next_id: AtomicU64::new(1),
            pending: Mutex::default(),
            calls: Mutex::default(),
            tasks: Mutex::default(),
            closing: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            ending: Mutex::new(None),
            private: upstream.session != SessionScope::Shared,
            stderr_read: Mutex::new(None),
            initialized: Mutex::new(Value::Null),
        })
    }

    /// Why the session ended (or is ending). Before its reader has recorded why, a
    /// closed program's session is one whose stdout closed.
    pub fn ending(&self) -> Ending {
        lock(&self.ending).clone().unwrap_or(Ending::OutputClosed)
    }

    /// Records why the session ends, unless a cause was recorded first.
    fn record(&self, ending: Ending) {
        lock(&self.ending).get_or_insert(ending);
    }

    /// Whether a call is in flight (or parked) on the session.
    pub fn busy(&self) -> bool {
        !lock(&self.calls).is_empty()
    }

    /// Whether the upstream serves `tools/call` as tasks (2025-11-25 tasks).
    pub fn serves_tool_tasks(&self) -> bool {
        lock(&self.initialized)
            .pointer("/capabilities/tasks/requests/tools/call")
            .is_some()
    }

    /// Whether the upstream is spoken to in the stateless revision (2026-07-28): no
    /// session, no requests of its own (it asks by `input_required` results), tasks of
    /// the Tasks extension.
    pub fn is_modern(&self) -> bool {
        matches!(&self.wire, Wire::Http(http) if http.is_modern())
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Sends a request and waits up to `timeout` for its result.
    pub fn ask(
        &self,
        method: &'static str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, SessionError> {
        let (events, answers) = crossbeam_channel::bounded(1);
        let id = self.request(method, params, events)?;
        let deadline = Instant::now() + timeout;
        loop {
            match answers.recv_deadline(deadline) {
                Ok(Event::Response(Ok(result))) => return Ok(result),
                Ok(Event::Response(Err(error))) => {
                    return Err(SessionError::Refused {
                        method,
                        code: error
                            .get("code")
                            .and_then(Value::as_i64)
                            .unwrap_or(taskd_protocol::code::INTERNAL_ERROR),
                        message: error
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("no message")
                            .to_owned(),
                    })
                }
                Ok(Event::Closed(ending)) => return Err(SessionError::Closed(ending)),
                Ok(Event::Failed(why)) => return Err(SessionError::Failed { method, why }),
                Ok(_) => {}
                Err(_) => {
                    lock(&self.pending).remove(&id);
                    return Err(SessionError::Timeout { method, timeout });
                }
            }
        }
    }

    /// Sends a request whose response goes to `events`; returns its id.
    pub fn request(
        &self,
        method: &str,
        params: Value,
        events: Sender<Event>,
    ) -> Result<u64, SessionError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.send_request(id, method, params, events)?;
        Ok(id)
    }

    fn send_request(
        &self,
        id: u64,
        method: &str,
        params: Value,
        events: Sender<Event>,
    ) -> Result<(), SessionError> {
        self.send_request_with(id, method, params, events, Vec::new())
    }

    fn send_request_with(
        &self,
        id: u64,
        method: &str,
        mut params: Value,
        events: Sender<Event>,
        headers: Vec<(String, String)>,
    ) -> Result<(), SessionError> {
        if self.is_modern() {
            with_request_meta(&mut params);
        }
        // Pending before the closed check, and no check after the write: the reader
        // marks the session closed before it tells every pending request, so a request
        // is either refused here, unsent, or told `Closed` once sent (an upstream that
        // dies of this very request must not make it look unsent).
        lock(&self.pending).insert(id, events);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if self.is_closed() || self.send_with(&message, headers).is_err() {
            lock(&self.pending).remove(&id);
            return Err(SessionError::Closed(self.ending()));
        }
        Ok(())
    }

    /// Starts a call (`tools/call`, or `tasks/result` following the task one became):
    /// progress and the upstream's requests during it go to the returned receiver, and
    /// its response last. A new call gets a progress token of its own in its `_meta`; a
    /// call that goes on from an earlier one keeps that one's `token`. The call is
    /// tracked until [`Session::end_call`].
    pub fn call(
        &self,
        method: &str,
        mut params: Map<String, Value>,
        token: Option<&str>,
        headers: Vec<(String, String)>,
    ) -> Result<(u64, String, Receiver<Event>), SessionError> {
        let (events, receiver) = crossbeam_channel::unbounded();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let token = match token {
            Some(token) => token.to_owned(),
            None => {
                let token = format!("call-{id}");
                let meta = params
                    .entry("_meta")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(meta) = meta.as_object_mut() {
                    meta.insert("progressToken".into(), Value::String(token.clone()));
                }
                token
            }
        };
        lock(&self.calls).insert(token.clone(), events.clone());
        match self.send_request_with(id, method, Value::Object(params), events, headers) {
            Ok(()) => Ok((id, token, receiver)),
            Err(error) => {
                lock(&self.calls).remove(&token);
                Err(error)
            }
        }
    }

    /// Routes the upstream's requests about its task `task_id` (named in their
    /// related-task `_meta`) to the call of `token`, whatever else is in flight.
    pub fn follow_task(&self, task_id: &str, token: &str) {
        lock(&self.tasks).insert(task_id.to_owned(), token.to_owned());
    }

    /// Stops tracking a call (its response came, or it was given up).
    pub fn end_call(&self, id: u64, token: &str) {
        lock(&self.pending).remove(&id);
        lock(&self.calls).remove(token);
        lock(&self.tasks).retain(|_, followed| followed != token);
    }

    /// Tells the upstream that the call `id` is no longer wanted.
    pub fn cancel_call(&self, id: u64, token: &str, reason: &str) {
        let _ = self.send(&json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": reason},
        }));
        self.end_call(id, token);
    }

    /// Sends a request whose answer nobody waits for (`tasks/cancel`).
    pub fn tell(&self, method: &str, params: Value) {
        let (events, _) = crossbeam_channel::bounded(1);
        if let Ok(id) = self.request(method, params, events) {
            // Its answer finds no one: forget it now rather than when it comes.
            lock(&self.pending).remove(&id);
        }
    }

    /// Answers a request of the upstream.
    pub fn answer(&self, id: &Value, answer: Result<Value, (i64, String)>) {
        let message = match answer {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, message)) => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
            }
        };
        let _ = self.send(&message);
    }

    /// Ends the session on purpose (`why`: what the calls still in flight on it hear):
    /// a program's stdin closes, then its process group is stopped; an HTTP upstream is
    /// told (`DELETE`).
    pub fn close(&self, why: &'static str) {
        self.record(Ending::Closed(why));
        self.closing.store(true, Ordering::Release);
        match &self.wire {
            Wire::Stdio { .. } => {
                self.stop_program();
            }
            Wire::Http(http) => {
                if !self.closed.swap(true, Ordering::AcqRel) {
                    http.close();
                    self.ended(true);
                }
            }
        }
    }

    /// Closes a program's stdin, gives it [`CLOSE_GRACE`] to exit, then stops its
    /// process group and reaps it: its exit status, unless it was stopped already.
    fn stop_program(&self) -> Option<std::process::ExitStatus> {
        let Wire::Stdio { stdin, daemon } = &self.wire else {
            return None;
        };
        lock(stdin).take();
        let daemon = lock(daemon).take()?;
        let deadline = Instant::now() + CLOSE_GRACE;
        while !daemon.has_exited() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        match daemon.stop(CLOSE_GRACE) {
            Ok(status) => Some(status),
            Err(error) => {
                log::warn!("upstream {}: reaping its process: {error}", self.upstream);
                None
            }
        }
    }

    /// Whether the program exits by itself within `wait` (it stays unreaped).
    fn exits_within(&self, wait: Duration) -> bool {
        let Wire::Stdio { daemon, .. } = &self.wire else {
            return false;
        };
        let deadline = Instant::now() + wait;
        loop {
            let exited = lock(daemon).as_ref().is_none_or(Daemon::has_exited);
            if exited || Instant::now() >= deadline {
                return exited;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends one message. A request to an HTTP upstream is answered on a thread of its
    /// own; everything else is sent before this returns.
    fn send(&self, message: &Value) -> std::io::Result<()> {
        self.send_with(message, Vec::new())
    }

    /// [`Session::send`], with HTTP headers for the request (a stateless `tools/call`'s
    /// `Mcp-Param-*`; a program's wire has none).
    fn send_with(&self, message: &Value, headers: Vec<(String, String)>) -> std::io::Result<()> {
        match &self.wire {
            Wire::Stdio { stdin, .. } => {
                let mut line = message.to_string();
                line.push('\n');
                let mut stdin = lock(stdin);
                let Some(stdin) = stdin.as_mut() else {
                    return Err(std::io::ErrorKind::BrokenPipe.into());
                };
                let written = stdin
                    .write_all(line.as_bytes())
                    .and_then(|()| stdin.flush());
                if written.is_err() {
                    // The program is gone (its end of the pipe closed) even if its reader
                    // has not seen the end of its stdout yet: no new call picks it.
                    self.record(Ending::InputClosed);
                    self.closed.store(true, Ordering::Release);
                }
                written
            }
            Wire::Http(_) if self.is_closed() => Err(std::io::ErrorKind::BrokenPipe.into()),
            Wire::Http(_) => {
                let request = message.get("method").is_some()
                    && message.get("id").is_some_and(|id| !id.is_null());
                if !request {
                    self.post(message, &headers);
                    return Ok(());
                }
                let Some(session) = self.this.upgrade() else {
                    return Err(std::io::ErrorKind::BrokenPipe.into());
                };
                let message = message.clone();
                std::thread::Builder::new()
                    .name("upstream-post".into())
                    .spawn(move || session.post(&message, &headers))
                    .map(|_| ())
            }
        }
    }

    /// POSTs a message to an HTTP upstream and routes what comes back.
    fn post(&self, message: &Value, headers: &[(String, String)]) {
        let Wire::Http(http) = &self.wire else {
            return;
        };
        let id = message
            .get("id")
            .filter(|id| !id.is_null() && message.get("method").is_some());
        let mut answered = false;
        http.post(message, headers, &mut |delivery| match delivery {
            Delivery::Message(mut reply) => {
                // A refusal made before the body was read carries no id: it is this
                // request's.
                if let (Some(id), Some(Value::Null)) = (id, reply.get("id")) {
                    reply["id"] = id.clone();
                }
                if id.is_some_and(|id| reply.get("id") == Some(id) && reply.get("method").is_none())
                {
                    answered = true;
                }
                self.route_via(reply, id.and_then(Value::as_u64));
            }
            Delivery::SessionGone => {
                log::info!(
                    "upstream {}: its session ended; the next call starts another",
                    self.upstream
                );
                self.record(Ending::SessionGone);
                if !self.closed.swap(true, Ordering::AcqRel) {
                    self.ended(false);
                }
                answered = true;
            }
            Delivery::Failed(why) => {
                log::warn!("upstream {}: it {why}", self.upstream);
                if let Some(id) = id {
                    self.fail_request(id, why);
                    answered = true;
                }
            }
        });
        if let (Some(id), false) = (id, answered) {
            self.fail_request(id, "ended its answer without a response".into());
        }
    }

    /// Tells whoever waits on the request `id` that its answer will not come, and why.
    fn fail_request(&self, id: &Value, why: String) {
        let waiting = id.as_u64().and_then(|id| lock(&self.pending).remove(&id));
        if let Some(events) = waiting {
            let _ = events.send(Event::Failed(why));
        }
    }

    /// The session is over: whoever waits on it hears so and why, and so does the
    /// supervisor (`expected` when it was closed on purpose).
    fn ended(&self, expected: bool) {
        let ending = self.ending();
        for (_, events) in lock(&self.pending).drain() {
            let _ = events.send(Event::Closed(ending.clone()));
        }
        for (_, events) in lock(&self.calls).drain() {
            let _ = events.send(Event::Closed(ending.clone()));
        }
        lock(&self.tasks).clear();
        (self.notices)(Notice::Closed { expected, ending });
    }
}

/// What every stateless request carries in its `_meta` (kept where the caller set a
/// key already: a call's `clientCapabilities` are its caller's).
fn with_request_meta(params: &mut Value) {
    if !params.is_object() {
        *params = json!({});
    }
    let Some(params) = params.as_object_mut() else {
        return;
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    meta.entry("io.modelcontextprotocol/protocolVersion")
        .or_insert_with(|| json!(MODERN_VERSION));
    meta.entry("io.modelcontextprotocol/clientInfo")
        .or_insert_with(|| json!({ "name": "mcp-taskd", "version": env!("CARGO_PKG_VERSION") }));
    meta.entry("io.modelcontextprotocol/clientCapabilities")
        .or_insert_with(|| json!({ "extensions": { TASKS_EXTENSION: {} } }));
}

/// The id of a stateless session's `subscriptions/listen` (its notifications carry it
/// as their subscription id; nothing else is sent with a string id).
const LISTEN_ID: &str = "mcp-taskd-listen";

/// Keeps an HTTP session's stream for messages outside requests open while the session
/// lives, routing what comes on it: the GET stream of a 2025-11-25 session, a
/// `subscriptions/listen` for the list changes of a stateless upstream. Opened again
/// after it ends (backing off from 1 s to 30 s while it keeps failing), given up when
/// the upstream serves none.
fn listen(session: &Weak<Session>) {
    let mut backoff = Duration::from_secs(1);
    loop {
        let Some(live) = session.upgrade().filter(|live| !live.is_closed()) else {
            return;
        };
        let Wire::Http(http) = &live.wire else {
            return;
        };
        let opened = Instant::now();
        let mut heard = false;
        let listened = if live.is_modern() {
            let mut params = json!({ "notifications": {
                "toolsListChanged": true,
                "promptsListChanged": true,
                "resourcesListChanged": true,
            }});
            with_request_meta(&mut params);
            let request = json!({
                "jsonrpc": "2.0", "id": LISTEN_ID, "method": "subscriptions/listen",
                "params": params,
            });
            let mut refused = false;
            http.post(&request, &[], &mut |delivery| {
                if let Delivery::Message(message) = delivery {
                    if message.get("error").is_some() {
                        refused = true;
                    } else {
                        heard = true;
                        live.route(message);
                    }
                }
            });
            if refused {
                Listened::Unsupported
            } else {
                Listened::Ended
            }
        } else {
            http.listen(&mut |delivery| {
                if let Delivery::Message(message) = delivery {
                    heard = true;
                    live.route(message);
                }
            })
        };
        match listened {
            Listened::Unsupported => return,
            Listened::SessionGone => {
                live.record(Ending::SessionGone);
                if !live.closed.swap(true, Ordering::AcqRel) {
                    live.ended(false);
                }
                return;
            }
            Listened::Ended => {}
        }
        // The session is not kept alive by its stream between tries.
        drop(live);
        if heard || opened.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_secs(1);
        }
        let until = Instant::now() + backoff;
        while Instant::now() < until {
            if session.upgrade().is_none_or(|live| live.is_closed()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

fn spawn_thread(name: &str, body: impl FnOnce() + Send + 'static) {
    if let Err(error) = std::thread::Builder::new()
        .name(name.chars().take(15).collect())
        .spawn(body)
    {
        log::error!("could not start thread {name}: {error}");
    }
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
