//! The MCP protocol layer: JSON-RPC envelope and `_meta`, request validation that needs
//! the body, and routing of each method to its handler.
//!
//! The transport hands this layer a parsed [`envelope::Envelope`] plus the caller's
//! identity and the headers it needs to cross-check; this layer answers with a
//! [`Reply`]. It never touches sockets.

pub mod envelope;
pub mod error;
mod methods;
pub mod request_state;

use serde_json::Value;

use crate::auth::Identity;
use crate::later::Later;
use crate::notifications::{Filter, Subscription};
use envelope::{Envelope, RequestMeta};
pub use error::RpcError;
pub use methods::{missing_for_input_requests, ServerInfo, Service, META_IDEMPOTENCY_KEY};

/// Protocol revisions this server speaks.
pub const SUPPORTED_VERSIONS: &[&str] = &["2026-07-28"];

/// Every method this server answers. Anything else (including the methods 2026-07-28
/// removed, such as `initialize`, `ping`, `tasks/list` and `tasks/result`) is `-32601`.
pub const METHODS: &[&str] = &[
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "subscriptions/listen",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
];

/// Receives the notifications a request emits before its result (progress, log
/// messages). The transport switches the response to an SSE stream on the first one.
pub trait Emitter {
    fn notify(&mut self, method: &str, params: Value);
    /// Whether the client cancelled the request (legacy `notifications/cancelled`); an
    /// inline tool polls it to stop early.
    fn cancelled(&self) -> bool {
        false
    }
}

/// A request that passed transport validation, as the handlers see it.
pub struct Request<'a> {
    pub identity: &'a Identity,
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
    pub capabilities: envelope::ClientCapabilities,
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
