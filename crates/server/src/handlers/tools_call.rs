//! `tools/call`: validation, capability gates, inline runs (with progress and log
//! messages on the response stream), MRTR rounds, and handing task calls to the engine —
//! and, for a client that does not speak tasks, the created task to the bridge.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::request_state::Binding;
use super::tasks::tasks_required;
use super::{complete, input_responses, object_param, Emitter, Reply, Request, Service};
use taskd_base::liveness;
use taskd_engine::flow::Pause;
use taskd_engine::output::{log_lines, OutputRules, OutputTail};
use taskd_engine::{NoPlace, Submission};
use taskd_protocol::{LogLevel, RpcError, TraceContext, META_IDEMPOTENCY_KEY};
use taskd_tools::flow::OnPause;
use taskd_tools::panics::run_tool;
use taskd_tools::{Admission, Invocation, InvocationHost, Outcome, OutputStream, TaskPolicy};

/// Longest idempotency key accepted.
const MAX_IDEMPOTENCY_KEY: usize = 256;

impl Service {
    pub(super) fn tools_call(&self, request: &Request<'_>, emitter: &mut dyn Emitter) -> Reply {
        match self.tools_call_inner(request, emitter) {
            Ok(reply) => reply,
            Err(error) => Reply::Error(error),
        }
    }

    pub(super) fn tools_call_inner(
        &self,
        request: &Request<'_>,
        emitter: &mut dyn Emitter,
    ) -> Result<Reply, RpcError> {
        let params = &request.envelope.params;
        let name = request
            .envelope
            .str_param("name")
            .ok_or_else(|| RpcError::invalid_params("name must be a string"))?;
        let arguments = object_param(params, "arguments")?;
        if let Some(answer) = self.task_tool_call(request, name, &arguments, emitter) {
            return answer.map(|result| Reply::Result(complete(result)));
        }
        let tool = self
            .tools()
            .get(name)
            .cloned()
            .ok_or_else(|| RpcError::invalid_params(format!("Unknown tool: {name}")))?;
        // Before anything else about the call: a missing scope is 403 whatever the
        // arguments, so that the client steps up once.
        self.tasks.require_scopes(request.scopes, name)?;
        let capabilities = &request.meta.capabilities;
        // A client that does not speak tasks still gets task tools as tasks, through
        // the bridge, unless it is off.
        let bridged =
            tool.spec.task_policy != TaskPolicy::Inline && self.bridge.serves(capabilities);
        let as_task = match tool.spec.task_policy {
            TaskPolicy::Inline => false,
            TaskPolicy::Optional => capabilities.tasks() || bridged,
            TaskPolicy::Required if capabilities.tasks() || bridged => true,
            TaskPolicy::Required => return Err(tasks_required()),
        };
        // A paused tool's calls wait in its queue as tasks; what cannot wait there (an
        // inline run, or any call of a tool that says so) is told it is paused.
        if let Some(pause) = self.tasks.pause_of(name)? {
            if !as_task || tool.spec.flow.on_pause == OnPause::Refuse {
                return Ok(Reply::Result(complete(paused(name, &pause))));
            }
        }
        if let Some(required) = &tool.spec.required_capabilities {
            let missing: Map<String, Value> = required
                .iter()
                .filter(|(capability, _)| !capabilities.0.contains_key(capability.as_str()))
                .map(|(capability, value)| (capability.clone(), value.clone()))
                .collect();
            if !missing.is_empty() {
                return Err(RpcError::missing_capability(Value::Object(missing)));
            }
        }
        if !tool.input.is_valid(&Value::Object(arguments.clone())) {
            let violations = tool
                .input
                .violations(&Value::Object(arguments.clone()), 5)
                .join("; ");
            return Ok(Reply::Result(complete(taskd_tools::error_result(format!(
                "Arguments do not match the tool's inputSchema: {violations}"
            )))));
        }
        let input_responses = input_responses(params)?;
        let binding = Binding {
            identity: request.identity,
            method: "tools/call",
            name,
            arguments: &arguments,
        };
        let state = self.open_request_state(params, &binding)?;
        let mut host = InlineHost {
            emitter: &mut *emitter,
            progress_token: request.meta.progress_token.clone(),
            log_level: request.meta.log_level,
            tool: &tool.spec.name,
            trace: request.meta.trace.clone(),
            rules: Arc::clone(&self.live.load().output),
            keeps_output: tool.spec.execution.output_max_bytes != Some(0),
            tail: OutputTail::default(),
        };
        let caller = request.identity.key();
        let mut invocation = Invocation {
            arguments: &arguments,
            input_responses: &input_responses,
            state: state.as_ref(),
            capabilities,
            caller: &caller,
            host: &mut host,
        };
        // An inline run shares the tool's concurrency slots with its task attempts, and
        // waits for one up to the tool's timeout.
        let timeout = tool.spec.execution.timeout;
        let _slot = match (&tool.slots, as_task) {
            (Some(slots), false) => match slots.take_within(timeout) {
                Some(slot) => Some(slot),
                None => {
                    log::warn!(
                        "tool {} found no free slot (max_concurrency {}) within {} ms",
                        tool.spec.name,
                        slots.limit(),
                        timeout.as_millis()
                    );
                    return Ok(Reply::Result(complete(taskd_tools::error_result(format!(
                        "The tool did not run: all {} of its runs stayed busy for {} ms. \
                         Try again later.",
                        slots.limit(),
                        timeout.as_millis()
                    )))));
                }
            },
            _ => None,
        };
        // An inline run takes its key's place and a token of its rate, as a task's
        // attempt does, waiting for them up to the tool's timeout.
        let _place = if as_task {
            None
        } else {
            match self.tasks.enter_inline(&tool, &arguments, timeout) {
                Ok(place) => Some(place),
                Err(NoPlace::Store(error)) => {
                    log::error!("tool {}: flow control: {error}", tool.spec.name);
                    return Err(RpcError::internal());
                }
                Err(why) => {
                    return Ok(Reply::Result(complete(taskd_tools::error_result(format!(
                        "The tool did not run: {why} for {} ms. Try again later.",
                        timeout.as_millis()
                    )))))
                }
            }
        };
        // Inline tools run here; task tools only decide here whether the task can be
        // created yet (an MRTR exchange may come first).
        let admission = run_tool(|| {
            if as_task {
                tool.tool.admit(&mut invocation)
            } else {
                // The tool's timeout bounds the run: not a stall of this request thread.
                Admission::Answer(liveness::unwatched(|| tool.tool.run(&mut invocation)))
            }
        })
        .unwrap_or_else(|place| {
            log::error!(
                "tool {} panicked during tools/call (at {place})",
                tool.spec.name
            );
            Admission::Answer(Outcome::Error(RpcError::internal()))
        });
        let outcome = match admission {
            Admission::Answer(outcome) => outcome,
            Admission::Proceed => {
                let key = idempotency_key(
                    request,
                    &arguments,
                    tool.spec.idempotency_argument.as_deref(),
                )?;
                let creation = self.tasks.create(Submission {
                    identity: request.identity,
                    tool: &tool,
                    arguments: &arguments,
                    protocol_version: &request.meta.protocol_version,
                    capabilities,
                    input_responses: &input_responses,
                    idempotency_key: key,
                    trace: request.meta.trace.clone(),
                });
                if !bridged {
                    return Ok(Reply::Later(creation));
                }
                return self
                    .bridged_call(request, &tool.spec, creation, emitter)
                    .map(|result| Reply::Result(complete(result)));
            }
        };
        let answer = match outcome {
            Outcome::Complete(result) => tool.check_result(result).map(complete),
            Outcome::InputRequired { requests, state } => {
                self.input_required(&binding, capabilities, requests, state)
            }
            Outcome::Error(error) => Err(error),
            Outcome::Cancelled => Err(RpcError::internal()),
            // Inline there is no retry: the tool ran and failed, which is no fault of
            // the request. The caller (often a model) gets a tool error saying why, with
            // the end of the run's output (redacted, as a task keeps it).
            Outcome::Retry(reason) | Outcome::Failed(reason) => {
                log::warn!("tool {} failed during tools/call: {reason}", tool.spec.name);
                Ok(complete(taskd_tools::error_result(
                    host.tail.explain(&format!("The tool failed: {reason}")),
                )))
            }
        };
        answer.map(Reply::Result)
    }
}

/// The answer to a call of a paused tool that cannot wait in its queue.
fn paused(name: &str, pause: &Pause) -> Value {
    let why = if pause.reason.is_empty() {
        String::new()
    } else {
        format!(" ({})", pause.reason)
    };
    taskd_tools::error_result(format!(
        "The tool {name} is paused{why}: nothing was started. Try again once an operator \
         resumes it."
    ))
}

/// The idempotency key of a task submission: `_meta["dev.mcp-taskd/idempotencyKey"]`,
/// else the tool's designated argument (string or integer).
fn idempotency_key(
    request: &Request<'_>,
    arguments: &Map<String, Value>,
    argument: Option<&str>,
) -> Result<Option<String>, RpcError> {
    let from_meta = request
        .envelope
        .params
        .get("_meta")
        .and_then(|meta| meta.get(META_IDEMPOTENCY_KEY));
    let from_argument = argument.and_then(|name| arguments.get(name));
    let key = match from_meta.or(from_argument) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(key)) => key.clone(),
        Some(Value::Number(number)) if number.is_i64() || number.is_u64() => number.to_string(),
        Some(_) => {
            return Err(RpcError::invalid_params(
                "an idempotency key must be a string or an integer",
            ))
        }
    };
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY {
        return Err(RpcError::invalid_params(format!(
            "an idempotency key must be 1-{MAX_IDEMPOTENCY_KEY} bytes"
        )));
    }
    Ok(Some(key))
}

/// The host of an inline call: progress and log messages go to the response stream;
/// the end of the run's output is kept for a failure's message.
struct InlineHost<'a> {
    emitter: &'a mut dyn Emitter,
    progress_token: Option<Value>,
    log_level: Option<LogLevel>,
    tool: &'a str,
    trace: Option<TraceContext>,
    rules: Arc<OutputRules>,
    /// Whether the tool's output may be shown at all (`output_max_bytes = 0`: not even
    /// in a failure's message).
    keeps_output: bool,
    tail: OutputTail,
}

impl InvocationHost for InlineHost<'_> {
    fn progress(&mut self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let Some(token) = &self.progress_token else {
            return;
        };
        let mut params = json!({ "progressToken": token, "progress": progress });
        if let Some(total) = total {
            params["total"] = json!(total);
        }
        if let Some(message) = message {
            params["message"] = json!(message);
        }
        self.emitter.notify("notifications/progress", params);
    }

    fn output(&mut self, stream: OutputStream, line: &str) {
        if self.keeps_output {
            self.tail.push(stream, &self.rules.redact(line));
        }
    }

    fn log(&mut self, level: LogLevel, data: Value) {
        for line in log_lines(level, &data) {
            self.output(OutputStream::Log, &line);
        }
        if self.log_level.is_some_and(|minimum| level >= minimum) {
            self.emitter.notify(
                "notifications/message",
                json!({ "level": level.as_str(), "logger": self.tool, "data": data }),
            );
        }
    }

    fn cancelled(&self) -> bool {
        self.emitter.cancelled()
    }

    fn trace(&self) -> Option<TraceContext> {
        self.trace.clone()
    }

    /// Sleeps in short slices so that a cancelled request stops within one of them.
    fn sleep(&mut self, duration: Duration) -> bool {
        const SLICE: Duration = Duration::from_millis(50);
        let deadline = std::time::Instant::now() + duration;
        loop {
            if self.emitter.cancelled() {
                return false;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(left.min(SLICE));
        }
    }
}
