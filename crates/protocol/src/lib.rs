//! The protocol's vocabulary, the ground floor of the workspace: JSON-RPC errors and
//! their codes, the request envelope and its `_meta`, client capabilities, log levels,
//! input-request kinds, task statuses, W3C trace context, the MCP headers that mirror a
//! request's body, and the identity a request acts for.
//!
//! May depend on: no crate of this workspace. Must never know: tasks, stores, tools,
//! transports or configuration; the dispatcher that answers each method is in
//! `taskd-server`'s `handlers`.

pub mod capabilities;
pub mod envelope;
pub mod error;
pub mod headers;
pub mod identity;
pub mod input;
pub mod log_level;
pub mod task_status;
pub mod trace;

pub use capabilities::{missing_for_input_requests, ClientCapabilities, TASKS_EXTENSION};
pub use envelope::{Envelope, RequestMeta};
pub use error::{code, RpcError};
pub use identity::{is_scope_token, Identity, Scopes};
pub use input::InputKind;
pub use log_level::LogLevel;
pub use task_status::TaskStatus;
pub use trace::TraceContext;

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

/// `_meta` key a client may set on `tools/call` to make task submission idempotent.
pub const META_IDEMPOTENCY_KEY: &str = "dev.mcp-taskd/idempotencyKey";
/// `tools/list` marks a tool the caller's access token lacks scopes for with them here
/// (`[auth.oauth] tools_list = "mark"`).
pub const META_REQUIRED_SCOPES: &str = "dev.mcp-taskd/requiredScopes";
