//! Why a configuration cannot be used: [`ConfigError`], whose messages are the ones
//! `mcp-taskd` prints.

use std::net::SocketAddr;
use std::path::PathBuf;

use thiserror::Error;

use taskd_builtin::BuiltinSet;
use taskd_tools::command::DeclarationError;

/// Why a configuration cannot be used. The messages are the ones `mcp-taskd` prints.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("embedded default: {0}")]
    EmbeddedDefault(Box<ConfigError>),
    #[error("{}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    InFile {
        path: PathBuf,
        source: Box<ConfigError>,
    },
    #[error("{0}")]
    Toml(Box<toml::de::Error>),
    #[error("{}: {source}", dir.display())]
    BaseDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    /// A `[[tools]]` entry that does not deserialize; `detail` locates it in the text.
    #[error("{label}: {detail}")]
    ToolEntry { label: String, detail: String },
    /// A `[[schedules]]` entry that cannot run, or whose tool cannot run it.
    #[error("{label}: {detail}")]
    ScheduleEntry { label: String, detail: String },
    #[error("{label}: {source}")]
    UpstreamDeclaration {
        label: String,
        source: taskd_upstreams::UpstreamError,
    },
    #[error("{label}: {detail}")]
    UpstreamEntry { label: String, detail: String },
    #[error("{label}: {source}")]
    ToolDeclaration {
        label: String,
        source: DeclarationError,
    },
    #[error("server.endpoint must start with '/' and not be /healthz")]
    Endpoint,
    #[error("server.handler_threads and workers.threads must be at least 1")]
    NoThreads,
    #[error("limits.max_body_bytes must be >= 1024 and limits.max_json_depth >= 8")]
    TinyLimits,
    #[error("server timeouts and min_write_bytes_per_sec must be positive")]
    ConnectionTimes,
    #[error("limits.max_buffered_request_bytes must be >= limits.max_body_bytes")]
    BufferedBelowBody,
    #[error("limits.page_size must be at least 1")]
    PageSize,
    #[error("workers.lease_ms must be at least 300")]
    ShortLease,
    #[error("tasks.ttl_ms and tasks.poll_interval_ms must be positive")]
    TaskTimes,
    #[error(
        "{field} = {value}: at most {} ms (hosts cut tool calls off at about 4 minutes; \
         the default, 20000, stays under the 60 s request timeout of the TypeScript SDK)",
        taskd_tools::MAX_INLINE_WAIT_MS
    )]
    InlineWait { field: String, value: u64 },
    #[error("[notifications] limits must be positive")]
    NotificationLimits,
    #[error("workers.janitor_interval_ms must be positive")]
    JanitorInterval,
    #[error(transparent)]
    Postgres(#[from] taskd_postgres::UrlError),
    #[error(
        "store.cache_bytes = {value}: at least {} (16 pages)",
        taskd_engine::config::MIN_CACHE_BYTES
    )]
    CacheBytes { value: u64 },
    #[error(
        "tasks.max_live_tasks_per_identity, tasks.creation_burst_per_identity and \
         tasks.max_inline_waits_per_identity must be at least 1, \
         tasks.creations_per_sec_per_identity 0 (no limit) or more"
    )]
    TaskQuotas,
    #[error("[sessions] limits must be positive")]
    SessionLimits,
    #[error("dashboard.max_logins_per_identity must be at least 1")]
    DashboardLogins,
    #[error("auth.tokens[{index}].sha256 must be 64 hex digits (the SHA-256 of the token)")]
    TokenDigest { index: usize },
    #[error("auth.tokens[{index}].principal must not be empty")]
    TokenPrincipal { index: usize },
    #[error("auth.tokens[{index}].roles: unknown role \"{role}\" (known: admin)")]
    UnknownRole { index: usize, role: String },
    #[error("auth.tokens[{index}].weight must be 1 to 1000")]
    TokenWeight { index: usize },
    #[error("auth.tokens[{index}].priority must be -100 to 100")]
    TokenPriority { index: usize },
    #[error("auth.tokens[{index}].{key} must be at least 1 (creations_per_sec: 0 or more)")]
    TokenQuota { index: usize, key: &'static str },
    #[error(
        "auth.tokens[{first}] and auth.tokens[{index}] grant the same identity (tenant and \
         principal) with a different share (weight, priority or quotas): give them the same"
    )]
    TokenShares { first: usize, index: usize },
    #[error(
        "dashboard.path \"{path}\" must start with / (not end with one), use letters, digits, \
         - _ . / only, and not overlap server.endpoint, /healthz or /metrics"
    )]
    DashboardPath { path: String },
    #[error("{field}: {why}")]
    OAuthUrl { field: String, why: &'static str },
    #[error("auth.oauth.principal_claim must not be empty")]
    OAuthClaim,
    #[error("auth.oauth.audiences must not hold an empty audience")]
    OAuthAudience,
    #[error(
        "{field}: \"{scope}\" is not a scope (printable ASCII without spaces, quotes or \
         backslashes)"
    )]
    Scope { scope: String, field: String },
    #[error(
        "auth.oauth.introspection_endpoint needs auth.oauth.client_id and \
         auth.oauth.client_secret_file"
    )]
    IntrospectionClient,
    #[error("auth.oauth.jwks_cooldown_ms and provider_timeout_ms must be positive")]
    OAuthTimes,
    #[error("auth.oauth.client_secret_file {}: {source}", path.display())]
    ClientSecret {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(
        "[auth.oauth] on non-loopback {listen} needs server.public_url (where clients reach \
         this server: tokens are bound to that URL)"
    )]
    OAuthWithoutPublicUrl { listen: SocketAddr },
    #[error("telemetry.otlp_endpoint \"{endpoint}\" must be an http:// or https:// URL")]
    TelemetryEndpoint { endpoint: String },
    #[error(
        "telemetry.trace_url \"{url}\" must be an http:// or https:// URL holding {{trace_id}}"
    )]
    TraceUrl { url: String },
    #[error("builtin.sets: unknown set \"{name}\" (known: {})", known_sets())]
    UnknownBuiltinSet { name: String },
    #[error(
        "refusing to listen on non-loopback {listen} without [[auth.tokens]] or [auth.oauth] \
         (set server.allow_unauthenticated_remote = true to override)"
    )]
    UnauthenticatedRemote { listen: SocketAddr },
    #[error(
        "listening on non-loopback {listen} needs server.allowed_hosts \
         (the Host names clients use), to keep DNS-rebinding protection"
    )]
    RemoteWithoutHosts { listen: SocketAddr },
    #[error(transparent)]
    Redact(#[from] taskd_engine::output::RedactError),
    #[error(transparent)]
    Webhook(#[from] taskd_webhooks::WebhookConfigError),
}

fn known_sets() -> String {
    let names: Vec<&str> = BuiltinSet::ALL.iter().map(|set| set.name()).collect();
    names.join(", ")
}
