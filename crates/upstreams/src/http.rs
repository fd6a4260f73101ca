//! The Streamable HTTP wire of an upstream at a `url` (the 2025-11-25 revision's
//! session transport): each message is a POST; a request's answer comes as one JSON
//! body or as an SSE stream carrying the upstream's progress, its requests and, last,
//! the response. Every message of either kind goes to the session's router, as a stdio
//! upstream's stdout lines do.
//!
//! A request's POST is read on a thread of its own (a tool call's stream stays open
//! until its result); notifications and our answers to the upstream's requests are
//! POSTed on the caller's thread, in order. The session id and protocol version the
//! upstream gives at `initialize` go on every later POST, with the bearer token of the
//! upstream's `bearer_token_file` (never a client's token). Messages outside any
//! request (a `list_changed` at any time) come on the session's GET stream
//! ([`HttpWire::listen`]), which the session keeps open while it lives; an upstream
//! that serves no GET stream (`405`) sends them only on a request's stream.

use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;

use crate::session::ending::{too_large, MAX_MESSAGE};
use taskd_protocol::headers::mcp_name;

/// The stateless revision, spoken when the upstream says it serves it.
pub const MODERN_VERSION: &str = "2026-07-28";

/// Longest wait for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a request's answer may take to start, or a stream may stay open.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// Longest refusal body read.
const MAX_ERROR_BODY: u64 = 64 * 1024;

/// How a GET stream ended.
pub enum Listened {
    /// The upstream serves none (`405`, or another refusal): not asked again.
    Unsupported,
    /// The upstream forgot the session (`404`).
    SessionGone,
    /// It closed, or the connection failed: worth opening again.
    Ended,
}

/// What a POST produced, message by message, or how it failed.
pub enum Delivery {
    Message(Value),
    /// The upstream forgot the session (404 with a session id): start another.
    SessionGone,
    /// The POST failed (no connection, an error status, an answer too large or not
    /// JSON): a phrase for the caller, after the upstream's name ("answered with HTTP
    /// status 502").
    Failed(String),
}

pub struct HttpWire {
    url: String,
    bearer: Option<String>,
    agent: ureq::Agent,
    /// `Mcp-Session-Id` and the negotiated `MCP-Protocol-Version`, once initialized.
    session: Mutex<(Option<String>, Option<String>)>,
    /// Spoken to in the stateless revision: no session, and each request names its
    /// method (and tool, resource, prompt or task) in headers as well as its body.
    modern: AtomicBool,
}

impl HttpWire {
    pub fn new(url: &str, bearer: Option<&str>) -> HttpWire {
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::PlatformVerifier)
            .build();
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_recv_response(Some(ANSWER_TIMEOUT))
            .timeout_recv_body(Some(ANSWER_TIMEOUT))
            .http_status_as_error(false)
            .max_redirects(0)
            .tls_config(tls)
            .user_agent(concat!("mcp-taskd/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        HttpWire {
            url: url.to_owned(),
            bearer: bearer.map(str::to_owned),
            agent,
            session: Mutex::new((None, None)),
            modern: AtomicBool::new(false),
        }
    }

    /// Speaks the stateless revision (or, `false`, the session one) from now on.
    pub fn set_modern(&self, modern: bool) {
        self.modern.store(modern, Ordering::Release);
    }

    pub fn is_modern(&self) -> bool {
        self.modern.load(Ordering::Acquire)
    }

    /// Records the protocol version `initialize` agreed on.
    pub fn set_version(&self, version: &str) {
        lock(&self.session).1 = Some(version.to_owned());
    }

    /// POSTs `message` (with `headers`, a `tools/call`'s `Mcp-Param-*`) and hands every
    /// message of the answer to `deliver`.
    pub fn post(
        &self,
        message: &Value,
        headers: &[(String, String)],
        deliver: &mut dyn FnMut(Delivery),
    ) {
        let (session_id, version) = lock(&self.session).clone();
        let mut request = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        if self.is_modern() {
            request = request.header("MCP-Protocol-Version", MODERN_VERSION);
            if let Some(method) = message.get("method").and_then(Value::as_str) {
                request = request.header("Mcp-Method", method);
                let params = message.get("params").unwrap_or(&Value::Null);
                if let Some(name) = mcp_name(method, params) {
                    request = request.header("Mcp-Name", &name);
                }
            }
            for (name, value) in headers {
                request = request.header(name, value);
            }
        } else {
            if let Some(id) = &session_id {
                request = request.header("Mcp-Session-Id", id);
            }
            if let Some(version) = &version {
                request = request.header("MCP-Protocol-Version", version);
            }
        }
        if let Some(token) = &self.bearer {
            request = request.header("Authorization", &format!("Bearer {token}"));
        }
        let mut response = match request.send(message.to_string().as_bytes()) {
            Ok(response) => response,
            Err(error) => return deliver(Delivery::Failed(format!("gave no answer ({error})"))),
        };
        let status = response.status().as_u16();
        if status == 404 && session_id.is_some() {
            return deliver(Delivery::SessionGone);
        }
        if !(200..300).contains(&status) {
            // A stateless server's refusal carries a JSON-RPC error worth passing on.
            let mut text = Vec::new();
            let _ = response
                .body_mut()
                .as_reader()
                .take(MAX_ERROR_BODY)
                .read_to_end(&mut text);
            let refusal = serde_json::from_slice::<Value>(&text)
                .ok()
                .filter(|body| body.get("error").is_some_and(Value::is_object));
            return match refusal {
                Some(refusal) if self.is_modern() => deliver(Delivery::Message(refusal)),
                _ => deliver(Delivery::Failed(format!(
                    "answered with HTTP status {status}"
                ))),
            };
        }
        if let Some(id) = response
            .headers()
            .get("Mcp-Session-Id")
            .and_then(|value| value.to_str().ok())
        {
            lock(&self.session).0 = Some(id.to_owned());
        }
        let streamed = response
            .headers()
            .get("Content-Type")
            .and_then(|value| value.to_str().ok())
            .is_some_and(|kind| kind.starts_with("text/event-stream"));
        let body = response.body_mut().as_reader();
        if streamed {
            read_events(body, deliver);
        } else if status != 202 {
            let mut text = Vec::new();
            let mut body = body.take(MAX_MESSAGE as u64 + 1);
            if body.read_to_end(&mut text).is_ok() && !text.is_empty() {
                if text.len() > MAX_MESSAGE {
                    return deliver(Delivery::Failed(too_large()));
                }
                match serde_json::from_slice(&text) {
                    Ok(message) => deliver(Delivery::Message(message)),
                    Err(_) => deliver(Delivery::Failed(
                        "answered with something that is not JSON".into(),
                    )),
                }
            }
        }
    }

    /// Opens the session's GET stream and hands every message on it to `deliver`
    /// until it ends.
    pub fn listen(&self, deliver: &mut dyn FnMut(Delivery)) -> Listened {
        let (session_id, version) = lock(&self.session).clone();
        let Some(session_id) = session_id else {
            // A server that keeps no session has no stream of it either.
            return Listened::Unsupported;
        };
        let mut request = self
            .agent
            .get(&self.url)
            .header("Accept", "text/event-stream")
            .header("Mcp-Session-Id", &session_id);
        if let Some(version) = &version {
            request = request.header("MCP-Protocol-Version", version);
        }
        if let Some(token) = &self.bearer {
            request = request.header("Authorization", &format!("Bearer {token}"));
        }
        let mut response = match request.call() {
            Ok(response) => response,
            Err(_) => return Listened::Ended,
        };
        match response.status().as_u16() {
            200 => {}
            404 => return Listened::SessionGone,
            429 | 500..=599 => return Listened::Ended,
            _ => return Listened::Unsupported,
        }
        read_events(response.body_mut().as_reader(), deliver);
        Listened::Ended
    }

    /// Ends the upstream's session (`DELETE`), best effort.
    pub fn close(&self) {
        let (session_id, _) = lock(&self.session).clone();
        if let Some(id) = session_id {
            let mut request = self.agent.delete(&self.url).header("Mcp-Session-Id", &id);
            if let Some(token) = &self.bearer {
                request = request.header("Authorization", &format!("Bearer {token}"));
            }
            let _ = request.call();
        }
    }
}

/// Reads an SSE stream: each event's `data` lines joined are one message. An event
/// larger than [`MAX_MESSAGE`] ends the stream, saying so.
fn read_events(body: impl Read, deliver: &mut dyn FnMut(Delivery)) {
    let mut lines = BufReader::new(body);
    let mut data: Vec<u8> = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        // Room for what the event may still hold, and a field name.
        let room = (MAX_MESSAGE + 1 - data.len().min(MAX_MESSAGE)) as u64 + 16;
        match (&mut lines).take(room).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.is_empty() {
            if !data.is_empty() {
                if let Ok(message) = serde_json::from_slice::<Value>(&data) {
                    deliver(Delivery::Message(message));
                }
                data.clear();
            }
        } else if let Some(value) = text.strip_prefix(b"data:") {
            if !data.is_empty() {
                data.push(b'\n');
            }
            data.extend_from_slice(value.strip_prefix(b" ").unwrap_or(value));
        }
        if data.len() > MAX_MESSAGE || line.len() as u64 >= room {
            return deliver(Delivery::Failed(too_large()));
        }
    }
}

/// A session's lock: each update is one assignment, so a poisoned one is whole.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
