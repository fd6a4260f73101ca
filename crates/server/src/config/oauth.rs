//! The checks of `[auth.oauth]` (`taskd_auth::OAuthConfig`: mcp-taskd as an OAuth 2.1
//! protected resource) that serde cannot express, and the URL checks they share with
//! `server.public_url`.

use taskd_auth::OAuthConfig;
use taskd_protocol::is_scope_token;

use super::ConfigError;

/// Checks of `[auth.oauth]` that serde cannot express.
pub(super) fn check(oauth: &OAuthConfig) -> Result<(), ConfigError> {
    for (field, url) in [
        ("issuer", Some(&oauth.issuer)),
        ("jwks_uri", oauth.jwks_uri.as_ref()),
        (
            "introspection_endpoint",
            oauth.introspection_endpoint.as_ref(),
        ),
    ] {
        if let Some(url) = url {
            check_provider_url(url).map_err(|why| ConfigError::OAuthUrl {
                field: format!("auth.oauth.{field}"),
                why,
            })?;
        }
    }
    if oauth.principal_claim.is_empty() {
        return Err(ConfigError::OAuthClaim);
    }
    if let Some(scope) = oauth.scopes_supported.iter().find(|s| !is_scope_token(s)) {
        return Err(ConfigError::Scope {
            scope: scope.clone(),
            field: "auth.oauth.scopes_supported".into(),
        });
    }
    if oauth.audiences.iter().any(String::is_empty) {
        return Err(ConfigError::OAuthAudience);
    }
    if oauth.introspection_endpoint.is_some()
        && (oauth.client_id.is_none() || oauth.client_secret_file.is_none())
    {
        return Err(ConfigError::IntrospectionClient);
    }
    if oauth.jwks_cooldown_ms == 0 || oauth.provider_timeout_ms == 0 {
        return Err(ConfigError::OAuthTimes);
    }
    Ok(())
}

/// An authorization server URL: `https://`, or `http://` on a loopback host (a test
/// provider on this machine); no query or fragment.
fn check_provider_url(url: &str) -> Result<(), &'static str> {
    let (scheme, host) = split_url(url)?;
    if scheme == "https" || (scheme == "http" && is_loopback_host(host)) {
        Ok(())
    } else {
        Err("must be https:// (http:// only on a loopback host)")
    }
}

/// `server.public_url`: where clients reach this server, `http(s)://host[:port][/path]`
/// without a query or fragment.
pub(super) fn check_public_url(url: &str) -> Result<(), &'static str> {
    let (scheme, _) = split_url(url)?;
    if scheme == "https" || scheme == "http" {
        Ok(())
    } else {
        Err("must start with https:// or http://")
    }
}

/// The scheme and host of an absolute URL, after the checks every URL here shares.
fn split_url(url: &str) -> Result<(&str, &str), &'static str> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or("must be an absolute URL (https://host/…)")?;
    if url.contains(['?', '#']) || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must have no query, fragment or spaces");
    }
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    if host.is_empty() || authority.contains('@') {
        return Err("must name a host (and no user)");
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
}
