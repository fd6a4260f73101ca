//! Authorization server metadata: RFC 8414 first, then OpenID Connect Discovery, at
//! every well-known URL the MCP authorization spec has clients try. A document whose
//! `issuer` is not exactly the configured issuer is refused (a mix-up defence: its keys
//! would vouch for someone else's tokens).

use super::http::{get_json, FetchError};

/// What this server uses from the authorization server's metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderMetadata {
    pub jwks_uri: Option<String>,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
    pub introspection_endpoint: Option<String>,
}

/// Fetches the metadata of `issuer`: the first well-known URL that answers with a
/// document for exactly this issuer wins.
pub fn discover(agent: &ureq::Agent, issuer: &str) -> Result<ProviderMetadata, FetchError> {
    let mut last = None;
    for url in well_known_urls(issuer) {
        match get_json(agent, &url) {
            Ok(fetched) if fetched.body["issuer"].as_str() == Some(issuer) => {
                let text = |name: &str| fetched.body[name].as_str().map(str::to_owned);
                return Ok(ProviderMetadata {
                    jwks_uri: text("jwks_uri"),
                    authorization_endpoint: text("authorization_endpoint"),
                    token_endpoint: text("token_endpoint"),
                    introspection_endpoint: text("introspection_endpoint"),
                });
            }
            Ok(_) => {
                log::warn!("oauth: {url} describes another issuer; ignored");
                last = Some(FetchError::NotJson { url });
            }
            // A connection failure will not go better at the next URL of the same host.
            Err(error @ FetchError::Unreachable { .. }) => return Err(error),
            Err(error) => last = Some(error),
        }
    }
    Err(last.unwrap_or(FetchError::NotJson {
        url: issuer.to_owned(),
    }))
}

/// RFC 8414 §3.1 inserts the well-known segment between host and path; OpenID Connect
/// Discovery appends it to the issuer (and some providers serve the inserted form).
fn well_known_urls(issuer: &str) -> Vec<String> {
    let issuer = issuer.trim_end_matches('/');
    let (origin, path) = split_origin(issuer);
    if path.is_empty() {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
            format!("{issuer}/.well-known/openid-configuration"),
        ]
    }
}

/// `https://host:port` and `/path` (empty when there is none).
pub fn split_origin(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(slash) => url.split_at(after_scheme + slash),
        None => (url, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_urls_follow_rfc_8414_then_oidc() {
        assert_eq!(
            well_known_urls("https://idp.example.com"),
            [
                "https://idp.example.com/.well-known/oauth-authorization-server",
                "https://idp.example.com/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            well_known_urls("https://kc.example.com/realms/team"),
            [
                "https://kc.example.com/.well-known/oauth-authorization-server/realms/team",
                "https://kc.example.com/.well-known/openid-configuration/realms/team",
                "https://kc.example.com/realms/team/.well-known/openid-configuration"
            ]
        );
    }
}
