//! The checks of a configuration that serde cannot express: values in range, fields
//! that must agree with each other, and what a non-loopback listener needs. Run at
//! parse, and again after command-line overrides and before a reload swaps anything.

use std::collections::HashMap;

use taskd_auth::{TokenConfig, ROLES};
use taskd_engine::config::{Backend, MIN_CACHE_BYTES};
use taskd_engine::model::MAX_WEIGHT;
use taskd_tools::PRIORITIES;

use super::oauth::{self, check_public_url};
use super::{Config, ConfigError};

impl Config {
    /// Cross-field checks that serde cannot express. Run again after command-line
    /// overrides.
    pub fn check(&self) -> Result<(), ConfigError> {
        let s = &self.server;
        if !s.endpoint.starts_with('/') || s.endpoint == "/healthz" {
            return Err(ConfigError::Endpoint);
        }
        if s.handler_threads == Some(0) || self.workers.threads == 0 {
            return Err(ConfigError::NoThreads);
        }
        if self.limits.max_body_bytes < 1024 || self.limits.max_json_depth < 8 {
            return Err(ConfigError::TinyLimits);
        }
        if self.limits.page_size == 0 {
            return Err(ConfigError::PageSize);
        }
        if s.idle_timeout_ms == 0
            || s.request_timeout_ms == 0
            || s.write_timeout_ms == 0
            || s.min_write_bytes_per_sec == 0
        {
            return Err(ConfigError::ConnectionTimes);
        }
        if self.limits.max_buffered_request_bytes < self.limits.max_body_bytes {
            return Err(ConfigError::BufferedBelowBody);
        }
        if self.workers.lease_ms < 300 {
            return Err(ConfigError::ShortLease);
        }
        if self.tasks.ttl_ms == 0 || self.tasks.poll_interval_ms == 0 {
            return Err(ConfigError::TaskTimes);
        }
        taskd_engine::output::OutputRules::new(&self.output)?;
        taskd_webhooks::config::check(&self.webhooks)?;
        let t = &self.tasks;
        if t.max_live_tasks_per_identity == 0
            || t.creation_burst_per_identity == 0
            || t.max_inline_waits_per_identity == 0
            || !(t.creations_per_sec_per_identity.is_finite()
                && t.creations_per_sec_per_identity >= 0.0)
        {
            return Err(ConfigError::TaskQuotas);
        }
        if self.tasks.inline_wait_ms > taskd_tools::MAX_INLINE_WAIT_MS {
            return Err(ConfigError::InlineWait {
                field: "tasks.inline_wait_ms".into(),
                value: self.tasks.inline_wait_ms,
            });
        }
        let n = &self.notifications;
        if n.max_subscriptions == 0
            || n.max_subscriptions_per_identity == 0
            || n.queue_len == 0
            || n.max_stall_ms == 0
            || n.keep_alive_ms == 0
            || n.max_stream_lifetime_ms == 0
        {
            return Err(ConfigError::NotificationLimits);
        }
        if self.workers.janitor_interval_ms == 0 {
            return Err(ConfigError::JanitorInterval);
        }
        if self.store.cache_bytes < MIN_CACHE_BYTES {
            return Err(ConfigError::CacheBytes {
                value: self.store.cache_bytes,
            });
        }
        if self.store.backend == Backend::Postgres {
            taskd_postgres::check_url(&self.store)?;
        }
        let bounds = &self.sessions;
        if bounds.max_sessions == 0
            || bounds.max_sessions_per_identity == 0
            || bounds.idle_timeout_ms == 0
            || bounds.client_request_timeout_ms == 0
        {
            return Err(ConfigError::SessionLimits);
        }
        if self.dashboard.max_logins_per_identity == 0 {
            return Err(ConfigError::DashboardLogins);
        }
        for (index, token) in self.auth.tokens.iter().enumerate() {
            let digest_ok =
                token.sha256.len() == 64 && token.sha256.bytes().all(|b| b.is_ascii_hexdigit());
            if !digest_ok {
                return Err(ConfigError::TokenDigest { index });
            }
            if token.principal.is_empty() {
                return Err(ConfigError::TokenPrincipal { index });
            }
            if let Some(role) = token.roles.iter().find(|r| !ROLES.contains(&r.as_str())) {
                return Err(ConfigError::UnknownRole {
                    index,
                    role: role.clone(),
                });
            }
            if !(1..=MAX_WEIGHT).contains(&token.weight) {
                return Err(ConfigError::TokenWeight { index });
            }
            if !PRIORITIES.contains(&token.priority) {
                return Err(ConfigError::TokenPriority { index });
            }
            let zero = [
                ("max_sessions", token.max_sessions == Some(0)),
                ("max_live_tasks", token.max_live_tasks == Some(0)),
                ("creation_burst", token.creation_burst == Some(0)),
                ("max_inline_waits", token.max_inline_waits == Some(0)),
                (
                    "max_dashboard_logins",
                    token.max_dashboard_logins == Some(0),
                ),
                (
                    "creations_per_sec",
                    token
                        .creations_per_sec
                        .is_some_and(|rate| !(rate.is_finite() && rate >= 0.0)),
                ),
            ];
            if let Some((key, _)) = zero.iter().find(|(_, bad)| *bad) {
                return Err(ConfigError::TokenQuota { index, key });
            }
        }
        check_token_shares(&self.auth.tokens)?;
        let path = &self.dashboard.path;
        let path_ok = path.len() > 1
            && path.starts_with('/')
            && !path.ends_with('/')
            && path
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/-_.".contains(&b));
        let clashes = [s.endpoint.as_str(), "/healthz", "/metrics"]
            .iter()
            .any(|taken| taken.starts_with(path.as_str()) || path.starts_with(taken));
        if !path_ok || clashes {
            return Err(ConfigError::DashboardPath { path: path.clone() });
        }
        if let Some(url) = &s.public_url {
            check_public_url(url).map_err(|why| ConfigError::OAuthUrl {
                field: "server.public_url".into(),
                why,
            })?;
        }
        if let Some(oauth) = &self.auth.oauth {
            oauth::check(oauth)?;
            if s.public_url.is_none() && !s.listen.ip().is_loopback() {
                return Err(ConfigError::OAuthWithoutPublicUrl { listen: s.listen });
            }
        }
        if let Some(endpoint) = &self.telemetry.otlp_endpoint {
            if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                return Err(ConfigError::TelemetryEndpoint {
                    endpoint: endpoint.clone(),
                });
            }
        }
        if let Some(url) = &self.telemetry.trace_url {
            if !url.contains("{trace_id}")
                || !(url.starts_with("http://") || url.starts_with("https://"))
            {
                return Err(ConfigError::TraceUrl { url: url.clone() });
            }
        }
        super::schedules::built(self)?;
        if !s.listen.ip().is_loopback() {
            let authenticated = !self.auth.tokens.is_empty() || self.auth.oauth.is_some();
            if !authenticated && !s.allow_unauthenticated_remote {
                return Err(ConfigError::UnauthenticatedRemote { listen: s.listen });
            }
            if s.allowed_hosts.is_empty() {
                return Err(ConfigError::RemoteWithoutHosts { listen: s.listen });
            }
        }
        Ok(())
    }
}

/// A token's share as it sets it: an unset quota differs from one set to the default,
/// a mistake waiting for the default to change.
fn as_set(token: &TokenConfig) -> impl PartialEq {
    (
        (token.weight, token.priority, token.max_sessions),
        (
            token.max_live_tasks,
            token.creations_per_sec,
            token.creation_burst,
            token.max_inline_waits,
            token.max_dashboard_logins,
        ),
    )
}

/// Refuses tokens that grant one identity with different shares: which one a request
/// got would depend on the token it showed.
fn check_token_shares(tokens: &[TokenConfig]) -> Result<(), ConfigError> {
    let mut first: HashMap<(&str, &str), usize> = HashMap::new();
    for (index, token) in tokens.iter().enumerate() {
        let key = (token.tenant.as_str(), token.principal.as_str());
        match first.get(&key) {
            Some(&earlier) if as_set(&tokens[earlier]) != as_set(token) => {
                return Err(ConfigError::TokenShares {
                    first: earlier,
                    index,
                });
            }
            Some(_) => {}
            None => {
                first.insert(key, index);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(tenant: &str, principal: &str, weight: u32, priority: i32) -> TokenConfig {
        TokenConfig {
            principal: principal.into(),
            tenant: tenant.into(),
            sha256: "0".repeat(64),
            roles: Vec::new(),
            weight,
            priority,
            max_sessions: None,
            max_live_tasks: None,
            creations_per_sec: None,
            creation_burst: None,
            max_inline_waits: None,
            max_dashboard_logins: None,
        }
    }

    #[test]
    fn tokens_of_one_identity_must_agree_on_its_share() {
        let same = [
            token("t", "a", 2, 0),
            token("t", "a", 2, 0),
            token("u", "a", 1, 0),
        ];
        assert!(check_token_shares(&same).is_ok());
        let differ = [
            token("t", "a", 2, 0),
            token("u", "a", 1, 0),
            token("t", "a", 1, 0),
        ];
        let error = check_token_shares(&differ).unwrap_err().to_string();
        assert!(
            error.contains("auth.tokens[0] and auth.tokens[2]"),
            "{error}"
        );
        let mut capped = token("t", "a", 2, 0);
        capped.max_sessions = Some(64);
        assert!(check_token_shares(&[token("t", "a", 2, 0), capped]).is_err());
    }
}
