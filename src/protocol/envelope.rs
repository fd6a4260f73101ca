//! The JSON-RPC 2.0 envelope of one POSTed message, and the MCP request `_meta` it carries.

use serde_json::{Map, Value};

use super::capabilities::ClientCapabilities;
use super::error::RpcError;
use super::log_level::LogLevel;

pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// One JSON-RPC message from a client: a request (with `id`) or a notification.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// `None` for notifications. Echoed verbatim, whatever its JSON type.
    pub id: Option<Value>,
    pub method: String,
    pub params: Map<String, Value>,
}

impl Envelope {
    /// Checks the JSON-RPC shape. On failure returns the error together with the id to
    /// echo (null when the message has no usable id).
    pub fn parse(message: Value) -> Result<Envelope, Box<(Value, RpcError)>> {
        Self::parse_inner(message).map_err(Box::new)
    }

    fn parse_inner(message: Value) -> Result<Envelope, (Value, RpcError)> {
        let Value::Object(mut object) = message else {
            let detail = if message.is_array() {
                "batches are not supported"
            } else {
                "a message must be a JSON object"
            };
            return Err((Value::Null, RpcError::invalid_request(detail)));
        };
        let id = object.remove("id");
        let echo = id.clone().unwrap_or(Value::Null);
        if let Some(id) = &id {
            if !(id.is_string() || id.is_number()) {
                return Err((
                    Value::Null,
                    RpcError::invalid_request("id must be a string or a number"),
                ));
            }
        }
        if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err((echo, RpcError::invalid_request("jsonrpc must be \"2.0\"")));
        }
        let method = match object.remove("method") {
            Some(Value::String(method)) => method,
            Some(_) => return Err((echo, RpcError::invalid_request("method must be a string"))),
            None => {
                return Err((
                    echo,
                    RpcError::invalid_request("only requests and notifications may be sent"),
                ))
            }
        };
        let params = match object.remove("params") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(params)) => params,
            Some(_) => return Err((echo, RpcError::invalid_params("params must be an object"))),
        };
        Ok(Envelope { id, method, params })
    }

    /// A string parameter, or `None` when absent or not a string.
    pub fn str_param(&self, name: &str) -> Option<&str> {
        self.params.get(name).and_then(Value::as_str)
    }
}

/// The per-request `_meta` every 2026-07-28 request carries. There is no session: this is
/// the only truth about the client for the request at hand.
#[derive(Debug, Clone, Default)]
pub struct RequestMeta {
    pub protocol_version: String,
    pub capabilities: ClientCapabilities,
    pub progress_token: Option<Value>,
    pub log_level: Option<LogLevel>,
}

impl RequestMeta {
    /// Reads the required `_meta` fields (`-32602` when missing or mistyped).
    pub fn parse(params: &Map<String, Value>) -> Result<RequestMeta, RpcError> {
        let meta = match params.get("_meta") {
            Some(Value::Object(meta)) => meta,
            Some(_) => return Err(RpcError::invalid_params("_meta must be an object")),
            None => return Err(RpcError::invalid_params("missing _meta")),
        };
        let protocol_version = match meta.get(META_PROTOCOL_VERSION) {
            Some(Value::String(version)) => version.clone(),
            Some(_) => {
                return Err(RpcError::invalid_params(format!(
                    "_meta[\"{META_PROTOCOL_VERSION}\"] must be a string"
                )))
            }
            None => {
                return Err(RpcError::invalid_params(format!(
                    "missing _meta[\"{META_PROTOCOL_VERSION}\"]"
                )))
            }
        };
        let capabilities = match meta.get(META_CLIENT_CAPABILITIES) {
            Some(Value::Object(caps)) => ClientCapabilities(caps.clone()),
            Some(_) => {
                return Err(RpcError::invalid_params(format!(
                    "_meta[\"{META_CLIENT_CAPABILITIES}\"] must be an object"
                )))
            }
            None => {
                return Err(RpcError::invalid_params(format!(
                    "missing _meta[\"{META_CLIENT_CAPABILITIES}\"]"
                )))
            }
        };
        let progress_token = meta
            .get("progressToken")
            .filter(|token| token.is_string() || token.is_number())
            .cloned();
        let log_level = match meta.get(META_LOG_LEVEL) {
            None | Some(Value::Null) => None,
            Some(Value::String(level)) => Some(LogLevel::parse(level).ok_or_else(|| {
                RpcError::invalid_params(format!("unknown log level \"{level}\""))
            })?),
            Some(_) => return Err(RpcError::invalid_params("log level must be a string")),
        };
        Ok(RequestMeta {
            protocol_version,
            capabilities,
            progress_token,
            log_level,
        })
    }
}
