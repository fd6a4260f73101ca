//! Configuration: the TOML file format, its defaults, and the checks run before start-up.
//!
//! `mcp-taskd serve` with no `--config` uses the embedded default
//! (`examples/default.toml`): loopback only, a data dir under the working directory and
//! the built-in demo tools. Unknown keys are errors, so a typo never silently falls back
//! to a default.
//!
//! `[[tools]]` entries declare command tools (see [`crate::tools::command`]); each is
//! checked and built here, once — with errors naming the tool and the field — and
//! registered by `server::build_catalog`. Relative paths in them resolve against
//! the directory of the configuration file (the working directory for the embedded
//! default).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use thiserror::Error;

use crate::tools::command::{CommandTool, CommandToolConfig, DeclarationError};

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
    /// Threads answering requests (long-lived streams get their own thread).
    pub handler_threads: usize,
    /// Permit a non-loopback bind without any `[[auth.tokens]]`.
    pub allow_unauthenticated_remote: bool,
    /// Name reported in `server/discover`.
    pub name: String,
    /// Optional instructions for models, reported in `server/discover`.
    pub instructions: Option<String>,
    /// Connections open at once (503 beyond); 0 derives it from the descriptor limit,
    /// see [`crate::transport::limits::default_max_connections`].
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
            handler_threads: 64,
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

/// SQLite durability knobs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `full` (default: every acknowledged write survives power loss) or `normal`.
    pub synchronous: Synchronous,
    /// How long a connection waits on a lock before giving up.
    pub busy_timeout_ms: u64,
    /// Read connections in the pool.
    pub read_connections: u32,
    /// Longest the start-up integrity check (`PRAGMA quick_check`, every page) may run;
    /// past it the rest of the database goes unchecked. `0` skips the check.
    pub integrity_check_ms: u64,
    /// Free bytes on the data dir's file system below which new tasks are refused (503),
    /// and below half of which every write: room for running tasks' outcomes and for
    /// the checkpoint that lets the WAL be reused. `0`: no floor.
    pub min_free_bytes: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            synchronous: Synchronous::Full,
            busy_timeout_ms: 5000,
            read_connections: 8,
            integrity_check_ms: 10_000,
            min_free_bytes: 1 << 20,
        }
    }
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
}

impl Default for TaskDefaults {
    fn default() -> Self {
        TaskDefaults {
            ttl_ms: 3_600_000,
            poll_interval_ms: 1000,
            max_payload_bytes_in_flight: 32 * 1024 * 1024,
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

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    pub tokens: Vec<TokenConfig>,
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
    #[error("[notifications] limits must be positive")]
    NotificationLimits,
    #[error("workers.janitor_interval_ms must be positive")]
    JanitorInterval,
    #[error("auth.tokens[{index}].sha256 must be 64 hex digits (the SHA-256 of the token)")]
    TokenDigest { index: usize },
    #[error("auth.tokens[{index}].principal must not be empty")]
    TokenPrincipal { index: usize },
    #[error("builtin.sets: unknown set \"{name}\" (known: {})", known_sets())]
    UnknownBuiltinSet { name: String },
    #[error(
        "refusing to listen on non-loopback {listen} without [[auth.tokens]] \
         (set server.allow_unauthenticated_remote = true to override)"
    )]
    UnauthenticatedRemote { listen: SocketAddr },
    #[error(
        "listening on non-loopback {listen} needs server.allowed_hosts \
         (the Host names clients use), to keep DNS-rebinding protection"
    )]
    RemoteWithoutHosts { listen: SocketAddr },
}

fn known_sets() -> String {
    let names: Vec<&str> = BuiltinSet::ALL.iter().map(|set| set.name()).collect();
    names.join(", ")
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
        if s.handler_threads == 0 || self.workers.threads == 0 {
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
        for (index, token) in self.auth.tokens.iter().enumerate() {
            let digest_ok =
                token.sha256.len() == 64 && token.sha256.bytes().all(|b| b.is_ascii_hexdigit());
            if !digest_ok {
                return Err(ConfigError::TokenDigest { index });
            }
            if token.principal.is_empty() {
                return Err(ConfigError::TokenPrincipal { index });
            }
        }
        if !s.listen.ip().is_loopback() {
            if self.auth.tokens.is_empty() && !s.allow_unauthenticated_remote {
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
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_valid_and_loopback() {
        let config = Config::parse(EMBEDDED_DEFAULT).unwrap();
        assert!(config.server.listen.ip().is_loopback());
    }

    #[test]
    fn unknown_keys_are_errors() {
        let error = Config::parse("[server]\nlisten_addr = \"127.0.0.1:1\"\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("listen_addr"), "{error}");
    }

    #[test]
    fn tools_take_table_or_json_schemas_in_declared_order() {
        let config = Config::parse(
            r#"
[[tools]]
name = "a"
description = "d"
command = ["/bin/sh"]
input_schema = { type = "object", properties = { zeta = { type = "string" }, alpha = { type = "integer" } } }

[[tools]]
name = "b"
description = "d"
command = ["/bin/sh"]
input_schema = '{"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}}'
"#,
        )
        .unwrap();
        let schema = |index: usize| config.tools[index].spec().input_schema.clone();
        assert_eq!(schema(0), schema(1));
        let keys: Vec<String> = schema(0)["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(keys, ["zeta", "alpha"]);
    }

    #[test]
    fn relative_commands_resolve_against_the_config_directory() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        let program = dir.path().join("bin/tool.sh");
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let text = "[[tools]]\nname = \"t\"\ndescription = \"d\"\ncommand = [\"bin/tool.sh\"]\n";
        let config = Config::parse_in(text, dir.path()).unwrap();
        assert_eq!(config.base_dir, dir.path());
        let error = Config::parse_in(text, Path::new("/"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("tools[0] (\"t\")") && error.contains("command"),
            "{error}"
        );
    }

    #[test]
    fn remote_bind_needs_auth_and_hosts() {
        let error = Config::parse("[server]\nlisten = \"0.0.0.0:8080\"\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("auth.tokens"), "{error}");
    }

    #[test]
    fn connection_bounds_are_checked() {
        let config = Config::parse(
            "[server]\nmax_connections = 10\nrequest_timeout_ms = 2000\n\
             [limits]\nmax_unsent_answer_bytes = 1048576\n",
        )
        .unwrap();
        assert_eq!(config.server.max_connections, 10);
        assert_eq!(config.server.request_timeout_ms, 2000);
        assert_eq!(config.limits.max_unsent_answer_bytes, 1024 * 1024);
        let error = Config::parse("[server]\nrequest_timeout_ms = 0\n").unwrap_err();
        assert!(matches!(error, ConfigError::ConnectionTimes), "{error}");
        let error = Config::parse("[limits]\nmax_buffered_request_bytes = 1024\n").unwrap_err();
        assert!(matches!(error, ConfigError::BufferedBelowBody), "{error}");
    }
}

/// Generated configurations (see [`crate::fuzzing`]): every section and key with values
/// that are right, of the wrong type or out of range, unknown keys, missing required
/// keys, repeated tables, then sometimes damaged text. A configuration made only of good
/// values must load; one with any bad value must be refused with a message, never a
/// panic; whatever loads passes its own checks.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use proptest::sample::Index;

    use super::*;
    use crate::fuzzing::config as run_config;

    /// One key: TOML literals that must be accepted, and ones that must be refused.
    struct Key {
        name: &'static str,
        good: &'static [&'static str],
        bad: &'static [&'static str],
    }

    const fn key(
        name: &'static str,
        good: &'static [&'static str],
        bad: &'static [&'static str],
    ) -> Key {
        Key { name, good, bad }
    }

    const COUNT_BAD: &[&str] = &["0", "-1", "\"8\"", "1.5", "[]"];
    const MS_GOOD: &[&str] = &["1", "60000", "9223372036854775807"];
    const ANY_MS_GOOD: &[&str] = &["0", "1", "60000"];
    const ANY_MS_BAD: &[&str] = &["-1", "\"5s\"", "true", "{}"];
    const TEXT_GOOD: &[&str] = &["\"x\"", "''", "\"\\u00e9\\n\""];
    const TEXT_BAD: &[&str] = &["1", "true", "[\"x\"]", "1979-05-27"];
    /// `[[tools]]` entries are typed from a `toml::Value`, which hands a date to a string
    /// field as its text: `title = 1979-05-27` is the title "1979-05-27" (harmless).
    const TOOL_TEXT_BAD: &[&str] = &["1", "true", "[\"x\"]"];

    /// `(table, repeated as [[table]], keys, required keys)`.
    type Section = (&'static str, bool, &'static [Key], &'static [&'static str]);

    const SECTIONS: &[Section] = &[
        (
            "server",
            false,
            &[
                key(
                    "listen",
                    &["\"127.0.0.1:8080\"", "\"[::1]:0\""],
                    &[
                        "8080",
                        "\"localhost\"",
                        "\"127.0.0.1\"",
                        "\"127.0.0.1:70000\"",
                    ],
                ),
                key("data_dir", &["\"data\"", "\"/tmp/x\""], &["1", "[]"]),
                key(
                    "endpoint",
                    &["\"/mcp\"", "\"/\""],
                    &["\"mcp\"", "\"/healthz\"", "5"],
                ),
                key(
                    "allowed_hosts",
                    &["[]", "[\"a.example\"]"],
                    &["\"a\"", "[1]"],
                ),
                key(
                    "allowed_origins",
                    &["[]", "[\"https://a.example\"]"],
                    &["{}", "[true]"],
                ),
                key("handler_threads", &["1", "64"], COUNT_BAD),
                key(
                    "allow_unauthenticated_remote",
                    &["true", "false"],
                    &["\"yes\"", "1"],
                ),
                key("name", TEXT_GOOD, TEXT_BAD),
                key("instructions", TEXT_GOOD, TEXT_BAD),
                key(
                    "max_connections",
                    &["0", "1", "100000"],
                    &["-1", "\"8\"", "1.5"],
                ),
                key("idle_timeout_ms", MS_GOOD, &["0", "-1"]),
                key("request_timeout_ms", MS_GOOD, &["0", "\"10s\""]),
                key("write_timeout_ms", MS_GOOD, &["0", "[]"]),
                key("min_write_bytes_per_sec", &["1", "262144"], &["0", "-1"]),
            ],
            &[],
        ),
        (
            "limits",
            false,
            &[
                key(
                    "max_body_bytes",
                    &["1024", "4194304"],
                    &["1023", "-5", "\"big\""],
                ),
                key("max_json_depth", &["8", "64", "100000"], &["7", "0", "-1"]),
                key("page_size", &["1", "100"], COUNT_BAD),
                key("cache_ttl_ms", ANY_MS_GOOD, ANY_MS_BAD),
                key("request_state_ttl_ms", ANY_MS_GOOD, ANY_MS_BAD),
                // At least `max_body_bytes`, whose largest good value is 4 MiB.
                key(
                    "max_buffered_request_bytes",
                    &["4194304", "67108864"],
                    &["1023", "-1", "\"x\""],
                ),
                key("max_unsent_answer_bytes", &["0", "67108864"], ANY_MS_BAD),
            ],
            &[],
        ),
        (
            "store",
            false,
            &[
                key(
                    "synchronous",
                    &["\"full\"", "\"normal\""],
                    &["\"FULL\"", "2", "\"off\""],
                ),
                key("busy_timeout_ms", ANY_MS_GOOD, ANY_MS_BAD),
                key(
                    "read_connections",
                    &["1", "8"],
                    &["-1", "4294967296", "\"8\""],
                ),
                key("integrity_check_ms", ANY_MS_GOOD, ANY_MS_BAD),
                key("min_free_bytes", &["0", "1048576"], ANY_MS_BAD),
            ],
            &[],
        ),
        (
            "workers",
            false,
            &[
                key("threads", &["1", "8"], COUNT_BAD),
                key("lease_ms", &["300", "30000"], &["299", "0", "-1"]),
                key("shutdown_grace_ms", ANY_MS_GOOD, ANY_MS_BAD),
                key("janitor_interval_ms", MS_GOOD, &["0", "-1", "\"1s\""]),
            ],
            &[],
        ),
        (
            "tasks",
            false,
            &[
                key("ttl_ms", MS_GOOD, &["0", "-1"]),
                key("poll_interval_ms", MS_GOOD, &["0", "[1]"]),
                key(
                    "max_payload_bytes_in_flight",
                    &["0", "33554432"],
                    ANY_MS_BAD,
                ),
            ],
            &[],
        ),
        (
            "notifications",
            false,
            &[
                key("max_subscriptions", &["1", "8192"], COUNT_BAD),
                key("max_subscriptions_per_identity", &["1", "32"], COUNT_BAD),
                key("max_task_ids", &["0", "1", "256"], &["-1", "\"x\""]),
                key("queue_len", &["1", "128"], COUNT_BAD),
                key("max_stall_ms", MS_GOOD, &["0", "-1"]),
                key("keep_alive_ms", MS_GOOD, &["0", "-1"]),
                key("max_stream_lifetime_ms", MS_GOOD, &["0", "{}"]),
            ],
            &[],
        ),
        (
            "builtin",
            false,
            &[key(
                "sets",
                &[
                    "[]",
                    "[\"demo\"]",
                    "[\"conformance\", \"demo\", \"testing\"]",
                ],
                &["[\"nope\"]", "\"demo\"", "[1]"],
            )],
            &[],
        ),
        (
            "auth.tokens",
            true,
            &[
                key("principal", &["\"alice\""], &["\"\"", "3"]),
                key("tenant", &["\"\"", "\"t\""], &["1"]),
                key(
                    "sha256",
                    &["\"2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\""],
                    &[
                        "\"abc\"",
                        "\"zz4dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824\"",
                    ],
                ),
            ],
            &["principal", "sha256"],
        ),
        (
            "tools",
            true,
            &[
                key("name", &["\"t\"", "\"a.b-c\""], &["1", "[]"]),
                key("title", TEXT_GOOD, TOOL_TEXT_BAD),
                key("description", TEXT_GOOD, TOOL_TEXT_BAD),
                key(
                    "command",
                    &["[\"/bin/sh\"]", "[\"sh\", \"-c\", \"true\"]"],
                    &[
                        "[]",
                        "[\"\"]",
                        "[\"/nonexistent/x\"]",
                        "\"sh\"",
                        "[\"no-such-program-x\"]",
                    ],
                ),
                key(
                    "input_schema",
                    &[
                        "{ type = \"object\" }",
                        "'{\"type\": \"object\", \"properties\": {}}'",
                    ],
                    &["'{\"type\": \"array\"}'", "'not json'", "5", "{ type = 1 }"],
                ),
                key(
                    "output_schema",
                    &["{ type = \"object\" }"],
                    &["{ type = \"string\" }", "[]"],
                ),
                key(
                    "annotations",
                    &["{ readOnlyHint = true }", "'{}'"],
                    &["3", "'[1]'"],
                ),
                key(
                    "task_policy",
                    &["\"inline\"", "\"optional\"", "\"required\""],
                    &["\"sometimes\"", "1"],
                ),
                key(
                    "working_dir",
                    &["\".\"", "\"/\""],
                    &["\"/nonexistent-dir\"", "1"],
                ),
                key(
                    "env",
                    &["{}", "{ A = \"1\" }"],
                    &["{ \"A=B\" = \"1\" }", "{ A = 1 }", "[]"],
                ),
                key("timeout_ms", MS_GOOD, &["0", "-1"]),
                key("max_attempts", &["1", "4294967295"], &["0", "4294967296"]),
                key("backoff_ms", ANY_MS_GOOD, ANY_MS_BAD),
                key("max_concurrency", &["1"], COUNT_BAD),
                key("ttl_ms", MS_GOOD, &["0"]),
                key("poll_interval_ms", MS_GOOD, &["0"]),
                key("max_output_bytes", &["1", "4194304"], COUNT_BAD),
            ],
            &["name", "description", "command"],
        ),
    ];

    /// One table as generated: which section, and per key `(key, good, which value)`.
    type Choice = (Index, Vec<(Index, bool, Index)>, bool);

    fn choices() -> impl Strategy<Value = (Vec<Choice>, bool, Option<(Index, String)>)> {
        let table = (
            any::<Index>(),
            prop::collection::vec(
                (any::<Index>(), prop::bool::weighted(0.9), any::<Index>()),
                0..6,
            ),
            prop::bool::weighted(0.05),
        );
        let damage =
            prop::option::weighted(0.2, (any::<Index>(), "[\\[\\]{}=\"'#\\n.,a-z0-9 ]{0,4}"));
        (
            prop::collection::vec(table, 0..6),
            prop::bool::weighted(0.05),
            damage,
        )
    }

    /// The configuration text, and whether it must load (`None` once damaged).
    fn render(
        (tables, unknown, damage): &(Vec<Choice>, bool, Option<(Index, String)>),
    ) -> (String, Option<bool>) {
        let mut text = String::new();
        let mut good = !unknown;
        let mut seen_tables = Vec::new();
        if *unknown {
            text.push_str("surprise = 1\n");
        }
        for (section, keys, drop_required) in tables {
            let (name, repeated, all_keys, required) = section.get(SECTIONS);
            if *repeated {
                text.push_str(&format!("[[{name}]]\n"));
            } else {
                // A table may appear once.
                good &= !seen_tables.contains(name);
                seen_tables.push(*name);
                text.push_str(&format!("[{name}]\n"));
            }
            let mut written = Vec::new();
            for (key, value_good, value) in keys {
                let key = key.get(all_keys);
                let values = if *value_good && !key.good.is_empty() {
                    key.good
                } else {
                    key.bad
                };
                good &= *value_good && !written.contains(&key.name);
                written.push(key.name);
                text.push_str(&format!("{} = {}\n", key.name, value.get(values)));
            }
            for name in required.iter().filter(|name| !written.contains(name)) {
                if *drop_required {
                    good = false;
                } else if let Some(key) = all_keys.iter().find(|key| key.name == *name) {
                    text.push_str(&format!("{name} = {}\n", key.good[0]));
                }
            }
        }
        match damage {
            None => (text, Some(good)),
            Some((at, snippet)) => {
                let mut at = at.index(text.len() + 1);
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                text.insert_str(at, snippet);
                (text, None)
            }
        }
    }

    proptest! {
        #![proptest_config(run_config(256))]

        #[test]
        fn configurations_load_exactly_when_every_value_is_good(generated in choices()) {
            let (text, expected) = render(&generated);
            match Config::parse_in(&text, Path::new("/")) {
                Ok(config) => {
                    prop_assert!(expected != Some(false), "accepted:\n{text}");
                    prop_assert!(config.check().is_ok());
                    // Damage may respell a header (`[[tools]] `, `[[ tools]]`): count undamaged.
                    if expected.is_some() {
                        let declared = text.lines().filter(|line| *line == "[[tools]]").count();
                        prop_assert_eq!(config.tools.len(), declared);
                    }
                }
                Err(error) => {
                    prop_assert!(expected != Some(true), "refused ({error}):\n{text}");
                    prop_assert!(!error.to_string().trim().is_empty());
                }
            }
        }

        #[test]
        fn any_text_is_loaded_or_refused_with_a_message(text in any::<String>()) {
            if let Err(error) = Config::parse_in(&text, Path::new("/")) {
                prop_assert!(!error.to_string().trim().is_empty());
            }
        }
    }
}
