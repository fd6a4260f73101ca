//! `[auth.oauth]`: mcp-taskd as an OAuth 2.1 protected resource (src/auth/oauth/), and
//! the URL checks it shares with `server.public_url`.

use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;

/// `[auth.oauth]`, as written. The names `issuer`, `jwks_uri`, `audiences`,
/// `scopes_supported`, `principal_claim`, `tenant_claim`, `roles_claim` and `advertise`
/// are a contract (BRIEF.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// The authorization server, exactly as its tokens' `iss` says it. Its metadata is
    /// found by RFC 8414 or OpenID Connect discovery, unless `jwks_uri` is given.
    pub issuer: String,
    /// The key set; given, no discovery is needed for JWT access tokens.
    #[serde(default)]
    pub jwks_uri: Option<String>,
    /// Audiences accepted besides the canonical resource URL (`server.public_url` +
    /// `server.endpoint`): aliases for providers that cannot put the URL in `aud`
    /// (Entra's `api://…`, a Keycloak client id).
    #[serde(default)]
    pub audiences: Vec<String>,
    /// What the protected-resource metadata advertises, and what a 401 asks for.
    #[serde(default)]
    pub scopes_supported: Vec<String>,
    /// The claim naming the person (a task's principal).
    #[serde(default = "default_principal_claim")]
    pub principal_claim: String,
    /// The claim naming the tenant; none: every token's tenant is empty. A dotted path
    /// (`realm_access.roles`) reads nested objects.
    #[serde(default)]
    pub tenant_claim: Option<String>,
    /// The claim listing roles (an array, or a space-separated string); a dotted path
    /// reads nested objects.
    #[serde(default)]
    pub roles_claim: Option<String>,
    /// The role in `roles_claim` that opens the dashboard.
    #[serde(default = "default_admin_role")]
    pub admin_role: String,
    /// Serve the protected-resource metadata and name it in 401 challenges. Off, access
    /// tokens still work, but clients are not told about OAuth (hosts that drop their
    /// static header once a server advertises OAuth keep working).
    #[serde(default = "default_true")]
    pub advertise: bool,
    /// What `tools/list` does with a tool the caller's token lacks scopes for.
    #[serde(default)]
    pub tools_list: ToolsListPolicy,
    /// RFC 7662 introspection, for opaque (non-JWT) access tokens.
    #[serde(default)]
    pub introspection_endpoint: Option<String>,
    /// This server's client at the authorization server: introspection and the
    /// dashboard's login.
    #[serde(default)]
    pub client_id: Option<String>,
    /// A file holding the client secret (trailing newline ignored); relative to the
    /// configuration file's directory.
    #[serde(default)]
    pub client_secret_file: Option<PathBuf>,
    /// An unknown `kid` refetches the key set at most once per this long.
    #[serde(default = "default_jwks_cooldown_ms")]
    pub jwks_cooldown_ms: u64,
    /// Longest a request waits on the authorization server (discovery, key set,
    /// introspection); past it the request is answered without it.
    #[serde(default = "default_provider_timeout_ms")]
    pub provider_timeout_ms: u64,
}

/// `[auth.oauth] tools_list`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolsListPolicy {
    /// Every tool is listed; a tool the token lacks scopes for says which in
    /// `_meta["io.github.mcp-taskd/requiredScopes"]`.
    #[default]
    Mark,
    /// Tools the token lacks scopes for are left out (their calls get 403 naming the
    /// scopes, so nothing is hidden that would work).
    Filter,
}

fn default_principal_claim() -> String {
    "sub".into()
}

fn default_admin_role() -> String {
    "admin".into()
}

fn default_true() -> bool {
    true
}

fn default_jwks_cooldown_ms() -> u64 {
    30_000
}

fn default_provider_timeout_ms() -> u64 {
    2_000
}

impl OAuthConfig {
    /// Checks that serde cannot express.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        for (field, url) in [
            ("issuer", Some(&self.issuer)),
            ("jwks_uri", self.jwks_uri.as_ref()),
            (
                "introspection_endpoint",
                self.introspection_endpoint.as_ref(),
            ),
        ] {
            if let Some(url) = url {
                check_provider_url(url).map_err(|why| ConfigError::OAuthUrl {
                    field: format!("auth.oauth.{field}"),
                    why,
                })?;
            }
        }
        if self.principal_claim.is_empty() {
            return Err(ConfigError::OAuthClaim);
        }
        if let Some(scope) = self.scopes_supported.iter().find(|s| !is_scope_token(s)) {
            return Err(ConfigError::Scope {
                scope: scope.clone(),
                field: "auth.oauth.scopes_supported".into(),
            });
        }
        if self.audiences.iter().any(String::is_empty) {
            return Err(ConfigError::OAuthAudience);
        }
        if self.introspection_endpoint.is_some()
            && (self.client_id.is_none() || self.client_secret_file.is_none())
        {
            return Err(ConfigError::IntrospectionClient);
        }
        if self.jwks_cooldown_ms == 0 || self.provider_timeout_ms == 0 {
            return Err(ConfigError::OAuthTimes);
        }
        Ok(())
    }
}

/// RFC 6749 §3.3 `scope-token`: one or more of %x21 / %x23-5B / %x5D-7E (no space, `"`
/// or `\`), so that a scope can be quoted in a `WWW-Authenticate` header as it is.
pub fn is_scope_token(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

/// An authorization server URL: `https://`, or `http://` on a loopback host (a test
/// provider on this machine); no query or fragment.
fn check_provider_url(url: &str) -> Result<(), String> {
    let (scheme, host) = split_url(url)?;
    if scheme == "https" || (scheme == "http" && is_loopback_host(host)) {
        Ok(())
    } else {
        Err("must be https:// (http:// only on a loopback host)".into())
    }
}

/// `server.public_url`: where clients reach this server, `http(s)://host[:port][/path]`
/// without a query or fragment.
pub(super) fn check_public_url(url: &str) -> Result<(), String> {
    let (scheme, _) = split_url(url)?;
    if scheme == "https" || scheme == "http" {
        Ok(())
    } else {
        Err("must start with https:// or http://".into())
    }
}

/// The scheme and host of an absolute URL, after the checks every URL here shares.
fn split_url(url: &str) -> Result<(&str, &str), String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| "must be an absolute URL (https://host/…)".to_string())?;
    if url.contains(['?', '#']) || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must have no query, fragment or spaces".into());
    }
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    if host.is_empty() || authority.contains('@') {
        return Err("must name a host (and no user)".into());
    }
    Ok((scheme, host))
}

fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_urls_are_https_or_loopback_http() {
        assert!(check_provider_url("https://login.example.com/tenant/v2.0").is_ok());
        assert!(check_provider_url("http://127.0.0.1:9000").is_ok());
        assert!(check_provider_url("http://[::1]:9000/x").is_ok());
        assert!(check_provider_url("http://localhost:9000").is_ok());
        assert!(check_provider_url("http://idp.example.com").is_err());
        assert!(check_provider_url("https://idp.example.com/?x=1").is_err());
        assert!(check_provider_url("https://user@idp.example.com").is_err());
        assert!(check_provider_url("idp.example.com").is_err());
        assert!(check_public_url("https://mcp.example.com/team").is_ok());
        assert!(check_public_url("ftp://mcp.example.com").is_err());
    }

    #[test]
    fn scopes_must_be_quotable_as_they_are() {
        assert!(is_scope_token("tasks:write"));
        assert!(is_scope_token("https://graph.example/.default"));
        for bad in ["", "a b", "a\"b", "a\\b", "é"] {
            assert!(!is_scope_token(bad), "{bad:?}");
        }
    }
}
