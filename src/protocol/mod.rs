//! The protocol's vocabulary: the ground floor every other module builds on. It imports
//! nothing else from this crate — JSON-RPC errors and their codes, the request envelope
//! and its `_meta`, client capabilities, log levels, input-request kinds, task statuses,
//! W3C trace context.
//! The dispatcher that answers each method lives above it, in `handlers`.

pub mod capabilities;
pub mod envelope;
pub mod error;
pub mod input;
pub mod log_level;
pub mod task_status;
pub mod trace;

pub use capabilities::{missing_for_input_requests, ClientCapabilities};
pub use envelope::{Envelope, RequestMeta};
pub use error::{code, RpcError};
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
