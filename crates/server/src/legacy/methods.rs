//! Legacy request dispatch: the methods only initialize-based revisions have (`ping`,
//! `logging/setLevel`, `resources/subscribe|unsubscribe`), and the bridge that serves
//! every shared method through the 2026 handlers with a [`RequestMeta`] built from the
//! session — answering their MRTR input requests with server-to-client requests and
//! stripping the fields only 2026-07-28 results carry.

use std::time::Duration;

use serde_json::{json, Map, Value};

use super::era::strip_modern_fields;
use super::outbound;
use super::sessions::Session;
use super::stream::CallSink;
use super::tasks;
use super::Legacy;
use crate::handlers::{Reply, Request, Service};
use taskd_auth::Caller;
use taskd_base::later::Later;
use taskd_protocol::RpcError;
use taskd_protocol::TASKS_EXTENSION;
use taskd_protocol::{Envelope, LogLevel, RequestMeta, TraceContext, METHODS};

/// Methods of 2026-07-28 ([`METHODS`]) that a legacy session does not share: discovery
/// and listen streams have no legacy form, and legacy tasks have their own shapes. The
/// rest are served by the same handlers.
const MODERN_ONLY: &[&str] = &[
    "server/discover",
    "subscriptions/listen",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
];

/// Whether a legacy session's `method` is served by the shared handlers.
fn shared(method: &str) -> bool {
    METHODS.contains(&method) && !MODERN_ONLY.contains(&method)
}

/// Longest wait for a task creation's commit.
const CREATION_WAIT: Duration = Duration::from_secs(30);

/// Input rounds one call may take before the server gives up on it.
const MAX_INPUT_ROUNDS: usize = 16;

/// The `initialize` result for a session at `version`.
pub fn initialize_result(service: &Service, version: &str) -> Value {
    let settings = service.live.load();
    let server = &settings.config.server;
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": {
            "tools": { "listChanged": true },
            "prompts": { "listChanged": true },
            "resources": { "subscribe": true, "listChanged": false },
            "completions": {},
            "logging": {},
        },
        "serverInfo": { "name": server.name, "version": crate::handlers::VERSION },
    });
    if version == tasks::TASKS_VERSION {
        result["capabilities"]["tasks"] = tasks::capabilities();
    }
    if let Some(instructions) = &server.instructions {
        result["instructions"] = json!(instructions);
    }
    result
}

impl Legacy {
    /// Answers one request inside `session`.
    pub(super) fn call(
        &self,
        session: &Session,
        caller: &Caller,
        envelope: Envelope,
        sink: &mut CallSink,
    ) -> Result<Value, RpcError> {
        match envelope.method.as_str() {
            "initialize" => Err(RpcError::invalid_request(
                "This session is already initialized",
            )),
            "ping" => Ok(json!({})),
            "logging/setLevel" => {
                let level = envelope
                    .str_param("level")
                    .and_then(LogLevel::parse)
                    .ok_or_else(|| RpcError::invalid_params("level must be a log level name"))?;
                session.set_log_level(level);
                self.sessions.record_change(session);
                Ok(json!({}))
            }
            "resources/subscribe" | "resources/unsubscribe" => {
                let uri = envelope
                    .str_param("uri")
                    .ok_or_else(|| RpcError::invalid_params("uri must be a string"))?;
                if crate::handlers::output::is_output_uri(uri) {
                    return Err(crate::handlers::output::not_subscribable(uri));
                }
                if !self.service.catalog().serves(uri) {
                    return Err(RpcError::new(-32002, "Resource not found")
                        .with_data(json!({ "uri": uri })));
                }
                if envelope.method == "resources/subscribe" {
                    session.subscribe(uri);
                } else {
                    session.unsubscribe(uri);
                }
                self.sessions.record_change(session);
                Ok(json!({}))
            }
            "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel"
                if session.version == tasks::TASKS_VERSION =>
            {
                self.task_method(session, caller, &envelope, sink)
            }
            "tools/call" if session.version == tasks::TASKS_VERSION => {
                let as_task = self.task_gate(session, &envelope)?;
                self.shared(session, caller, envelope, sink, as_task)
            }
            method if shared(method) => self.shared(session, caller, envelope, sink, false),
            method => Err(RpcError::method_not_found(method)),
        }
    }

    /// Runs a shared method through the 2026 handlers, answering their input requests
    /// on the call's stream and re-running with the answers. `as_task` is a
    /// `tools/call` with `params.task`: it answers a 2025-11-25 `CreateTaskResult`.
    fn shared(
        &self,
        session: &Session,
        caller: &Caller,
        mut envelope: Envelope,
        sink: &mut CallSink,
        as_task: bool,
    ) -> Result<Value, RpcError> {
        let progress_token = envelope
            .params
            .get("_meta")
            .and_then(|meta| meta.get("progressToken"))
            .filter(|token| token.is_string() || token.is_number())
            .cloned();
        // The 2026 Tasks extension is how the shared handlers learn that a call opted
        // in; a session never declares it itself (its task opt-in is `params.task`).
        let capabilities = if as_task {
            tasks::with_tasks_extension(&session.capabilities)
        } else {
            let mut capabilities = session.capabilities.clone();
            if let Some(Value::Object(extensions)) = capabilities.0.get_mut("extensions") {
                extensions.remove(TASKS_EXTENSION);
            }
            capabilities
        };
        let trace = match envelope.params.get("_meta") {
            Some(Value::Object(meta)) => TraceContext::from_meta(meta),
            _ => None,
        };
        let meta = RequestMeta {
            protocol_version: session.version.to_owned(),
            capabilities,
            progress_token,
            log_level: session.log_level(),
            trace,
        };
        let timeout = Duration::from_millis(self.sessions.limits().client_request_timeout_ms);
        for _ in 0..MAX_INPUT_ROUNDS {
            let reply = self.service.handle(
                &Request {
                    identity: &caller.identity,
                    scopes: &caller.scopes,
                    envelope: &envelope,
                    meta: &meta,
                },
                &mut outbound::SessionEmitter {
                    session,
                    sink: &mut *sink,
                    timeout,
                },
            );
            let mut result = match reply {
                Reply::Result(result) => result,
                Reply::Error(error) => return Err(error),
                Reply::Later(creation) => wait_for(creation)?,
                Reply::Listen(listen) => {
                    self.hub.unsubscribe(listen.subscription.key);
                    return Err(RpcError::internal());
                }
            };
            match result.get("resultType").and_then(Value::as_str) {
                Some("input_required") => {}
                Some("task") => {
                    let task = tasks::legacy_task(&result);
                    tasks::follow(session, &task);
                    return Ok(json!({ "task": task }));
                }
                _ => {
                    if envelope.method == "tools/list" && session.version == tasks::TASKS_VERSION {
                        let bridged = self.service.bridge.serves(&meta.capabilities);
                        tasks::annotate_tools(&mut result, &self.service.tools(), bridged);
                    }
                    if let Some(fields) = result.as_object_mut() {
                        strip_modern_fields(fields);
                    }
                    return Ok(result);
                }
            }
            let requests = match result.get("inputRequests") {
                Some(Value::Object(requests)) => requests.clone(),
                _ => Map::new(),
            };
            let responses = outbound::ask_all(session, sink, &requests, timeout, None)?;
            envelope
                .params
                .insert("inputResponses".into(), Value::Object(responses));
            match result.get("requestState") {
                Some(state) => envelope.params.insert("requestState".into(), state.clone()),
                None => envelope.params.remove("requestState"),
            };
        }
        log::warn!("a legacy call asked for input more than {MAX_INPUT_ROUNDS} times");
        Err(RpcError::internal())
    }
}

/// Waits for a task creation's answer, which arrives once the task is committed.
fn wait_for(creation: Later<Result<Value, RpcError>>) -> Result<Value, RpcError> {
    creation
        .wait(CREATION_WAIT)
        .unwrap_or_else(|| Err(RpcError::internal()))
}
