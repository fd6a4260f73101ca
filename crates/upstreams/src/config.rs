//! An `[[upstreams]]` declaration, and turning it into an [`Upstream`]: every field
//! checked, the program resolved to an absolute path, the filters and per-tool
//! overrides compiled, defaults filled in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use glob::Pattern;
use serde::Deserialize;
use thiserror::Error;

use taskd_tools::command::spawn::Launch;
use taskd_tools::command::{check_env, resolve_program, DeclarationError};
use taskd_tools::flow::{FlowConfig, OnPause};
use taskd_tools::{TaskPolicy, MAX_INLINE_WAIT_MS};

/// Default `startup_timeout_ms`: `npx` fetching a package on a cold cache takes a while.
const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// One `[[upstreams]]` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    pub name: String,
    /// The stdio MCP server and its arguments; no shell is involved.
    #[serde(default)]
    pub command: Vec<String>,
    /// Or: the URL of a Streamable HTTP MCP server of either era.
    pub url: Option<String>,
    /// The revision a `url` upstream is spoken to in: `"2026-07-28"` (stateless) or
    /// `"2025-11-25"` (sessions). Unset: `server/discover` tells, else the older one.
    pub protocol_version: Option<String>,
    /// The file holding the bearer token mcp-taskd presents to the `url` upstream (never
    /// a client's token); relative to the configuration file's directory.
    pub bearer_token_file: Option<PathBuf>,
    /// Its working directory; the configuration file's directory by default.
    pub working_dir: Option<PathBuf>,
    /// Its whole environment besides `PATH` (which has a safe default): nothing is
    /// inherited from the server, as for command tools.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Put before each of its tools' names (`<name>_` by default).
    pub prefix: Option<String>,
    /// Globs over the upstream's own tool names: only those matching one are served
    /// (all by default), less those matching an `exclude` glob.
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    /// `shared` (the default), `per_identity` or `per_call`.
    #[serde(default)]
    pub session: SessionScope,
    /// Most calls in flight to this upstream at once, all its tools together.
    pub max_concurrency: Option<usize>,
    /// How long its start and `initialize` may take.
    pub startup_timeout_ms: Option<u64>,
    /// Per-tool settings by upstream tool name or glob (`"*"` for all): an exact name
    /// wins over globs, globs apply in the order written.
    #[serde(default)]
    pub tools: toml::Table,
}

/// Which callers share one session of the upstream: upstreams keep state per session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionScope {
    /// One session for every caller.
    #[default]
    Shared,
    /// One per principal and tenant: callers never see each other's upstream state.
    PerIdentity,
    /// A fresh session (and process) for each call.
    PerCall,
}

/// `[upstreams.tools."<name or glob>"]`: what the server decides about an upstream tool.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ToolSettings {
    /// `inline`, `optional` (the default) or `required`.
    pub task_policy: Option<TaskPolicy>,
    /// Longest one call may take.
    pub timeout_ms: Option<u64>,
    pub max_concurrency: Option<usize>,
    pub inline_wait_ms: Option<u64>,
    pub ttl_ms: Option<u64>,
    /// Whether a call interrupted by a crash may run again. Without it, only tools the
    /// upstream annotates `idempotentHint` or `readOnlyHint` are called again.
    pub idempotent: Option<bool>,
    /// Queued calls of a higher priority run first (-100 to 100).
    pub priority: Option<i32>,
    /// OAuth scopes an access token needs to call the tool.
    pub scopes: Option<Vec<String>>,
    /// Bytes of a task's captured output kept (its status and log messages);
    /// `output.max_bytes_per_task` by default, `0` keeps none.
    pub output_max_bytes: Option<u64>,
    /// Flow control, as for `[[tools]]` ([`taskd_tools::flow`]).
    pub concurrency_key: Option<String>,
    pub max_concurrency_per_key: Option<u32>,
    pub rate: Option<String>,
    pub rate_burst: Option<u32>,
    pub rate_per_key: Option<bool>,
    pub on_pause: Option<OnPause>,
}

impl ToolSettings {
    /// `self`, with what it leaves unset taken from `fallback`.
    fn or(&self, fallback: &ToolSettings) -> ToolSettings {
        ToolSettings {
            task_policy: self.task_policy.or(fallback.task_policy),
            timeout_ms: self.timeout_ms.or(fallback.timeout_ms),
            max_concurrency: self.max_concurrency.or(fallback.max_concurrency),
            inline_wait_ms: self.inline_wait_ms.or(fallback.inline_wait_ms),
            ttl_ms: self.ttl_ms.or(fallback.ttl_ms),
            idempotent: self.idempotent.or(fallback.idempotent),
            priority: self.priority.or(fallback.priority),
            scopes: self.scopes.clone().or_else(|| fallback.scopes.clone()),
            output_max_bytes: self.output_max_bytes.or(fallback.output_max_bytes),
            concurrency_key: self
                .concurrency_key
                .clone()
                .or_else(|| fallback.concurrency_key.clone()),
            max_concurrency_per_key: self
                .max_concurrency_per_key
                .or(fallback.max_concurrency_per_key),
            rate: self.rate.clone().or_else(|| fallback.rate.clone()),
            rate_burst: self.rate_burst.or(fallback.rate_burst),
            rate_per_key: self.rate_per_key.or(fallback.rate_per_key),
            on_pause: self.on_pause.or(fallback.on_pause),
        }
    }

    /// The flow-control keys of these settings.
    pub fn flow(&self) -> FlowConfig {
        FlowConfig {
            concurrency_key: self.concurrency_key.clone(),
            max_concurrency_per_key: self.max_concurrency_per_key,
            rate: self.rate.clone(),
            rate_burst: self.rate_burst,
            rate_per_key: self.rate_per_key,
            on_pause: self.on_pause,
        }
    }
}

/// What is wrong with a declaration; the message names the field, the caller the
/// upstream.
#[derive(Debug, Error)]
pub enum UpstreamError {
    #[error("name must be 1-64 characters of A-Z a-z 0-9 _ -")]
    BadName,
    #[error("declared twice")]
    Duplicate,
    #[error("prefix: at most 64 characters of A-Z a-z 0-9 _ . -")]
    BadPrefix,
    #[error("{field}: \"{glob}\" is not a glob: {reason}")]
    BadGlob {
        field: &'static str,
        glob: String,
        reason: String,
    },
    #[error("tools.\"{key}\": {detail}")]
    ToolEntry { key: String, detail: String },
    #[error(
        "tools.\"{key}\": inline_wait_ms: at most {MAX_INLINE_WAIT_MS} ms, and only for task tools"
    )]
    InlineWait { key: String },
    #[error("tools.\"{key}\": priority: must be -100 to 100")]
    Priority { key: String },
    #[error("tools.\"{key}\": {field}: must be at least 1")]
    Zero { key: String, field: &'static str },
    #[error("max_concurrency and startup_timeout_ms must be at least 1")]
    ZeroLimit,
    #[error(transparent)]
    Command(#[from] DeclarationError),
    #[error("command: {0}")]
    Launch(String),
    #[error("command and url: an upstream is either a program or a URL, not both")]
    CommandAndUrl,
    #[error("url: \"{url}\" is not an http:// or https:// URL")]
    BadUrl { url: String },
    #[error("env and working_dir are for a command upstream, not a url one")]
    ProgramKeysWithUrl,
    #[error("protocol_version: \"{0}\" is not one mcp-taskd speaks to upstreams (\"2026-07-28\" or \"2025-11-25\"), and only a url upstream has one")]
    ProtocolVersion(String),
    #[error("bearer_token_file: {}: {source}", path.display())]
    TokenFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bearer_token_file: {} holds no token (one line of printable ASCII)", path.display())]
    BadToken { path: PathBuf },
}

/// How an upstream is reached.
pub enum Transport {
    /// A program mcp-taskd starts, speaking on its stdin and stdout.
    Stdio {
        launch: Launch,
        /// The program as resolved, for messages.
        program: PathBuf,
    },
    /// A Streamable HTTP endpoint.
    Http {
        url: String,
        bearer: Option<String>,
        era: Era,
    },
}

/// Which revision a `url` upstream is spoken to in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// Asked with `server/discover`: 2026-07-28 when it answers so, else 2025-11-25.
    Probe,
    /// 2026-07-28: stateless, every request carries its own `_meta`.
    Modern,
    /// 2025-11-25: an `initialize` handshake and a session.
    Legacy,
}

impl std::fmt::Debug for Transport {
    /// Never shows the bearer token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Stdio { launch, .. } => f.debug_tuple("Stdio").field(launch).finish(),
            Transport::Http { url, bearer, .. } => f
                .debug_struct("Http")
                .field("url", url)
                .field("bearer", &bearer.as_ref().map(|_| "<from its file>"))
                .finish(),
        }
    }
}

/// A checked `[[upstreams]]` entry.
#[derive(Debug)]
pub struct Upstream {
    pub name: String,
    pub prefix: String,
    pub transport: Transport,
    include: Vec<Pattern>,
    exclude: Vec<Pattern>,
    pub session: SessionScope,
    pub max_concurrency: Option<usize>,
    pub startup_timeout: Duration,
    /// Exact names first, then globs in the order written.
    tools: Vec<(Pattern, ToolSettings)>,
    exact: BTreeMap<String, ToolSettings>,
}

impl Upstream {
    /// Checks a declaration; relative paths resolve against `base_dir`.
    pub fn build(config: &UpstreamConfig, base_dir: &Path) -> Result<Upstream, UpstreamError> {
        let valid = |text: &str, extra: &[u8]| {
            text.len() <= 64
                && text
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b) || extra.contains(&b))
        };
        if config.name.is_empty() || !valid(&config.name, b"") {
            return Err(UpstreamError::BadName);
        }
        let prefix = config
            .prefix
            .clone()
            .unwrap_or_else(|| format!("{}_", config.name));
        if !valid(&prefix, b".") {
            return Err(UpstreamError::BadPrefix);
        }
        let transport = match (&config.url, config.command.is_empty()) {
            (Some(_), false) => return Err(UpstreamError::CommandAndUrl),
            (Some(url), true) => http_transport(config, url, base_dir)?,
            (None, _) => stdio_transport(config, base_dir)?,
        };
        if config.max_concurrency == Some(0) || config.startup_timeout_ms == Some(0) {
            return Err(UpstreamError::ZeroLimit);
        }
        let globs = |field: &'static str, globs: &[String]| {
            globs
                .iter()
                .map(|glob| {
                    Pattern::new(glob).map_err(|error| UpstreamError::BadGlob {
                        field,
                        glob: glob.clone(),
                        reason: error.msg.to_owned(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let mut include = globs("include", &config.include)?;
        if include.is_empty() {
            include = globs("include", &["*".to_owned()])?;
        }
        let exclude = globs("exclude", &config.exclude)?;
        let mut tools = Vec::new();
        let mut exact = BTreeMap::new();
        for (key, value) in &config.tools {
            let settings = ToolSettings::deserialize(value.clone()).map_err(|error| {
                UpstreamError::ToolEntry {
                    key: key.clone(),
                    detail: error.message().to_owned(),
                }
            })?;
            check_settings(key, &settings)?;
            if Pattern::escape(key) == *key {
                exact.insert(key.clone(), settings);
            } else {
                let pattern = Pattern::new(key).map_err(|error| UpstreamError::BadGlob {
                    field: "tools",
                    glob: key.clone(),
                    reason: error.msg.to_owned(),
                })?;
                tools.push((pattern, settings));
            }
        }
        Ok(Upstream {
            name: config.name.clone(),
            prefix,
            transport,
            include,
            exclude,
            session: config.session,
            max_concurrency: config.max_concurrency,
            startup_timeout: config
                .startup_timeout_ms
                .map_or(DEFAULT_STARTUP_TIMEOUT, Duration::from_millis),
            tools,
            exact,
        })
    }

    /// Whether the upstream's tool `name` is served.
    pub fn serves(&self, name: &str) -> bool {
        self.include.iter().any(|glob| glob.matches(name))
            && !self.exclude.iter().any(|glob| glob.matches(name))
    }

    /// The settings of the upstream's tool `name`: its exact entry, then every matching
    /// glob in order, each filling in what the ones before left unset.
    pub fn settings(&self, name: &str) -> ToolSettings {
        let mut settings = self.exact.get(name).cloned().unwrap_or_default();
        for (glob, more) in &self.tools {
            if glob.matches(name) {
                settings = settings.or(more);
            }
        }
        settings
    }
}

/// A `command` upstream: its program resolved, its environment checked.
fn stdio_transport(config: &UpstreamConfig, base_dir: &Path) -> Result<Transport, UpstreamError> {
    if let Some(version) = &config.protocol_version {
        return Err(UpstreamError::ProtocolVersion(version.clone()));
    }
    let env = check_env(&config.env)?;
    let Some((program, args)) = config.command.split_first() else {
        return Err(DeclarationError::NoProgram.into());
    };
    if program.is_empty() {
        return Err(DeclarationError::EmptyProgram.into());
    }
    let path_var = env
        .get("PATH")
        .map(String::as_str)
        .unwrap_or(taskd_tools::command::DEFAULT_PATH);
    let program = resolve_program(program, base_dir, path_var)?;
    let working_dir = match &config.working_dir {
        None => base_dir.to_path_buf(),
        Some(dir) => base_dir.join(dir),
    };
    if !working_dir.is_dir() {
        return Err(DeclarationError::NotADirectory { dir: working_dir }.into());
    }
    let launch = Launch::new(
        &program,
        args,
        &working_dir,
        &env,
        taskd_tools::command::MARKER,
    )
    .map_err(UpstreamError::Launch)?;
    Ok(Transport::Stdio { launch, program })
}

/// A `url` upstream: an http(s) URL, its token read from its file now.
fn http_transport(
    config: &UpstreamConfig,
    url: &str,
    base_dir: &Path,
) -> Result<Transport, UpstreamError> {
    if !(url.starts_with("http://") || url.starts_with("https://"))
        || url.contains(char::is_whitespace)
    {
        return Err(UpstreamError::BadUrl {
            url: url.to_owned(),
        });
    }
    if !config.env.is_empty() || config.working_dir.is_some() {
        return Err(UpstreamError::ProgramKeysWithUrl);
    }
    let era = match config.protocol_version.as_deref() {
        None => Era::Probe,
        Some("2026-07-28") => Era::Modern,
        Some("2025-11-25") => Era::Legacy,
        Some(other) => return Err(UpstreamError::ProtocolVersion(other.to_owned())),
    };
    let bearer = match &config.bearer_token_file {
        None => None,
        Some(file) => {
            let path = base_dir.join(file);
            let token =
                std::fs::read_to_string(&path).map_err(|source| UpstreamError::TokenFile {
                    path: path.clone(),
                    source,
                })?;
            let token = token.trim().to_owned();
            if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(UpstreamError::BadToken { path });
            }
            Some(token)
        }
    };
    Ok(Transport::Http {
        url: url.to_owned(),
        bearer,
        era,
    })
}

fn check_settings(key: &str, settings: &ToolSettings) -> Result<(), UpstreamError> {
    let zero = |field| UpstreamError::Zero {
        key: key.to_owned(),
        field,
    };
    if settings.timeout_ms == Some(0) {
        return Err(zero("timeout_ms"));
    }
    if settings.max_concurrency == Some(0) {
        return Err(zero("max_concurrency"));
    }
    if settings.ttl_ms == Some(0) {
        return Err(zero("ttl_ms"));
    }
    if let Some(wait) = settings.inline_wait_ms {
        if wait > MAX_INLINE_WAIT_MS || settings.task_policy == Some(TaskPolicy::Inline) {
            return Err(UpstreamError::InlineWait {
                key: key.to_owned(),
            });
        }
    }
    if let Some(priority) = settings.priority {
        if !taskd_tools::PRIORITIES.contains(&priority) {
            return Err(UpstreamError::Priority {
                key: key.to_owned(),
            });
        }
    }
    if let Some(scope) = settings
        .scopes
        .iter()
        .flatten()
        .find(|scope| !taskd_protocol::is_scope_token(scope))
    {
        return Err(UpstreamError::ToolEntry {
            key: key.to_owned(),
            detail: format!("scopes: \"{scope}\" is not a scope"),
        });
    }
    if let Err(error) = settings.flow().build() {
        return Err(UpstreamError::ToolEntry {
            key: key.to_owned(),
            detail: error.to_string(),
        });
    }
    Ok(())
}
