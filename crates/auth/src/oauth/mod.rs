//! mcp-taskd as an OAuth 2.1 protected resource (`[auth.oauth]`, MCP authorization
//! spec): it verifies access tokens issued by one authorization server for this
//! resource, and tells clients where that server is (RFC 9728 metadata, RFC 6750
//! challenges). It is not an authorization server, and it passes no token on: a token
//! is checked, turned into a [`Grant`] (identity, scopes, roles), and never stored or
//! logged.
//!
//! One file per part: [`http`] (the client that talks to the provider), [`discovery`]
//! (RFC 8414 / OIDC metadata), [`keys`] (the key set: lazy, single-flight, cooled
//! down), [`jwt`] (JWT access tokens), [`introspection`] (opaque tokens, RFC 7662),
//! [`metadata`] (what clients are told), [`sign_in`] (the dashboard's OpenID Connect
//! sign-in, this server's one use of the provider as a client).

pub mod discovery;
pub mod http;
pub mod introspection;
pub mod jwt;
pub mod keys;
pub mod metadata;
pub mod sign_in;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::{Identity, Scopes};
use crate::config::{ClientSecret, OAuthConfig, ToolsListPolicy};
pub use metadata::Metadata;

/// What a verified access token grants.
#[derive(Debug, Clone)]
pub struct Grant {
    pub identity: Identity,
    pub scopes: Scopes,
    /// Whether the roles claim holds the admin role (the dashboard).
    pub admin: bool,
    /// When the token expires (Unix seconds).
    pub exp: u64,
}

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not valid here: 401 `invalid_token`, with this description.
    Invalid(&'static str),
    /// The authorization server could not be asked in time: 503, try again.
    Unavailable,
}

/// How claims become a [`Grant`]: the issuer and audiences a token must name, and the
/// claims that hold the person, the tenant and the roles.
pub struct Claims {
    pub issuer: String,
    /// Accepted audiences, normalized ([`normalize_audience`]).
    audiences: Vec<String>,
    endpoint: String,
    principal: String,
    tenant: Option<String>,
    roles: Option<String>,
    admin_role: String,
}

impl Claims {
    /// The grant of a token whose signature and times were checked, and its `exp`.
    fn grant(&self, claims: &Map<String, Value>) -> Result<(Grant, u64), Refusal> {
        if let Some(iss) = claims.get("iss") {
            if iss.as_str() != Some(self.issuer.as_str()) {
                return Err(Refusal::Invalid("the token is from another issuer"));
            }
        }
        let ours = audiences(claims).any(|aud| self.audiences.contains(&normalize_audience(aud)));
        if !ours {
            return Err(Refusal::Invalid("the token is for another resource"));
        }
        let exp = claims
            .get("exp")
            .and_then(Value::as_f64)
            .filter(|exp| *exp > 0.0)
            .ok_or(Refusal::Invalid("the token lacks exp"))? as u64;
        let Person { identity, admin } = self.person(claims)?;
        // RFC 8693 / 9068 `scope` (space-separated), or `scp` (Entra: a string; others:
        // an array).
        let scopes: Vec<String> = words(claims.get("scope"))
            .chain(words(claims.get("scp")))
            .map(str::to_owned)
            .collect();
        let grant = Grant {
            identity,
            scopes: Scopes::granted(scopes),
            admin,
            exp,
        };
        Ok((grant, exp))
    }

    /// Who verified claims name (an access token's, or the dashboard sign-in's ID
    /// token's): the principal and tenant claims, and whether the roles claim holds the
    /// admin role.
    fn person(&self, claims: &Map<String, Value>) -> Result<Person, Refusal> {
        let principal = claim_path(claims, &self.principal)
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .ok_or(Refusal::Invalid("the token does not name its subject"))?;
        let tenant = match &self.tenant {
            Some(path) => claim_path(claims, path)
                .and_then(Value::as_str)
                .unwrap_or_default(),
            None => "",
        };
        let admin = self.roles.as_deref().is_some_and(|path| {
            words(claim_path(claims, path)).any(|role| role == self.admin_role)
        });
        Ok(Person {
            identity: Identity {
                endpoint: self.endpoint.clone(),
                issuer: self.issuer.clone(),
                tenant: tenant.to_owned(),
                principal: principal.to_owned(),
            },
            admin,
        })
    }
}

/// A person as the authorization server vouches for them.
#[derive(Debug, Clone)]
pub struct Person {
    pub identity: Identity,
    /// Whether the roles claim holds the admin role (the dashboard).
    pub admin: bool,
}

/// The words of a claim that is a space-separated string or an array of strings.
/// The `aud` claim's values: one string, or an array of them.
fn audiences(claims: &Map<String, Value>) -> Box<dyn Iterator<Item = &str> + '_> {
    match claims.get("aud") {
        Some(Value::String(one)) => Box::new(std::iter::once(one.as_str())),
        Some(Value::Array(many)) => Box::new(many.iter().filter_map(Value::as_str)),
        _ => Box::new(std::iter::empty()),
    }
}

fn words(value: Option<&Value>) -> Box<dyn Iterator<Item = &str> + '_> {
    match value {
        Some(Value::String(text)) => Box::new(text.split_ascii_whitespace()),
        Some(Value::Array(items)) => Box::new(items.iter().filter_map(Value::as_str)),
        _ => Box::new(std::iter::empty()),
    }
}

/// A claim by name, or by dotted path into nested objects (`realm_access.roles`). A
/// claim whose own name holds a dot is found first.
fn claim_path<'a>(claims: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    if let Some(value) = claims.get(path) {
        return Some(value);
    }
    let mut parts = path.split('.');
    let mut value = claims.get(parts.next()?)?;
    for part in parts {
        value = value.get(part)?;
    }
    Some(value)
}

/// An audience as compared: scheme and host in lowercase, no trailing slash (RFC 8707
/// resource URIs; other audiences, such as a client id, unchanged).
pub fn normalize_audience(audience: &str) -> String {
    let Some(scheme_end) = audience.find("://") else {
        return audience.to_owned();
    };
    let rest = &audience[scheme_end + 3..];
    let host_end = rest.find('/').unwrap_or(rest.len());
    let normalized = format!(
        "{}://{}{}",
        audience[..scheme_end].to_ascii_lowercase(),
        rest[..host_end].to_ascii_lowercase(),
        &rest[host_end..]
    );
    match normalized.strip_suffix('/') {
        Some(trimmed) if trimmed.len() > scheme_end + 3 => trimmed.to_owned(),
        _ => normalized,
    }
}

/// Verified tokens remembered by the SHA-256 of the token, so that a client sending
/// the same token again costs a hash and a lookup instead of a signature check. An
/// entry is used only until its token's `exp` and only with the key set it was
/// verified against; the map holds at most [`MAX_VERIFIED`] entries.
struct Verified {
    entries: RwLock<HashMap<[u8; 32], Remembered>>,
}

/// A verified token's grant, its `exp`, and the key-set epoch it was verified with.
type Remembered = (Arc<Grant>, u64, u64);

/// Tokens remembered at once.
const MAX_VERIFIED: usize = 10_000;

impl Verified {
    fn get(&self, digest: &[u8; 32], now_s: u64, epoch: u64) -> Option<Arc<Grant>> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        let (grant, exp, at_epoch) = entries.get(digest)?;
        (now_s < exp.saturating_add(jwt::LEEWAY_S) && *at_epoch == epoch).then(|| Arc::clone(grant))
    }

    fn put(&self, digest: [u8; 32], grant: Arc<Grant>, exp: u64, epoch: u64, now_s: u64) {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_VERIFIED {
            entries.retain(|_, (_, exp, at_epoch)| now_s < *exp && *at_epoch == epoch);
            if entries.len() >= MAX_VERIFIED {
                entries.clear();
            }
        }
        entries.insert(digest, (grant, exp, epoch));
    }
}

/// The protected resource: verifies access tokens and describes itself.
pub struct OAuth {
    claims: Claims,
    keys: keys::KeyStore,
    verified: Verified,
    /// Opaque tokens, when `introspection_endpoint` is configured.
    introspection: Option<introspection::Introspector>,
    pub metadata: Arc<Metadata>,
    pub tools_list: ToolsListPolicy,
    /// The dashboard's sign-in, when `client_id` is configured.
    sign_in: Option<sign_in::SignIn>,
    /// The client every provider call goes through.
    agent: ureq::Agent,
}

impl OAuth {
    /// `resource` is the canonical URL of the endpoint (`Config::resource_url`).
    /// `secret` is the client secret read from `client_secret_file`. `sign_in_redirect`
    /// is the dashboard's sign-in callback URL, which the provider must know.
    pub fn new(
        config: &OAuthConfig,
        secret: Option<&ClientSecret>,
        resource: &str,
        endpoint: &str,
        server_name: &str,
        sign_in_redirect: String,
    ) -> OAuth {
        let timeout = Duration::from_millis(config.provider_timeout_ms);
        let agent = http::agent(timeout);
        let source = match &config.jwks_uri {
            Some(uri) => keys::Source::Uri(uri.clone()),
            None => keys::Source::Issuer(config.issuer.clone()),
        };
        let mut audiences = vec![normalize_audience(resource)];
        audiences.extend(config.audiences.iter().map(|a| normalize_audience(a)));
        OAuth {
            claims: Claims {
                issuer: config.issuer.clone(),
                audiences,
                endpoint: endpoint.to_owned(),
                principal: config.principal_claim.clone(),
                tenant: config.tenant_claim.clone(),
                roles: config.roles_claim.clone(),
                admin_role: config.admin_role.clone(),
            },
            introspection: match (&config.introspection_endpoint, &config.client_id, secret) {
                (Some(endpoint), Some(client_id), Some(secret)) => {
                    Some(introspection::Introspector::new(
                        endpoint.clone(),
                        client_id.clone(),
                        secret.clone(),
                        agent.clone(),
                    ))
                }
                _ => None,
            },
            keys: keys::KeyStore::new(
                source,
                agent.clone(),
                Duration::from_millis(config.jwks_cooldown_ms),
                timeout,
            ),
            sign_in: config.client_id.as_deref().map(|client_id| {
                sign_in::SignIn::new(client_id, secret.map(|s| s.0.as_str()), sign_in_redirect)
            }),
            agent,
            verified: Verified {
                entries: RwLock::default(),
            },
            metadata: Arc::new(Metadata::new(config, resource, server_name)),
            tools_list: config.tools_list,
        }
    }

    /// Whether the dashboard offers a sign-in at the provider (`client_id` is set).
    pub fn offers_sign_in(&self) -> bool {
        self.sign_in.is_some()
    }

    /// The provider URL a browser goes to for a new dashboard sign-in; `None` when
    /// none is offered.
    pub fn begin_sign_in(&self) -> Option<Result<String, sign_in::SignInError>> {
        let sign_in = self.sign_in.as_ref()?;
        Some(sign_in.begin(&self.agent, &self.claims.issuer))
    }

    /// The person the provider's redirect back to the dashboard vouches for; `None`
    /// when no sign-in is offered.
    pub fn finish_sign_in(
        &self,
        code: &str,
        state: &str,
    ) -> Option<Result<Person, sign_in::SignInError>> {
        let sign_in = self.sign_in.as_ref()?;
        Some(sign_in.finish(&self.agent, &self.keys, &self.claims, code, state))
    }

    /// Verifies an access token.
    pub fn verify(&self, token: &str) -> Result<Arc<Grant>, Refusal> {
        self.verify_digested(token, Sha256::digest(token.as_bytes()).into())
    }

    /// Verifies an access token whose SHA-256 `digest` the caller has already taken
    /// (looking it up among the static tokens): a remembered token then costs one
    /// hash of its bytes, not two.
    pub fn verify_digested(&self, token: &str, digest: [u8; 32]) -> Result<Arc<Grant>, Refusal> {
        if token.len() > jwt::MAX_TOKEN_BYTES {
            return Err(Refusal::Invalid("the token is too long"));
        }
        let now_s = taskd_base::clock::now_ms().max(0) as u64 / 1000;
        if !jwt::looks_like_jwt(token) {
            return match &self.introspection {
                Some(introspector) => introspector.check(token, digest, &self.claims, now_s),
                None => Err(Refusal::Invalid("a malformed token")),
            };
        }
        let epoch = self.keys.epoch();
        if let Some(grant) = self.verified.get(&digest, now_s, epoch) {
            return Ok(grant);
        }
        let (grant, exp) = jwt::verify(token, &self.keys, &self.claims)?;
        let grant = Arc::new(grant);
        self.verified
            .put(digest, Arc::clone(&grant), exp, epoch, now_s);
        Ok(grant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims() -> Claims {
        Claims {
            issuer: "https://idp.example".into(),
            audiences: vec![
                normalize_audience("https://MCP.example.com/mcp"),
                "api://taskd".into(),
            ],
            endpoint: "/mcp".into(),
            principal: "sub".into(),
            tenant: Some("tid".into()),
            roles: Some("realm_access.roles".into()),
            admin_role: "admin".into(),
        }
    }

    fn token(extra: Value) -> Map<String, Value> {
        let mut claims = json!({
            "iss": "https://idp.example", "aud": "https://mcp.example.com/mcp/",
            "exp": 4_000_000_000u64, "sub": "alice", "tid": "acme",
            "scope": "tasks:read tasks:write",
            "realm_access": {"roles": ["user", "admin"]}
        });
        for (key, value) in extra.as_object().unwrap() {
            claims[key] = value.clone();
        }
        claims.as_object().unwrap().clone()
    }

    #[test]
    fn claims_map_to_the_person_their_tenant_scopes_and_roles() {
        let (grant, exp) = claims().grant(&token(json!({}))).unwrap();
        assert_eq!(exp, 4_000_000_000);
        assert_eq!(grant.identity.issuer, "https://idp.example");
        assert_eq!(grant.identity.principal, "alice");
        assert_eq!(grant.identity.tenant, "acme");
        assert!(grant.admin);
        assert!(!grant.scopes.lacks(&["tasks:write".into()]));
        assert!(grant.scopes.lacks(&["admin:all".into()]));
        let (entra, _) = claims()
            .grant(&token(
                json!({"scope": null, "scp": "a b", "aud": "api://taskd"}),
            ))
            .unwrap();
        assert!(!entra.scopes.lacks(&["a".into(), "b".into()]));
    }

    #[test]
    fn audience_issuer_and_subject_are_required() {
        let refused = |extra| claims().grant(&token(extra)).unwrap_err();
        assert_eq!(
            refused(json!({"aud": "https://other.example/mcp"})),
            Refusal::Invalid("the token is for another resource")
        );
        assert_eq!(
            refused(json!({"aud": ["x", "y"]})),
            Refusal::Invalid("the token is for another resource")
        );
        assert_eq!(
            refused(json!({"iss": "https://idp.example/"})),
            Refusal::Invalid("the token is from another issuer")
        );
        assert_eq!(
            refused(json!({"sub": ""})),
            Refusal::Invalid("the token does not name its subject")
        );
    }

    #[test]
    fn audiences_compare_with_rfc_8707_case_rules() {
        assert_eq!(
            normalize_audience("HTTPS://Mcp.Example.com/MCP/"),
            "https://mcp.example.com/MCP"
        );
        assert_eq!(normalize_audience("api://Taskd"), "api://taskd");
        assert_eq!(normalize_audience("my-client"), "my-client");
        assert_eq!(normalize_audience("https://h/"), "https://h");
    }

    #[test]
    fn only_jwt_shaped_tokens_are_verified_as_jwts() {
        assert!(jwt::looks_like_jwt("eyJh.eyJz.c2ln"));
        assert!(!jwt::looks_like_jwt("opaque-token"));
        assert!(!jwt::looks_like_jwt("a.b.c.d"));
        assert!(!jwt::looks_like_jwt("a b.c.d"));
    }
}
