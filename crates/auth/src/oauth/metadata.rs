//! What clients are told: the protected-resource metadata (RFC 9728) and the
//! `WWW-Authenticate` challenges (RFC 6750 §3, MCP "Scope Selection Strategy").
//!
//! The metadata is served at the path-aware well-known URL of the endpoint
//! (`/.well-known/oauth-protected-resource/mcp` for `https://host/mcp`) and at the root
//! (`/.well-known/oauth-protected-resource`), both naming the exact public resource URL.
//! With `advertise = false` neither is served and challenges name no metadata: clients
//! are not steered into OAuth (some hosts drop their static header once they are).

use serde_json::json;

use super::discovery::split_origin;
use crate::config::OAuthConfig;

/// The well-known path prefix of RFC 9728.
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

pub struct Metadata {
    /// The canonical resource URL (the `resource` of the document, RFC 8707).
    pub resource: String,
    pub issuer: String,
    /// Where the document is, as clients see it (the challenges' `resource_metadata`).
    pub url: String,
    /// Local paths that serve the document (none when not advertised).
    paths: Vec<String>,
    document: String,
    pub scopes_supported: Vec<String>,
    pub advertise: bool,
}

impl Metadata {
    pub fn new(config: &OAuthConfig, resource: &str, server_name: &str) -> Metadata {
        let (origin, resource_path) = split_origin(resource);
        let mut document = json!({
            "resource": resource,
            "authorization_servers": [config.issuer],
            "bearer_methods_supported": ["header"],
            "resource_name": server_name,
        });
        if !config.scopes_supported.is_empty() {
            document["scopes_supported"] = json!(config.scopes_supported);
        }
        let path_aware = format!("{WELL_KNOWN}{resource_path}");
        let paths = if config.advertise {
            vec![path_aware.clone(), WELL_KNOWN.to_owned()]
        } else {
            Vec::new()
        };
        Metadata {
            resource: resource.to_owned(),
            issuer: config.issuer.clone(),
            url: format!("{origin}{path_aware}"),
            paths,
            document: document.to_string(),
            scopes_supported: config.scopes_supported.clone(),
            advertise: config.advertise,
        }
    }

    /// The metadata document, if `path` serves it.
    pub fn document_at(&self, path: &str) -> Option<&str> {
        self.paths
            .iter()
            .any(|served| served == path)
            .then_some(self.document.as_str())
    }

    /// A `Bearer` challenge: `error` (with its description) when a token was presented
    /// and refused; `scopes` the operation needs (empty: `scopes_supported`, the scopes
    /// for basic use). Scopes and descriptions are header-safe by construction (config
    /// checks scopes; descriptions are fixed strings).
    pub fn challenge(&self, error: Option<(&str, &str)>, scopes: &[String]) -> String {
        let mut parts = Vec::new();
        if let Some((code, description)) = error {
            parts.push(format!("error=\"{code}\""));
            parts.push(format!("error_description=\"{description}\""));
        }
        let scopes = if scopes.is_empty() {
            &self.scopes_supported
        } else {
            scopes
        };
        if !scopes.is_empty() {
            parts.push(format!("scope=\"{}\"", scopes.join(" ")));
        }
        if self.advertise {
            parts.push(format!("resource_metadata=\"{}\"", self.url));
        }
        if parts.is_empty() {
            "Bearer".to_owned()
        } else {
            format!("Bearer {}", parts.join(", "))
        }
    }
}
