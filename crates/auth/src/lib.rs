//! Authentication: turns a request's `Authorization` header into a [`Caller`]: an
//! [`Identity`], the [`Scopes`] its credential carries, and the [`Credential`] itself.
//!
//! Static tokens are configured only as SHA-256 digests; the presented token is hashed
//! and looked up, so the clear token is never stored or logged. OAuth access tokens
//! (`[auth.oauth]`, [`oauth`]) are verified against the authorization server's keys.
//! With neither configured the server runs anonymous (and the server's configuration
//! checks refuse non-loopback binds unless told).
//!
//! May depend on: `taskd-protocol` (the `Identity` and `Scopes` it produces),
//! `taskd-base`. Must never know: tasks, stores, tools, transports; it owns `[auth]`'s
//! settings ([`AuthConfig`]) and reads nothing else of the configuration.

mod config;
pub mod oauth;

pub use config::{AuthConfig, ClientSecret, OAuthConfig, TokenConfig, ToolsListPolicy, ROLES};

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use taskd_protocol::{Identity, Scopes};

use oauth::OAuth;

/// Who is calling, what its credential lets it reach, and the credential.
#[derive(Debug, Clone)]
pub struct Caller {
    pub identity: Identity,
    pub scopes: Scopes,
    pub credential: Credential,
}

/// Why a request was not authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No credential (or not a bearer one): 401 with the plain challenge.
    Missing,
    /// A credential that is not valid here: 401 `invalid_token`, with this description.
    Invalid(&'static str),
    /// The authorization server could not be asked in time: 503, try again.
    Unavailable,
}

pub struct Authenticator {
    endpoint: String,
    /// Access tokens from an authorization server, when `[auth.oauth]` is configured.
    pub oauth: Option<OAuth>,
    /// token digest -> (tenant, principal)
    tokens: HashMap<[u8; 32], (String, String)>,
    /// Digests of the tokens with the `admin` role.
    admins: std::collections::HashSet<[u8; 32]>,
}

/// What a request may do on the operator surfaces (the dashboard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// An admin-role token, or anyone when no tokens are configured.
    Admin,
    /// A valid token without the admin role: MCP only.
    McpOnly,
}

/// The request must be refused with 401.
#[derive(Debug, PartialEq, Eq)]
pub struct Unauthorized;

/// What a request authenticated with: a configured token (by its SHA-256 digest, never
/// the token itself), or nothing at all when no tokens are configured.
///
/// Whatever outlives the request that opened it (a listen stream, a legacy session and
/// its GET stream, a dashboard login) keeps its credential, so that a reload revoking
/// the token ends it: it lives only while [`Authenticator::still_grants`] says the
/// credential still grants the identity it was opened for (a rotated token for the same
/// principal does not keep a leaked one's stream alive). Another kind of credential
/// (OAuth) becomes a variant here, with its own rule in `still_grants`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Credential {
    /// No tokens are configured: everyone is anonymous.
    Anonymous,
    /// A `[[auth.tokens]]` entry, by the digest of the token presented.
    Token([u8; 32]),
    /// The host on stdin/stdout (`mcp-taskd stdio`): the process's own user, whom no
    /// configuration revokes.
    Local,
    /// An OAuth access token (never kept), valid until `exp` (Unix seconds): it grants
    /// while `[auth.oauth]` still names the identity's issuer, until then.
    Access { exp: u64 },
    /// A dashboard sign-in at `[auth.oauth]`'s provider whose ID token carried the
    /// admin role (`auth::oauth::sign_in`): it grants while that sign-in is offered.
    SignIn,
}

impl Authenticator {
    pub fn new(endpoint: &str, tokens: &[TokenConfig]) -> Authenticator {
        let digest_of = |token: &TokenConfig| -> Option<[u8; 32]> {
            hex::decode(&token.sha256).ok()?.try_into().ok()
        };
        let by_digest = tokens
            .iter()
            .filter_map(|token| {
                Some((
                    digest_of(token)?,
                    (token.tenant.clone(), token.principal.clone()),
                ))
            })
            .collect();
        let admins = tokens
            .iter()
            .filter(|token| token.roles.iter().any(|role| role == "admin"))
            .filter_map(digest_of)
            .collect();
        Authenticator {
            endpoint: endpoint.to_owned(),
            oauth: None,
            tokens: by_digest,
            admins,
        }
    }

    /// Also accepts access tokens of `oauth`.
    pub fn with_oauth(mut self, oauth: Option<OAuth>) -> Authenticator {
        self.oauth = oauth;
        self
    }

    /// Whether credentials are required (else everyone is anonymous, and an admin).
    pub fn has_tokens(&self) -> bool {
        !self.tokens.is_empty() || self.oauth.is_some()
    }

    /// What a clear static token (a login form's) grants.
    pub fn access_of_token(&self, token: &str) -> Result<Access, Unauthorized> {
        if !self.has_tokens() {
            return Ok(Access::Admin);
        }
        let digest: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
        if self.admins.contains(&digest) {
            Ok(Access::Admin)
        } else if self.tokens.contains_key(&digest) {
            Ok(Access::McpOnly)
        } else {
            Err(Unauthorized)
        }
    }

    /// What an `Authorization` header (if any) grants: a static token by its roles, an
    /// access token by its roles claim.
    pub fn access(&self, authorization: Option<&str>) -> Result<Access, Unauthorized> {
        if !self.has_tokens() {
            return Ok(Access::Admin);
        }
        let token = bearer_token(authorization).ok_or(Unauthorized)?;
        match (&self.oauth, self.access_of_token(token)) {
            (Some(oauth), Err(Unauthorized)) => match oauth.verify(token) {
                Ok(grant) if grant.admin => Ok(Access::Admin),
                Ok(_) => Ok(Access::McpOnly),
                Err(_) => Err(Unauthorized),
            },
            (_, access) => access,
        }
    }

    /// Resolves the `Authorization` header value (if any): a static token by its
    /// digest, else an access token of `[auth.oauth]`.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Caller, Refusal> {
        if !self.has_tokens() {
            return Ok(Caller {
                identity: Identity::anonymous(&self.endpoint),
                scopes: Scopes::Unrestricted,
                credential: Credential::Anonymous,
            });
        }
        let token = bearer_token(authorization).ok_or(Refusal::Missing)?;
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(identity) = self.identity_of(&digest) {
            return Ok(Caller {
                identity,
                scopes: Scopes::Unrestricted,
                credential: Credential::Token(digest),
            });
        }
        let Some(oauth) = &self.oauth else {
            return Err(Refusal::Invalid("unknown token"));
        };
        match oauth.verify_digested(token, digest) {
            Ok(grant) => Ok(Caller {
                identity: grant.identity.clone(),
                scopes: grant.scopes.clone(),
                credential: Credential::Access { exp: grant.exp },
            }),
            Err(oauth::Refusal::Invalid(why)) => Err(Refusal::Invalid(why)),
            Err(oauth::Refusal::Unavailable) => Err(Refusal::Unavailable),
        }
    }

    fn identity_of(&self, digest: &[u8; 32]) -> Option<Identity> {
        let (tenant, principal) = self.tokens.get(digest)?;
        Some(Identity {
            endpoint: self.endpoint.clone(),
            issuer: String::new(),
            tenant: tenant.clone(),
            principal: principal.clone(),
        })
    }

    /// Whether `credential` still authenticates as `identity` here: false once its token
    /// is gone, or now names another principal or tenant, and for the anonymous
    /// credential once tokens are configured.
    pub fn still_grants(&self, credential: &Credential, identity: &Identity) -> bool {
        match credential {
            Credential::Anonymous => {
                !self.has_tokens() && *identity == Identity::anonymous(&self.endpoint)
            }
            Credential::Token(digest) => self.identity_of(digest).as_ref() == Some(identity),
            Credential::Local => true,
            Credential::Access { exp } => {
                let now_s = taskd_base::clock::now_ms().max(0) as u64 / 1000;
                now_s < exp.saturating_add(oauth::jwt::LEEWAY_S)
                    && self
                        .oauth
                        .as_ref()
                        .is_some_and(|oauth| oauth.metadata.issuer == identity.issuer)
            }
            Credential::SignIn => self.oauth.as_ref().is_some_and(|oauth| {
                oauth.offers_sign_in() && oauth.metadata.issuer == identity.issuer
            }),
        }
    }

    /// Every credential that opens the operator surfaces here.
    pub fn admin_credentials(&self) -> Vec<Credential> {
        if !self.has_tokens() {
            return vec![Credential::Anonymous];
        }
        let signed_in = self
            .oauth
            .as_ref()
            .is_some_and(OAuth::offers_sign_in)
            .then_some(Credential::SignIn);
        self.admins
            .iter()
            .copied()
            .map(Credential::Token)
            .chain(signed_in)
            .collect()
    }

    /// Whether `credential` opens the operator surfaces here (the admin role, or no
    /// tokens at all).
    pub fn grants_admin(&self, credential: &Credential) -> bool {
        match credential {
            Credential::Anonymous => !self.has_tokens(),
            Credential::Token(digest) => self.admins.contains(digest),
            Credential::SignIn => self.oauth.as_ref().is_some_and(OAuth::offers_sign_in),
            Credential::Local | Credential::Access { .. } => false,
        }
    }
}

/// The token of a `Bearer` `Authorization` header value (scheme case-insensitive).
fn bearer_token(authorization: Option<&str>) -> Option<&str> {
    let (scheme, token) = authorization?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(principal: &str, secret: &str) -> TokenConfig {
        TokenConfig {
            principal: principal.into(),
            tenant: "t".into(),
            sha256: hex::encode(Sha256::digest(secret.as_bytes())),
            roles: Vec::new(),
            weight: 1,
            priority: 0,
            max_sessions: None,
            max_live_tasks: None,
            creations_per_sec: None,
            creation_burst: None,
            max_inline_waits: None,
            max_dashboard_logins: None,
        }
    }

    #[test]
    fn bearer_tokens_map_to_identities() {
        let auth = Authenticator::new("/mcp", &[token("alice", "s3cret")]);
        let who = auth.authenticate(Some("Bearer s3cret")).unwrap();
        assert_eq!(who.identity.principal, "alice");
        assert_eq!(who.scopes, Scopes::Unrestricted);
        let refused = |header| auth.authenticate(header).unwrap_err();
        assert_eq!(
            refused(Some("Bearer nope")),
            Refusal::Invalid("unknown token")
        );
        assert_eq!(refused(None), Refusal::Missing);
        assert_eq!(refused(Some("Basic s3cret")), Refusal::Missing);
        assert_eq!(refused(Some("Bearer ")), Refusal::Missing);
    }

    #[test]
    fn only_admin_role_tokens_reach_the_operator_surface() {
        let mut boss = token("boss", "b0ss");
        boss.roles = vec!["admin".into()];
        let auth = Authenticator::new("/mcp", &[token("alice", "s3cret"), boss]);
        assert_eq!(auth.access(Some("Bearer b0ss")), Ok(Access::Admin));
        assert_eq!(auth.access(Some("Bearer s3cret")), Ok(Access::McpOnly));
        assert_eq!(auth.access(Some("Bearer nope")), Err(Unauthorized));
        assert_eq!(auth.access(None), Err(Unauthorized));
        let open = Authenticator::new("/mcp", &[]);
        assert_eq!(open.access(None), Ok(Access::Admin));
    }

    #[test]
    fn a_credential_stops_granting_once_its_token_is_gone_or_moved() {
        let before = Authenticator::new("/mcp", &[token("alice", "s3cret"), token("bob", "b0b")]);
        let Caller {
            identity: alice,
            credential,
            ..
        } = before.authenticate(Some("Bearer s3cret")).unwrap();
        assert!(before.still_grants(&credential, &alice));
        // Revoked, while a new token for the same principal is added.
        let rotated = Authenticator::new("/mcp", &[token("alice", "n3w"), token("bob", "b0b")]);
        assert!(!rotated.still_grants(&credential, &alice));
        // The same token now names someone else.
        let moved = Authenticator::new("/mcp", &[token("carol", "s3cret")]);
        assert!(!moved.still_grants(&credential, &alice));
        // Anonymous lasts only while no token is configured.
        let open = Authenticator::new("/mcp", &[]);
        let Caller {
            identity: anonymous,
            credential: nobody,
            ..
        } = open.authenticate(None).unwrap();
        assert_eq!(nobody, Credential::Anonymous);
        assert!(open.still_grants(&nobody, &anonymous));
        assert!(open.grants_admin(&nobody));
        assert!(!before.still_grants(&nobody, &anonymous));
        assert!(!before.grants_admin(&nobody));
    }
}
