// Over 600 lines: both eras' exchanges share the answer-writing and session state.
//! `mcp-taskd stdio --connect URL`: relays a host's stdio to a running `serve`, so a
//! desktop host shares that server's tasks (and its identity: the bearer token from
//! `--token-file`).
//!
//! Each line becomes an HTTP request, as a Streamable HTTP client of its era would send
//! it:
//! - a 2026-07-28 message (modern `_meta`) is POSTed with `MCP-Protocol-Version`,
//!   `Mcp-Method` and `Mcp-Name` taken from its body;
//! - an `initialize` opens a legacy session: its `Mcp-Session-Id` goes on every later
//!   legacy message, a GET stream brings the server's own requests and notifications,
//!   and end of input DELETEs the session. The server keeps sessions across its
//!   restarts; one it no longer knows (expired, ended, a store replaced) answers 404, and
//!   the relay then replays the host's `initialize` and `notifications/initialized`
//!   for a new session and sends the request again there, once: the host never sees
//!   the break.
//!
//! Answers come back as lines: a JSON body as one line, an SSE body event by event as
//! they arrive. Requests run concurrently, one connection each. The server is probed at
//! start, so an unreachable server or a refused token fails at once with one line. End
//! of input, SIGTERM, SIGINT or SIGHUP end the relay (and its session).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::http::{self, Endpoint, Response};
use super::{error_message, read_line, request_id, Line, StdioError, StdoutWire};
use crate::transport::Wire;
use taskd_protocol::envelope::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION};
use taskd_protocol::headers::{header_params, HeaderParam};
use taskd_protocol::headers::{mcp_name, param_headers};
use taskd_protocol::{code, RpcError, SUPPORTED_VERSIONS};

/// The longest line relayed (the server has its own, usually smaller, limit).
const MAX_LINE: usize = 64 * 1024 * 1024;

/// The longest JSON answer read.
const MAX_ANSWER: u64 = 64 * 1024 * 1024;

/// The most `tools/list` pages read at start.
const MAX_TOOL_PAGES: usize = 100;

/// How long the start-up probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long end of input waits for answers still arriving.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// Pause before reopening a legacy GET stream that ended while the session lives.
const REOPEN_PAUSE: Duration = Duration::from_secs(1);

/// How long a request that only reads (`tasks/get`, `task_status`, `task_wait`) whose
/// answer broke off is sent again, while the server restarts.
const ASK_AGAIN_FOR: Duration = Duration::from_secs(60);
/// The first pause before asking again; each doubles, up to a second.
const ASK_AGAIN_PAUSE: Duration = Duration::from_millis(100);

/// Relays stdin/stdout to the server at `url` until end of input.
pub fn run(url: &str, token_file: Option<&Path>) -> Result<(), StdioError> {
    let endpoint = Endpoint::parse(url).map_err(|reason| StdioError::BadUrl {
        url: url.to_owned(),
        reason,
    })?;
    let token = match token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| StdioError::TokenFile {
                path: path.to_owned(),
                source,
            })?;
            Some(text.trim().to_owned())
        }
        None => None,
    };
    let relay = Arc::new(Relay {
        url: url.to_owned(),
        endpoint,
        token,
        wire: Arc::new(StdoutWire::new()),
        session: Mutex::new(None),
        opening: Mutex::new(None),
        param_headers: Mutex::new(HashMap::new()),
        busy: Arc::new(AtomicUsize::new(0)),
        ended: Arc::new(AtomicBool::new(false)),
        failure: Mutex::new(None),
    });
    relay.probe()?;
    log::info!("relaying stdio to the server");

    let (done, finished) = crossbeam_channel::bounded::<()>(2);
    // A host quitting may signal instead of closing stdin: the session still ends.
    let signalled = done.clone();
    let mut signals = {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
            .map_err(StdioError::Threads)?
    };
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                let _ = signalled.send(());
            }
        })
        .map_err(StdioError::Threads)?;
    let reading = Arc::clone(&relay);
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let mut input = std::io::stdin().lock();
            loop {
                match read_line(&mut input, MAX_LINE) {
                    Ok(Line::Message(bytes)) => reading.relay_line(&bytes),
                    Ok(Line::TooLong) => {
                        let error =
                            RpcError::parse_error(format!("message longer than {MAX_LINE} bytes"));
                        reading.wire.send(&error_message(&Value::Null, &error));
                    }
                    Ok(Line::End) => break,
                    Err(error) => {
                        log::warn!("reading stdin: {error}");
                        break;
                    }
                }
                if reading.failed() {
                    break;
                }
            }
            let _ = done.send(());
        })
        .map_err(StdioError::Threads)?;
    // Ends at end of input or a signal, or at once when the server refuses the token.
    loop {
        if relay.failed() {
            break;
        }
        match finished.recv_timeout(Duration::from_millis(100)) {
            Ok(()) | Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
        }
    }
    relay.finish();
    match relay.take_failure() {
        Some(failure) => Err(failure),
        None => Ok(()),
    }
}

/// What the relay takes from an answer besides relaying it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    Plain,
    /// `initialize`'s answer: the session id and revision.
    OpensSession,
    /// A 2026-07-28 `tools/list` page: the tools' `x-mcp-header` arguments.
    ListsTools,
    /// A request that only reads (see [`only_reads`]): asked again when its answer
    /// breaks off.
    Rereadable,
}

/// Whether `message` only reads, so that sending it twice changes nothing: `tasks/get`,
/// and the bridge's `task_status` and `task_wait`.
fn only_reads(message: &Value) -> bool {
    match message.get("method").and_then(Value::as_str) {
        Some("tasks/get") => true,
        Some("tools/call") => matches!(
            message.pointer("/params/name").and_then(Value::as_str),
            Some(crate::handlers::bridge::TASK_STATUS | crate::handlers::bridge::TASK_WAIT)
        ),
        _ => false,
    }
}

/// The legacy session the relay holds for the host.
#[derive(Clone)]
struct Session {
    id: String,
    version: String,
}

struct Relay {
    url: String,
    endpoint: Endpoint,
    token: Option<String>,
    wire: Arc<dyn Wire>,
    session: Mutex<Option<Session>>,
    /// The host's `initialize` (its body), replayed to reopen a session the server no
    /// longer knows; held while reopening, so that concurrent 404s reopen once.
    opening: Mutex<Option<Vec<u8>>>,
    /// The `x-mcp-header` arguments of each tool, by tool name, from the server's
    /// `tools/list`: a 2026-07-28 `tools/call` mirrors them into `Mcp-Param-*` headers.
    param_headers: Mutex<HashMap<String, Vec<HeaderParam>>>,
    /// Requests whose answers are still being relayed.
    busy: Arc<AtomicUsize>,
    /// Set at end of input: the GET stream stops reopening.
    ended: Arc<AtomicBool>,
    /// What ends the relay early (a refused token).
    failure: Mutex<Option<StdioError>>,
}

impl Relay {
    /// A modern `server/discover` tells an unreachable server and a refused token apart
    /// from a working one before the host sends anything.
    fn probe(&self) -> Result<(), StdioError> {
        let version = SUPPORTED_VERSIONS[0];
        let body = json!({
            "jsonrpc": "2.0", "id": 0, "method": "server/discover",
            "params": { "_meta": { META_PROTOCOL_VERSION: version, META_CLIENT_CAPABILITIES: {} } },
        });
        let mut headers = self.common_headers();
        headers.push(("MCP-Protocol-Version".into(), version.to_owned()));
        headers.push(("Mcp-Method".into(), "server/discover".to_owned()));
        let response = http::send(
            &self.endpoint,
            "POST",
            &headers,
            body.to_string().as_bytes(),
            Some(PROBE_TIMEOUT),
        )
        .map_err(|error| StdioError::Unreachable {
            url: self.url.clone(),
            reason: error.to_string(),
        })?;
        if let Some(refused) = self.refusal(response.status) {
            return Err(refused);
        }
        if response.status == 404 {
            return Err(StdioError::Unreachable {
                url: self.url.clone(),
                reason: "no MCP endpoint at this path (HTTP 404)".into(),
            });
        }
        let _ = response.read_body(MAX_ANSWER);
        self.learn_all_tools(version);
        Ok(())
    }

    /// Reads every page of the server's `tools/list` to learn the tools'
    /// `x-mcp-header` arguments before the host calls one.
    fn learn_all_tools(&self, version: &str) {
        let mut cursor: Option<Value> = None;
        for _ in 0..MAX_TOOL_PAGES {
            let mut params = json!({ "_meta": { META_PROTOCOL_VERSION: version, META_CLIENT_CAPABILITIES: {} } });
            if let Some(cursor) = &cursor {
                params["cursor"] = cursor.clone();
            }
            let body =
                json!({ "jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": params });
            let mut headers = self.common_headers();
            headers.push(("MCP-Protocol-Version".into(), version.to_owned()));
            headers.push(("Mcp-Method".into(), "tools/list".to_owned()));
            let answer = http::send(
                &self.endpoint,
                "POST",
                &headers,
                body.to_string().as_bytes(),
                Some(PROBE_TIMEOUT),
            )
            .and_then(|response| response.read_body(MAX_ANSWER));
            let Some(result) = answer
                .ok()
                .and_then(|body| serde_json::from_slice::<Value>(&body).ok())
                .and_then(|message| message.get("result").cloned())
            else {
                log::warn!("could not read the server's tools/list");
                return;
            };
            self.learn_tools(&result);
            match result.get("nextCursor") {
                Some(next) if !next.is_null() => cursor = Some(next.clone()),
                _ => return,
            }
        }
    }

    /// Records the `x-mcp-header` arguments of the tools in a `tools/list` result.
    fn learn_tools(&self, result: &Value) {
        let Some(tools) = result.get("tools").and_then(Value::as_array) else {
            return;
        };
        let mut known = self.param_headers.lock().unwrap_or_else(|p| p.into_inner());
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let params = tool
                .get("inputSchema")
                .and_then(|schema| header_params(schema).ok())
                .unwrap_or_default();
            if params.is_empty() {
                known.remove(name);
            } else {
                known.insert(name.to_owned(), params);
            }
        }
    }

    /// The `Mcp-Param-*` headers a 2026-07-28 `tools/call` must carry.
    fn param_headers_for(&self, message: &Value) -> Vec<(String, String)> {
        let params = &message["params"];
        let (Some(tool), Some(arguments)) = (
            params.get("name").and_then(Value::as_str),
            params.get("arguments").and_then(Value::as_object),
        ) else {
            return Vec::new();
        };
        let known = self.param_headers.lock().unwrap_or_else(|p| p.into_inner());
        known
            .get(tool)
            .map(|declared| param_headers(declared, arguments))
            .unwrap_or_default()
    }

    fn refusal(&self, status: u16) -> Option<StdioError> {
        matches!(status, 401 | 403).then(|| StdioError::Refused {
            url: self.url.clone(),
            status,
            credential: if self.token.is_some() {
                "the token from --token-file"
            } else {
                "the connection without a token (pass --token-file)"
            },
        })
    }

    fn failed(&self) -> bool {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    fn fail(&self, error: StdioError) {
        let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        failure.get_or_insert(error);
    }

    fn take_failure(&self) -> Option<StdioError> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    fn session(&self) -> Option<Session> {
        self.session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn common_headers(&self) -> Vec<(String, String)> {
        let mut headers = vec![
            ("Content-Type".into(), "application/json".to_owned()),
            (
                "Accept".into(),
                "application/json, text/event-stream".to_owned(),
            ),
        ];
        if let Some(token) = &self.token {
            headers.push(("Authorization".into(), format!("Bearer {token}")));
        }
        headers
    }

    /// Relays one line from the host.
    fn relay_line(self: &Arc<Self>, bytes: &[u8]) {
        let message: Value = match serde_json::from_slice(bytes) {
            Ok(message) => message,
            Err(error) => {
                let error = RpcError::parse_error(error);
                self.wire.send(&error_message(&Value::Null, &error));
                return;
            }
        };
        let modern_version = message
            .get("params")
            .and_then(|params| params.get("_meta"))
            .and_then(|meta| meta.get(META_PROTOCOL_VERSION))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mut headers = self.common_headers();
        let session = self.session();
        let opening = modern_version.is_none()
            && session.is_none()
            && message.get("method").and_then(Value::as_str) == Some("initialize");
        match (&modern_version, &session) {
            (Some(version), _) => {
                headers.push(("MCP-Protocol-Version".into(), version.clone()));
                if let Some(method) = message.get("method").and_then(Value::as_str) {
                    headers.push(("Mcp-Method".into(), method.to_owned()));
                    if let Some(name) = mcp_name(method, &message["params"]) {
                        headers.push(("Mcp-Name".into(), name));
                    }
                    if method == "tools/call" {
                        headers.extend(self.param_headers_for(&message));
                    }
                }
            }
            (None, Some(session)) => {
                headers.push(("Mcp-Session-Id".into(), session.id.clone()));
                headers.push(("MCP-Protocol-Version".into(), session.version.clone()));
            }
            (None, None) => {}
        }
        let body = message.to_string().into_bytes();
        let id = request_id(&message).cloned();
        if opening {
            *self.opening.lock().unwrap_or_else(|p| p.into_inner()) = Some(body.clone());
            // Answered before the next line is read, so that line has the session.
            self.post(&headers, &body, id.as_ref(), Answer::OpensSession);
        } else if id.is_none() {
            // Notifications and answers to the server's requests: quick, and in order.
            self.post(&headers, &body, None, Answer::Plain);
        } else {
            let kind = if modern_version.is_some()
                && message.get("method").and_then(Value::as_str) == Some("tools/list")
            {
                Answer::ListsTools
            } else if only_reads(&message) {
                Answer::Rereadable
            } else {
                Answer::Plain
            };
            let relay = Arc::clone(self);
            let busy = Arc::clone(&self.busy);
            busy.fetch_add(1, Ordering::AcqRel);
            let spawned = std::thread::Builder::new()
                .name("relay-request".into())
                .spawn(move || {
                    relay.post(&headers, &body, id.as_ref(), kind);
                    busy.fetch_sub(1, Ordering::AcqRel);
                });
            if spawned.is_err() {
                log::error!("could not start a relay thread");
                self.busy.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// The session to send again in after the server answered 404 in `lost`: the one
    /// another request reopened meanwhile, or a new one opened by replaying the host's
    /// `initialize` and `notifications/initialized`. `None` if it cannot be reopened.
    fn reopen(&self, lost: &str) -> Option<Session> {
        let opening = self.opening.lock().unwrap_or_else(|p| p.into_inner());
        let initialize = opening.as_ref()?;
        if let Some(current) = self.session().filter(|current| current.id != lost) {
            return Some(current);
        }
        let response = http::send(
            &self.endpoint,
            "POST",
            &self.common_headers(),
            initialize,
            None,
        )
        .ok()?;
        let session_id = response.header("Mcp-Session-Id").map(str::to_owned)?;
        let answer: Value = serde_json::from_slice(&response.read_body(MAX_ANSWER).ok()?).ok()?;
        let version = answer["result"]["protocolVersion"].as_str()?.to_owned();
        log::info!("the server no longer knew the relay's session: reopened it");
        self.open_session(session_id, version);
        let session = self.session()?;
        let mut headers = self.common_headers();
        headers.push(("Mcp-Session-Id".into(), session.id.clone()));
        headers.push(("MCP-Protocol-Version".into(), session.version.clone()));
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let body = initialized.to_string().into_bytes();
        if let Err(error) = http::send(&self.endpoint, "POST", &headers, &body, None) {
            log::warn!("the reopened session's notifications/initialized failed: {error}");
        }
        Some(session)
    }

    /// POSTs one message and relays the answer (taking from it what `kind` says).
    fn post(&self, headers: &[(String, String)], body: &[u8], id: Option<&Value>, kind: Answer) {
        let mut response = match http::send(&self.endpoint, "POST", headers, body, None) {
            Ok(response) => response,
            Err(error) => {
                log::warn!("a request could not be sent to the server: {error}");
                if let Some(id) = id {
                    let error = RpcError::new(
                        code::INTERNAL_ERROR,
                        format!("mcp-taskd relay: the request could not be sent to the server ({error})"),
                    );
                    self.wire.send(&error_message(id, &error));
                }
                return;
            }
        };
        if let Some(refused) = self.refusal(response.status) {
            self.fail(refused);
            return;
        }
        let lost = headers
            .iter()
            .find(|(name, _)| name == "Mcp-Session-Id")
            .map(|(_, id)| id.clone());
        if let (404, Some(lost)) = (response.status, lost) {
            if let Some(session) = self.reopen(&lost) {
                let headers: Vec<(String, String)> = headers
                    .iter()
                    .map(|(name, value)| match name.as_str() {
                        "Mcp-Session-Id" => (name.clone(), session.id.clone()),
                        "MCP-Protocol-Version" => (name.clone(), session.version.clone()),
                        _ => (name.clone(), value.clone()),
                    })
                    .collect();
                match http::send(&self.endpoint, "POST", &headers, body, None) {
                    Ok(again) => response = again,
                    Err(error) => log::warn!("a request could not be sent again: {error}"),
                }
            }
        }
        self.relay_answer(response, headers, body, id, kind);
    }

    /// Relays the server's answer to one request to the host. Every request with an id
    /// gets an answer with that id: when the answer breaks off (the server stopped in
    /// the middle of it), a request that only reads is asked again once the server is
    /// back, and any other is answered with an error saying so.
    fn relay_answer(
        &self,
        response: Response,
        headers: &[(String, String)],
        body: &[u8],
        id: Option<&Value>,
        kind: Answer,
    ) {
        let session_id = response.header("Mcp-Session-Id").map(str::to_owned);
        let status = response.status;
        if response.is_event_stream() {
            let mut answered = false;
            let outcome = response.for_each_event(|_, data| {
                if let Ok(message) = serde_json::from_str::<Value>(data) {
                    // A response (not a notification or a request of the server).
                    answered |= message.get("result").is_some() || message.get("error").is_some();
                    self.wire.send(&with_id(message, id));
                }
                true
            });
            if let Err(error) = outcome {
                log::warn!("an answer stream broke off: {error}");
            }
            if !answered {
                if let Some(id) = id {
                    self.broke_off(headers, body, id, kind);
                }
            }
            return;
        }
        let answer = response
            .read_body(MAX_ANSWER)
            .ok()
            .and_then(|body| serde_json::from_slice::<Value>(&body).ok());
        match answer {
            Some(message) if message.get("jsonrpc").is_some() => {
                if kind == Answer::ListsTools {
                    if let Some(result) = message.get("result") {
                        self.learn_tools(result);
                    }
                }
                if kind == Answer::OpensSession {
                    if let Some(session_id) = session_id {
                        let version = message["result"]["protocolVersion"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned();
                        self.open_session(session_id, version);
                    }
                }
                self.wire.send(&with_id(message, id));
            }
            None if status == 200 && id.is_some() && kind == Answer::Rereadable => {
                // The body broke off: as for a stream.
                if let Some(id) = id {
                    self.broke_off(headers, body, id, kind);
                }
            }
            _ => {
                if let Some(id) = id {
                    let error = RpcError::new(
                        code::INTERNAL_ERROR,
                        format!("mcp-taskd relay: the server answered HTTP {status} without a JSON-RPC message"),
                    );
                    self.wire.send(&error_message(id, &error));
                }
            }
        }
    }

    /// The answer to request `id` broke off before its result. A request that only
    /// reads is sent again (for up to [`ASK_AGAIN_FOR`], while the server restarts) and
    /// its new answer relayed; any other gets an error with its id, so that the host
    /// never waits for an answer that will not come (the model can ask again: a task
    /// the call created goes on).
    fn broke_off(&self, headers: &[(String, String)], body: &[u8], id: &Value, kind: Answer) {
        if kind == Answer::Rereadable {
            let deadline = Instant::now() + ASK_AGAIN_FOR;
            let mut pause = ASK_AGAIN_PAUSE;
            while Instant::now() < deadline && !self.ended.load(Ordering::Acquire) {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(1));
                if let Ok(response) = http::send(&self.endpoint, "POST", headers, body, None) {
                    if self.refusal(response.status).is_none() {
                        // Asked once more only: an answer that breaks off again is an error.
                        return self.relay_answer(response, headers, body, Some(id), Answer::Plain);
                    }
                }
            }
        }
        let error = RpcError::new(
            code::INTERNAL_ERROR,
            "mcp-taskd relay: the server's answer broke off (did it restart?); ask again: \
             a task the call started goes on",
        );
        self.wire.send(&error_message(id, &error));
    }

    /// Keeps the session `initialize` opened and starts relaying its GET stream.
    fn open_session(&self, id: String, version: String) {
        let session = Session { id, version };
        *self.session.lock().unwrap_or_else(|p| p.into_inner()) = Some(session.clone());
        let stream = GetStream {
            endpoint: self.endpoint.clone(),
            headers: self.common_headers(),
            session,
            wire: Arc::clone(&self.wire),
            ended: Arc::clone(&self.ended),
        };
        let spawned = std::thread::Builder::new()
            .name("relay-stream".into())
            .spawn(move || stream.run());
        if spawned.is_err() {
            log::error!("could not start the session stream thread");
        }
    }

    /// At end of input: waits (bounded) for answers in flight, then ends the session.
    fn finish(&self) {
        self.ended.store(true, Ordering::Release);
        let deadline = Instant::now() + DRAIN_LIMIT;
        while self.busy.load(Ordering::Acquire) > 0 && Instant::now() < deadline && !self.failed() {
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(session) = self.session() {
            let mut headers = self.common_headers();
            headers.push(("Mcp-Session-Id".into(), session.id));
            headers.push(("MCP-Protocol-Version".into(), session.version));
            let ended = http::send(&self.endpoint, "DELETE", &headers, b"", Some(PROBE_TIMEOUT));
            if let Err(error) = ended {
                log::warn!("could not end the session: {error}");
            }
        }
    }
}

/// A legacy session's GET stream: the server's own requests and notifications.
struct GetStream {
    endpoint: Endpoint,
    headers: Vec<(String, String)>,
    session: Session,
    wire: Arc<dyn Wire>,
    ended: Arc<AtomicBool>,
}

impl GetStream {
    /// Relays the stream, reopening it (from the last event seen) when it breaks off,
    /// until the server says the session is gone.
    fn run(self) {
        let mut last_event: Option<String> = None;
        while !self.ended.load(Ordering::Acquire) {
            let mut headers = self.headers.clone();
            headers.retain(|(name, _)| name != "Accept" && name != "Content-Type");
            headers.push(("Accept".into(), "text/event-stream".to_owned()));
            headers.push(("Mcp-Session-Id".into(), self.session.id.clone()));
            headers.push(("MCP-Protocol-Version".into(), self.session.version.clone()));
            if let Some(last) = &last_event {
                headers.push(("Last-Event-ID".into(), last.clone()));
            }
            let response: Response = match http::send(&self.endpoint, "GET", &headers, b"", None) {
                Ok(response) => response,
                Err(error) => {
                    log::debug!("the session stream could not be opened: {error}");
                    std::thread::sleep(REOPEN_PAUSE);
                    continue;
                }
            };
            if !(200..300).contains(&response.status) || !response.is_event_stream() {
                // The session ended (404), or the server offers no stream.
                return;
            }
            let outcome = response.for_each_event(|event_id, data| {
                if let Some(event_id) = event_id {
                    last_event = Some(event_id.to_owned());
                }
                match serde_json::from_str::<Value>(data) {
                    Ok(message) => self.wire.send(&message),
                    Err(_) => true,
                }
            });
            if let Err(error) = outcome {
                log::debug!("the session stream broke off: {error}");
            }
            std::thread::sleep(REOPEN_PAUSE);
        }
    }
}

/// The server's answer, with the request's id put back where a refusal that came
/// before the server read the body carries `null`, so the host can match it.
fn with_id(mut message: Value, id: Option<&Value>) -> Value {
    if let (Some(id), Some(fields)) = (id, message.as_object_mut()) {
        let is_answer = fields.contains_key("result") || fields.contains_key("error");
        if is_answer && fields.get("id").is_none_or(Value::is_null) {
            fields.insert("id".into(), id.clone());
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_without_id_gets_the_request_id() {
        let refusal = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600}});
        assert_eq!(with_id(refusal, Some(&json!(7)))["id"], 7);
        let notification = json!({"jsonrpc": "2.0", "method": "notifications/progress"});
        assert!(with_id(notification, Some(&json!(7))).get("id").is_none());
    }
}
