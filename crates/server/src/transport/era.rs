//! The seam to another protocol era served on the same endpoint (the 2025 session era
//! of the `legacy` module): the transport admits a request — Host/Origin, authentication,
//! body limits — then asks the era whether the request is its own and hands it over.
//! The era depends on the transport, never the other way round.

use std::sync::Arc;

use serde_json::Value;

use taskd_auth::oauth::Metadata;
use taskd_auth::{Authenticator, Caller};

/// A request of the other era that the transport admitted: who sent it, and its JSON
/// body (`None` for `GET` and `DELETE`).
pub struct Inbound {
    /// Who sent it, and what it authenticated with (a session keeps the credential:
    /// see [`taskd_auth::Credential`]).
    pub caller: Caller,
    /// Names the protected-resource metadata in a `403 insufficient_scope` challenge.
    pub challenger: Option<Arc<Metadata>>,
    pub message: Option<Value>,
}

/// Where a stream transport (stdio) writes whole JSON-RPC messages, one per line; each
/// send is atomic with respect to the others. `false` once the peer is gone.
pub trait Wire: Send + Sync {
    fn send(&self, message: &Value) -> bool;
}

/// An era the transport hands requests to.
pub trait SessionEra: Send + Sync {
    /// Whether a POST belongs to this era, from its `Mcp-Session-Id` and
    /// `MCP-Protocol-Version` headers and its body.
    fn claims_post(&self, session: Option<&str>, version: Option<&str>, message: &Value) -> bool;
    /// Answers an admitted request (its own thread may keep a stream open).
    fn serve(self: Arc<Self>, request: tiny_http::Request, inbound: Inbound);
    /// Ends the sessions (and their streams) whose credential `auth` no longer grants
    /// their identity; returns how many ended.
    fn revoke(&self, auth: &Authenticator) -> usize;
    /// Writes every stored session's state to the store (a graceful stop).
    fn record_sessions(&self);
}
