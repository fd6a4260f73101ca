//! Upstream MCP servers as durable task tools (`[[upstreams]]`).
//!
//! An upstream is a stdio MCP server that mcp-taskd launches and supervises
//! ([`supervisor`]), or a Streamable HTTP one at a URL ([`http`]), reached as a client
//! of the 2025-11-25 revision ([`session`]). Its tools
//! are served as ours under a prefix ([`tool`]): listed in `tools/list` of both eras
//! and over stdio with their schemas and annotations, and each call is an ordinary tool
//! run, so a call is a durable task whenever a tool call here would be one (the Tasks
//! extension, 2025-11-25 tasks, the bridge's inline wait and handle), held by a worker
//! that outlives the client and the host's timeout.
//!
//! Data flow:
//!
//! ```text
//! config::Upstream ──► Supervisor (sessions by scope, restarts, circuit breaker,
//!                                  the tool list, cached in the data dir)
//!                        │ tools/list ──► registration: UpstreamTool per tool
//! worker / request ──► UpstreamTool::run ──► Session::call ──► the upstream
//!                        ◄── progress, requests (input_required), the result
//!                            (or an upstream task, followed to its result)
//! ```
//!
//! Guarantees, and their limits, are written next to the code that keeps them: the
//! re-run rule after an interruption in [`tool`], request routing in [`session`], the
//! sessions' lifetimes in [`supervisor`].
//!
//! May depend on: `taskd-protocol` (the MCP vocabulary and headers it speaks as a
//! client), `taskd-base`, `taskd-tools` (an upstream tool is a [`taskd_tools::Tool`]).
//! Must never know: the engine or its store (a worker runs an upstream tool like any
//! other), the server's transport, the configuration file (it owns
//! [`UpstreamConfig`]).

pub mod config;
mod http;
mod session;
mod supervisor;
mod tool;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};

use self::supervisor::Supervisor;
use self::tool::{ParkedCalls, UpstreamTool};
use taskd_protocol::RpcError;
use taskd_tools::catalog::{
    Catalog, Prompt, PromptArgument, PromptFn, ReadFn, Resource, ResourceTemplate,
};
use taskd_tools::{ExecutionPolicy, Outcome, Registry, TaskPolicy, ToolSpec};

pub use self::config::{SessionScope, Upstream, UpstreamConfig, UpstreamError};

/// How long start-up waits for the first listing of upstreams that have no cached one.
const FIRST_LISTING: Duration = Duration::from_secs(10);
/// How often kept sessions are health-checked and expired parked calls given up.
const CHECK_INTERVAL: Duration = Duration::from_secs(30);
/// Attempts of a tool that is not idempotent: its attempts after the first only report
/// the interruption (see [`tool`]), and input rounds count as attempts too.
const NOT_IDEMPOTENT_ATTEMPTS: u32 = 1000;

/// Every upstream of the configuration the server started with.
pub struct Upstreams {
    supervisors: Vec<Arc<Supervisor>>,
    parked: Arc<ParkedCalls>,
    /// Told when an upstream's tool list changes (set once the server can rebuild).
    changed: Arc<OnceLock<Box<dyn Fn() + Send + Sync>>>,
    /// Dropped to stop the health checks: the checker sleeps on it, so an idle server
    /// wakes once per check, not to poll a flag.
    stop_checks: Mutex<Option<crossbeam_channel::Sender<()>>>,
}

impl Upstreams {
    /// No upstreams (`check-config` and offline commands list none).
    pub fn none() -> Upstreams {
        Upstreams::new(&[], std::path::Path::new("."))
    }

    /// The upstreams of `upstreams`, not started; their tool lists as cached in
    /// `data_dir`.
    pub fn new(upstreams: &[Arc<Upstream>], data_dir: &std::path::Path) -> Upstreams {
        let changed: Arc<OnceLock<Box<dyn Fn() + Send + Sync>>> = Arc::default();
        let cache_dir = data_dir.join("upstreams");
        let supervisors = upstreams
            .iter()
            .map(|upstream| {
                let changed = Arc::clone(&changed);
                Supervisor::new(
                    Arc::clone(upstream),
                    &cache_dir,
                    Arc::new(move || {
                        if let Some(changed) = changed.get() {
                            changed();
                        }
                    }),
                )
            })
            .collect();
        Upstreams {
            supervisors,
            parked: Arc::default(),
            changed,
            stop_checks: Mutex::default(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.supervisors.is_empty()
    }

    /// Lists each upstream's tools in the background (calling `changed` when a list
    /// differs from the cached one), then health-checks them every
    /// [`CHECK_INTERVAL`].
    pub fn start(&self, changed: Box<dyn Fn() + Send + Sync>) {
        if self.supervisors.is_empty() {
            return;
        }
        let _ = self.changed.set(changed);
        let (listed, done) = crossbeam_channel::unbounded();
        let mut uncached = 0;
        for supervisor in &self.supervisors {
            if supervisor.tools().is_empty() {
                uncached += 1;
            }
            let supervisor = Arc::clone(supervisor);
            let listed = listed.clone();
            let _ = std::thread::Builder::new()
                .name("upstream-list".into())
                .spawn(move || {
                    let was_empty = supervisor.tools().is_empty();
                    supervisor.discover();
                    if was_empty {
                        let _ = listed.send(());
                    }
                });
        }
        // An upstream never listed before (no cached list) gets a moment, so that the
        // first `tools/list` a host sends already has its tools; a slow one joins
        // later with `list_changed`.
        let deadline = std::time::Instant::now() + FIRST_LISTING;
        for _ in 0..uncached {
            if done.recv_deadline(deadline).is_err() {
                log::warn!(
                    "upstream tools not listed within {} s of start; they are added when \
                     their server answers",
                    FIRST_LISTING.as_secs()
                );
                break;
            }
        }
        let supervisors = self.supervisors.clone();
        let parked = Arc::clone(&self.parked);
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let checker = std::thread::Builder::new()
            .name("upstream-check".into())
            .spawn(move || {
                // Ends when `stop` is dropped (a disconnection, not a timeout).
                while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(CHECK_INTERVAL)
                {
                    parked.expire();
                    for supervisor in &supervisors {
                        supervisor.check();
                    }
                }
            });
        match checker {
            Ok(_) => *session::lock(&self.stop_checks) = Some(stop),
            Err(error) => log::error!("could not start the upstreams' health checks: {error}"),
        }
    }

    /// Registers every served tool of every upstream. A tool that cannot be served
    /// (a name taken, a schema that does not compile) is left out with a warning: one
    /// upstream's odd tool must not take the server down.
    pub fn register(&self, registry: &mut Registry) {
        for supervisor in &self.supervisors {
            for listed in supervisor.tools() {
                let Some((spec, idempotent)) = tool_spec(&supervisor.upstream, &listed) else {
                    continue;
                };
                let tool = UpstreamTool {
                    supervisor: Arc::clone(supervisor),
                    parked: Arc::clone(&self.parked),
                    name: listed
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    idempotent,
                    timeout: spec.execution.timeout,
                    task_support: matches!(
                        listed
                            .pointer("/execution/taskSupport")
                            .and_then(Value::as_str),
                        Some("optional" | "required")
                    ),
                    header_params: listed
                        .get("inputSchema")
                        .and_then(|schema| taskd_protocol::headers::header_params(schema).ok())
                        .unwrap_or_default(),
                };
                if let Err(error) = registry.register(spec, Arc::new(tool)) {
                    log::warn!(
                        "upstream {}: a tool is not served: {error}",
                        supervisor.upstream.name
                    );
                }
            }
        }
    }

    /// Registers every upstream's resources, resource templates and prompts, as last
    /// listed: resources keep their URIs (names get the prefix), prompts' names get the
    /// prefix. Reading one, or getting a prompt, asks the upstream in the caller's
    /// session.
    pub fn register_catalog(&self, catalog: &mut Catalog) {
        for supervisor in &self.supervisors {
            let listed = supervisor.listed();
            let prefix = &supervisor.upstream.prefix;
            let text =
                |item: &Value, key: &str| item.get(key).and_then(Value::as_str).map(str::to_owned);
            for resource in &listed.resources {
                let (Some(uri), Some(name)) = (text(resource, "uri"), text(resource, "name"))
                else {
                    continue;
                };
                catalog.resources.push(Resource {
                    uri,
                    name: format!("{prefix}{name}"),
                    description: text(resource, "description"),
                    mime_type: text(resource, "mimeType"),
                    read: resource_reader(supervisor),
                });
            }
            for template in &listed.templates {
                let (Some(uri_template), Some(name)) =
                    (text(template, "uriTemplate"), text(template, "name"))
                else {
                    continue;
                };
                catalog.templates.push(ResourceTemplate {
                    uri_template,
                    name: format!("{prefix}{name}"),
                    description: text(template, "description"),
                    mime_type: text(template, "mimeType"),
                    read: resource_reader(supervisor),
                });
            }
            for prompt in &listed.prompts {
                let Some(name) = text(prompt, "name") else {
                    continue;
                };
                let arguments = prompt
                    .get("arguments")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|argument| {
                        Some(PromptArgument {
                            name: text(argument, "name")?,
                            description: text(argument, "description"),
                            required: argument.get("required").and_then(Value::as_bool)
                                == Some(true),
                            completions: Vec::new(),
                        })
                    })
                    .collect();
                catalog.prompts.push(Prompt {
                    name: format!("{prefix}{name}"),
                    description: text(prompt, "description").unwrap_or_else(|| {
                        format!(
                            "Prompt {name} of the MCP server \"{}\".",
                            supervisor.upstream.name
                        )
                    }),
                    arguments,
                    get: prompt_getter(supervisor, name),
                });
            }
        }
    }

    /// Each upstream's state and counters, for `/healthz` and the dashboard.
    pub fn health(&self) -> Value {
        let upstreams: Vec<Value> = self
            .supervisors
            .iter()
            .map(|supervisor| {
                let (health, last_failure) = supervisor.health();
                let counters = &supervisor.counters;
                json!({
                    "name": supervisor.upstream.name,
                    "state": health.as_str(),
                    "tools": supervisor.tools().len(),
                    "starts": counters.starts.load(Ordering::Relaxed),
                    "restarts": counters.restarts.load(Ordering::Relaxed),
                    "calls": counters.calls.load(Ordering::Relaxed),
                    "errors": counters.errors.load(Ordering::Relaxed),
                    "latency_seconds": {
                        "count": counters.latency.count(),
                        "p50": quantile(&counters.latency, 0.5),
                        "p95": quantile(&counters.latency, 0.95),
                        "p99": quantile(&counters.latency, 0.99),
                    },
                    "last_failure": last_failure,
                })
            })
            .collect();
        Value::Array(upstreams)
    }

    /// Appends each upstream's counters, call latency and state to the metrics page. The
    /// label is the upstream's configured name (bounded, chosen by the operator).
    pub fn render_metrics(&self, page: &mut String) {
        use std::fmt::Write;
        if self.supervisors.is_empty() {
            return;
        }
        type Counter = (&'static str, &'static str, fn(&supervisor::Counters) -> u64);
        let counters: [Counter; 4] = [
            ("starts", "Upstream server processes started.", |c| {
                c.starts.load(Ordering::Relaxed)
            }),
            (
                "restarts",
                "Upstream servers that exited unexpectedly.",
                |c| c.restarts.load(Ordering::Relaxed),
            ),
            ("calls", "Tool calls sent to upstream servers.", |c| {
                c.calls.load(Ordering::Relaxed)
            }),
            (
                "errors",
                "Upstream tool calls that failed or could not be sent.",
                |c| c.errors.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, read) in counters {
            let _ = writeln!(page, "# HELP mcp_taskd_upstream_{name}_total {help}");
            let _ = writeln!(page, "# TYPE mcp_taskd_upstream_{name}_total counter");
            for supervisor in &self.supervisors {
                let _ = writeln!(
                    page,
                    "mcp_taskd_upstream_{name}_total{{upstream=\"{}\"}} {}",
                    supervisor.upstream.name,
                    read(&supervisor.counters)
                );
            }
        }
        let name = "mcp_taskd_upstream_call_duration_seconds";
        let _ = writeln!(
            page,
            "# HELP {name} How long upstream servers took to answer tool calls (calls that \
             waited for a caller's answer left out).\n# TYPE {name} histogram"
        );
        for supervisor in &self.supervisors {
            let upstream = taskd_base::histogram::label_value(&supervisor.upstream.name);
            supervisor
                .counters
                .latency
                .render(page, name, "upstream", &upstream);
        }
        let _ = writeln!(
            page,
            "# HELP mcp_taskd_upstream_state Each upstream's state (1 for the state it is in)."
        );
        let _ = writeln!(page, "# TYPE mcp_taskd_upstream_state gauge");
        for supervisor in &self.supervisors {
            let (health, _) = supervisor.health();
            for state in supervisor::Health::ALL {
                let _ = writeln!(
                    page,
                    "mcp_taskd_upstream_state{{upstream=\"{}\",state=\"{}\"}} {}",
                    supervisor.upstream.name,
                    state.as_str(),
                    u8::from(state == health)
                );
            }
        }
    }

    /// Closes every session (the server is stopping).
    pub fn stop(&self) {
        session::lock(&self.stop_checks).take();
        for supervisor in &self.supervisors {
            supervisor.stop();
        }
    }
}

/// How long reading an upstream's resource or getting its prompt may take.
const CATALOG_TIMEOUT: Duration = Duration::from_secs(60);

/// What an upstream's refusal or absence is to our caller.
fn catalog_error(upstream: &Upstream, error: session::SessionError) -> RpcError {
    match error {
        session::SessionError::Refused { code, message, .. } => RpcError::new(code, message),
        other => RpcError::new(
            taskd_protocol::code::INTERNAL_ERROR,
            format!("the upstream MCP server \"{}\": {other}", upstream.name),
        ),
    }
}

/// Reads a resource of the upstream, in the caller's session.
fn resource_reader(supervisor: &Arc<Supervisor>) -> ReadFn {
    let supervisor = Arc::clone(supervisor);
    Arc::new(move |uri, _, caller| {
        let upstream = &supervisor.upstream;
        let unavailable = |why: supervisor::Unavailable| {
            RpcError::new(taskd_protocol::code::INTERNAL_ERROR, why.0)
        };
        let session = supervisor.session_for(caller).map_err(unavailable)?;
        let result = session
            .session
            .ask("resources/read", json!({ "uri": uri }), CATALOG_TIMEOUT)
            .map_err(|error| catalog_error(upstream, error))?;
        Ok(result
            .get("contents")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default())
    })
}

/// Gets a prompt of the upstream (by its own name), in the caller's session.
fn prompt_getter(supervisor: &Arc<Supervisor>, name: String) -> PromptFn {
    let supervisor = Arc::clone(supervisor);
    Arc::new(move |call| {
        let upstream = &supervisor.upstream;
        let session = match supervisor.session_for(call.caller) {
            Ok(session) => session,
            Err(why) => {
                return Outcome::Error(RpcError::new(taskd_protocol::code::INTERNAL_ERROR, why.0))
            }
        };
        let params = json!({ "name": name, "arguments": call.arguments });
        match session.session.ask("prompts/get", params, CATALOG_TIMEOUT) {
            Ok(result) => Outcome::Complete(result),
            Err(error) => Outcome::Error(catalog_error(upstream, error)),
        }
    })
}

/// Our spec of the upstream's tool `listed`, when it is served, and whether it is
/// idempotent.
/// A latency quantile's bucket bound for `/healthz`: `null` without calls, and past
/// the last bucket (an hour) too (JSON has no infinity).
fn quantile(latency: &taskd_base::histogram::Histogram, q: f64) -> Value {
    latency
        .quantile_bound(q)
        .filter(|seconds| seconds.is_finite())
        .map_or(Value::Null, |seconds| json!(seconds))
}

fn tool_spec(upstream: &Upstream, listed: &Value) -> Option<(ToolSpec, bool)> {
    let warn = |why: &str| {
        log::warn!("upstream {}: a tool is not served: {why}", upstream.name);
        None
    };
    let Some(name) = listed.get("name").and_then(Value::as_str) else {
        return warn("it has no name");
    };
    if !upstream.serves(name) {
        return None;
    }
    let Some(input_schema) = listed.get("inputSchema").filter(|s| s.is_object()) else {
        return warn(&format!("{name} has no inputSchema"));
    };
    let settings = upstream.settings(name);
    let annotations = listed.get("annotations").filter(|a| a.is_object()).cloned();
    let hint = |key: &str| {
        annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .and_then(Value::as_bool)
            == Some(true)
    };
    let idempotent = settings
        .idempotent
        .unwrap_or_else(|| hint("idempotentHint") || hint("readOnlyHint"));
    let task_policy = settings.task_policy.unwrap_or(TaskPolicy::Optional);
    let defaults = ExecutionPolicy::default();
    let description = listed
        .get("description")
        .and_then(Value::as_str)
        .filter(|text| !text.trim().is_empty())
        .map_or_else(
            || format!("Tool {name} of the MCP server \"{}\".", upstream.name),
            str::to_owned,
        );
    let spec = ToolSpec {
        name: format!("{}{name}", upstream.prefix),
        title: listed
            .get("title")
            .and_then(Value::as_str)
            .map(str::to_owned),
        description,
        input_schema: input_schema.clone(),
        output_schema: listed
            .get("outputSchema")
            .filter(|s| s.is_object())
            .cloned(),
        annotations,
        task_policy,
        required_capabilities: None,
        execution: ExecutionPolicy {
            max_attempts: if idempotent {
                defaults.max_attempts
            } else {
                NOT_IDEMPOTENT_ATTEMPTS
            },
            timeout: settings
                .timeout_ms
                .map_or(defaults.timeout, Duration::from_millis),
            backoff: defaults.backoff,
            ttl: settings.ttl_ms.map(Duration::from_millis),
            poll_interval: None,
            output_max_bytes: settings.output_max_bytes,
        },
        idempotency_argument: None,
        max_concurrency: settings.max_concurrency,
        inline_wait: settings
            .inline_wait_ms
            .filter(|_| task_policy != TaskPolicy::Inline)
            .map(Duration::from_millis),
        // Checked with the configuration (`config::check_settings`).
        flow: settings.flow().build().unwrap_or_default(),
        scopes: settings.scopes.unwrap_or_default(),
        priority: settings.priority.unwrap_or(0),
    };
    Some((spec, idempotent))
}
