//! Configuration: the TOML file format, its defaults, and the checks run before start-up.
//!
//! `mcp-taskd serve` with no `--config` uses the embedded default
//! (`examples/default.toml`): loopback only, a data dir under the working directory and
//! the built-in demo tools. Unknown keys are errors, so a typo never silently falls back
//! to a default.
//!
//! Configuration is data: each crate owns the settings it reads (`[store]`, `[workers]`,
//! `[tasks]`, `[output]` and `[history]` the engine's, `[auth]` authentication's, `[notifications]` the hub's,
//! `[telemetry]` and `[log]` telemetry's, `[[tools]]` a command tool's declaration,
//! `[[upstreams]]` an upstream's), and [`Config`] composes them with the server's own
//! sections, then checks what serde cannot express (`check`). Nothing is built here:
//! `[[tools]]` and `[[upstreams]]` entries are typed (errors naming the entry and the
//! field) and built where the server is assembled (`crate::registration`). Relative
//! paths in them resolve against [`Config::base_dir`], the directory of the
//! configuration file (the working directory for the embedded default).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use taskd_auth::{AuthConfig, ClientSecret};
use taskd_builtin::BuiltinSet;
use taskd_engine::config::{OutputConfig, StoreConfig, TaskDefaults, WorkerConfig};
use taskd_engine::history::HistoryConfig;
use taskd_engine::schedules::ScheduleConfig;
use taskd_notifications::NotificationLimits;
use taskd_telemetry::{LogConfig, TelemetryConfig};
use taskd_tools::command::CommandToolConfig;
use taskd_upstreams::UpstreamConfig;
use taskd_webhooks::WebhookConfig;

mod check;
mod error;
mod oauth;
pub mod schedules;

pub use error::ConfigError;

/// The configuration used when no file is given.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../../examples/default.toml");

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
    pub output: OutputConfig,
    #[serde(default)]
    pub history: HistoryConfig,
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
    /// Command tools' declarations, in order (built by `registration::command_tools`).
    #[serde(skip)]
    pub tools: Vec<CommandToolConfig>,
    /// `[[upstreams]]`, kept raw until [`Config::parse_in`] types each entry.
    #[serde(default, rename = "upstreams")]
    raw_upstreams: Vec<toml::Table>,
    /// Upstream MCP servers' declarations, in order (built by
    /// `registration::upstreams`).
    #[serde(skip)]
    pub upstreams: Vec<UpstreamConfig>,
    /// `[[schedules]]`: tasks started at their times (see `config::schedules`).
    #[serde(default)]
    pub schedules: Vec<ScheduleConfig>,
    /// `[[webhooks]]`: receivers of task events (`taskd_webhooks`), their secrets read.
    #[serde(default)]
    pub webhooks: Vec<WebhookConfig>,
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

/// Only the `[[upstreams]]` of a configuration, typed: used to locate a bad entry's
/// error.
#[derive(Deserialize)]
struct TypedUpstreams {
    #[serde(default)]
    #[allow(dead_code)]
    upstreams: Vec<UpstreamConfig>,
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

/// `[dashboard]`: the operator web page on the MCP listener (`crates/server/src/dashboard/`).
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

    /// Parses and checks a configuration, typing its `[[tools]]` and `[[upstreams]]`
    /// declarations; relative paths in them resolve against `base_dir`.
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
            config.tools.push(tool);
        }
        let base = config.base_dir.clone();
        for (index, webhook) in config.webhooks.iter_mut().enumerate() {
            webhook.load_secret(index, &base)?;
        }
        config.check()?;
        for name in &config.raw_builtin.sets {
            let set = BuiltinSet::named(name)
                .ok_or_else(|| ConfigError::UnknownBuiltinSet { name: name.clone() })?;
            config.builtin.sets.push(set);
        }
        for (index, table) in std::mem::take(&mut config.raw_upstreams)
            .into_iter()
            .enumerate()
        {
            let label = upstream_label(index, table.get("name").and_then(toml::Value::as_str));
            let declaration =
                UpstreamConfig::deserialize(toml::Value::Table(table)).map_err(|error| {
                    // Parse the text again, typed, for an error that shows the offending
                    // line.
                    let located = toml::from_str::<TypedUpstreams>(text).err();
                    let detail =
                        located.map_or_else(|| error.message().to_owned(), |e| e.to_string());
                    ConfigError::UpstreamEntry {
                        label,
                        detail: detail.trim_end().to_owned(),
                    }
                })?;
            config.upstreams.push(declaration);
        }
        Ok(config)
    }

    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        match path {
            None => Config::parse(EMBEDDED_DEFAULT).map_err(|error| in_file(None, error)),
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
                Config::parse_in(&text, base_dir).map_err(|error| in_file(Some(path), error))
            }
        }
    }
}

/// How errors name the `index`th `[[tools]]` entry.
pub(crate) fn tool_label(index: usize, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("tools[{index}] (\"{name}\")"),
        None => format!("tools[{index}]"),
    }
}

/// How errors name the `index`th `[[upstreams]]` entry.
pub(crate) fn upstream_label(index: usize, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("upstreams[{index}] (\"{name}\")"),
        None => format!("upstreams[{index}]"),
    }
}

/// `error`, naming the file it is in (or the embedded default, without one): how a
/// configuration's errors reach the operator.
pub fn in_file(path: Option<&Path>, error: ConfigError) -> ConfigError {
    match path {
        None => ConfigError::EmbeddedDefault(Box::new(error)),
        Some(path) => ConfigError::InFile {
            path: path.to_path_buf(),
            source: Box::new(error),
        },
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fuzz;

#[cfg(test)]
pub(crate) mod reference;
