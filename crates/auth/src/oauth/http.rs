//! The HTTP client that talks to the authorization server (discovery, key sets,
//! introspection): ureq with rustls (the ring provider) and the system's trust store,
//! every call bounded by the configured provider timeout and every body by
//! [`MAX_BODY_BYTES`]. Errors name the URL (provider URLs are configuration, not
//! secrets) and never a token.

use std::time::Duration;

use serde_json::Value;

/// Largest document accepted from the provider (metadata, key set, introspection).
pub const MAX_BODY_BYTES: u64 = 1 << 20;

/// Why the provider could not give an answer.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url}: {detail}")]
    Unreachable { url: String, detail: String },
    #[error("{url}: HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: not a JSON object")]
    NotJson { url: String },
}

/// A JSON document and how long it may be cached (`Cache-Control: max-age`; zero for
/// `no-store` / `no-cache`).
pub struct Fetched {
    pub body: Value,
    pub max_age: Option<Duration>,
}

/// The agent every provider call goes through: `timeout` bounds each call whole.
pub fn agent(timeout: Duration) -> ureq::Agent {
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::PlatformVerifier)
        .build();
    ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .tls_config(tls)
        .user_agent(concat!("mcp-taskd/", env!("CARGO_PKG_VERSION")))
        .build()
        .new_agent()
}

/// GETs a JSON object.
pub fn get_json(agent: &ureq::Agent, url: &str) -> Result<Fetched, FetchError> {
    let response = agent
        .get(url)
        .header("Accept", "application/json")
        .call()
        .map_err(|e| unreachable(url, e))?;
    let max_age = response
        .headers()
        .get("cache-control")
        .and_then(|value| value.to_str().ok())
        .and_then(max_age);
    Ok(Fetched {
        body: json_object(url, response)?,
        max_age,
    })
}

/// POSTs a form and reads a JSON object back. A confidential client (`secret`)
/// authenticates with HTTP Basic (RFC 6749 §2.3.1: both parts form-urlencoded first);
/// a public client names itself in the form (`client_id`), as RFC 6749 §3.2.1 has it.
pub fn post_form(
    agent: &ureq::Agent,
    url: &str,
    form: &[(&str, &str)],
    client_id: &str,
    secret: Option<&str>,
) -> Result<Value, FetchError> {
    use base64::Engine;
    let request = agent.post(url).header("Accept", "application/json");
    let response = match secret {
        Some(secret) => {
            let credentials = format!("{}:{}", form_encode(client_id), form_encode(secret));
            let basic = base64::engine::general_purpose::STANDARD.encode(credentials);
            request
                .header("Authorization", &format!("Basic {basic}"))
                .send_form(form.iter().copied())
        }
        None => request.send_form(form.iter().copied().chain([("client_id", client_id)])),
    }
    .map_err(|e| unreachable(url, e))?;
    json_object(url, response)
}

fn unreachable(url: &str, error: ureq::Error) -> FetchError {
    FetchError::Unreachable {
        url: url.to_owned(),
        detail: error.to_string(),
    }
}

fn json_object(
    url: &str,
    mut response: ureq::http::Response<ureq::Body>,
) -> Result<Value, FetchError> {
    let status = response.status().as_u16();
    if status != 200 {
        return Err(FetchError::Status {
            url: url.to_owned(),
            status,
        });
    }
    let bytes = response
        .body_mut()
        .with_config()
        .limit(MAX_BODY_BYTES)
        .read_to_vec()
        .map_err(|e| unreachable(url, e))?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(body @ Value::Object(_)) => Ok(body),
        _ => Err(FetchError::NotJson {
            url: url.to_owned(),
        }),
    }
}

/// `max-age` of a `Cache-Control` value; `no-store` and `no-cache` are zero.
fn max_age(cache_control: &str) -> Option<Duration> {
    let mut age = None;
    for directive in cache_control.split(',').map(str::trim) {
        let lower = directive.to_ascii_lowercase();
        if lower == "no-store" || lower == "no-cache" {
            return Some(Duration::ZERO);
        }
        if let Some(seconds) = lower.strip_prefix("max-age=") {
            age = seconds
                .trim_matches('"')
                .parse()
                .ok()
                .map(Duration::from_secs);
        }
    }
    age
}

/// `application/x-www-form-urlencoded` encoding of one value.
pub fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(byte as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_control_gives_the_lifetime() {
        assert_eq!(
            max_age("public, max-age=300"),
            Some(Duration::from_secs(300))
        );
        assert_eq!(max_age("no-store"), Some(Duration::ZERO));
        assert_eq!(max_age("max-age=10, no-cache"), Some(Duration::ZERO));
        assert_eq!(max_age("public"), None);
    }

    #[test]
    fn form_values_are_percent_encoded() {
        assert_eq!(form_encode("a b+c/d:é"), "a+b%2Bc%2Fd%3A%C3%A9");
    }
}
