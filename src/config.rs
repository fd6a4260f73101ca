//! Configuration: the TOML file format, its defaults, and the checks run before start-up.
//!
//! `mcp-taskd serve` with no `--config` uses the embedded default
//! (`examples/default.toml`): loopback only, a data dir under the working directory and
//! the built-in demo tools. Unknown keys are errors, so a typo never silently falls back
//! to a default.
//!
//! `[[tools]]` entries declare command tools (see [`crate::tools::command`]); each is
//! checked here — with errors naming the tool and the field — and built into a tool by
//! [`crate::server::build_catalog`]. Relative paths in them resolve against the
//! directory of the configuration file (the working directory for the embedded default).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::tools::TaskPolicy;

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
    pub builtin: BuiltinConfig,
    /// `[[tools]]`, kept raw until [`Config::parse_in`] types each entry, so that errors
    /// can name the tool.
    #[serde(default, rename = "tools")]
    raw_tools: Vec<toml::Table>,
    /// Command tools, in declaration order.
    #[serde(skip)]
    pub tools: Vec<CommandToolConfig>,
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
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 4 * 1024 * 1024,
            max_json_depth: 64,
            page_size: 100,
            cache_ttl_ms: 60_000,
            request_state_ttl_ms: 15 * 60 * 1000,
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
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            synchronous: Synchronous::Full,
            busy_timeout_ms: 5000,
            read_connections: 8,
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
}

impl Default for TaskDefaults {
    fn default() -> Self {
        TaskDefaults {
            ttl_ms: 3_600_000,
            poll_interval_ms: 1000,
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
    /// Frames queued per stream; a subscriber that falls this far behind is cut off.
    pub queue_len: usize,
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
    /// Sessions open at once, server-wide; `initialize` beyond it gets 503.
    pub max_sessions: usize,
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
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BuiltinConfig {
    /// `demo` (example tools), `conformance` (the official suite's fixtures) and
    /// `testing` (fault-injection tools for the test suite).
    pub sets: Vec<String>,
}

impl Default for BuiltinConfig {
    fn default() -> Self {
        BuiltinConfig {
            sets: vec!["demo".into()],
        }
    }
}

/// One `[[tools]]` entry: an executable served as an MCP tool. See
/// [`crate::tools::command`] for how it runs and README.md for every key.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandToolConfig {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    /// A TOML table or a string holding JSON; `{"type": "object"}` when absent.
    pub input_schema: Option<toml::Value>,
    /// A TOML table or a string holding JSON.
    pub output_schema: Option<toml::Value>,
    /// `ToolAnnotations`, as a TOML table or a string holding JSON.
    pub annotations: Option<toml::Value>,
    /// `inline`, `optional` (the default) or `required`.
    #[serde(default = "default_task_policy")]
    pub task_policy: TaskPolicy,
    /// The program and its arguments; no shell is involved.
    pub command: Vec<String>,
    /// The program's working directory; the configuration file's directory by default.
    pub working_dir: Option<PathBuf>,
    /// The program's whole environment besides `PATH` (which has a safe default) and
    /// the `MCP_TASK_*` variables. Nothing is inherited from the server.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Hard limit for one run of the program.
    pub timeout_ms: Option<u64>,
    pub max_attempts: Option<u32>,
    pub backoff_ms: Option<u64>,
    /// Most runs of this tool at once (task attempts and inline calls together).
    pub max_concurrency: Option<usize>,
    pub ttl_ms: Option<u64>,
    pub poll_interval_ms: Option<u64>,
    /// The argument whose value makes task submission idempotent.
    pub idempotency_argument: Option<String>,
    /// Most bytes the program may write to stdout in one run.
    pub max_output_bytes: Option<usize>,
}

/// Only the `[[tools]]` of a configuration, typed: used to locate a bad entry's error.
#[derive(Deserialize)]
struct TypedTools {
    #[serde(default)]
    #[allow(dead_code)]
    tools: Vec<CommandToolConfig>,
}

fn default_task_policy() -> TaskPolicy {
    TaskPolicy::Optional
}

impl Config {
    /// Parses a configuration whose relative tool paths resolve against the working
    /// directory.
    pub fn parse(text: &str) -> Result<Config, String> {
        Config::parse_in(text, Path::new("."))
    }

    /// Parses a configuration whose relative tool paths resolve against `base_dir`.
    pub fn parse_in(text: &str, base_dir: &Path) -> Result<Config, String> {
        let mut config: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        config.base_dir =
            std::path::absolute(base_dir).map_err(|e| format!("{}: {e}", base_dir.display()))?;
        for (index, table) in std::mem::take(&mut config.raw_tools)
            .into_iter()
            .enumerate()
        {
            let label = tool_label(index, table.get("name").and_then(toml::Value::as_str));
            let tool = CommandToolConfig::deserialize(toml::Value::Table(table)).map_err(|e| {
                // Parse the text again, typed, for an error that shows the offending line.
                let located = toml::from_str::<TypedTools>(text).err();
                let detail = located.map_or_else(|| e.message().to_owned(), |e| e.to_string());
                format!("{label}: {}", detail.trim_end())
            })?;
            config.tools.push(tool);
        }
        config.check()?;
        Ok(config)
    }

    pub fn load(path: Option<&Path>) -> Result<Config, String> {
        match path {
            None => Config::parse(EMBEDDED_DEFAULT).map_err(|e| format!("embedded default: {e}")),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                let base_dir = match path.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => parent,
                    _ => Path::new("."),
                };
                Config::parse_in(&text, base_dir).map_err(|e| format!("{}: {e}", path.display()))
            }
        }
    }

    /// Cross-field checks that serde cannot express.
    pub fn check(&self) -> Result<(), String> {
        let s = &self.server;
        if !s.endpoint.starts_with('/') || s.endpoint == "/healthz" {
            return Err("server.endpoint must start with '/' and not be /healthz".into());
        }
        if s.handler_threads == 0 || self.workers.threads == 0 {
            return Err("server.handler_threads and workers.threads must be at least 1".into());
        }
        if self.limits.max_body_bytes < 1024 || self.limits.max_json_depth < 8 {
            return Err(
                "limits.max_body_bytes must be >= 1024 and limits.max_json_depth >= 8".into(),
            );
        }
        if self.limits.page_size == 0 {
            return Err("limits.page_size must be at least 1".into());
        }
        if self.workers.lease_ms < 300 {
            return Err("workers.lease_ms must be at least 300".into());
        }
        if self.tasks.ttl_ms == 0 || self.tasks.poll_interval_ms == 0 {
            return Err("tasks.ttl_ms and tasks.poll_interval_ms must be positive".into());
        }
        let n = &self.notifications;
        if n.max_subscriptions == 0
            || n.max_subscriptions_per_identity == 0
            || n.queue_len == 0
            || n.keep_alive_ms == 0
            || n.max_stream_lifetime_ms == 0
        {
            return Err("[notifications] limits must be positive".into());
        }
        if self.workers.janitor_interval_ms == 0 {
            return Err("workers.janitor_interval_ms must be positive".into());
        }
        let bounds = &self.sessions;
        if bounds.max_sessions == 0
            || bounds.idle_timeout_ms == 0
            || bounds.client_request_timeout_ms == 0
        {
            return Err("[sessions] limits must be positive".into());
        }
        for (index, token) in self.auth.tokens.iter().enumerate() {
            let digest_ok =
                token.sha256.len() == 64 && token.sha256.bytes().all(|b| b.is_ascii_hexdigit());
            if !digest_ok {
                return Err(format!(
                    "auth.tokens[{index}].sha256 must be 64 hex digits (the SHA-256 of the token)"
                ));
            }
            if token.principal.is_empty() {
                return Err(format!("auth.tokens[{index}].principal must not be empty"));
            }
        }
        for set in &self.builtin.sets {
            if !matches!(set.as_str(), "demo" | "conformance" | "testing") {
                return Err(format!(
                    "builtin.sets: unknown set \"{set}\" (known: demo, conformance, testing)"
                ));
            }
        }
        for (index, tool) in self.tools.iter().enumerate() {
            crate::tools::command::CommandTool::build(tool, &self.base_dir)
                .map_err(|e| format!("{}: {e}", tool_label(index, Some(&tool.name))))?;
        }
        if !s.listen.ip().is_loopback() {
            if self.auth.tokens.is_empty() && !s.allow_unauthenticated_remote {
                return Err(format!(
                    "refusing to listen on non-loopback {} without [[auth.tokens]] \
                     (set server.allow_unauthenticated_remote = true to override)",
                    s.listen
                ));
            }
            if s.allowed_hosts.is_empty() {
                return Err(format!(
                    "listening on non-loopback {} needs server.allowed_hosts \
                     (the Host names clients use), to keep DNS-rebinding protection",
                    s.listen
                ));
            }
        }
        Ok(())
    }
}

/// How errors name the `index`th `[[tools]]` entry.
pub fn tool_label(index: usize, name: Option<&str>) -> String {
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
        let error = Config::parse("[server]\nlisten_addr = \"127.0.0.1:1\"\n").unwrap_err();
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
        let schema = |index: usize| {
            crate::tools::command::CommandTool::build(&config.tools[index], &config.base_dir)
                .unwrap()
                .0
                .input_schema
        };
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
        let error = Config::parse_in(text, Path::new("/")).unwrap_err();
        assert!(
            error.contains("tools[0] (\"t\")") && error.contains("command"),
            "{error}"
        );
    }

    #[test]
    fn remote_bind_needs_auth_and_hosts() {
        let error = Config::parse("[server]\nlisten = \"0.0.0.0:8080\"\n").unwrap_err();
        assert!(error.contains("auth.tokens"), "{error}");
    }
}
