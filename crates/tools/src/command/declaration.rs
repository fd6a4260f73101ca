//! A `[[tools]]` declaration, and turning it into a [`ToolSpec`] plus a [`CommandTool`]:
//! every field checked, the program resolved to an absolute path, defaults filled in.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};
use thiserror::Error;

use super::reaper::MARKER;
use super::spawn::Launch;
use super::CommandTool;
use crate::{ExecutionPolicy, TaskPolicy, ToolSpec};

/// `PATH` of a program whose `env` does not set one.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// Default `max_output_bytes`.
pub const DEFAULT_MAX_OUTPUT: usize = 4 * 1024 * 1024;

/// One `[[tools]]` entry: an executable served as an MCP tool. See
/// [`crate::command`] for how it runs and docs/configuration.md for every key.
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
    /// How long a client that does not speak tasks waits for the result before it gets
    /// a task handle (`tasks.inline_wait_ms` by default).
    pub inline_wait_ms: Option<u64>,
    /// The argument whose value makes task submission idempotent.
    pub idempotency_argument: Option<String>,
    /// Queued tasks of a higher priority run first (-100 to 100, default 0).
    #[serde(default)]
    pub priority: i32,
    /// Most bytes the program may write to stdout in one run.
    pub max_output_bytes: Option<usize>,
    /// Bytes of a task's captured output kept (stderr, stdout beyond the protocol);
    /// `output.max_bytes_per_task` by default, `0` keeps none.
    pub output_max_bytes: Option<u64>,
    /// OAuth scopes an access token needs to call the tool (and to reach its tasks).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Runs with the same value here exclude each other (a JSON pointer into the
    /// arguments, or a template of pointers): see [`crate::flow`].
    pub concurrency_key: Option<String>,
    /// Runs of one key's value at once (1 by default).
    pub max_concurrency_per_key: Option<u32>,
    /// How fast runs may start (`"6/min"`).
    pub rate: Option<String>,
    /// Starts the rate's bucket holds (1 by default: evenly spaced).
    pub rate_burst: Option<u32>,
    /// Each key's value has a rate of its own.
    pub rate_per_key: Option<bool>,
    /// What a paused tool does with new calls: `"queue"` (default) or `"refuse"`.
    pub on_pause: Option<crate::flow::OnPause>,
}

impl CommandToolConfig {
    /// The flow-control keys of this table.
    pub fn flow(&self) -> crate::flow::FlowConfig {
        crate::flow::FlowConfig {
            concurrency_key: self.concurrency_key.clone(),
            max_concurrency_per_key: self.max_concurrency_per_key,
            rate: self.rate.clone(),
            rate_burst: self.rate_burst,
            rate_per_key: self.rate_per_key,
            on_pause: self.on_pause,
        }
    }
}

fn default_task_policy() -> TaskPolicy {
    TaskPolicy::Optional
}

/// What is wrong with a declaration; the message names the field, the caller the tool.
#[derive(Debug, Error)]
pub enum DeclarationError {
    #[error(transparent)]
    Flow(#[from] crate::flow::FlowError),
    #[error("concurrency_key: argument \"{argument}\" is not a property of input_schema")]
    KeyUndeclared { argument: String },
    #[error("{field}: not valid JSON: {source}")]
    NotJson {
        field: &'static str,
        source: serde_json::Error,
    },
    #[error("{field}: {source}")]
    NotJsonValue {
        field: &'static str,
        source: serde_json::Error,
    },
    #[error("{field}: must be a table or a string holding JSON")]
    NotTableOrJson { field: &'static str },
    #[error("{field}: must have \"type\": \"object\"")]
    SchemaNotObject { field: &'static str },
    #[error("annotations: must be a table")]
    AnnotationsNotTable,
    #[error("priority: must be -100 to 100")]
    Priority,
    #[error("env: \"{key}\" is not a valid variable (no '=' or NUL in names, no NUL in values)")]
    InvalidEnv { key: String },
    #[error("command: must name a program (command = [\"/path/to/program\", …])")]
    NoProgram,
    #[error("command: the program must not be empty")]
    EmptyProgram,
    #[error("command: {} is not an executable file", path.display())]
    NotExecutable { path: PathBuf },
    #[error("command: \"{program}\" was not found in PATH ({path_var})")]
    NotInPath { program: String, path_var: String },
    #[error("working_dir: {} is not a directory", dir.display())]
    NotADirectory { dir: PathBuf },
    #[error("{field}: must be at least 1")]
    Zero { field: &'static str },
    #[error(
        "idempotency_argument: only task tools (task_policy optional or required) create tasks"
    )]
    IdempotencyOnInline,
    #[error("inline_wait_ms: only task tools (task_policy optional or required) wait for a task")]
    InlineWaitOnInline,
    #[error(
        "inline_wait_ms: at most {} ms (hosts cut tool calls off at about 4 minutes)",
        crate::MAX_INLINE_WAIT_MS
    )]
    InlineWaitTooLong,
    #[error("idempotency_argument: \"{argument}\" is not a property of input_schema")]
    IdempotencyUndeclared { argument: String },
    #[error(
        "scopes: \"{scope}\" is not a scope (printable ASCII without spaces, quotes or \
         backslashes)"
    )]
    Scope { scope: String },
}

impl CommandTool {
    /// Checks a declaration and builds the tool. Errors name the field; the caller adds
    /// the tool's name. Relative paths resolve against `base_dir`.
    pub fn build(
        config: &CommandToolConfig,
        base_dir: &Path,
    ) -> Result<CommandTool, DeclarationError> {
        let input_schema = match &config.input_schema {
            None => json!({ "type": "object" }),
            Some(value) => json_field("input_schema", value)?,
        };
        if input_schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(DeclarationError::SchemaNotObject {
                field: "input_schema",
            });
        }
        let output_schema = match &config.output_schema {
            None => None,
            Some(value) => {
                let schema = json_field("output_schema", value)?;
                if schema.get("type").and_then(Value::as_str) != Some("object") {
                    return Err(DeclarationError::SchemaNotObject {
                        field: "output_schema",
                    });
                }
                Some(schema)
            }
        };
        let annotations = match &config.annotations {
            None => None,
            Some(value) => {
                let annotations = json_field("annotations", value)?;
                if !annotations.is_object() {
                    return Err(DeclarationError::AnnotationsNotTable);
                }
                Some(annotations)
            }
        };

        let env = check_env(&config.env)?;
        let Some((program, args)) = config.command.split_first() else {
            return Err(DeclarationError::NoProgram);
        };
        if program.is_empty() {
            return Err(DeclarationError::EmptyProgram);
        }
        let path_var = env.get("PATH").map(String::as_str).unwrap_or(DEFAULT_PATH);
        let program = resolve_program(program, base_dir, path_var)?;
        let working_dir = match &config.working_dir {
            None => base_dir.to_path_buf(),
            Some(dir) => base_dir.join(dir),
        };
        if !working_dir.is_dir() {
            return Err(DeclarationError::NotADirectory { dir: working_dir });
        }

        let defaults_policy = ExecutionPolicy::default();
        let timeout = positive("timeout_ms", config.timeout_ms)?
            .map_or(defaults_policy.timeout, Duration::from_millis);
        let max_attempts =
            positive("max_attempts", config.max_attempts)?.unwrap_or(defaults_policy.max_attempts);
        let backoff = config
            .backoff_ms
            .map_or(defaults_policy.backoff, Duration::from_millis);
        // Unset: the server's [tasks] defaults apply when a task is created.
        let ttl = positive("ttl_ms", config.ttl_ms)?.map(Duration::from_millis);
        let poll_interval =
            positive("poll_interval_ms", config.poll_interval_ms)?.map(Duration::from_millis);
        let max_concurrency = positive("max_concurrency", config.max_concurrency)?;
        let max_output =
            positive("max_output_bytes", config.max_output_bytes)?.unwrap_or(DEFAULT_MAX_OUTPUT);
        if let Some(wait) = config.inline_wait_ms {
            if config.task_policy == TaskPolicy::Inline {
                return Err(DeclarationError::InlineWaitOnInline);
            }
            if wait > crate::MAX_INLINE_WAIT_MS {
                return Err(DeclarationError::InlineWaitTooLong);
            }
        }
        if !crate::PRIORITIES.contains(&config.priority) {
            return Err(DeclarationError::Priority);
        }
        if let Some(argument) = &config.idempotency_argument {
            if config.task_policy == TaskPolicy::Inline {
                return Err(DeclarationError::IdempotencyOnInline);
            }
            let declared = input_schema
                .get("properties")
                .and_then(Value::as_object)
                .is_some_and(|properties| properties.contains_key(argument));
            if !declared {
                return Err(DeclarationError::IdempotencyUndeclared {
                    argument: argument.clone(),
                });
            }
        }

        if let Some(scope) = config
            .scopes
            .iter()
            .find(|scope| !taskd_protocol::is_scope_token(scope))
        {
            return Err(DeclarationError::Scope {
                scope: scope.clone(),
            });
        }

        let flow = config.flow().build()?;
        if let (Some(key), Some(properties)) = (
            &flow.key,
            input_schema.get("properties").and_then(Value::as_object),
        ) {
            if let Some(argument) = key.arguments().find(|name| !properties.contains_key(name)) {
                return Err(DeclarationError::KeyUndeclared { argument });
            }
        }
        let spec = ToolSpec {
            name: config.name.clone(),
            title: config.title.clone(),
            description: config.description.clone(),
            input_schema,
            output_schema,
            annotations,
            task_policy: config.task_policy,
            required_capabilities: None,
            execution: ExecutionPolicy {
                max_attempts,
                timeout,
                backoff,
                ttl,
                poll_interval,
                output_max_bytes: config.output_max_bytes,
            },
            idempotency_argument: config.idempotency_argument.clone(),
            max_concurrency,
            inline_wait: config.inline_wait_ms.map(Duration::from_millis),
            scopes: config.scopes.clone(),
            priority: config.priority,
            flow,
        };
        let launch = Launch::new(&program, args, &working_dir, &env, MARKER);
        Ok(CommandTool {
            spec,
            program,
            launch,
            max_output,
        })
    }
}

/// A schema or annotations field: a TOML table, or a string holding JSON.
fn json_field(field: &'static str, value: &toml::Value) -> Result<Value, DeclarationError> {
    match value {
        toml::Value::String(text) => {
            serde_json::from_str(text).map_err(|source| DeclarationError::NotJson { field, source })
        }
        toml::Value::Table(table) => serde_json::to_value(table)
            .map_err(|source| DeclarationError::NotJsonValue { field, source }),
        _ => Err(DeclarationError::NotTableOrJson { field }),
    }
}

/// An optional count or duration that, when set, must be at least 1.
fn positive<T: Default + PartialEq>(
    field: &'static str,
    value: Option<T>,
) -> Result<Option<T>, DeclarationError> {
    match value {
        Some(zero) if zero == T::default() => Err(DeclarationError::Zero { field }),
        _ => Ok(value),
    }
}

/// A program's whole environment: `env` as declared, checked, plus the default `PATH`
/// unless `env` sets one. Nothing is inherited from the server.
pub fn check_env(
    declared: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, DeclarationError> {
    let mut env = BTreeMap::new();
    env.insert("PATH".to_owned(), DEFAULT_PATH.to_owned());
    for (key, value) in declared {
        if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
            return Err(DeclarationError::InvalidEnv { key: key.clone() });
        }
        env.insert(key.clone(), value.clone());
    }
    Ok(env)
}

/// The absolute path of the program: a path with a `/` resolves against `base_dir`, a
/// bare name is looked up in the program's `PATH` — once, at start-up.
pub fn resolve_program(
    program: &str,
    base_dir: &Path,
    path_var: &str,
) -> Result<PathBuf, DeclarationError> {
    if program.contains('/') {
        let path = base_dir.join(program);
        return if is_executable_file(&path) {
            Ok(path)
        } else {
            Err(DeclarationError::NotExecutable { path })
        };
    }
    path_var
        .split(':')
        .filter(|dir| dir.starts_with('/'))
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| is_executable_file(candidate))
        .ok_or_else(|| DeclarationError::NotInPath {
            program: program.to_owned(),
            path_var: path_var.to_owned(),
        })
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}
