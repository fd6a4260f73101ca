//! The settings this crate reads, as the configuration file writes them: `[auth]`, its
//! `[[auth.tokens]]` and `[auth.oauth]` (the file format in `taskd-server` composes
//! them and checks what serde cannot).

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    pub tokens: Vec<TokenConfig>,
    /// Access tokens from an authorization server, beside (or instead of) `tokens`.
    pub oauth: Option<OAuthConfig>,
    /// The secret in `oauth.client_secret_file`, read when the configuration file is parsed.
    #[serde(skip)]
    pub client_secret: Option<ClientSecret>,
}

/// A client secret: kept out of `Debug` output, so that no log line can carry it.
#[derive(Clone)]
pub struct ClientSecret(pub String);

impl std::fmt::Debug for ClientSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientSecret(…)")
    }
}

/// A bearer token, known only by its SHA-256 digest, and the identity it grants.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub principal: String,
    #[serde(default)]
    pub tenant: String,
    /// Lowercase hex SHA-256 of the token.
    pub sha256: String,
    /// What the token may do besides MCP: `"admin"` opens the dashboard.
    #[serde(default)]
    pub roles: Vec<String>,
    /// The identity's share of the workers against other identities with queued jobs:
    /// it takes `weight` turns to their one (1 to 1000; see `tasks::model::TURN`).
    #[serde(default = "one")]
    pub weight: u32,
    /// Added to each job's tool priority (-100 to 100): interactive hosts above batch
    /// scripts. Higher runs first.
    #[serde(default)]
    pub priority: i32,
    /// The identity's own `sessions.max_sessions_per_identity` (at least 1).
    pub max_sessions: Option<usize>,
    /// The identity's own `tasks.max_live_tasks_per_identity` (at least 1).
    pub max_live_tasks: Option<u64>,
    /// The identity's own `tasks.creations_per_sec_per_identity` (0: no limit).
    pub creations_per_sec: Option<f64>,
    /// The identity's own `tasks.creation_burst_per_identity` (at least 1).
    pub creation_burst: Option<u32>,
    /// The identity's own `tasks.max_inline_waits_per_identity` (at least 1).
    pub max_inline_waits: Option<usize>,
    /// The identity's own `dashboard.max_logins_per_identity` (at least 1).
    pub max_dashboard_logins: Option<usize>,
}

fn one() -> u32 {
    1
}

/// Roles a token can carry (`[[auth.tokens]] roles`).
pub const ROLES: &[&str] = &["admin"];

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
