//! The legacy era of the endpoint: initialize-based sessions (2025-03-26 to 2025-11-25)
//! over Streamable HTTP, served next to the stateless 2026-07-28 path.
//!
//! The transport admits a request (Host/Origin, authentication, body) and asks
//! [`era::is_legacy_post`] which path serves it; legacy ones land in [`Legacy::serve`].
//! Here live the session handshake, the GET and DELETE verbs, the methods 2026-07-28
//! removed, and the bridge that runs every shared method through the same handlers as
//! the 2026 path, with the session standing in for per-request `_meta`. A stream
//! transport (stdio) uses the same sessions, one per connection ([`on_wire`]).

pub mod era;
mod methods;
mod on_wire;
mod outbound;
pub(crate) mod sessions;
mod stream;
mod tasks;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tiny_http::{Method, Response};

use crate::config::SessionLimits;
use crate::handlers::Service;
use crate::metrics::Metrics;
use crate::transport::headers::header;
use crate::transport::{Inbound, SessionEra};
pub use on_wire::WireSession;
use sessions::{Negotiated, Refused, Session, Sessions};
use stream::{json_response, Body};
use taskd_auth::oauth::Metadata;
use taskd_auth::{Authenticator, Caller, Credential};
use taskd_notifications::{Delivery, Frame, Hub};
use taskd_protocol::envelope::Envelope;
use taskd_protocol::Identity;
use taskd_protocol::RpcError;

/// How long the relay sleeps on its mailbox between checks that the hub is open.
const RELAY_WAIT: Duration = Duration::from_secs(30);

pub struct Legacy {
    service: Arc<Service>,
    hub: Arc<Hub>,
    sessions: Arc<Sessions>,
    metrics: Arc<Metrics>,
}

fn error_body(id: &Value, error: &RpcError) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": error.to_json() })
}

/// An HTTP-level refusal (bad or unknown session, bad version header) with its status.
fn refusal(status: u16, error: RpcError) -> Response<Body> {
    json_response(status, Some(&error_body(&Value::Null, &error)), &[])
}

fn no_session() -> Response<Body> {
    refusal(
        400,
        RpcError::invalid_request(format!(
            "No Mcp-Session-Id: send initialize first (session revisions {}), or send \
             2026-07-28 requests with params._meta[\"io.modelcontextprotocol/protocolVersion\"]",
            era::LEGACY_VERSIONS.join(", ")
        )),
    )
}

fn session_not_found() -> Response<Body> {
    refusal(
        404,
        RpcError::invalid_request("Session not found: it ended or expired; initialize again"),
    )
}

impl Legacy {
    /// Sets up the session table and the relay that copies list-change announcements
    /// and task status changes onto sessions' GET streams, and ends those streams when
    /// the hub closes (a graceful stop).
    pub fn start(
        service: Arc<Service>,
        hub: Arc<Hub>,
        limits: SessionLimits,
        metrics: Arc<Metrics>,
    ) -> Arc<Legacy> {
        let store = service.tasks.store();
        let legacy = Arc::new(Legacy {
            service,
            hub: Arc::clone(&hub),
            sessions: Arc::new(Sessions::new(limits, Arc::clone(&hub), Some(store))),
            metrics,
        });
        legacy.start_relay();
        legacy
    }

    /// One hub relay serves every session: list changes go to all of them, a resource
    /// update only to the sessions subscribed to that resource, a task's status change
    /// only to the sessions following that task.
    fn start_relay(&self) {
        let hub = Arc::clone(&self.hub);
        let service = Arc::clone(&self.service);
        let sessions = Arc::clone(&self.sessions);
        let spawned = std::thread::Builder::new()
            .name("legacy-relay".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                let keep = sessions.limits().replay_events;
                let Some(mailbox) = hub.relay() else {
                    sessions.end_streams();
                    return;
                };
                // The mailbox coalesces: a burst never cuts the relay off, and one change
                // of a list or resource is relayed once however often it was published.
                loop {
                    let frames = match mailbox.wait(RELAY_WAIT) {
                        Delivery::Frames(frames) => frames,
                        Delivery::Idle => continue,
                        // The hub closed (the server stops: `Hub::close_all`, which ends
                        // the listen streams): the GET streams end too, and the sessions
                        // stay for the next process.
                        Delivery::Close => {
                            sessions.end_streams();
                            return;
                        }
                        Delivery::Revoked => return,
                    };
                    for frame in frames {
                        let (message, uri) = match frame {
                            Frame::ListChanged(kind) => {
                                let message = json!({ "jsonrpc": "2.0", "method": kind.method(), "params": {} });
                                (message, None)
                            }
                            Frame::ResourceUpdated(uri) => (
                                json!({
                                    "jsonrpc": "2.0",
                                    "method": "notifications/resources/updated",
                                    "params": { "uri": uri },
                                }),
                                Some(uri),
                            ),
                            Frame::TaskChanged { task_id, .. } => {
                                for session in sessions.all() {
                                    if session.follows_task(&task_id) {
                                        tasks::announce_status(&service, &session, &task_id, keep);
                                    }
                                }
                                continue;
                            }
                        };
                        for session in sessions.all() {
                            let wanted = uri.as_deref().is_none_or(|uri| session.is_subscribed(uri));
                            if wanted {
                                session.push_event(message.clone(), keep);
                            }
                        }
                    }
                }
            });
        if spawned.is_err() {
            log::error!("could not start the legacy relay thread");
        }
    }

    /// Serves one legacy request to the end (a GET stream on its own thread).
    fn serve_request(self: &Arc<Self>, mut request: tiny_http::Request, inbound: Inbound) {
        let Inbound {
            caller,
            challenger,
            message,
        } = inbound;
        let identity = &caller.identity;
        if message.is_none() && request.body_length().is_none() {
            // An unread chunked body would be parsed as the next request on this
            // connection (see the transport's rejection path): read it to its end.
            let _ = std::io::copy(request.as_reader(), &mut std::io::sink());
        }
        match (request.method().clone(), message) {
            (Method::Get, None) => self.open_stream(request, &caller),
            (Method::Delete, None) => {
                let response = match header(&request, "Mcp-Session-Id") {
                    None => no_session(),
                    Some(id) => match self.sessions.end(id, identity) {
                        Ok(()) => json_response(200, None, &[]),
                        Err(_) => session_not_found(),
                    },
                };
                let _ = request.respond(response);
            }
            (_, Some(message)) => self.post(request, &caller, challenger, message),
            (_, None) => {
                let _ = request.respond(refusal(
                    405,
                    RpcError::invalid_request("use POST, GET or DELETE"),
                ));
            }
        }
    }

    /// The caller's session named by the request, with its version header checked
    /// against the negotiated revision. One this server does not hold is read back from
    /// the store (it restarted, or another node opened it): its followed tasks' current
    /// statuses then wait for its next GET stream.
    fn session_of(
        &self,
        request: &tiny_http::Request,
        caller: &Caller,
    ) -> Result<Arc<Session>, Response<Body>> {
        let identity = &caller.identity;
        let id = header(request, "Mcp-Session-Id").ok_or_else(no_session)?;
        let session = match self.sessions.get(id, identity) {
            Ok(session) => session,
            Err(Refused::Full) => return Err(session_not_found()),
            Err(Refused::NotFound) => {
                let session = self
                    .sessions
                    .restore(id, identity, caller.credential)
                    .map_err(|_| session_not_found())?;
                let keep = self.sessions.limits().replay_events;
                for task_id in session.followed_tasks() {
                    tasks::announce_status(&self.service, &session, &task_id, keep);
                }
                session
            }
        };
        // A missing header means 2025-03-26 to the spec; accept it from any session
        // rather than break clients that never send it.
        if let Some(version) = header(request, "MCP-Protocol-Version") {
            if !era::LEGACY_VERSIONS.contains(&version) {
                let error = RpcError::unsupported_version(version, &era::all_versions());
                return Err(refusal(400, error));
            }
            if version != session.version {
                return Err(refusal(
                    400,
                    RpcError::invalid_request(format!(
                        "MCP-Protocol-Version {version} differs from this session's {}",
                        session.version
                    )),
                ));
            }
        }
        Ok(session)
    }

    fn open_stream(self: &Arc<Self>, request: tiny_http::Request, caller: &Caller) {
        let session = match self.session_of(&request, caller) {
            Ok(session) => session,
            Err(response) => {
                let _ = request.respond(response);
                return;
            }
        };
        let accepts_sse =
            header(&request, "Accept").is_some_and(|accept| accept.contains("text/event-stream"));
        if !accepts_sse {
            let _ = request.respond(refusal(
                406,
                RpcError::invalid_request("GET needs Accept: text/event-stream"),
            ));
            return;
        }
        let last_event_id = header(&request, "Last-Event-ID").and_then(|id| id.trim().parse().ok());
        let sessions = Arc::clone(&self.sessions);
        let keep_alive = Duration::from_millis(self.hub.limits().keep_alive_ms);
        let spawned = std::thread::Builder::new()
            .name("legacy-stream".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                if let Err(error) =
                    stream::run_get_stream(request, &session, &sessions, last_event_id, keep_alive)
                {
                    log::debug!("legacy GET stream ended: {error}");
                }
            });
        if spawned.is_err() {
            log::error!("could not start a legacy GET stream thread");
        }
    }

    fn post(
        &self,
        request: tiny_http::Request,
        caller: &Caller,
        challenger: Option<Arc<Metadata>>,
        message: Value,
    ) {
        let identity = &caller.identity;
        let is_response = message.get("method").is_none()
            && (message.get("result").is_some() || message.get("error").is_some());
        if is_response {
            let response = match self.session_of(&request, caller) {
                Ok(session) => {
                    let id = message.get("id").cloned().unwrap_or(Value::Null);
                    if !session.deliver_answer(&id, message) {
                        log::debug!("a client answer matched no waiting request");
                    }
                    json_response(202, None, &[])
                }
                Err(response) => response,
            };
            let _ = request.respond(response);
            return;
        }
        let envelope = match Envelope::parse(message) {
            Ok(envelope) => envelope,
            Err(rejected) => {
                let (id, error) = *rejected;
                let _ = request.respond(json_response(200, Some(&error_body(&id, &error)), &[]));
                return;
            }
        };
        let opening = envelope.method == "initialize"
            && header(&request, "Mcp-Session-Id").is_none()
            && envelope.id.is_some();
        if opening {
            let response = self.initialize(identity, caller.credential, &envelope);
            let _ = request.respond(response);
            return;
        }
        if envelope.id.is_none() && header(&request, "Mcp-Session-Id").is_none() {
            // Nothing to attach a session-less notification to: accepted and ignored.
            let _ = request.respond(json_response(202, None, &[]));
            return;
        }
        let session = match self.session_of(&request, caller) {
            Ok(session) => session,
            Err(response) => {
                let _ = request.respond(response);
                return;
            }
        };
        let Some(id) = envelope.id.clone() else {
            if envelope.method == "notifications/cancelled" {
                if let Some(cancelled) = envelope.params.get("requestId") {
                    session.cancel_request(cancelled);
                }
            }
            let _ = request.respond(json_response(202, None, &[]));
            return;
        };
        let cancelled = session.start_request(&id);
        let sink = stream::CallSink::new(request, cancelled, challenger);
        self.answer_call(&session, caller, envelope, id, sink);
    }

    /// Runs one call of `session` and writes its answer through `sink`, whichever wire
    /// it is on (an HTTP POST's, or a stdio connection's).
    fn answer_call(
        &self,
        session: &Session,
        caller: &Caller,
        envelope: Envelope,
        id: Value,
        mut sink: stream::CallSink,
    ) {
        let method = envelope.method.clone();
        let result = self.call(session, caller, envelope, &mut sink);
        session.end_request(&id);
        self.metrics.record_request(&method, result.is_ok());
        match result {
            Ok(result) => sink.finish(200, json!({ "jsonrpc": "2.0", "id": id, "result": result })),
            // A missing scope is HTTP 403 with its challenge (clients step up on it);
            // other JSON-RPC errors travel with 200 on this wire: legacy SDKs only
            // parse 2xx.
            Err(error) if error.insufficient_scope => {
                sink.finish_forbidden(error_body(&id, &error), &error)
            }
            Err(error) => sink.finish(200, error_body(&id, &error)),
        }
    }

    fn initialize(
        &self,
        identity: &Identity,
        credential: Credential,
        envelope: &Envelope,
    ) -> Response<Body> {
        let id = envelope.id.clone().unwrap_or(Value::Null);
        let version = era::negotiate(envelope.str_param("protocolVersion"));
        let capabilities = match envelope.params.get("capabilities") {
            Some(Value::Object(capabilities)) => capabilities.clone(),
            _ => serde_json::Map::new(),
        };
        let share = self.service.live.load().shares.of(identity).max_sessions;
        let client_info = envelope.params.get("clientInfo").cloned();
        let session = match self.sessions.open(
            identity,
            share,
            credential,
            Negotiated {
                version,
                capabilities: taskd_protocol::ClientCapabilities(capabilities),
                client_info: client_info.unwrap_or(Value::Null),
            },
            true,
        ) {
            Ok(opened) => {
                self.metrics
                    .record_session_ended(opened.ended, &identity.key());
                opened.session
            }
            Err(_) => {
                self.metrics.record_sessions_full();
                let error = RpcError::new(
                    taskd_protocol::error::code::INTERNAL_ERROR,
                    "Too many open sessions; try again later",
                );
                return json_response(503, Some(&error_body(&id, &error)), &[]);
            }
        };
        self.metrics.record_request("initialize", true);
        let result = methods::initialize_result(&self.service, version);
        let body = json!({ "jsonrpc": "2.0", "id": id, "result": result });
        json_response(200, Some(&body), &[("Mcp-Session-Id", &session.id)])
    }
}

impl SessionEra for Legacy {
    fn claims_post(&self, session: Option<&str>, version: Option<&str>, message: &Value) -> bool {
        era::is_legacy_post(session, version, message)
    }

    fn serve(self: Arc<Self>, request: tiny_http::Request, inbound: Inbound) {
        self.serve_request(request, inbound);
    }

    fn revoke(&self, auth: &Authenticator) -> usize {
        self.sessions.revoke(auth)
    }

    fn record_sessions(&self) {
        self.sessions.record_all();
    }
}
