//! The JSON-RPC 2.0 envelope of one POSTed message, and the MCP request `_meta` it carries.

use serde_json::{Map, Value};

use super::capabilities::ClientCapabilities;
use super::error::RpcError;
use super::log_level::LogLevel;
use super::trace::TraceContext;

pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
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
    /// The caller's trace context (`_meta.traceparent` and `tracestate`; over HTTP, the
    /// headers of those names when `_meta` has none). Invalid values are ignored.
    pub trace: Option<TraceContext>,
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
            trace: TraceContext::from_meta(meta),
        })
    }
}

/// Generated envelopes and `_meta`s (see [`taskd_testkit`]): near-valid messages with
/// members removed, retyped or added, and odd ids. Each parse is checked against an
/// independent statement of the rules, and every refusal is a 400 with `-32600` or
/// `-32602`.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use serde_json::{json, Map, Value};

    use super::*;
    use crate::code;
    use crate::TASKS_EXTENSION;
    use taskd_testkit::{any_json, any_number, any_string, config, mutate_object};

    /// An id of any JSON type, odd ones included.
    fn any_id() -> impl Strategy<Value = Value> {
        prop_oneof![
            any_number(),
            any_string().prop_map(Value::String),
            any_json(2),
        ]
    }

    fn meta() -> impl Strategy<Value = Map<String, Value>> {
        let level = prop_oneof![
            Just(Value::Null),
            prop::sample::select(vec!["debug", "info", "warning", "emergency", "loud", ""])
                .prop_map(Value::from),
            any_json(1),
        ];
        (any_id(), level).prop_flat_map(|(token, level)| {
            let valid = json!({
                META_PROTOCOL_VERSION: "2026-07-28",
                META_CLIENT_CAPABILITIES: { "extensions": { TASKS_EXTENSION: {} } },
                META_LOG_LEVEL: level,
                "progressToken": token,
            });
            mutate_object(valid.as_object().cloned().unwrap_or_default())
        })
    }

    fn params() -> impl Strategy<Value = Map<String, Value>> {
        meta().prop_flat_map(|meta| {
            let mut valid = Map::new();
            valid.insert("_meta".into(), Value::Object(meta));
            valid.insert("name".into(), Value::from("echo"));
            mutate_object(valid)
        })
    }

    fn message() -> impl Strategy<Value = Value> {
        let method = prop_oneof![
            3 => prop::sample::select(crate::METHODS).prop_map(Value::from),
            1 => any_json(1),
        ];
        let object = (any_id(), method, params()).prop_flat_map(|(id, method, params)| {
            let mut valid = Map::new();
            valid.insert("jsonrpc".into(), Value::from("2.0"));
            valid.insert("id".into(), id);
            valid.insert("method".into(), method);
            valid.insert("params".into(), Value::Object(params));
            mutate_object(valid).prop_map(Value::Object)
        });
        prop_oneof![8 => object, 1 => any_json(4)]
    }

    /// The envelope rules, restated: the id to echo and whether the message is accepted.
    fn expected(message: &Value) -> (Value, bool) {
        let Some(object) = message.as_object() else {
            return (Value::Null, false);
        };
        let id = object.get("id");
        let usable_id = id.is_none_or(|id| id.is_string() || id.is_number());
        if !usable_id {
            return (Value::Null, false);
        }
        let accepted = object.get("jsonrpc") == Some(&Value::from("2.0"))
            && object.get("method").is_some_and(Value::is_string)
            && object
                .get("params")
                .is_none_or(|params| params.is_null() || params.is_object());
        (id.cloned().unwrap_or(Value::Null), accepted)
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn envelopes_are_accepted_exactly_by_the_rules(message in message()) {
            let (echo, accepted) = expected(&message);
            match Envelope::parse(message.clone()) {
                Ok(envelope) => {
                    prop_assert!(accepted, "accepted {message}");
                    prop_assert_eq!(envelope.id.as_ref(), message.get("id"));
                    prop_assert_eq!(Some(&Value::from(envelope.method)), message.get("method"));
                    let params = message.get("params").and_then(Value::as_object).cloned();
                    prop_assert_eq!(envelope.params, params.unwrap_or_default());
                }
                Err(rejected) => {
                    let (id, error) = *rejected;
                    prop_assert!(!accepted, "refused {message}: {error}");
                    prop_assert_eq!(id, echo);
                    prop_assert!(
                        [code::INVALID_REQUEST, code::INVALID_PARAMS].contains(&error.code),
                        "{error}"
                    );
                    prop_assert_eq!(error.http_status, 400);
                    prop_assert!(error.message.starts_with("Invalid "), "{error}");
                }
            }
        }

        #[test]
        fn meta_is_accepted_exactly_by_the_rules(params in params()) {
            let meta = params.get("_meta").and_then(Value::as_object);
            let field = |name: &str| meta.and_then(|meta| meta.get(name));
            let level_ok = match field(META_LOG_LEVEL) {
                None | Some(Value::Null) => true,
                Some(Value::String(level)) => LogLevel::parse(level).is_some(),
                Some(_) => false,
            };
            let accepted = field(META_PROTOCOL_VERSION).is_some_and(Value::is_string)
                && field(META_CLIENT_CAPABILITIES).is_some_and(Value::is_object)
                && level_ok;
            match RequestMeta::parse(&params) {
                Ok(parsed) => {
                    prop_assert!(accepted, "accepted {params:?}");
                    prop_assert_eq!(
                        Some(&Value::from(parsed.protocol_version)),
                        field(META_PROTOCOL_VERSION)
                    );
                    let token = field("progressToken")
                        .filter(|token| token.is_string() || token.is_number());
                    prop_assert_eq!(parsed.progress_token.as_ref(), token);
                }
                Err(error) => {
                    prop_assert!(!accepted, "refused {params:?}: {error}");
                    prop_assert_eq!(error.code, code::INVALID_PARAMS);
                    prop_assert_eq!(error.http_status, 400);
                    prop_assert!(error.message.starts_with("Invalid params: "), "{error}");
                }
            }
        }
    }
}
