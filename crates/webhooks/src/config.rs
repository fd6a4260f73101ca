//! `[[webhooks]]`: one receiver of task events each. Checked here (what serde cannot
//! express), its secret read from `secret_file` by [`WebhookConfig::load_secret`].

use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use taskd_engine::webhooks::{Route, ANY, EVENTS};

/// The `whsec_` prefix of a Standard Webhooks secret.
const SECRET_PREFIX: &str = "whsec_";

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// How operators, metrics and the store name it; default: the URL's host and port.
    #[serde(default)]
    pub name: Option<String>,
    /// Where the events are POSTed: https, or http for a host in `allow_http`.
    pub url: String,
    /// Which events: `task.created`, `task.completed`, `task.failed`, `task.cancelled`,
    /// `task.input_required`.
    pub events: Vec<String>,
    /// Only tasks of these tools (all when empty).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Only tasks of these identities (all when empty): a principal (of any tenant), or
    /// `tenant/principal`.
    #[serde(default)]
    pub identities: Vec<String>,
    /// A file holding the Standard Webhooks secret (`whsec_` and base64), one a line:
    /// several sign each request with each (a rotation).
    pub secret_file: PathBuf,
    /// Whether the body carries the task's result (and a task's input requests).
    #[serde(default)]
    pub include_result: bool,
    /// How long a delivery is retried before it is recorded as undelivered (`"24h"`;
    /// units s, m, h, d).
    #[serde(default = "default_retry_for")]
    pub retry_for: String,
    /// Hosts (as written in `url`) that may be plain http and private, loopback or
    /// link-local addresses: `["127.0.0.1"]` for a receiver on this box.
    #[serde(default)]
    pub allow_http: Vec<String>,
    /// Longest a delivery attempt may take, connecting included.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Deliveries of this webhook in flight at once (of different tasks: one task's
    /// events go one after the other).
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// The signing keys, read from `secret_file`.
    #[serde(skip)]
    pub secrets: Secrets,
}

fn default_retry_for() -> String {
    "24h".into()
}

fn default_timeout_ms() -> u64 {
    10_000
}

fn default_concurrency() -> usize {
    4
}

/// Signing keys, never shown.
#[derive(Clone, Default, PartialEq)]
pub struct Secrets(pub Vec<Vec<u8>>);

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} secret(s)>", self.0.len())
    }
}

/// What is wrong with a `[[webhooks]]` entry.
#[derive(Debug, thiserror::Error)]
pub enum WebhookConfigError {
    #[error("webhooks[{index}] ({name}): {detail}")]
    Invalid {
        index: usize,
        name: String,
        detail: String,
    },
    #[error("webhooks[{index}]: cannot read secret_file {}: {source}", path.display())]
    SecretFile {
        index: usize,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("two [[webhooks]] are named {name:?}: give each its own `name`")]
    Duplicate { name: String },
}

/// A duration as `"90s"`, `"15m"`, `"24h"`, `"7d"`, in milliseconds.
pub fn parse_duration(text: &str) -> Option<i64> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let number: i64 = number.parse().ok()?;
    let unit_ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    number.checked_mul(unit_ms).filter(|ms| *ms > 0)
}

/// The host of `url` as its authority writes it (IPv6 without brackets), lowercased.
pub fn url_host(url: &str) -> Option<String> {
    let uri: ureq::http::Uri = url.parse().ok()?;
    let host = uri.host()?;
    Some(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase(),
    )
}

impl WebhookConfig {
    /// Its name: `name`, else the URL's host and port.
    pub fn name(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        let uri: Option<ureq::http::Uri> = self.url.parse().ok();
        uri.and_then(|uri| uri.authority().map(|a| a.as_str().to_owned()))
            .map(|authority| {
                // Never credentials: only what follows an `@`.
                authority
                    .rsplit_once('@')
                    .map_or(authority.clone(), |(_, host)| host.to_owned())
            })
            .unwrap_or_else(|| "webhook".into())
    }

    /// The retry horizon in milliseconds (checked by [`check`]).
    pub fn retry_for_ms(&self) -> i64 {
        parse_duration(&self.retry_for).unwrap_or(86_400_000)
    }

    /// Whether `url`'s host is one of `allow_http`.
    pub fn host_allowed(&self) -> bool {
        let Some(host) = url_host(&self.url) else {
            return false;
        };
        self.allow_http.iter().any(|allowed| {
            allowed
                .trim_start_matches('[')
                .trim_end_matches(']')
                .eq_ignore_ascii_case(&host)
        })
    }

    /// Reads the secret(s) of `secret_file` (relative to `base_dir`).
    pub fn load_secret(&mut self, index: usize, base_dir: &Path) -> Result<(), WebhookConfigError> {
        self.secret_file = base_dir.join(&self.secret_file);
        let text = std::fs::read_to_string(&self.secret_file).map_err(|source| {
            WebhookConfigError::SecretFile {
                index,
                path: self.secret_file.clone(),
                source,
            }
        })?;
        let mut secrets = Vec::new();
        for line in text.lines().map(str::trim).filter(|line| !line.is_empty()) {
            secrets.push(decode_secret(line).map_err(|detail| self.invalid(index, detail))?);
        }
        if secrets.is_empty() {
            return Err(self.invalid(index, "secret_file holds no secret".into()));
        }
        self.secrets = Secrets(secrets);
        Ok(())
    }

    fn invalid(&self, index: usize, detail: String) -> WebhookConfigError {
        WebhookConfigError::Invalid {
            index,
            name: self.name(),
            detail,
        }
    }

    /// What it wants, as the store's routes.
    pub fn routes(&self) -> Vec<Route> {
        let name = self.name();
        let tools: Vec<&str> = if self.tools.is_empty() {
            vec![ANY]
        } else {
            self.tools.iter().map(String::as_str).collect()
        };
        // (tenant, principal) pairs.
        let mut identities: Vec<(String, String)> = Vec::new();
        if self.identities.is_empty() {
            identities.push((ANY.into(), ANY.into()));
        }
        for identity in &self.identities {
            identities.push((ANY.into(), identity.clone()));
            if let Some((tenant, principal)) = identity.split_once('/') {
                identities.push((tenant.into(), principal.into()));
            }
        }
        let mut routes = Vec::new();
        for event in &self.events {
            for tool in &tools {
                for (tenant, principal) in &identities {
                    routes.push(Route {
                        event: event.clone(),
                        webhook: name.clone(),
                        tool: (*tool).to_owned(),
                        tenant: tenant.clone(),
                        principal: principal.clone(),
                    });
                }
            }
        }
        routes
    }
}

/// The key of a `whsec_…` secret.
fn decode_secret(text: &str) -> Result<Vec<u8>, String> {
    let encoded = text.strip_prefix(SECRET_PREFIX).ok_or_else(|| {
        "the secret must be a Standard Webhooks secret: whsec_ and base64 (e.g. \
         `printf 'whsec_%s\\n' \"$(head -c 32 /dev/urandom | base64)\"`)"
            .to_owned()
    })?;
    let key = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| "the secret after whsec_ is not base64".to_owned())?;
    if !(24..=64).contains(&key.len()) {
        return Err(format!(
            "the secret is {} bytes; Standard Webhooks secrets are 24 to 64",
            key.len()
        ));
    }
    Ok(key)
}

/// Checks the entries (their secrets are read already): URLs and their schemes, events,
/// horizons, bounds, and that names are unique.
pub fn check(webhooks: &[WebhookConfig]) -> Result<(), WebhookConfigError> {
    let mut names = Vec::new();
    for (index, webhook) in webhooks.iter().enumerate() {
        let invalid = |detail: String| webhook.invalid(index, detail);
        let uri: ureq::http::Uri = webhook
            .url
            .parse()
            .map_err(|_| invalid(format!("url {:?} is not a URL", webhook.url)))?;
        if uri.host().is_none_or(str::is_empty) {
            return Err(invalid("url has no host".into()));
        }
        match uri.scheme_str() {
            Some("https") => {}
            Some("http") if webhook.host_allowed() => {}
            Some("http") => {
                return Err(invalid(format!(
                    "url is plain http: use https, or list its host in allow_http (allow_http = [{:?}])",
                    url_host(&webhook.url).unwrap_or_default()
                )))
            }
            _ => return Err(invalid("url must be https (or http)".into())),
        }
        if webhook.events.is_empty() {
            return Err(invalid(format!(
                "events is empty: name some of {}",
                EVENTS.join(", ")
            )));
        }
        for event in &webhook.events {
            if !EVENTS.contains(&event.as_str()) {
                return Err(invalid(format!(
                    "unknown event {event:?} (known: {})",
                    EVENTS.join(", ")
                )));
            }
        }
        if parse_duration(&webhook.retry_for).is_none() {
            return Err(invalid(format!(
                "retry_for {:?} is not a duration (e.g. \"90m\", \"24h\", \"3d\")",
                webhook.retry_for
            )));
        }
        if !(100..=120_000).contains(&webhook.timeout_ms) {
            return Err(invalid("timeout_ms must be from 100 to 120000".into()));
        }
        if !(1..=64).contains(&webhook.concurrency) {
            return Err(invalid("concurrency must be from 1 to 64".into()));
        }
        let name = webhook.name();
        if name.is_empty()
            || name.len() > 100
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._:-[]".contains(c))
        {
            return Err(invalid(
                "name must be 1 to 100 letters, digits and . _ : - (it labels metrics)".into(),
            ));
        }
        if names.contains(&name) {
            return Err(WebhookConfigError::Duplicate { name });
        }
        names.push(name);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn webhook(url: &str) -> WebhookConfig {
        WebhookConfig {
            name: None,
            url: url.into(),
            events: vec!["task.completed".into()],
            tools: Vec::new(),
            identities: Vec::new(),
            secret_file: PathBuf::new(),
            include_result: false,
            retry_for: default_retry_for(),
            allow_http: Vec::new(),
            timeout_ms: default_timeout_ms(),
            concurrency: default_concurrency(),
            secrets: Secrets(vec![vec![1; 32]]),
        }
    }

    #[test]
    fn http_needs_its_host_in_allow_http() {
        assert!(check(&[webhook("https://hooks.example.com/x")]).is_ok());
        let plain = webhook("http://127.0.0.1:9/x");
        let refused = check(std::slice::from_ref(&plain)).unwrap_err().to_string();
        assert!(
            refused.contains("allow_http = [\"127.0.0.1\"]"),
            "{refused}"
        );
        let mut allowed = plain;
        allowed.allow_http = vec!["127.0.0.1".into()];
        assert!(check(&[allowed]).is_ok());
        let mut v6 = webhook("http://[::1]:9/x");
        v6.allow_http = vec!["::1".into()];
        assert!(check(&[v6]).is_ok());
        assert!(check(&[webhook("ftp://example.com/")]).is_err());
    }

    #[test]
    fn events_durations_and_names_are_checked() {
        let mut bad = webhook("https://a.example/");
        bad.events = vec!["task.done".into()];
        assert!(check(&[bad]).unwrap_err().to_string().contains("task.done"));
        let mut bad = webhook("https://a.example/");
        bad.retry_for = "soon".into();
        assert!(check(&[bad]).is_err());
        assert_eq!(parse_duration("90m"), Some(5_400_000));
        assert_eq!(parse_duration("24h"), Some(86_400_000));
        assert_eq!(parse_duration("0s"), None);
        assert_eq!(parse_duration("5"), None);
        let twice = [
            webhook("https://a.example/1"),
            webhook("https://a.example/2"),
        ];
        assert!(matches!(
            check(&twice),
            Err(WebhookConfigError::Duplicate { .. })
        ));
        assert_eq!(
            webhook("https://u:p@a.example:8443/x").name(),
            "a.example:8443"
        );
    }

    #[test]
    fn secrets_are_standard_webhooks_secrets() {
        let key = decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(key.len(), 24);
        assert!(decode_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(decode_secret("whsec_c2hvcnQ=").is_err());
        assert_eq!(format!("{:?}", Secrets(vec![key])), "<1 secret(s)>");
    }

    #[test]
    fn routes_cover_events_tools_and_identities() {
        let mut hook = webhook("https://a.example/");
        hook.events = vec!["task.completed".into(), "task.failed".into()];
        hook.tools = vec!["deploy".into()];
        hook.identities = vec!["alice".into(), "acme/bob".into()];
        let routes = hook.routes();
        assert_eq!(routes.len(), 2 * 3);
        assert!(routes
            .iter()
            .any(|r| r.tenant == "acme" && r.principal == "bob" && r.tool == "deploy"));
        assert!(routes.iter().all(|r| r.webhook == "a.example"));
    }
}
