//! Authentication: turns a request's `Authorization` header into an [`Identity`].
//!
//! Tokens are configured only as SHA-256 digests; the presented token is hashed and
//! looked up, so the clear token is never stored or logged. With no tokens configured
//! the server runs anonymous (and `config` refuses non-loopback binds unless told).

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use crate::config::TokenConfig;

/// Who is asking, as far as task authorization is concerned. Every task is bound to the
/// identity that created it and is visible to that identity only.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    pub endpoint: String,
    pub tenant: String,
    pub principal: String,
}

impl Identity {
    /// Everyone's identity on `endpoint` when no tokens are configured (and the local
    /// host's over stdio).
    pub fn anonymous(endpoint: &str) -> Identity {
        Identity {
            endpoint: endpoint.to_owned(),
            tenant: String::new(),
            principal: "anonymous".into(),
        }
    }
}

pub struct Authenticator {
    endpoint: String,
    /// token digest -> (tenant, principal)
    tokens: HashMap<[u8; 32], (String, String)>,
}

/// The request must be refused with 401.
#[derive(Debug, PartialEq, Eq)]
pub struct Unauthorized;

impl Authenticator {
    pub fn new(endpoint: &str, tokens: &[TokenConfig]) -> Authenticator {
        let tokens = tokens
            .iter()
            .filter_map(|token| {
                let digest: [u8; 32] = hex::decode(&token.sha256).ok()?.try_into().ok()?;
                Some((digest, (token.tenant.clone(), token.principal.clone())))
            })
            .collect();
        Authenticator {
            endpoint: endpoint.to_owned(),
            tokens,
        }
    }

    /// Resolves the `Authorization` header value (if any).
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Identity, Unauthorized> {
        if self.tokens.is_empty() {
            return Ok(Identity::anonymous(&self.endpoint));
        }
        let header = authorization.ok_or(Unauthorized)?.trim();
        let (scheme, token) = header.split_once(' ').ok_or(Unauthorized)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(Unauthorized);
        }
        let digest: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
        let (tenant, principal) = self.tokens.get(&digest).ok_or(Unauthorized)?;
        Ok(Identity {
            endpoint: self.endpoint.clone(),
            tenant: tenant.clone(),
            principal: principal.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(principal: &str, secret: &str) -> TokenConfig {
        TokenConfig {
            principal: principal.into(),
            tenant: "t".into(),
            sha256: hex::encode(Sha256::digest(secret.as_bytes())),
        }
    }

    #[test]
    fn bearer_tokens_map_to_identities() {
        let auth = Authenticator::new("/mcp", &[token("alice", "s3cret")]);
        let who = auth.authenticate(Some("Bearer s3cret")).unwrap();
        assert_eq!(who.principal, "alice");
        assert_eq!(auth.authenticate(Some("Bearer nope")), Err(Unauthorized));
        assert_eq!(auth.authenticate(None), Err(Unauthorized));
        assert_eq!(auth.authenticate(Some("Basic s3cret")), Err(Unauthorized));
    }
}
