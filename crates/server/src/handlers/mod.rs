//! The dispatcher: one handler per MCP method, above the protocol vocabulary. The
//! transport hands it a validated [`Request`]; it answers a [`Reply`]. Handlers own the
//! method semantics (pagination, caching hints, capability gates, MRTR) and call the task
//! engine, the tool registry and the catalog — never the transport or the store.
//!
//! One file per area: [`lists`] (discovery, lists, reads, prompts, completion),
//! [`tools_call`], [`tasks`] (`tasks/*` and task notifications), [`listen`]
//! (`subscriptions/listen`), [`mrtr`] (input rounds and their signed state), [`bridge`]
//! (task tools for clients that do not speak tasks), [`output`] (a task's output as a
//! resource).

pub mod bridge;
mod listen;
mod lists;
mod mrtr;
pub mod output;
mod request_span;
pub mod request_state;
mod tasks;
mod tools_call;

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::live::Live;
use request_state::StateSigner;
use taskd_base::later::Later;
use taskd_engine::TaskService;
use taskd_notifications::{Filter, Hub, Subscription};
use taskd_protocol::envelope::{Envelope, RequestMeta};
use taskd_protocol::{ClientCapabilities, RpcError};
use taskd_protocol::{Identity, Scopes};
use taskd_telemetry::logs::LogScope;
use taskd_tools::catalog::Catalog;
use taskd_tools::Registry;
pub use tasks::TaskNotification;

/// Receives the notifications a request emits before its result (progress, log
/// messages). The transport switches the response to an SSE stream on the first one.
pub trait Emitter {
    fn notify(&mut self, method: &str, params: Value);
    /// Whether the client cancelled the request (legacy `notifications/cancelled`); an
    /// inline tool polls it to stop early.
    fn cancelled(&self) -> bool {
        false
    }
    /// Whether [`Emitter::ask`] can reach the client.
    fn can_ask(&self) -> bool {
        false
    }
    /// Asks the client a task's input requests (elicitation, sampling, roots) and
    /// returns its `inputResponses`, where the transport can send a request to the
    /// client (legacy sessions); `None` where it cannot.
    fn ask(
        &mut self,
        _requests: &Map<String, Value>,
        _task_id: &str,
    ) -> Option<Result<Map<String, Value>, RpcError>> {
        None
    }
}

/// A request that passed transport validation, as the handlers see it.
pub struct Request<'a> {
    pub identity: &'a Identity,
    /// What the caller's credential reaches (tools' `scopes`).
    pub scopes: &'a Scopes,
    pub envelope: &'a Envelope,
    pub meta: &'a RequestMeta,
}

/// A new `subscriptions/listen` stream: the transport writes the acknowledgement first,
/// then every frame, each tagged with `subscription_id`.
pub struct Listen {
    pub subscription_id: Value,
    pub filter: Filter,
    pub subscription: Subscription,
    /// Task notifications are re-read with the subscriber's own identity and
    /// capabilities, never taken from the hint.
    pub identity: Identity,
    /// The scopes of the listen request's token: a task of a tool it lacks scopes for
    /// is not sent.
    pub scopes: Scopes,
    pub capabilities: ClientCapabilities,
    /// The outbox position when the listen arrived: changes at or before it are not
    /// replayed.
    pub changes_after: i64,
}

/// What a handler answers.
pub enum Reply {
    Result(Value),
    Error(RpcError),
    Listen(Box<Listen>),
    /// Answered later, from another thread (a task creation waiting for its commit).
    Later(Later<Result<Value, RpcError>>),
}

impl From<Result<Value, RpcError>> for Reply {
    fn from(result: Result<Value, RpcError>) -> Reply {
        match result {
            Ok(value) => Reply::Result(value),
            Err(error) => Reply::Error(error),
        }
    }
}

/// The MCP service: everything the method handlers need.
pub struct Service {
    /// The tools, catalog, server info and limits in force (swapped by a reload).
    pub live: Arc<Live>,
    pub signer: StateSigner,
    pub hub: Arc<Hub>,
    pub tasks: Arc<TaskService>,
    /// Task tools for clients that do not speak tasks.
    pub bridge: bridge::Bridge,
}

/// This build's version, as `server/discover` and `initialize` report it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

impl Service {
    /// The tools served now.
    pub fn tools(&self) -> Arc<Registry> {
        Arc::clone(&self.live.load().tools)
    }

    /// The resources and prompts served now.
    pub fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&self.live.load().catalog)
    }

    /// Routes one request. The transport has already checked headers, `_meta`, the
    /// protocol version and that the method exists.
    pub fn handle(&self, request: &Request<'_>, emitter: &mut dyn Emitter) -> Reply {
        if !taskd_telemetry::enabled() {
            // Log lines of the request name its trace (the JSON log format).
            let _log_scope = LogScope::enter(None, request.meta.trace.as_ref());
            return self.dispatch(request, emitter);
        }
        let tool = request
            .envelope
            .str_param("name")
            .filter(|name| self.tools().get(name).is_some() || bridge::is_task_tool(name));
        let span = request_span::start(request, tool);
        // What this request starts (a task, a program) hangs under its span.
        let meta = RequestMeta {
            trace: span.context().or_else(|| request.meta.trace.clone()),
            ..request.meta.clone()
        };
        let traced = Request {
            identity: request.identity,
            scopes: request.scopes,
            envelope: request.envelope,
            meta: &meta,
        };
        let _log_scope = LogScope::enter(None, meta.trace.as_ref());
        let reply = self.dispatch(&traced, emitter);
        request_span::finish(span, reply)
    }

    fn dispatch(&self, request: &Request<'_>, emitter: &mut dyn Emitter) -> Reply {
        let method = request.envelope.method.as_str();
        match method {
            "server/discover" => Reply::Result(self.discover()),
            "tools/list" => self.tools_list(request).into(),
            "tools/call" => self.tools_call(request, emitter),
            "resources/list" => self.resources_list(request).into(),
            "resources/templates/list" => self.templates_list(request).into(),
            "resources/read" => self.resources_read(request).into(),
            "prompts/list" => self.prompts_list(request).into(),
            "prompts/get" => self.prompts_get(request).into(),
            "completion/complete" => self.complete(request).into(),
            "subscriptions/listen" => self.listen(request),
            "tasks/get" | "tasks/update" | "tasks/cancel" => self.task_method(request).into(),
            _ => Reply::Error(RpcError::method_not_found(method)),
        }
    }

    /// Adds the caching hints (SEP-2549) and `resultType` to a cacheable result.
    fn cacheable(&self, mut result: Value) -> Value {
        result["resultType"] = json!("complete");
        result["ttlMs"] = json!(self.live.load().config.limits.cache_ttl_ms);
        result["cacheScope"] = json!("public");
        result
    }
}

/// `params[name]` as an object; absent or null is an empty object.
fn object_param(params: &Map<String, Value>, name: &str) -> Result<Map<String, Value>, RpcError> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(object)) => Ok(object.clone()),
        Some(_) => Err(RpcError::invalid_params(format!(
            "{name} must be an object"
        ))),
    }
}

/// `params.inputResponses`: absent is empty; anything but an object is invalid.
fn input_responses(params: &Map<String, Value>) -> Result<Map<String, Value>, RpcError> {
    match params.get("inputResponses") {
        None => Ok(Map::new()),
        Some(Value::Object(responses)) => Ok(responses.clone()),
        Some(_) => Err(RpcError::invalid_params("inputResponses must be an object")),
    }
}

fn complete(mut result: Value) -> Value {
    result["resultType"] = json!("complete");
    result
}
