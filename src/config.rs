//! Configuration: the TOML file format, its defaults, and the checks run before start-up.
//!
//! `mcp-taskd serve` with no `--config` uses the embedded default
//! (`examples/default.toml`): loopback only, a data dir under the working directory and
//! the built-in demo tools. Unknown keys are errors, so a typo never silently falls back
//! to a default.
//!
//! `[[tools]]` entries declare command tools (see [`crate::tools::command`]); each is
//! checked and built here, once — with errors naming the tool and the field — and
//! registered by `registration::build_catalog`. Relative paths in them resolve against
//! the directory of the configuration file (the working directory for the embedded
//! default).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::tools::command::{CommandTool, CommandToolConfig};

mod error;
mod oauth;

pub use error::ConfigError;
pub use oauth::{is_scope_token, OAuthConfig, ToolsListPolicy};

/// The configuration used when no file is given.
pub const EMBEDDED_DEFAULT: &str = include_str!("../examples/default.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub workers: WorkerConfig,
    #[serde(default)]
    pub tasks: TaskDefaults,
    #[serde(default)]
    pub notifications: NotificationLimits,
    #[serde(default)]
    pub auth: AuthConfig,
    #[serde(default)]
    pub sessions: SessionLimits,
    #[serde(default)]
    pub dashboard: DashboardConfig,
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    #[serde(default)]
    pub log: LogConfig,
    /// `[builtin]` as written, until [`Config::parse_in`] names each set.
    #[serde(default, rename = "builtin")]
    raw_builtin: RawBuiltinConfig,
    #[serde(skip)]
    pub builtin: BuiltinConfig,
    /// `[[tools]]`, kept raw until [`Config::parse_in`] types each entry, so that errors
    /// can name the tool.
    #[serde(default, rename = "tools")]
    raw_tools: Vec<toml::Table>,
    /// Command tools, in declaration order, each built once from its declaration.
    #[serde(skip)]
    pub tools: Vec<Arc<CommandTool>>,
    /// `[[upstreams]]`, kept raw until [`Config::parse_in`] types each entry.
    #[serde(default, rename = "upstreams")]
    raw_upstreams: Vec<toml::Table>,
    /// Upstream MCP servers, in declaration order (`crate::upstreams`).
    #[serde(skip)]
    pub upstreams: Vec<Arc<crate::upstreams::Upstream>>,
    /// The directory relative paths in `[[tools]]` resolve against.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Where the task database and the request-state key live.
    pub data_dir: PathBuf,
    /// Path of the MCP endpoint.
    pub endpoint: String,
    /// Extra `Host` names accepted besides loopback ones (needed for non-loopback binds).
    pub allowed_hosts: Vec<String>,
    /// Extra `Origin`s accepted besides loopback ones (e.g. `https://app.example.com`).
    pub allowed_origins: Vec<String>,
    /// Where clients reach this server (`https://mcp.example.com`), when a proxy stands
    /// in front of it: the OAuth resource URL is this plus `endpoint`.
    pub public_url: Option<String>,
    /// The address the listener bound (`listen` with port 0 resolved), set at start: a
    /// loopback listener's OAuth resource URL names it. Not a key of the file.
    #[serde(skip)]
    pub bound: Option<SocketAddr>,
    /// Obsolete: requests are answered on their connections' own threads, bounded by
    /// `max_connections`. Still accepted, so that older files load, and ignored with a
    /// warning at start-up.
    pub handler_threads: Option<usize>,
    /// Permit a non-loopback bind without any `[[auth.tokens]]`.
    pub allow_unauthenticated_remote: bool,
    /// Name reported in `server/discover`.
    pub name: String,
    /// Optional instructions for models, reported in `server/discover`.
    pub instructions: Option<String>,
    /// Connections open at once (503 beyond); 0 derives it from the descriptor limit,
    /// see `transport::limits::default_max_connections` (named, not linked: the
    /// transport reads the configuration, never the other way round).
    pub max_connections: usize,
    /// How long an idle keep-alive connection waits for its next request.
    pub idle_timeout_ms: u64,
    /// How long a request may take to arrive whole, head and body, from its first byte.
    pub request_timeout_ms: u64,
    /// Size-independent part of an answer's write deadline.
    pub write_timeout_ms: u64,
    /// Slowest reader served: an answer of n bytes must be read within
    /// `write_timeout_ms + n / min_write_bytes_per_sec` seconds.
    pub min_write_bytes_per_sec: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("mcp-taskd-data"),
            endpoint: "/mcp".into(),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            public_url: None,
            bound: None,
            handler_threads: None,
            allow_unauthenticated_remote: false,
            name: "mcp-taskd".into(),
            instructions: None,
            max_connections: 0,
            idle_timeout_ms: 30_000,
            request_timeout_ms: 10_000,
            write_timeout_ms: 10_000,
            min_write_bytes_per_sec: 256 * 1024,
        }
    }
}

/// Bounds on what a client may send and on what list results carry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Deepest JSON nesting accepted (400 beyond).
    pub max_json_depth: usize,
    /// Items per page in `tools/list`, `prompts/list`, `resources/list`.
    pub page_size: usize,
    /// `ttlMs` on cacheable results (discover, lists, reads).
    pub cache_ttl_ms: u64,
    /// Lifetime of an MRTR `requestState`.
    pub request_state_ttl_ms: u64,
    /// Bytes of request bodies held in memory at once, server-wide (503 beyond; the
    /// first 64 KiB of each body are not counted).
    pub max_buffered_request_bytes: usize,
    /// Bytes of answers waiting for slow readers, server-wide (beyond, the connection
    /// is closed instead; the first 64 KiB of each answer are not counted).
    pub max_unsent_answer_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 4 * 1024 * 1024,
            max_json_depth: 64,
            page_size: 100,
            cache_ttl_ms: 60_000,
            request_state_ttl_ms: 15 * 60 * 1000,
            max_buffered_request_bytes: 64 * 1024 * 1024,
            max_unsent_answer_bytes: 64 * 1024 * 1024,
        }
    }
}

/// The task store: which backend, and its knobs (the SQLite ones apply to SQLite only).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `sqlite` (default: `tasks.db` in the data dir) or `postgres` (several nodes may
    /// share one database; see `src/tasks/postgres/`).
    pub backend: Backend,
    /// PostgreSQL: `postgresql://USER@HOST:PORT/DBNAME` (or `key=value` form). A password
    /// in it is refused ([`StoreConfig::check_postgres`]): use `password_file` or the
    /// `MCP_TASKD_PG_PASSWORD` environment variable.
    pub url: Option<String>,
    /// PostgreSQL: a file holding the password (trailing newline ignored); relative to
    /// the configuration file's directory.
    pub password_file: Option<PathBuf>,
    /// PostgreSQL: connections in the bounded pool.
    pub pool_size: u32,
    /// `full` (default: every acknowledged write survives power loss) or `normal`.
    pub synchronous: Synchronous,
    /// How long a connection waits on a lock before giving up.
    pub busy_timeout_ms: u64,
    /// Read connections in the pool.
    pub read_connections: u32,
    /// Page cache of each store connection (the writer, the checkpointer and every
    /// reader), in bytes; SQLite's default, 2,048,000.
    pub cache_bytes: u64,
    /// Longest the start-up integrity check (`PRAGMA quick_check`, every page) may run;
    /// past it the rest of the database goes unchecked. `0` skips the check. The
    /// default keeps start-up under a second at any size (a full check of 1M tasks
    /// took 3.4 s); stores up to ~150k tasks are still checked whole.
    pub integrity_check_ms: u64,
    /// Free bytes on the data dir's file system below which new tasks are refused (503),
    /// and below half of which every write: room for running tasks' outcomes and for
    /// the checkpoint that lets the WAL be reused. `0`: no floor.
    pub min_free_bytes: u64,
    /// `exclusive` (default: only this process can open `tasks.db`) or `shared` (the
    /// ordinary locking, so that Litestream, `sqlite3` and other readers can open it).
    pub locking: Locking,
    /// `internal` (default: the server checkpoints the WAL) or `external` (it never does:
    /// Litestream or another tool checkpoints).
    pub checkpoints: Checkpoints,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: Backend::Sqlite,
            url: None,
            password_file: None,
            pool_size: 16,
            synchronous: Synchronous::Full,
            busy_timeout_ms: 5000,
            read_connections: 8,
            cache_bytes: DEFAULT_CACHE_BYTES,
            integrity_check_ms: 500,
            min_free_bytes: 1 << 20,
            locking: Locking::Exclusive,
            checkpoints: Checkpoints::Internal,
        }
    }
}

/// `store.cache_bytes` by default: SQLite's own default page cache (2,000 KiB).
pub const DEFAULT_CACHE_BYTES: u64 = 2000 * 1024;
/// The smallest `store.cache_bytes` accepted: 16 pages of 4 KiB.
pub const MIN_CACHE_BYTES: u64 = 64 * 1024;

/// Where tasks are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// One SQLite file in the data dir: one node.
    Sqlite,
    /// A PostgreSQL database, which several nodes may share.
    Postgres,
}

impl StoreConfig {
    /// The PostgreSQL settings, checked: a URL that parses and names no password, and a
    /// pool of at least one connection. Returns the parsed URL.
    pub fn check_postgres(&self) -> Result<postgres::Config, ConfigError> {
        let url = self.url.as_deref().ok_or(ConfigError::PostgresUrlMissing)?;
        let parsed: postgres::Config = url.parse().map_err(|e: postgres::Error| {
            // The parser's message never repeats the URL (which may hold a password).
            ConfigError::PostgresUrl {
                detail: e.to_string(),
            }
        })?;
        if parsed.get_password().is_some() {
            return Err(ConfigError::PostgresPasswordInUrl);
        }
        if self.pool_size == 0 {
            return Err(ConfigError::PoolSize);
        }
        Ok(parsed)
    }
}

/// How the server locks `tasks.db` (see "One server per data dir" in the store).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Locking {
    /// SQLite's `unix-excl` VFS: one exclusive lock for the process lifetime.
    Exclusive,
    /// SQLite's default VFS: shared and exclusive locks per transaction, as every
    /// other SQLite program expects.
    Shared,
}

/// Who checkpoints the write-ahead log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Checkpoints {
    /// The server's checkpointer and janitor.
    Internal,
    /// Another process (Litestream): the server never checkpoints.
    External,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    Full,
    Normal,
}

impl Synchronous {
    /// The value `PRAGMA synchronous` reads back as.
    pub fn pragma_value(self) -> i64 {
        match self {
            Synchronous::Full => 2,
            Synchronous::Normal => 1,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// Worker threads running task attempts.
    pub threads: usize,
    /// Lease length; a running attempt renews it at a third of this.
    pub lease_ms: u64,
    /// How long a graceful shutdown waits for running attempts.
    pub shutdown_grace_ms: u64,
    /// Period of the janitor (lease reclaim, TTL expiry, outbox pruning).
    pub janitor_interval_ms: u64,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            threads: 8,
            lease_ms: 30_000,
            shutdown_grace_ms: 10_000,
            janitor_interval_ms: 1000,
        }
    }
}

/// Defaults for task tools that do not set their own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskDefaults {
    /// How long a task is kept after creation; it is deleted once this passes.
    pub ttl_ms: u64,
    /// `pollIntervalMs` suggested to clients.
    pub poll_interval_ms: u64,
    /// Bytes of large task payloads (over 1 MiB each) read into `tasks/get` answers at
    /// once, server-wide; beyond it `tasks/get` answers 503 to retry.
    pub max_payload_bytes_in_flight: usize,
    /// Whether clients that do not declare the Tasks extension still get durable task
    /// tools, through ordinary `CallToolResult`s and the `task_*` tools (see
    /// `handlers::bridge`). Off: the extension's strict refusal (-32021).
    pub bridge: bool,
    /// How long such a client's `tools/call` waits for its task before it gets a handle
    /// instead of the result (tools may set their own).
    pub inline_wait_ms: u64,
    /// Tasks not yet terminal one identity may have (a token's `max_live_tasks`
    /// overrides it); a creation beyond it gets 429. Counted in the store.
    pub max_live_tasks_per_identity: u64,
    /// Task creations per second one identity may make, on average (a token's
    /// `creations_per_sec` overrides it); 0: no limit.
    pub creations_per_sec_per_identity: f64,
    /// Creations an identity may make at once before `creations_per_sec` paces it.
    pub creation_burst_per_identity: u32,
    /// Bridged calls one identity may have waiting for their task at once (a token's
    /// `max_inline_waits` overrides it); beyond, a call gets its task handle at once.
    pub max_inline_waits_per_identity: usize,
}

impl Default for TaskDefaults {
    fn default() -> Self {
        TaskDefaults {
            ttl_ms: 3_600_000,
            poll_interval_ms: 1000,
            max_payload_bytes_in_flight: 32 * 1024 * 1024,
            bridge: true,
            // A third of the TypeScript SDK's 60 s default request timeout.
            inline_wait_ms: 20_000,
            max_live_tasks_per_identity: 100_000,
            creations_per_sec_per_identity: 0.0,
            creation_burst_per_identity: 100,
            max_inline_waits_per_identity: 32,
        }
    }
}

/// Bounds on `subscriptions/listen` streams.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotificationLimits {
    /// Streams open at once, server-wide.
    pub max_subscriptions: usize,
    /// Streams open at once per identity (endpoint, tenant, principal).
    pub max_subscriptions_per_identity: usize,
    /// Task ids one stream may name.
    pub max_task_ids: usize,
    /// Frames a stream may have written that the kernel could not send yet (the client
    /// is not reading); beyond that the stream pauses (its changes keep coalescing).
    pub queue_len: usize,
    /// How long a paused stream waits for its client to read anything before it is
    /// ended with an error.
    pub max_stall_ms: u64,
    /// Quiet time before a keep-alive comment.
    pub keep_alive_ms: u64,
    /// Longest life of a stream; it then ends gracefully and the client reconnects.
    pub max_stream_lifetime_ms: u64,
}

impl Default for NotificationLimits {
    fn default() -> Self {
        NotificationLimits {
            max_subscriptions: 8192,
            max_subscriptions_per_identity: 32,
            max_task_ids: 256,
            queue_len: 128,
            max_stall_ms: 10_000,
            keep_alive_ms: 15_000,
            max_stream_lifetime_ms: 24 * 3600 * 1000,
        }
    }
}

/// Bounds on legacy (initialize-based, 2025-03-26 to 2025-11-25) sessions, which live
/// in memory only: a restart ends them all, but no task.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionLimits {
    /// Sessions open at once, server-wide. When the table is full, the least recently
    /// used idle session ends to make room; `initialize` gets 503 only when none is idle.
    pub max_sessions: usize,
    /// Sessions one identity may have open (a token's `max_sessions` overrides it): an
    /// `initialize` beyond it ends that identity's least recently used session.
    pub max_sessions_per_identity: usize,
    /// A session unused this long is ended (its next request gets 404).
    pub idle_timeout_ms: u64,
    /// How long a call waits for the client's answer to a server-to-client request.
    pub client_request_timeout_ms: u64,
    /// Events of the standalone GET stream kept for `Last-Event-ID` replay.
    pub replay_events: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max_sessions: 4096,
            max_sessions_per_identity: 64,
            idle_timeout_ms: 30 * 60 * 1000,
            client_request_timeout_ms: 5 * 60 * 1000,
            replay_events: 64,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    pub tokens: Vec<TokenConfig>,
    /// Access tokens from an authorization server, beside (or instead of) `tokens`.
    pub oauth: Option<OAuthConfig>,
    /// The secret in `oauth.client_secret_file`, read by [`Config::parse_in`].
    #[serde(skip)]
    pub client_secret: Option<ClientSecret>,
}

/// A client secret: kept out of `Debug` output, so that no log line can carry it.
#[derive(Clone)]
pub struct ClientSecret(pub String);

impl std::fmt::Debug for ClientSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientSecret(…)")
    }
}

/// Only the `[[upstreams]]` of a configuration, typed: used to locate a bad entry's
/// error.
#[derive(Deserialize)]
struct TypedUpstreams {
    #[serde(default)]
    #[allow(dead_code)]
    upstreams: Vec<crate::upstreams::UpstreamConfig>,
}

impl Config {
    /// The canonical URL of the MCP endpoint (RFC 8707 resource, RFC 9728 `resource`):
    /// `server.public_url` + `server.endpoint`, else the listener's address on loopback
    /// (`http://127.0.0.1:PORT/mcp`, the bound port once known). `None` on a
    /// non-loopback listener without a public URL (`check` refuses that with
    /// `[auth.oauth]`).
    pub fn resource_url(&self) -> Option<String> {
        let bound = self.server.bound.unwrap_or(self.server.listen);
        match &self.server.public_url {
            Some(public) => Some(format!(
                "{}{}",
                public.trim_end_matches('/'),
                self.server.endpoint
            )),
            None if bound.ip().is_loopback() => {
                Some(format!("http://{bound}{}", self.server.endpoint))
            }
            None => None,
        }
    }
}

/// A bearer token, known only by its SHA-256 digest, and the identity it grants.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub principal: String,
    #[serde(default)]
    pub tenant: String,
    /// Lowercase hex SHA-256 of the token.
    pub sha256: String,
    /// What the token may do besides MCP: `"admin"` opens the dashboard.
    #[serde(default)]
    pub roles: Vec<String>,
    /// The identity's share of the workers against other identities with queued jobs:
    /// it takes `weight` turns to their one (1 to 1000; see `tasks::model::TURN`).
    #[serde(default = "one")]
    pub weight: u32,
    /// Added to each job's tool priority (-100 to 100): interactive hosts above batch
    /// scripts. Higher runs first.
    #[serde(default)]
    pub priority: i32,
    /// The identity's own `sessions.max_sessions_per_identity` (at least 1).
    pub max_sessions: Option<usize>,
    /// The identity's own `tasks.max_live_tasks_per_identity` (at least 1).
    pub max_live_tasks: Option<u64>,
    /// The identity's own `tasks.creations_per_sec_per_identity` (0: no limit).
    pub creations_per_sec: Option<f64>,
    /// The identity's own `tasks.creation_burst_per_identity` (at least 1).
    pub creation_burst: Option<u32>,
    /// The identity's own `tasks.max_inline_waits_per_identity` (at least 1).
    pub max_inline_waits: Option<usize>,
    /// The identity's own `dashboard.max_logins_per_identity` (at least 1).
    pub max_dashboard_logins: Option<usize>,
}

fn one() -> u32 {
    1
}

/// Priorities a tool or a token may have (`priority`): a job's is the sum of both.
pub const PRIORITIES: std::ops::RangeInclusive<i32> = -100..=100;

/// Roles a token can carry (`[[auth.tokens]] roles`).
pub const ROLES: &[&str] = &["admin"];

/// `[dashboard]`: the operator web page on the MCP listener (`src/dashboard/`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DashboardConfig {
    /// Unset: served on a loopback listener, not on any other (an explicit `true` is
    /// needed there).
    pub enabled: Option<bool>,
    /// Where the page lives; its API and assets are under it.
    pub path: String,
    /// Browser logins one identity may have at once (a token's `max_dashboard_logins`
    /// overrides it); a login beyond ends the identity's oldest.
    pub max_logins_per_identity: usize,
}

impl Default for DashboardConfig {
    fn default() -> Self {
        DashboardConfig {
            enabled: None,
            path: "/dashboard".into(),
            max_logins_per_identity: 8,
        }
    }
}

/// `[telemetry]`: OpenTelemetry traces over OTLP/HTTP (`src/telemetry/`, docs/tracing.md).
/// Read at start-up only (a reload does not change it).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (e.g. `http://127.0.0.1:4318`); spans go to
    /// `<otlp_endpoint>/v1/traces`. Unset: `OTEL_EXPORTER_OTLP_ENDPOINT` (or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) if set, else telemetry is off.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the spans (default `OTEL_SERVICE_NAME`, else `mcp-taskd`).
    pub service_name: Option<String>,
    /// Longest a finished span waits before its batch is sent.
    pub batch_delay_ms: u64,
    /// Most spans a second handed to the exporter (bursts of up to a second's worth);
    /// the rest are dropped at once and counted. Bounds what encoding and sending spans
    /// may take of the CPU at saturation. `0`: no bound.
    pub max_spans_per_second: u64,
    /// How often the metrics go to `<otlp_endpoint>/v1/metrics` (unset:
    /// `OTEL_METRIC_EXPORT_INTERVAL`, else 60 000).
    pub metrics_interval_ms: Option<u64>,
    /// A link from the dashboard's task page to a trace viewer: `{trace_id}` is replaced
    /// with the task's trace id (e.g. `http://jaeger:16686/trace/{trace_id}`).
    pub trace_url: Option<String>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            service_name: None,
            batch_delay_ms: 1000,
            max_spans_per_second: 5000,
            metrics_interval_ms: None,
            trace_url: None,
        }
    }
}

/// `[log]`: how the server's log lines look on stderr.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub format: LogFormat,
}

/// `text` (default: one line of text, as env_logger writes it) or `json` (one JSON
/// object a line, for journald and Loki).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl Config {
    /// Whether the dashboard is served on this configuration's listener.
    pub fn dashboard_enabled(&self) -> bool {
        self.dashboard
            .enabled
            .unwrap_or_else(|| self.server.listen.ip().is_loopback())
    }
}

/// Which built-in tool sets to serve.
#[derive(Debug, Clone, Default)]
pub struct BuiltinConfig {
    pub sets: Vec<BuiltinSet>,
}

/// A built-in tool set; [`BuiltinSet::name`] is the one list of the names a
/// configuration may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinSet {
    /// Example tools, what `mcp-taskd serve` shows with no config.
    Demo,
    /// The official conformance suite's fixtures.
    Conformance,
    /// Fault-injection tools for the test suite.
    Testing,
}

impl BuiltinSet {
    pub const ALL: [BuiltinSet; 3] = [
        BuiltinSet::Demo,
        BuiltinSet::Conformance,
        BuiltinSet::Testing,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BuiltinSet::Demo => "demo",
            BuiltinSet::Conformance => "conformance",
            BuiltinSet::Testing => "testing",
        }
    }

    fn named(name: &str) -> Option<BuiltinSet> {
        BuiltinSet::ALL.into_iter().find(|set| set.name() == name)
    }
}

/// `[builtin]` as written: set names, checked by [`Config::parse_in`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawBuiltinConfig {
    sets: Vec<String>,
}

impl Default for RawBuiltinConfig {
    fn default() -> Self {
        RawBuiltinConfig {
            sets: vec![BuiltinSet::Demo.name().into()],
        }
    }
}

/// Only the `[[tools]]` of a configuration, typed: used to locate a bad entry's error.
#[derive(Deserialize)]
struct TypedTools {
    #[serde(default)]
    #[allow(dead_code)]
    tools: Vec<CommandToolConfig>,
}

impl Config {
    /// Parses a configuration whose relative tool paths resolve against the working
    /// directory.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse_in(text, Path::new("."))
    }

    /// Parses and checks a configuration, building its command tools; relative tool
    /// paths resolve against `base_dir`.
    pub fn parse_in(text: &str, base_dir: &Path) -> Result<Config, ConfigError> {
        let mut config: Config =
            toml::from_str(text).map_err(|error| ConfigError::Toml(Box::new(error)))?;
        config.base_dir = std::path::absolute(base_dir).map_err(|source| ConfigError::BaseDir {
            dir: base_dir.to_path_buf(),
            source,
        })?;
        if let Some(file) = &config.store.password_file {
            config.store.password_file = Some(config.base_dir.join(file));
        }
        if let Some(file) = config
            .auth
            .oauth
            .as_mut()
            .and_then(|oauth| oauth.client_secret_file.as_mut())
        {
            *file = config.base_dir.join(&*file);
            let secret =
                std::fs::read_to_string(&*file).map_err(|source| ConfigError::ClientSecret {
                    path: file.clone(),
                    source,
                })?;
            config.auth.client_secret = Some(ClientSecret(secret.trim_end().to_owned()));
        }
        let mut declared = Vec::new();
        for (index, table) in std::mem::take(&mut config.raw_tools)
            .into_iter()
            .enumerate()
        {
            let label = tool_label(index, table.get("name").and_then(toml::Value::as_str));
            let tool = CommandToolConfig::deserialize(toml::Value::Table(table)).map_err(|e| {
                // Parse the text again, typed, for an error that shows the offending line.
                let located = toml::from_str::<TypedTools>(text).err();
                let detail = located.map_or_else(|| e.message().to_owned(), |e| e.to_string());
                ConfigError::ToolEntry {
                    label,
                    detail: detail.trim_end().to_owned(),
                }
            })?;
            declared.push(tool);
        }
        config.check()?;
        for name in &config.raw_builtin.sets {
            let set = BuiltinSet::named(name)
                .ok_or_else(|| ConfigError::UnknownBuiltinSet { name: name.clone() })?;
            config.builtin.sets.push(set);
        }
        for (index, declaration) in declared.iter().enumerate() {
            let tool = CommandTool::build(declaration, &config.base_dir).map_err(|source| {
                ConfigError::ToolDeclaration {
                    label: tool_label(index, Some(&declaration.name)),
                    source,
                }
            })?;
            config.tools.push(Arc::new(tool));
        }
        let mut upstream_names = std::collections::BTreeSet::new();
        for (index, table) in std::mem::take(&mut config.raw_upstreams)
            .into_iter()
            .enumerate()
        {
            let name = table.get("name").and_then(toml::Value::as_str);
            let label = match name {
                Some(name) => format!("upstreams[{index}] (\"{name}\")"),
                None => format!("upstreams[{index}]"),
            };
            let declaration = crate::upstreams::UpstreamConfig::deserialize(toml::Value::Table(
                table,
            ))
            .map_err(|error| {
                // Parse the text again, typed, for an error that shows the offending line.
                let located = toml::from_str::<TypedUpstreams>(text).err();
                let detail = located.map_or_else(|| error.message().to_owned(), |e| e.to_string());
                ConfigError::UpstreamEntry {
                    label: label.clone(),
                    detail: detail.trim_end().to_owned(),
                }
            })?;
            let upstream = crate::upstreams::Upstream::build(&declaration, &config.base_dir)
                .map_err(|source| ConfigError::UpstreamDeclaration {
                    label: label.clone(),
                    source,
                })?;
            if !upstream_names.insert(upstream.name.clone()) {
                return Err(ConfigError::UpstreamDeclaration {
                    label,
                    source: crate::upstreams::UpstreamError::Duplicate,
                });
            }
            config.upstreams.push(Arc::new(upstream));
        }
        Ok(config)
    }

    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        match path {
            None => Config::parse(EMBEDDED_DEFAULT)
                .map_err(|error| ConfigError::EmbeddedDefault(Box::new(error))),
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| ConfigError::Unreadable {
                        path: path.to_path_buf(),
                        source,
                    })?;
                let base_dir = match path.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => parent,
                    _ => Path::new("."),
                };
                Config::parse_in(&text, base_dir).map_err(|error| ConfigError::InFile {
                    path: path.to_path_buf(),
                    source: Box::new(error),
                })
            }
        }
    }

    /// Cross-field checks that serde cannot express. Run again after command-line
    /// overrides; tools are not rebuilt.
    pub fn check(&self) -> Result<(), ConfigError> {
        let s = &self.server;
        if !s.endpoint.starts_with('/') || s.endpoint == "/healthz" {
            return Err(ConfigError::Endpoint);
        }
        if s.handler_threads == Some(0) || self.workers.threads == 0 {
            return Err(ConfigError::NoThreads);
        }
        if self.limits.max_body_bytes < 1024 || self.limits.max_json_depth < 8 {
            return Err(ConfigError::TinyLimits);
        }
        if self.limits.page_size == 0 {
            return Err(ConfigError::PageSize);
        }
        if s.idle_timeout_ms == 0
            || s.request_timeout_ms == 0
            || s.write_timeout_ms == 0
            || s.min_write_bytes_per_sec == 0
        {
            return Err(ConfigError::ConnectionTimes);
        }
        if self.limits.max_buffered_request_bytes < self.limits.max_body_bytes {
            return Err(ConfigError::BufferedBelowBody);
        }
        if self.workers.lease_ms < 300 {
            return Err(ConfigError::ShortLease);
        }
        if self.tasks.ttl_ms == 0 || self.tasks.poll_interval_ms == 0 {
            return Err(ConfigError::TaskTimes);
        }
        let t = &self.tasks;
        if t.max_live_tasks_per_identity == 0
            || t.creation_burst_per_identity == 0
            || t.max_inline_waits_per_identity == 0
            || !(t.creations_per_sec_per_identity.is_finite()
                && t.creations_per_sec_per_identity >= 0.0)
        {
            return Err(ConfigError::TaskQuotas);
        }
        if self.tasks.inline_wait_ms > crate::tools::MAX_INLINE_WAIT_MS {
            return Err(ConfigError::InlineWait {
                field: "tasks.inline_wait_ms".into(),
                value: self.tasks.inline_wait_ms,
            });
        }
        let n = &self.notifications;
        if n.max_subscriptions == 0
            || n.max_subscriptions_per_identity == 0
            || n.queue_len == 0
            || n.max_stall_ms == 0
            || n.keep_alive_ms == 0
            || n.max_stream_lifetime_ms == 0
        {
            return Err(ConfigError::NotificationLimits);
        }
        if self.workers.janitor_interval_ms == 0 {
            return Err(ConfigError::JanitorInterval);
        }
        if self.store.cache_bytes < MIN_CACHE_BYTES {
            return Err(ConfigError::CacheBytes {
                value: self.store.cache_bytes,
            });
        }
        if self.store.backend == Backend::Postgres {
            self.store.check_postgres()?;
        }
        let bounds = &self.sessions;
        if bounds.max_sessions == 0
            || bounds.max_sessions_per_identity == 0
            || bounds.idle_timeout_ms == 0
            || bounds.client_request_timeout_ms == 0
        {
            return Err(ConfigError::SessionLimits);
        }
        if self.dashboard.max_logins_per_identity == 0 {
            return Err(ConfigError::DashboardLogins);
        }
        for (index, token) in self.auth.tokens.iter().enumerate() {
            let digest_ok =
                token.sha256.len() == 64 && token.sha256.bytes().all(|b| b.is_ascii_hexdigit());
            if !digest_ok {
                return Err(ConfigError::TokenDigest { index });
            }
            if token.principal.is_empty() {
                return Err(ConfigError::TokenPrincipal { index });
            }
            if let Some(role) = token.roles.iter().find(|r| !ROLES.contains(&r.as_str())) {
                return Err(ConfigError::UnknownRole {
                    index,
                    role: role.clone(),
                });
            }
            if !(1..=crate::tasks::model::MAX_WEIGHT).contains(&token.weight) {
                return Err(ConfigError::TokenWeight { index });
            }
            if !PRIORITIES.contains(&token.priority) {
                return Err(ConfigError::TokenPriority { index });
            }
            let zero = [
                ("max_sessions", token.max_sessions == Some(0)),
                ("max_live_tasks", token.max_live_tasks == Some(0)),
                ("creation_burst", token.creation_burst == Some(0)),
                ("max_inline_waits", token.max_inline_waits == Some(0)),
                (
                    "max_dashboard_logins",
                    token.max_dashboard_logins == Some(0),
                ),
                (
                    "creations_per_sec",
                    token
                        .creations_per_sec
                        .is_some_and(|rate| !(rate.is_finite() && rate >= 0.0)),
                ),
            ];
            if let Some((key, _)) = zero.iter().find(|(_, bad)| *bad) {
                return Err(ConfigError::TokenQuota { index, key });
            }
        }
        crate::shares::Shares::check(&self.auth.tokens)?;
        let path = &self.dashboard.path;
        let path_ok = path.len() > 1
            && path.starts_with('/')
            && !path.ends_with('/')
            && path
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/-_.".contains(&b));
        let clashes = [s.endpoint.as_str(), "/healthz", "/metrics"]
            .iter()
            .any(|taken| taken.starts_with(path.as_str()) || path.starts_with(taken));
        if !path_ok || clashes {
            return Err(ConfigError::DashboardPath { path: path.clone() });
        }
        if let Some(url) = &s.public_url {
            oauth::check_public_url(url).map_err(|why| ConfigError::OAuthUrl {
                field: "server.public_url".into(),
                why,
            })?;
        }
        if let Some(oauth) = &self.auth.oauth {
            oauth.check()?;
            if s.public_url.is_none() && !s.listen.ip().is_loopback() {
                return Err(ConfigError::OAuthWithoutPublicUrl { listen: s.listen });
            }
        }
        if let Some(endpoint) = &self.telemetry.otlp_endpoint {
            if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                return Err(ConfigError::TelemetryEndpoint {
                    endpoint: endpoint.clone(),
                });
            }
        }
        if let Some(url) = &self.telemetry.trace_url {
            if !url.contains("{trace_id}")
                || !(url.starts_with("http://") || url.starts_with("https://"))
            {
                return Err(ConfigError::TraceUrl { url: url.clone() });
            }
        }
        if !s.listen.ip().is_loopback() {
            let authenticated = !self.auth.tokens.is_empty() || self.auth.oauth.is_some();
            if !authenticated && !s.allow_unauthenticated_remote {
                return Err(ConfigError::UnauthenticatedRemote { listen: s.listen });
            }
            if s.allowed_hosts.is_empty() {
                return Err(ConfigError::RemoteWithoutHosts { listen: s.listen });
            }
        }
        Ok(())
    }
}

/// How errors name the `index`th `[[tools]]` entry.
fn tool_label(index: usize, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("tools[{index}] (\"{name}\")"),
        None => format!("tools[{index}]"),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fuzz;

#[cfg(test)]
pub(crate) mod reference;
