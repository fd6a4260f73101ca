//! The dashboard's sign-in at the authorization server (issue 32): OpenID Connect's
//! authorization code flow with PKCE, for `[auth.oauth] client_id`. The dashboard
//! sends the browser to [`SignIn::begin`]'s URL and hands the redirect back to
//! [`SignIn::finish`], which answers with the [`Person`] the ID token names (the
//! admin role read from `roles_claim`, as for access tokens).
//!
//! Guarantees, each kept here:
//! - **One sign-in per `state`.** The state is 32 random bytes, kept in memory with the
//!   PKCE verifier and the nonce, for at most [`PENDING_FOR`], and removed by the first
//!   callback that names it (a replayed or forged callback finds nothing). At most
//!   [`MAX_PENDING`] are kept; beyond that the oldest is dropped, so that a flood of
//!   sign-in starts costs bounded memory.
//! - **The code is useless without the verifier** (PKCE S256, RFC 7636), which never
//!   leaves this process.
//! - **The ID token is verified like an access token** ([`super::jwt::verified_claims`]:
//!   allowed algorithms, the issuer's key set, `iss`, `exp`, `nbf`), then must name this
//!   client in `aud` and carry the nonce of this sign-in.
//! - **Nothing of the exchange is kept or logged**: the code and the tokens are dropped
//!   once the person is known.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::discovery::{discover, ProviderMetadata};
use super::http::{form_encode, post_form};
use super::keys::KeyStore;
use super::{audiences, jwt, Claims, Person, Refusal};

/// How long a sign-in may take between its start and its callback.
pub const PENDING_FOR: Duration = Duration::from_secs(600);
/// Sign-ins started and not yet finished, kept at once.
pub const MAX_PENDING: usize = 1024;

/// Why a sign-in did not end with a person.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    /// The callback is not one of ours (unknown, used or expired state), or the
    /// provider's answer does not hold (the ID token's audience, nonce, signature).
    #[error("the sign-in did not verify: {0}")]
    Refused(&'static str),
    /// The authorization server could not be reached or refused the exchange.
    #[error("the authorization server could not complete the sign-in")]
    Unavailable,
}

/// A sign-in started and not yet finished.
struct Pending {
    verifier: String,
    nonce: String,
    started: Instant,
}

/// This server as an OpenID Connect client of the authorization server.
pub struct SignIn {
    client_id: String,
    secret: Option<String>,
    /// Where the provider sends the browser back (the dashboard's callback).
    redirect_uri: String,
    /// The provider's endpoints, once discovered.
    endpoints: Mutex<Option<ProviderMetadata>>,
    pending: Mutex<HashMap<String, Pending>>,
}

impl SignIn {
    pub fn new(client_id: &str, secret: Option<&str>, redirect_uri: String) -> SignIn {
        SignIn {
            client_id: client_id.to_owned(),
            secret: secret.map(str::to_owned),
            redirect_uri,
            endpoints: Mutex::default(),
            pending: Mutex::default(),
        }
    }

    /// The authorization URL a browser is sent to, for a new sign-in.
    pub fn begin(&self, agent: &ureq::Agent, issuer: &str) -> Result<String, SignInError> {
        let endpoints = self.endpoints(agent, issuer)?;
        let authorize = endpoints
            .authorization_endpoint
            .ok_or(SignInError::Unavailable)?;
        let (state, verifier, nonce) = (random()?, random()?, random()?);
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(Sha256::digest(verifier.as_bytes()));
        let query = [
            ("response_type", "code"),
            ("client_id", self.client_id.as_str()),
            ("redirect_uri", self.redirect_uri.as_str()),
            ("scope", "openid"),
            ("state", state.as_str()),
            ("nonce", nonce.as_str()),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ]
        .iter()
        .map(|(name, value)| format!("{name}={}", form_encode(value)))
        .collect::<Vec<_>>()
        .join("&");
        let separator = if authorize.contains('?') { '&' } else { '?' };
        let now = Instant::now();
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.retain(|_, sign_in| now.duration_since(sign_in.started) < PENDING_FOR);
        if pending.len() >= MAX_PENDING {
            let oldest = pending
                .iter()
                .min_by_key(|(_, sign_in)| sign_in.started)
                .map(|(state, _)| state.clone());
            if let Some(oldest) = oldest {
                pending.remove(&oldest);
            }
        }
        pending.insert(
            state,
            Pending {
                verifier,
                nonce,
                started: now,
            },
        );
        Ok(format!("{authorize}{separator}{query}"))
    }

    /// The person the provider's redirect (`code`, `state`) vouches for.
    pub fn finish(
        &self,
        agent: &ureq::Agent,
        keys: &KeyStore,
        claims: &Claims,
        code: &str,
        state: &str,
    ) -> Result<Person, SignInError> {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(state)
            .filter(|sign_in| sign_in.started.elapsed() < PENDING_FOR)
            .ok_or(SignInError::Refused("unknown, used or expired sign-in"))?;
        let endpoints = self.endpoints(agent, &claims.issuer)?;
        let token_endpoint = endpoints.token_endpoint.ok_or(SignInError::Unavailable)?;
        let answer = post_form(
            agent,
            &token_endpoint,
            &[
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", &self.redirect_uri),
                ("code_verifier", &pending.verifier),
            ],
            &self.client_id,
            self.secret.as_deref(),
        )
        .map_err(|error| {
            log::warn!("dashboard sign-in: the token exchange failed: {error}");
            SignInError::Unavailable
        })?;
        let id_token = answer
            .get("id_token")
            .and_then(Value::as_str)
            .ok_or(SignInError::Refused("the provider sent no ID token"))?;
        let verified =
            jwt::verified_claims(id_token, keys, &claims.issuer).map_err(
                |refusal| match refusal {
                    Refusal::Invalid(why) => SignInError::Refused(why),
                    Refusal::Unavailable => SignInError::Unavailable,
                },
            )?;
        if !audiences(&verified).any(|aud| aud == self.client_id) {
            return Err(SignInError::Refused("the ID token is for another client"));
        }
        if verified.get("nonce").and_then(Value::as_str) != Some(pending.nonce.as_str()) {
            return Err(SignInError::Refused("the ID token is not this sign-in's"));
        }
        claims.person(&verified).map_err(|refusal| match refusal {
            Refusal::Invalid(why) => SignInError::Refused(why),
            Refusal::Unavailable => SignInError::Unavailable,
        })
    }

    /// The provider's endpoints: discovered once, then kept (a reload builds a new
    /// [`SignIn`]).
    fn endpoints(
        &self,
        agent: &ureq::Agent,
        issuer: &str,
    ) -> Result<ProviderMetadata, SignInError> {
        let mut endpoints = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(known) = endpoints.as_ref() {
            return Ok(known.clone());
        }
        let found = discover(agent, issuer).map_err(|error| {
            log::warn!("dashboard sign-in: discovery failed: {error}");
            SignInError::Unavailable
        })?;
        *endpoints = Some(found.clone());
        Ok(found)
    }
}

/// 32 random bytes, base64url: a state, a PKCE verifier (43 characters, RFC 7636's
/// minimum length and alphabet) or a nonce.
fn random() -> Result<String, SignInError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|_| SignInError::Unavailable)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}
