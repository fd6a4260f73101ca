//! One handler per MCP method. Handlers see a validated [`Request`] and answer a
//! [`Reply`]; they own the method semantics (pagination, caching hints, capability
//! gates, MRTR) but no transport concerns.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Map, Value};

use super::envelope::{ClientCapabilities, LogLevel, META_SERVER_INFO, TASKS_EXTENSION};
use super::error::RpcError;
use super::request_state::{Binding, StateSigner};
use super::{Emitter, Listen, Reply, Request, SUPPORTED_VERSIONS};
use crate::auth::Identity;
use crate::catalog::{Catalog, PromptCall};
use crate::notifications::{Filter, Hub};
use crate::tasks::{Submission, TaskService};
use crate::tools::{Admission, Invocation, InvocationHost, Outcome, Registry, TaskPolicy};

/// `_meta` key a client may set on `tools/call` to make task submission idempotent.
pub const META_IDEMPOTENCY_KEY: &str = "dev.mcp-taskd/idempotencyKey";
/// Longest idempotency key accepted.
const MAX_IDEMPOTENCY_KEY: usize = 256;

/// What `server/discover` says about this server.
pub struct ServerInfo {
    pub name: String,
    pub version: String,
    pub instructions: Option<String>,
}

/// The MCP service: everything the method handlers need.
pub struct Service {
    pub info: ServerInfo,
    pub page_size: usize,
    pub cache_ttl_ms: u64,
    pub tools: Arc<Registry>,
    pub catalog: Catalog,
    pub signer: StateSigner,
    pub hub: Arc<Hub>,
    pub tasks: Arc<TaskService>,
}

fn now_ms() -> u64 {
    crate::clock::now_ms().max(0) as u64
}

impl Service {
    /// Routes one request. The transport has already checked headers, `_meta`, the
    /// protocol version and that the method exists.
    pub fn handle(&self, request: &Request<'_>, emitter: &mut dyn Emitter) -> Reply {
        let method = request.envelope.method.as_str();
        match method {
            "server/discover" => Reply::Result(self.discover()),
            "tools/list" => self.tools_list(request).into(),
            "tools/call" => self.tools_call(request, emitter),
            "resources/list" => self.resources_list(request).into(),
            "resources/templates/list" => self.templates_list(request).into(),
            "resources/read" => self.resources_read(request).into(),
            "prompts/list" => self.prompts_list(request).into(),
            "prompts/get" => self.prompts_get(request).into(),
            "completion/complete" => self.complete(request).into(),
            "subscriptions/listen" => self.listen(request),
            "tasks/get" | "tasks/update" | "tasks/cancel" => self.task_method(request).into(),
            _ => Reply::Error(RpcError::method_not_found(method)),
        }
    }

    /// Adds the caching hints (SEP-2549) and `resultType` to a cacheable result.
    fn cacheable(&self, mut result: Value) -> Value {
        result["resultType"] = json!("complete");
        result["ttlMs"] = json!(self.cache_ttl_ms);
        result["cacheScope"] = json!("public");
        result
    }

    fn discover(&self) -> Value {
        let mut result = json!({
            "supportedVersions": SUPPORTED_VERSIONS,
            "capabilities": {
                "tools": { "listChanged": true },
                "prompts": { "listChanged": true },
                "resources": {},
                "completions": {},
                "logging": {},
                "extensions": { TASKS_EXTENSION: {} },
            },
            "_meta": { META_SERVER_INFO: { "name": self.info.name, "version": self.info.version } },
        });
        if let Some(instructions) = &self.info.instructions {
            result["instructions"] = json!(instructions);
        }
        self.cacheable(result)
    }

    /// One page of `items` after the request's cursor.
    fn page(
        &self,
        request: &Request<'_>,
        key: &str,
        items: impl ExactSizeIterator<Item = Value>,
    ) -> Result<Value, RpcError> {
        let total = items.len();
        let start = match request.envelope.params.get("cursor") {
            None | Some(Value::Null) => 0,
            Some(Value::String(cursor)) => decode_cursor(cursor)
                .filter(|&start| start <= total)
                .ok_or_else(|| RpcError::invalid_params("invalid cursor"))?,
            Some(_) => return Err(RpcError::invalid_params("cursor must be a string")),
        };
        let page: Vec<Value> = items.skip(start).take(self.page_size).collect();
        let end = start + page.len();
        let mut result = json!({ key: page });
        if end < total {
            result["nextCursor"] = json!(URL_SAFE_NO_PAD.encode(format!("offset:{end}")));
        }
        Ok(self.cacheable(result))
    }

    fn tools_list(&self, request: &Request<'_>) -> Result<Value, RpcError> {
        let tools = self.tools.all().iter().map(|tool| tool.spec.to_json());
        self.page(request, "tools", tools)
    }

    fn resources_list(&self, request: &Request<'_>) -> Result<Value, RpcError> {
        let resources = self.catalog.resources.iter().map(|r| r.to_json());
        self.page(request, "resources", resources)
    }

    fn templates_list(&self, request: &Request<'_>) -> Result<Value, RpcError> {
        let templates = self.catalog.templates.iter().map(|t| t.to_json());
        self.page(request, "resourceTemplates", templates)
    }

    fn prompts_list(&self, request: &Request<'_>) -> Result<Value, RpcError> {
        let prompts = self.catalog.prompts.iter().map(|p| p.to_json());
        self.page(request, "prompts", prompts)
    }

    fn resources_read(&self, request: &Request<'_>) -> Result<Value, RpcError> {
        let uri = request
            .envelope
            .str_param("uri")
            .ok_or_else(|| RpcError::invalid_params("uri must be a string"))?;
        let contents = self.catalog.read(uri)?;
        Ok(self.cacheable(json!({ "contents": contents })))
    }

    fn prompts_get(&self, request: &Request<'_>) -> Result<Value, RpcError> {
        let params = &request.envelope.params;
        let name = request
            .envelope
            .str_param("name")
            .ok_or_else(|| RpcError::invalid_params("name must be a string"))?;
        let prompt = self
            .catalog
            .prompt(name)
            .ok_or_else(|| RpcError::invalid_params(format!("Unknown prompt: {name}")))?;
        let arguments = object_param(params, "arguments")?;
        for argument in &prompt.arguments {
            match arguments.get(&argument.name) {
                Some(Value::String(_)) => {}
                None if !argument.required => {}
                _ => {
                    return Err(RpcError::invalid_params(format!(
                        "argument \"{}\" must be a string{}",
                        argument.name,
                        if argument.required {
                            " and is required"
                        } else {
                            ""
                        }
                    )))
                }
            }
        }
        let input_responses = input_responses(params)?;
        let binding = Binding {
            identity: request.identity,
            method: "prompts/get",
            name,
            arguments: &arguments,
        };
        let state = self.open_request_state(params, &binding)?;
        let call = PromptCall {
            arguments: &arguments,
            input_responses: &input_responses,
            state: state.as_ref(),
            capabilities: &request.meta.capabilities,
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| (prompt.get)(&call))).unwrap_or_else(|_| {
            log::error!("prompt handler panicked");
            Outcome::Error(RpcError::internal())
        });
        match outcome {
            Outcome::Complete(mut result) => {
                result["resultType"] = json!("complete");
                Ok(result)
            }
            Outcome::InputRequired { requests, state } => {
                self.input_required(&binding, &request.meta.capabilities, requests, state)
            }
            Outcome::Error(error) => Err(error),
            Outcome::Cancelled => Err(RpcError::internal()),
            Outcome::Retry(reason) => {
                log::error!("prompt {name} failed: {reason}");
                Err(RpcError::internal())
            }
        }
    }

    fn complete(&self, request: &Request<'_>) -> Result<Value, RpcError> {
        let params = &request.envelope.params;
        let reference = params
            .get("ref")
            .and_then(Value::as_object)
            .ok_or_else(|| RpcError::invalid_params("ref must be an object"))?;
        let argument = params
            .get("argument")
            .and_then(Value::as_object)
            .ok_or_else(|| RpcError::invalid_params("argument must be an object"))?;
        let (Some(arg_name), Some(prefix)) = (
            argument.get("name").and_then(Value::as_str),
            argument.get("value").and_then(Value::as_str),
        ) else {
            return Err(RpcError::invalid_params(
                "argument needs string name and value",
            ));
        };
        let values = match reference.get("type").and_then(Value::as_str) {
            Some("ref/prompt") => {
                let name = reference
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| RpcError::invalid_params("ref.name must be a string"))?;
                if self.catalog.prompt(name).is_none() {
                    return Err(RpcError::invalid_params(format!("Unknown prompt: {name}")));
                }
                self.catalog
                    .complete_prompt_argument(name, arg_name, prefix)
                    .unwrap_or_default()
            }
            Some("ref/resource") => Vec::new(),
            _ => return Err(RpcError::invalid_params("unknown ref type")),
        };
        Ok(json!({
            "resultType": "complete",
            "completion": { "values": values, "total": values.len(), "hasMore": false },
        }))
    }

    fn listen(&self, request: &Request<'_>) -> Reply {
        let params = &request.envelope.params;
        let Some(wanted) = params.get("notifications").and_then(Value::as_object) else {
            return Reply::Error(RpcError::invalid_params("notifications must be an object"));
        };
        let flag = |name: &str| wanted.get(name).and_then(Value::as_bool) == Some(true);
        let requested_tasks = match wanted.get("taskIds") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(ids)) => {
                let mut unique: Vec<String> = Vec::new();
                for id in ids {
                    let Some(id) = id.as_str() else {
                        return Reply::Error(RpcError::invalid_params("taskIds must be strings"));
                    };
                    if !unique.iter().any(|seen| seen == id) {
                        unique.push(id.to_owned());
                    }
                }
                unique
            }
            Some(_) => return Reply::Error(RpcError::invalid_params("taskIds must be an array")),
        };
        if !requested_tasks.is_empty() && !request.meta.capabilities.tasks() {
            return Reply::Error(tasks_required());
        }
        let max_task_ids = self.hub.limits().max_task_ids;
        if requested_tasks.len() > max_task_ids {
            return Reply::Error(RpcError::invalid_params(format!(
                "at most {max_task_ids} taskIds per subscription"
            )));
        }
        let mut filter = Filter {
            tools_list_changed: flag("toolsListChanged"),
            prompts_list_changed: flag("promptsListChanged"),
            resources_updated: false,
            task_ids: requested_tasks,
        };
        // Note where the outbox stands, then subscribe, then authorize: a change
        // committed meanwhile is queued rather than lost, nothing older is replayed, and
        // the acknowledgement names only the caller's tasks.
        let changes_after = match self.tasks.outbox_position() {
            Ok(position) => position,
            Err(error) => return Reply::Error(error),
        };
        let subscription = match self.hub.subscribe(request.identity, filter.clone()) {
            Ok(subscription) => subscription,
            Err(error) => return Reply::Error(error),
        };
        filter
            .task_ids
            .retain(|id| self.tasks.is_visible(request.identity, id));
        Reply::Listen(Box::new(Listen {
            subscription_id: request.envelope.id.clone().unwrap_or(Value::Null),
            filter,
            subscription,
            identity: request.identity.clone(),
            capabilities: request.meta.capabilities.clone(),
            changes_after,
        }))
    }

    /// The `notifications/tasks` params for a task, read now with the subscriber's
    /// identity and capabilities; `None` when it must not be sent (gone, foreign, or
    /// not deliverable to this client).
    pub fn task_notification(
        &self,
        identity: &Identity,
        capabilities: &ClientCapabilities,
        task_id: &str,
    ) -> Option<Value> {
        let mut detailed = self.tasks.get(identity, task_id, capabilities).ok()?;
        if let Some(fields) = detailed.as_object_mut() {
            fields.remove("resultType");
        }
        Some(detailed)
    }

    /// `tasks/get`, `tasks/update`, `tasks/cancel`: the extension gate comes before
    /// any lookup, then the task is authorized inside the lookup itself.
    fn task_method(&self, request: &Request<'_>) -> Result<Value, RpcError> {
        if !request.meta.capabilities.tasks() {
            return Err(tasks_required());
        }
        let task_id = request
            .envelope
            .str_param("taskId")
            .ok_or_else(RpcError::task_not_found)?;
        let identity = request.identity;
        match request.envelope.method.as_str() {
            "tasks/get" => self
                .tasks
                .get(identity, task_id, &request.meta.capabilities),
            "tasks/update" => {
                let responses = match request.envelope.params.get("inputResponses") {
                    Some(Value::Object(responses)) => responses.clone(),
                    _ => return Err(RpcError::invalid_params("inputResponses must be an object")),
                };
                self.tasks.update(identity, task_id, responses)
            }
            _ => self.tasks.cancel(identity, task_id),
        }
    }

    fn tools_call(&self, request: &Request<'_>, emitter: &mut dyn Emitter) -> Reply {
        match self.tools_call_inner(request, emitter) {
            Ok(reply) => reply,
            Err(error) => Reply::Error(error),
        }
    }

    fn tools_call_inner(
        &self,
        request: &Request<'_>,
        emitter: &mut dyn Emitter,
    ) -> Result<Reply, RpcError> {
        let params = &request.envelope.params;
        let name = request
            .envelope
            .str_param("name")
            .ok_or_else(|| RpcError::invalid_params("name must be a string"))?;
        let tool = self
            .tools
            .get(name)
            .ok_or_else(|| RpcError::invalid_params(format!("Unknown tool: {name}")))?;
        let arguments = object_param(params, "arguments")?;
        let capabilities = &request.meta.capabilities;
        let as_task = match tool.spec.task_policy {
            TaskPolicy::Inline => false,
            TaskPolicy::Optional => capabilities.tasks(),
            TaskPolicy::Required if capabilities.tasks() => true,
            TaskPolicy::Required => return Err(tasks_required()),
        };
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
            return Ok(Reply::Result(complete(crate::tools::error_result(
                format!("Arguments do not match the tool's inputSchema: {violations}"),
            ))));
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
            emitter,
            progress_token: request.meta.progress_token.clone(),
            log_level: request.meta.log_level,
            tool: &tool.spec.name,
        };
        let mut invocation = Invocation {
            arguments: &arguments,
            input_responses: &input_responses,
            state: state.as_ref(),
            capabilities,
            host: &mut host,
        };
        // Inline tools run here; task tools only decide here whether the task can be
        // created yet (an MRTR exchange may come first).
        let admission = catch_unwind(AssertUnwindSafe(|| {
            if as_task {
                tool.tool.admit(&mut invocation)
            } else {
                Admission::Answer(tool.tool.run(&mut invocation))
            }
        }))
        .unwrap_or_else(|_| {
            log::error!("tool {} panicked during tools/call", tool.spec.name);
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
                return Ok(Reply::Later(self.tasks.create(Submission {
                    identity: request.identity,
                    tool,
                    arguments: &arguments,
                    protocol_version: &request.meta.protocol_version,
                    capabilities,
                    input_responses: &input_responses,
                    idempotency_key: key,
                })));
            }
        };
        let answer = match outcome {
            Outcome::Complete(result) => tool.check_result(result).map(complete),
            Outcome::InputRequired { requests, state } => {
                self.input_required(&binding, capabilities, requests, state)
            }
            Outcome::Error(error) => Err(error),
            Outcome::Cancelled => Err(RpcError::internal()),
            // Inline there is no retry: the client sees a generic internal error, the
            // reason (which never holds arguments or results) goes to the log.
            Outcome::Retry(reason) => {
                log::error!("tool {} failed during tools/call: {reason}", tool.spec.name);
                Err(RpcError::internal())
            }
        };
        answer.map(Reply::Result)
    }

    /// Verifies the `requestState` a client echoed, if any.
    fn open_request_state(
        &self,
        params: &Map<String, Value>,
        binding: &Binding<'_>,
    ) -> Result<Option<Value>, RpcError> {
        match params.get("requestState") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(sealed)) => {
                self.signer.open_state(binding, sealed, now_ms()).map(Some)
            }
            Some(_) => Err(RpcError::invalid_params("requestState must be a string")),
        }
    }

    /// Builds an `InputRequiredResult`, refusing input requests the client cannot serve.
    fn input_required(
        &self,
        binding: &Binding<'_>,
        capabilities: &ClientCapabilities,
        requests: Map<String, Value>,
        state: Option<Value>,
    ) -> Result<Value, RpcError> {
        if let Some(missing) = missing_for_input_requests(&requests, capabilities) {
            return Err(RpcError::missing_capability(missing));
        }
        let mut result = json!({ "resultType": "input_required" });
        if !requests.is_empty() {
            result["inputRequests"] = Value::Object(requests);
        }
        if let Some(state) = state {
            result["requestState"] = json!(self.signer.seal(binding, &state, now_ms()));
        }
        if result.get("inputRequests").is_none() && result.get("requestState").is_none() {
            log::error!("a tool asked for input without requests or state");
            return Err(RpcError::internal());
        }
        Ok(result)
    }
}

/// The capabilities a set of input requests needs that the client did not declare, as
/// a `requiredCapabilities` object; `None` when the client can serve them all.
pub fn missing_for_input_requests(
    requests: &Map<String, Value>,
    capabilities: &ClientCapabilities,
) -> Option<Value> {
    let mut missing = Map::new();
    for request in requests.values() {
        match request.get("method").and_then(Value::as_str) {
            Some("elicitation/create") => {
                let mode = request["params"]
                    .get("mode")
                    .and_then(Value::as_str)
                    .unwrap_or("form");
                let supported = match mode {
                    "url" => capabilities.elicitation_url(),
                    _ => capabilities.elicitation_form(),
                };
                if !supported {
                    let modes = missing.entry("elicitation").or_insert_with(|| json!({}));
                    modes[if mode == "url" { "url" } else { "form" }] = json!({});
                }
            }
            Some("sampling/createMessage") if !capabilities.sampling() => {
                missing.insert("sampling".into(), json!({}));
            }
            Some("roots/list") if !capabilities.roots() => {
                missing.insert("roots".into(), json!({}));
            }
            _ => {}
        }
    }
    (!missing.is_empty()).then_some(Value::Object(missing))
}

/// `-32021` naming the Tasks extension.
fn tasks_required() -> RpcError {
    RpcError::missing_capability(json!({ "extensions": { TASKS_EXTENSION: {} } }))
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

/// `params[name]` as an object; absent or null is an empty object.
fn object_param(params: &Map<String, Value>, name: &str) -> Result<Map<String, Value>, RpcError> {
    match params.get(name) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(object)) => Ok(object.clone()),
        Some(_) => Err(RpcError::invalid_params(format!(
            "{name} must be an object"
        ))),
    }
}

/// `params.inputResponses`: absent is empty; anything but an object is invalid.
fn input_responses(params: &Map<String, Value>) -> Result<Map<String, Value>, RpcError> {
    match params.get("inputResponses") {
        None => Ok(Map::new()),
        Some(Value::Object(responses)) => Ok(responses.clone()),
        Some(_) => Err(RpcError::invalid_params("inputResponses must be an object")),
    }
}

fn decode_cursor(cursor: &str) -> Option<usize> {
    let decoded = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    std::str::from_utf8(&decoded)
        .ok()?
        .strip_prefix("offset:")?
        .parse()
        .ok()
}

fn complete(mut result: Value) -> Value {
    result["resultType"] = json!("complete");
    result
}

/// The host of an inline call: progress and log messages go to the response stream.
struct InlineHost<'a> {
    emitter: &'a mut dyn Emitter,
    progress_token: Option<Value>,
    log_level: Option<LogLevel>,
    tool: &'a str,
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

    fn log(&mut self, level: LogLevel, data: Value) {
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
