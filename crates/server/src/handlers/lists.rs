//! Discovery and the catalog methods: `server/discover`, the `*/list` methods with their
//! cursor pagination, `resources/read`, `prompts/get` and `completion/complete`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};

use super::request_state::Binding;
use super::{input_responses, object_param, Request, Service};
use taskd_auth::ToolsListPolicy;
use taskd_protocol::envelope::META_SERVER_INFO;
use taskd_protocol::Scopes;
use taskd_protocol::TASKS_EXTENSION;
use taskd_protocol::{RpcError, META_REQUIRED_SCOPES, SUPPORTED_VERSIONS};
use taskd_tools::catalog::PromptCall;
use taskd_tools::panics::run_tool;
use taskd_tools::Outcome;

impl Service {
    pub(super) fn discover(&self) -> Value {
        let settings = self.live.load();
        let server = &settings.config.server;
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
            "_meta": { META_SERVER_INFO: { "name": server.name, "version": super::VERSION } },
        });
        if let Some(instructions) = &server.instructions {
            result["instructions"] = json!(instructions);
        }
        self.cacheable(result)
    }

    /// One page of `items` after the request's cursor.
    pub(super) fn page(
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
        let page: Vec<Value> = items
            .skip(start)
            .take(self.live.load().config.limits.page_size)
            .collect();
        let end = start + page.len();
        let mut result = json!({ key: page });
        if end < total {
            result["nextCursor"] = json!(URL_SAFE_NO_PAD.encode(format!("offset:{end}")));
        }
        Ok(self.cacheable(result))
    }

    /// Every tool, unless `[auth.oauth] tools_list = "filter"` leaves out those the
    /// caller's access token lacks scopes for; with `"mark"` (the default) those carry
    /// the scopes in `_meta`. Either way a call to such a tool gets 403 naming them, so
    /// no tool is hidden that a call would reach. A list that depends on the caller's
    /// scopes is cached privately.
    pub(super) fn tools_list(&self, request: &Request<'_>) -> Result<Value, RpcError> {
        let mut tools = self.listed_tools(request);
        let mut personal = false;
        if let Scopes::Granted(_) = request.scopes {
            let settings = self.live.load();
            let policy = settings
                .config
                .auth
                .oauth
                .as_ref()
                .map_or(ToolsListPolicy::Mark, |oauth| oauth.tools_list);
            tools.retain_mut(|listed| {
                let required = listed["name"]
                    .as_str()
                    .and_then(|name| settings.tools.get(name))
                    .map_or(&[][..], |tool| &tool.spec.scopes[..]);
                if !request.scopes.lacks(required) {
                    return true;
                }
                personal = true;
                match policy {
                    ToolsListPolicy::Filter => false,
                    ToolsListPolicy::Mark => {
                        listed["_meta"][META_REQUIRED_SCOPES] = json!(required);
                        true
                    }
                }
            });
        }
        let mut result = self.page(request, "tools", tools.into_iter())?;
        if personal {
            result["cacheScope"] = json!("private");
        }
        Ok(result)
    }

    pub(super) fn resources_list(&self, request: &Request<'_>) -> Result<Value, RpcError> {
        let catalog = self.catalog();
        let resources = catalog.resources.iter().map(|r| r.to_json());
        self.page(request, "resources", resources)
    }

    pub(super) fn templates_list(&self, request: &Request<'_>) -> Result<Value, RpcError> {
        let catalog = self.catalog();
        let mut templates = vec![super::output::output_template()];
        templates.extend(catalog.templates.iter().map(|t| t.to_json()));
        self.page(request, "resourceTemplates", templates.into_iter())
    }

    pub(super) fn prompts_list(&self, request: &Request<'_>) -> Result<Value, RpcError> {
        let catalog = self.catalog();
        let prompts = catalog.prompts.iter().map(|p| p.to_json());
        self.page(request, "prompts", prompts)
    }

    pub(super) fn resources_read(&self, request: &Request<'_>) -> Result<Value, RpcError> {
        let uri = request
            .envelope
            .str_param("uri")
            .ok_or_else(|| RpcError::invalid_params("uri must be a string"))?;
        if let Some(answer) = self.read_output(request, uri) {
            return answer;
        }
        let contents = self.catalog().read(uri, &request.identity.key())?;
        Ok(self.cacheable(json!({ "contents": contents })))
    }

    pub(super) fn prompts_get(&self, request: &Request<'_>) -> Result<Value, RpcError> {
        let params = &request.envelope.params;
        let name = request
            .envelope
            .str_param("name")
            .ok_or_else(|| RpcError::invalid_params("name must be a string"))?;
        let catalog = self.catalog();
        let prompt = catalog
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
        let caller = request.identity.key();
        let call = PromptCall {
            arguments: &arguments,
            input_responses: &input_responses,
            state: state.as_ref(),
            capabilities: &request.meta.capabilities,
            caller: &caller,
        };
        let outcome = run_tool(|| (prompt.get)(&call)).unwrap_or_else(|place| {
            log::error!("prompt handler panicked (at {place})");
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
            Outcome::Retry(reason) | Outcome::Failed(reason) => {
                log::error!("prompt {name} failed: {reason}");
                Err(RpcError::internal())
            }
        }
    }

    pub(super) fn complete(&self, request: &Request<'_>) -> Result<Value, RpcError> {
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
                let catalog = self.catalog();
                if catalog.prompt(name).is_none() {
                    return Err(RpcError::invalid_params(format!("Unknown prompt: {name}")));
                }
                catalog
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
}

fn decode_cursor(cursor: &str) -> Option<usize> {
    let decoded = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    std::str::from_utf8(&decoded)
        .ok()?
        .strip_prefix("offset:")?
        .parse()
        .ok()
}
