//! The MCP headers of the 2026-07-28 Streamable HTTP transport that carry parts of a
//! request's body (SEP-2243): `Mcp-Name`, the `Mcp-Param-*` headers a tool declares with
//! `x-mcp-header` in its input schema, and the Base64 sentinel encoding of their values.
//! Both sides use them: the transport checks a client's headers against the body, and an
//! upstream's client writes them.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{Map, Value};

/// Why a tool's `x-mcp-header` annotations cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error("x-mcp-header \"{name}\" is used more than once")]
    Repeated { name: String },
    #[error("x-mcp-header is only allowed on properties reachable through \"properties\" keys")]
    Unreachable,
    #[error("x-mcp-header on \"{property}\" must be a non-empty HTTP token")]
    NotToken { property: String },
    #[error("x-mcp-header on \"{property}\" needs type string, integer or boolean")]
    NotPrimitive { property: String },
}

/// The JSON type a header-mirrored parameter may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderParamType {
    String,
    Integer,
    Boolean,
}

/// One `x-mcp-header` annotation: the argument at `path` travels as `Mcp-Param-{name}`.
#[derive(Debug, Clone, PartialEq)]
pub struct HeaderParam {
    pub name: String,
    pub path: Vec<String>,
    pub kind: HeaderParamType,
}

impl HeaderParam {
    /// The argument value this header mirrors, if the call carries one (null = absent).
    pub fn value_in<'a>(&self, arguments: &'a Map<String, Value>) -> Option<&'a Value> {
        let (last, parents) = self.path.split_last()?;
        let mut object = arguments;
        for key in parents {
            object = object.get(key)?.as_object()?;
        }
        object.get(last).filter(|value| !value.is_null())
    }
}

/// Finds every `x-mcp-header` annotation and checks the spec's constraints on it: only
/// on primitive (string, integer, boolean) properties reachable through `properties`
/// chains alone, a valid header token, unique (case-insensitively) within the schema.
pub fn header_params(input_schema: &Value) -> Result<Vec<HeaderParam>, HeaderError> {
    let mut found = Vec::new();
    collect(input_schema, &mut Vec::new(), &mut found)?;
    let mut seen = std::collections::HashSet::new();
    for param in &found {
        if !seen.insert(param.name.to_ascii_lowercase()) {
            return Err(HeaderError::Repeated {
                name: param.name.clone(),
            });
        }
    }
    // An annotation anywhere but on a statically reachable property is invalid.
    let reachable = found.len();
    if count_annotations(input_schema) != reachable {
        return Err(HeaderError::Unreachable);
    }
    Ok(found)
}

fn collect(
    schema: &Value,
    path: &mut Vec<String>,
    found: &mut Vec<HeaderParam>,
) -> Result<(), HeaderError> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    for (key, property) in properties {
        path.push(key.clone());
        if let Some(name) = property.get("x-mcp-header") {
            let name = name.as_str().filter(|name| is_token(name)).ok_or_else(|| {
                HeaderError::NotToken {
                    property: key.clone(),
                }
            })?;
            let kind = match property.get("type").and_then(Value::as_str) {
                Some("string") => HeaderParamType::String,
                Some("integer") => HeaderParamType::Integer,
                Some("boolean") => HeaderParamType::Boolean,
                _ => {
                    return Err(HeaderError::NotPrimitive {
                        property: key.clone(),
                    })
                }
            };
            found.push(HeaderParam {
                name: name.to_owned(),
                path: path.clone(),
                kind,
            });
        }
        collect(property, path, found)?;
        path.pop();
    }
    Ok(())
}

fn count_annotations(value: &Value) -> usize {
    match value {
        Value::Object(object) => {
            usize::from(object.contains_key("x-mcp-header"))
                + object.values().map(count_annotations).sum::<usize>()
        }
        Value::Array(items) => items.iter().map(count_annotations).sum(),
        _ => 0,
    }
}

/// RFC 9110 `token` (`1*tchar`).
pub fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// `text` as a header value, the client's side of [`decode_header_value`]: itself when
/// it is plain visible ASCII without surrounding blanks and does not look like the
/// sentinel, else Base64 in the `=?base64?…?=` sentinel.
pub fn encode_header_value(text: &str) -> String {
    let plain = text
        .bytes()
        .all(|b| b == b'\t' || (0x20..=0x7e).contains(&b));
    let sentinel_like = text.starts_with("=?base64?") && text.ends_with("?=");
    if plain && !sentinel_like && text.trim_matches([' ', '\t']) == text {
        text.to_owned()
    } else {
        format!("=?base64?{}?=", STANDARD.encode(text))
    }
}

/// The value a client's `Mcp-Name` header carries for a request of `method` with
/// `params`: the tool's or prompt's name, the resource's URI, the task's id.
pub fn mcp_name(method: &str, params: &Value) -> Option<String> {
    let field = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return None,
    };
    Some(encode_header_value(params.get(field)?.as_str()?))
}

/// The `Mcp-Param-*` headers a client's `tools/call` carries: each `x-mcp-header`
/// argument the tool declares (`declared`) that the call's `arguments` hold.
pub fn param_headers(
    declared: &[HeaderParam],
    arguments: &Map<String, Value>,
) -> Vec<(String, String)> {
    declared
        .iter()
        .filter_map(|param| {
            let value = match param.value_in(arguments)? {
                Value::String(text) => encode_header_value(text),
                Value::Number(number) => number.to_string(),
                Value::Bool(flag) => flag.to_string(),
                _ => return None,
            };
            Some((format!("Mcp-Param-{}", param.name), value))
        })
        .collect()
}

/// Decodes a header value that may use the `=?base64?...?=` sentinel. Plain values must
/// be visible ASCII, space or tab; sentinel values must be strict Base64 of UTF-8.
pub fn decode_header_value(raw: &str) -> Result<String, &'static str> {
    if let Some(encoded) = raw
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        let bytes = STANDARD
            .decode(encoded)
            .map_err(|_| "invalid Base64 in header value")?;
        return String::from_utf8(bytes).map_err(|_| "Base64 header value is not UTF-8");
    }
    if raw
        .bytes()
        .all(|b| b == b'\t' || (0x20..=0x7e).contains(&b))
    {
        Ok(raw.to_owned())
    } else {
        Err("header value has invalid characters")
    }
}

/// Why a `tools/call`'s `Mcp-Param-*` headers do not agree with its body.
#[derive(Debug, thiserror::Error)]
pub enum ParamHeaderError {
    #[error("missing {header} header")]
    Missing { header: String },
    #[error("{header}: {why}")]
    Undecodable { header: String, why: &'static str },
    #[error("{header} does not match the request body")]
    Mismatch { header: String },
}

/// Checks every `Mcp-Param-*` header a tool declares against the call's arguments.
/// `lookup` finds a header by name.
pub fn check_param_headers<'h>(
    params: &[HeaderParam],
    arguments: &Map<String, Value>,
    lookup: impl Fn(&str) -> Option<&'h str>,
) -> Result<(), ParamHeaderError> {
    for param in params {
        let header_name = format!("Mcp-Param-{}", param.name);
        let Some(body) = param.value_in(arguments) else {
            continue; // no value in the body: the header is not expected
        };
        let Some(raw) = lookup(&header_name) else {
            return Err(ParamHeaderError::Missing {
                header: header_name,
            });
        };
        let decoded = match decode_header_value(raw) {
            Ok(decoded) => decoded,
            Err(why) => {
                return Err(ParamHeaderError::Undecodable {
                    header: header_name,
                    why,
                })
            }
        };
        let matches = match (param.kind, body) {
            (HeaderParamType::String, Value::String(text)) => decoded == *text,
            (HeaderParamType::Integer, Value::Number(number)) => {
                match (decoded.parse::<f64>(), number.as_f64()) {
                    (Ok(header), Some(body)) => header == body,
                    _ => false,
                }
            }
            (HeaderParamType::Boolean, Value::Bool(flag)) => decoded == flag.to_string(),
            // The body value has the wrong type; argument validation reports it.
            _ => true,
        };
        if !matches {
            return Err(ParamHeaderError::Mismatch {
                header: header_name,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_nested_header_params() {
        let schema = json!({"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "opts":{"type":"object","properties":{"n":{"type":"integer","x-mcp-header":"N"}}}}});
        let params = header_params(&schema).unwrap();
        assert_eq!(params.len(), 2);
        assert_eq!(params[1].path, vec!["opts".to_string(), "n".to_string()]);
        let args = json!({"opts":{"n":3}});
        assert_eq!(
            params[1].value_in(args.as_object().unwrap()),
            Some(&json!(3))
        );
        assert_eq!(params[0].value_in(args.as_object().unwrap()), None);
    }

    #[test]
    fn rejects_invalid_annotations() {
        let number = json!({"properties":{"x":{"type":"number","x-mcp-header":"X"}}});
        assert!(header_params(&number).is_err());
        let in_items = json!({"properties":{"x":{"type":"array","items":{"type":"string","x-mcp-header":"X"}}}});
        assert!(header_params(&in_items).is_err());
        let duplicate = json!({"properties":{"a":{"type":"string","x-mcp-header":"X"},"b":{"type":"string","x-mcp-header":"x"}}});
        assert!(header_params(&duplicate).is_err());
        let bad_token = json!({"properties":{"a":{"type":"string","x-mcp-header":"a b"}}});
        assert!(header_params(&bad_token).is_err());
    }

    #[test]
    fn mcp_name_is_plain_or_base64() {
        let call = serde_json::json!({"name": "echo"});
        assert_eq!(mcp_name("tools/call", &call).as_deref(), Some("echo"));
        let task = serde_json::json!({"taskId": "é"});
        assert_eq!(
            mcp_name("tasks/get", &task).as_deref(),
            Some("=?base64?w6k=?=")
        );
        assert_eq!(mcp_name("tools/list", &call), None);
        let lookalike = encode_header_value("=?base64?literal?=");
        assert_eq!(lookalike, "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=");
        assert_eq!(
            decode_header_value(&lookalike).as_deref(),
            Ok("=?base64?literal?=")
        );
    }

    #[test]
    fn sentinel_decoding() {
        assert_eq!(decode_header_value("=?base64?SGVsbG8=?=").unwrap(), "Hello");
        assert!(decode_header_value("=?base64?SGVsbG8?=").is_err());
        assert!(decode_header_value("=?base64?SGVs!!!bG8=?=").is_err());
        assert_eq!(
            decode_header_value("=?base64?SGVsbG8=").unwrap(),
            "=?base64?SGVsbG8="
        );
        assert_eq!(decode_header_value("plain").unwrap(), "plain");
    }
}
