//! Opaque access tokens, checked by RFC 7662 introspection at the authorization server.
//!
//! Guarantees, each kept here:
//! - **Cached by a hash, never past `exp`.** Answers are remembered under the SHA-256
//!   of the token (never the token), an active one until the earlier of its `exp` and
//!   [`ACTIVE_FOR_S`] from now, an inactive one for [`INACTIVE_FOR_S`]; at most
//!   [`MAX_ENTRIES`] at once.
//! - **The same rules as a JWT.** An active answer must name this resource in `aud`
//!   and carry `exp` and the principal claim; an `iss`, when present, must be the
//!   issuer ([`super::Claims::grant`]).
//! - **Bounded.** Each call waits at most the provider timeout, and at most
//!   [`MAX_IN_FLIGHT`] run at once: beyond, the request is answered 503 at once instead
//!   of queueing on the provider.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::http::{post_form, FetchError};
use super::{Claims, Grant, Refusal};
use crate::config::ClientSecret;

/// Longest an active answer is trusted (a token revoked at the provider stops working
/// within this, or at its `exp` if sooner).
pub const ACTIVE_FOR_S: u64 = 300;
/// How long an inactive answer is remembered (a flood of one bad token asks once).
pub const INACTIVE_FOR_S: u64 = 30;
/// Answers remembered at once.
pub const MAX_ENTRIES: usize = 10_000;
/// Introspection calls running at once.
pub const MAX_IN_FLIGHT: usize = 16;

/// Token digest -> (the grant, or `None` for an inactive token; unix seconds it is
/// good until).
type Answers = HashMap<[u8; 32], (Option<Arc<Grant>>, u64)>;

pub struct Introspector {
    endpoint: String,
    client_id: String,
    secret: ClientSecret,
    agent: ureq::Agent,
    answers: Mutex<Answers>,
    in_flight: AtomicUsize,
}

impl Introspector {
    pub fn new(
        endpoint: String,
        client_id: String,
        secret: ClientSecret,
        agent: ureq::Agent,
    ) -> Introspector {
        Introspector {
            endpoint,
            client_id,
            secret,
            agent,
            answers: Mutex::default(),
            in_flight: AtomicUsize::new(0),
        }
    }

    /// What the opaque `token` (whose SHA-256 is `digest`) grants.
    pub fn check(
        &self,
        token: &str,
        digest: [u8; 32],
        claims: &Claims,
        now_s: u64,
    ) -> Result<Arc<Grant>, Refusal> {
        let remembered = self.lock().get(&digest).cloned();
        if let Some((answer, until)) = remembered {
            if now_s < until {
                return answer.ok_or(Refusal::Invalid("the token is not active"));
            }
        }
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_IN_FLIGHT {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::Unavailable);
        }
        let asked = post_form(
            &self.agent,
            &self.endpoint,
            &[("token", token), ("token_type_hint", "access_token")],
            &self.client_id,
            Some(&self.secret.0),
        );
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        let answer = match asked {
            Ok(answer) => answer,
            Err(error) => {
                log::warn!("oauth: introspection failed: {error}");
                return Err(match error {
                    FetchError::Status { status: 400, .. } => Refusal::Invalid("a malformed token"),
                    _ => Refusal::Unavailable,
                });
            }
        };
        if answer.get("active").and_then(Value::as_bool) != Some(true) {
            self.remember(digest, None, now_s + INACTIVE_FOR_S, now_s);
            return Err(Refusal::Invalid("the token is not active"));
        }
        let fields = answer.as_object().cloned().unwrap_or_default();
        let (grant, exp) = claims.grant(&fields)?;
        if exp.saturating_add(super::jwt::LEEWAY_S) <= now_s {
            return Err(Refusal::Invalid("the token has expired"));
        }
        let grant = Arc::new(grant);
        let until = exp.min(now_s + ACTIVE_FOR_S);
        self.remember(digest, Some(Arc::clone(&grant)), until, now_s);
        Ok(grant)
    }

    fn remember(&self, digest: [u8; 32], answer: Option<Arc<Grant>>, until: u64, now_s: u64) {
        let mut answers = self.lock();
        if answers.len() >= MAX_ENTRIES {
            answers.retain(|_, (_, until)| now_s < *until);
            if answers.len() >= MAX_ENTRIES {
                answers.clear();
            }
        }
        answers.insert(digest, (answer, until));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Answers> {
        self.answers.lock().unwrap_or_else(|p| p.into_inner())
    }
}
