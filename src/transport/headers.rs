//! Header rules of the 2026-07-28 Streamable HTTP transport: DNS-rebinding protection
//! (`Host`/`Origin`), the Base64 sentinel encoding, and `Mcp-Param-*` validation.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{Map, Value};

use crate::tools::schema::{HeaderParam, HeaderParamType};

/// The first header called `name` (case-insensitive), with surrounding spaces and tabs
/// removed (the transport says optional whitespace must not matter).
pub fn header<'r>(request: &'r tiny_http::Request, name: &str) -> Option<&'r str> {
    request
        .headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str().trim_matches([' ', '\t']))
}

const LOOPBACK_HOSTS: &[&str] = &["localhost", "127.0.0.1", "[::1]", "::1"];

/// Splits `host[:port]` (with bracketed IPv6) and returns the lowercase host.
fn host_part(authority: &str) -> String {
    let authority = authority.trim().to_ascii_lowercase();
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => authority[..=end].to_owned(),
            None => authority,
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host.to_owned(),
        _ => authority,
    }
}

/// Which `Host` and `Origin` values a request may carry.
pub struct OriginPolicy {
    /// Lowercase host names (no port) besides loopback.
    pub hosts: Vec<String>,
    /// Exact origins (`scheme://host[:port]`) besides loopback ones.
    pub origins: Vec<String>,
}

impl OriginPolicy {
    pub fn new(hosts: &[String], origins: &[String]) -> OriginPolicy {
        OriginPolicy {
            hosts: hosts.iter().map(|h| host_part(h)).collect(),
            origins: origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
        }
    }

    fn host_allowed(&self, authority: &str) -> bool {
        let host = host_part(authority);
        LOOPBACK_HOSTS.contains(&host.as_str()) || self.hosts.contains(&host)
    }

    /// `true` when `Host` and (if present) `Origin` are acceptable.
    pub fn allows(&self, host: Option<&str>, origin: Option<&str>) -> bool {
        if let Some(host) = host {
            if !self.host_allowed(host) {
                return false;
            }
        }
        match origin {
            None => true,
            Some(origin) => {
                let origin = origin.trim_end_matches('/').to_ascii_lowercase();
                if self.origins.contains(&origin) {
                    return true;
                }
                match origin.split_once("://") {
                    Some(("http" | "https", authority)) => {
                        LOOPBACK_HOSTS.contains(&host_part(authority).as_str())
                    }
                    _ => false,
                }
            }
        }
    }
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

    use super::*;

    #[test]
    fn loopback_and_configured_hosts() {
        let policy = OriginPolicy::new(&["mcp.example.com".into()], &[]);
        assert!(policy.allows(Some("127.0.0.1:8080"), Some("http://localhost:8080")));
        assert!(policy.allows(Some("[::1]:1"), None));
        assert!(policy.allows(Some("MCP.example.com:443"), None));
        assert!(!policy.allows(Some("evil.example.com"), None));
        assert!(!policy.allows(Some("localhost"), Some("http://evil.example.com")));
        assert!(!policy.allows(Some("localhost"), Some("null")));
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
