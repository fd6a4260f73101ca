//! Writing legacy answers: a POST's response (plain JSON until something must stream
//! first, then SSE carrying notifications and server-to-client requests before the
//! result), and the session's standalone GET stream with event ids and replay. On a
//! stream transport (stdio) the same messages go, one per line, to its [`Wire`].

use std::io::Cursor;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;
use serde_json::{json, Value};
use tiny_http::{Header, Response, StatusCode};

use super::sessions::{Session, Sessions, StreamEvent};
use crate::handlers::Emitter;
use crate::transport::sse::SseWriter;
use crate::transport::Wire;
use taskd_auth::oauth::Metadata;
use taskd_protocol::RpcError;

pub type Body = Cursor<Vec<u8>>;

/// A JSON (or empty, for `status` 202/204) response with extra headers.
pub fn json_response(
    status: u16,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> Response<Body> {
    let bytes = body
        .map(|body| body.to_string().into_bytes())
        .unwrap_or_default();
    let length = bytes.len();
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Cache-Control", "no-store"),
    ];
    all.extend_from_slice(headers);
    let headers = all
        .iter()
        .filter_map(|(name, value)| Header::from_bytes(name.as_bytes(), value.as_bytes()).ok())
        .collect();
    Response::new(
        StatusCode(status),
        headers,
        Cursor::new(bytes),
        Some(length),
        None,
    )
}

/// The answer to one legacy POST request.
pub struct CallSink {
    state: SinkState,
    cancelled: Arc<AtomicBool>,
    /// Names the protected-resource metadata in a `403 insufficient_scope` challenge.
    challenger: Option<Arc<Metadata>>,
}

enum SinkState {
    Pending(tiny_http::Request),
    Streaming(SseWriter),
    /// A stream transport: every message is a line of the one shared channel.
    Wire(Arc<dyn Wire>),
    /// The client went away mid-stream; later output is dropped.
    Broken,
}

impl CallSink {
    /// The answer to a request read from a stream transport.
    pub fn on_wire(wire: Arc<dyn Wire>, cancelled: Arc<AtomicBool>) -> CallSink {
        CallSink {
            state: SinkState::Wire(wire),
            cancelled,
            challenger: None,
        }
    }

    pub fn new(
        request: tiny_http::Request,
        cancelled: Arc<AtomicBool>,
        challenger: Option<Arc<Metadata>>,
    ) -> CallSink {
        CallSink {
            state: SinkState::Pending(request),
            cancelled,
            challenger,
        }
    }

    /// Ends a call refused for a missing scope: HTTP 403 with the challenge naming
    /// every scope `error` needs (clients step up on it), when nothing was streamed
    /// yet; otherwise as any other error message.
    pub fn finish_forbidden(self, message: Value, error: &RpcError) {
        match (self.state, &self.challenger, error.required_scopes()) {
            (SinkState::Pending(request), Some(metadata), Some(scopes)) => {
                let description = "the token lacks scopes this operation needs";
                let challenge =
                    metadata.challenge(Some(("insufficient_scope", description)), &scopes);
                let response = json_response(
                    error.http_status,
                    Some(&message),
                    &[("WWW-Authenticate", &challenge)],
                );
                let _ = request.respond(response);
            }
            (state, _, _) => CallSink {
                state,
                cancelled: self.cancelled,
                challenger: None,
            }
            .finish(200, message),
        }
    }

    /// Sends a message ahead of the result, switching the response to SSE if needed;
    /// `false` when the client is gone.
    pub fn send(&mut self, message: &Value) -> bool {
        let state = std::mem::replace(&mut self.state, SinkState::Broken);
        let stream = match state {
            SinkState::Pending(request) => SseWriter::start(request).ok(),
            SinkState::Streaming(stream) => Some(stream),
            SinkState::Wire(wire) => {
                if wire.send(message) {
                    self.state = SinkState::Wire(wire);
                }
                return !matches!(self.state, SinkState::Broken);
            }
            SinkState::Broken => None,
        };
        self.state = match stream {
            Some(mut stream) => match stream.send(message) {
                Ok(()) => SinkState::Streaming(stream),
                Err(_) => SinkState::Broken,
            },
            None => SinkState::Broken,
        };
        !matches!(self.state, SinkState::Broken)
    }

    /// Writes the final message (with `status` when nothing was streamed yet). A
    /// cancelled request gets no JSON-RPC response, as the legacy revisions require.
    pub fn finish(self, status: u16, message: Value) {
        let cancelled = self.cancelled.load(Ordering::Acquire);
        match self.state {
            SinkState::Pending(request) if cancelled => {
                let _ = request.respond(json_response(202, None, &[]));
            }
            SinkState::Pending(request) => {
                let _ = request.respond(json_response(status, Some(&message), &[]));
            }
            SinkState::Streaming(mut stream) => {
                if cancelled || stream.send(&message).is_ok() {
                    let _ = stream.finish();
                }
            }
            SinkState::Wire(wire) => {
                if !cancelled {
                    wire.send(&message);
                }
            }
            SinkState::Broken => {}
        }
    }
}

impl Emitter for CallSink {
    fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire) || matches!(self.state, SinkState::Broken)
    }
}

/// Serves a session's standalone GET stream until the session ends, a newer GET
/// replaces it, the server stops ([`Sessions::end_streams`]), or the client goes away.
/// Replays kept events after `last_event_id`. Every end but the client's own finishes
/// the response (its last chunk), so that the client opens the stream again.
pub fn run_get_stream(
    request: tiny_http::Request,
    session: &Session,
    sessions: &Sessions,
    last_event_id: Option<u64>,
    keep_alive: Duration,
) -> std::io::Result<()> {
    let (live, events) = crossbeam_channel::bounded::<StreamEvent>(256);
    let replay = session.attach_stream(live, last_event_id);
    let mut stream = SseWriter::start(request)?;
    for event in replay {
        stream.send_with_id(event.id, &event.message)?;
    }
    // Opened while the server stops (the client came back at once on a connection still
    // open): what it missed, then the end; it opens its next one on the next process.
    // Checked after attaching, so that a stop between the two detaches this stream.
    if sessions.streams_ended() {
        return stream.finish();
    }
    loop {
        match events.recv_timeout(keep_alive) {
            Ok(event) => stream.send_with_id(event.id, &event.message)?,
            Err(RecvTimeoutError::Timeout) => {
                if !sessions.is_open(&session.id) {
                    break;
                }
                sessions.touch(&session.id);
                stream.keep_alive()?;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    stream.finish()
}
