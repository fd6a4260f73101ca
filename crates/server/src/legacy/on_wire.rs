//! The legacy era on a stream transport (stdio): the connection is one implicit session,
//! opened by its `initialize` and ended with the connection. Everything a session gets
//! over HTTP arrives as lines of the one channel instead: answers, the notifications and
//! server-to-client requests of a call (where HTTP would stream them in the POST's
//! response), and what the GET stream carries (list changes, resource updates, task
//! status). Requests are served by the same code as HTTP sessions.

use std::sync::Arc;

use serde_json::{json, Value};

use super::sessions::{Negotiated, Session};
use super::stream::CallSink;
use super::{era, error_body, methods, Legacy};
use crate::transport::Wire;
use taskd_auth::{Caller, Credential};
use taskd_protocol::{ClientCapabilities, Envelope, RpcError};
use taskd_protocol::{Identity, Scopes};

/// The session of one stream connection.
pub struct WireSession {
    session: Arc<Session>,
}

impl WireSession {
    /// The negotiated protocol revision.
    pub fn version(&self) -> &'static str {
        self.session.version
    }
}

impl Legacy {
    /// Answers the connection's `initialize` on `wire` and opens its session; then the
    /// session's own notifications start flowing to `wire`. `None` (with the error
    /// answered) when no session could be opened.
    pub fn open_on_wire(
        &self,
        identity: &Identity,
        envelope: &Envelope,
        wire: Arc<dyn Wire>,
    ) -> Option<WireSession> {
        let id = envelope.id.clone().unwrap_or(Value::Null);
        let version = era::negotiate(envelope.str_param("protocolVersion"));
        let capabilities = match envelope.params.get("capabilities") {
            Some(Value::Object(capabilities)) => capabilities.clone(),
            _ => serde_json::Map::new(),
        };
        let share = self.service.live.load().shares.of(identity).max_sessions;
        // One session per connection, which ends with it: nothing to keep in the store.
        let client_info = envelope.params.get("clientInfo").cloned();
        let session = match self.sessions.open(
            identity,
            share,
            Credential::Local,
            Negotiated {
                version,
                capabilities: ClientCapabilities(capabilities),
                client_info: client_info.unwrap_or(Value::Null),
            },
            false,
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
                wire.send(&error_body(&id, &error));
                return None;
            }
        };
        self.metrics.record_request("initialize", true);
        let result = methods::initialize_result(&self.service, version);
        wire.send(&json!({ "jsonrpc": "2.0", "id": id, "result": result }));
        // What HTTP sends on the GET stream; event ids and replay have no use on a
        // channel that never reconnects. The forwarder ends when the session closes.
        let (live, events) = crossbeam_channel::bounded(256);
        session.attach_stream(live, None);
        let spawned = std::thread::Builder::new()
            .name("legacy-wire".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                for event in events {
                    if !wire.send(&event.message) {
                        break;
                    }
                }
            });
        if spawned.is_err() {
            log::error!("could not start the legacy notification thread");
        }
        Some(WireSession { session })
    }

    /// Serves one message of the connection's session: a request (answered on `wire`
    /// when done — run it on its own thread), a notification, or the client's answer to
    /// a server-to-client request.
    pub fn serve_on_wire(&self, session: &WireSession, message: Value, wire: &Arc<dyn Wire>) {
        let session = &session.session;
        let is_response = message.get("method").is_none()
            && (message.get("result").is_some() || message.get("error").is_some());
        if is_response {
            let id = message.get("id").cloned().unwrap_or(Value::Null);
            if !session.deliver_answer(&id, message) {
                log::debug!("a client answer matched no waiting request");
            }
            return;
        }
        let envelope = match Envelope::parse(message) {
            Ok(envelope) => envelope,
            Err(rejected) => {
                let (id, error) = *rejected;
                wire.send(&error_body(&id, &error));
                return;
            }
        };
        let Some(id) = envelope.id.clone() else {
            if envelope.method == "notifications/cancelled" {
                if let Some(cancelled) = envelope.params.get("requestId") {
                    session.cancel_request(cancelled);
                }
            }
            return;
        };
        let cancelled = session.start_request(&id);
        let sink = CallSink::on_wire(Arc::clone(wire), cancelled);
        // Over stdio the host is the local user: every tool, no scopes.
        let caller = Caller {
            identity: session.identity.clone(),
            scopes: Scopes::Unrestricted,
            credential: Credential::Local,
        };
        self.answer_call(session, &caller, envelope, id, sink);
    }

    /// Ends the connection's session: its calls are told to stop, its forwarder ends.
    pub fn close_on_wire(&self, session: &WireSession) {
        let _ = self
            .sessions
            .end(&session.session.id, &session.session.identity);
    }
}
