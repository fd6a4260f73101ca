//! Browser sessions of the dashboard: a cookie signed with HMAC-SHA256 under a key drawn
//! at start-up (so a restart logs everyone out, and nothing needs storing), the
//! per-session CSRF token derived from it, and the logins open now.
//!
//! A signed cookie alone could not be ended before it expires, nor counted. So the
//! logins open are kept too (in memory, as the key is), per identity: each identity
//! has at most its share of them (`dashboard.max_logins_per_identity`, issue 29), a
//! login beyond ends that identity's oldest (never another's), and a logout ends its
//! login for good, not just in the browser that sent it. Tokens are configured, so
//! the identities, and the table, are bounded.
//!
//! The cookie holds only an expiry, a random nonce and a tag of the credential shown at
//! login (a keyed MAC of the token's digest, so the cookie reveals nothing about the
//! token); it is issued after an admin-role token was shown, so a valid signature is the
//! proof of that. The session lasts only while that credential is still an admin's: a
//! reload that revokes the token (or its role) ends the login at its next request. The CSRF token is the
//! HMAC of the nonce under another label: the page reads it from the API (never from
//! the HttpOnly cookie) and sends it back in `X-CSRF-Token` with each action.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use taskd_auth::Credential;

/// The cookie's name.
pub const COOKIE: &str = "mcp_taskd_dashboard";
/// How long a session lasts.
pub const LIFETIME_S: i64 = 12 * 3600;

pub struct Sessions {
    key: [u8; 32],
    open: Mutex<OpenLogins>,
}

/// The logins not yet ended.
#[derive(Default)]
struct OpenLogins {
    /// Each login's nonce: its identity's key and its expiry (Unix seconds).
    by_nonce: HashMap<String, (String, i64)>,
    /// Each identity's logins, oldest first.
    by_identity: HashMap<String, VecDeque<String>>,
}

impl OpenLogins {
    fn end(&mut self, nonce: &str) {
        if let Some((identity, _)) = self.by_nonce.remove(nonce) {
            if let Some(nonces) = self.by_identity.get_mut(&identity) {
                nonces.retain(|open| open != nonce);
                if nonces.is_empty() {
                    self.by_identity.remove(&identity);
                }
            }
        }
    }
}

/// A login that [`Sessions::issue`] opened.
pub struct Issued {
    /// The cookie's value.
    pub cookie: String,
    /// Whether the identity's oldest login ended to make room.
    pub ended_oldest: bool,
}

/// A session presented back by the browser, already verified.
pub struct Session {
    nonce: String,
    /// [`Sessions::tag`] of the credential the session was opened with.
    credential: String,
}

impl Sessions {
    /// Sessions signed under a fresh random key; `None` if the OS has no randomness.
    pub fn new() -> Option<Sessions> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).ok()?;
        Some(Sessions {
            key,
            open: Mutex::default(),
        })
    }

    fn mac(&self, label: &str, text: &str) -> String {
        // HMAC takes keys of any length: this cannot fail.
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.key) {
            Ok(mac) => mac,
            Err(_) => return String::new(),
        };
        mac.update(label.as_bytes());
        mac.update(b"|");
        mac.update(text.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// What a cookie says about a credential: a MAC of it under this process's key.
    fn tag(&self, credential: &Credential) -> String {
        let text = match credential {
            Credential::Anonymous => "anonymous".to_owned(),
            Credential::Token(digest) => hex::encode(digest),
            Credential::Local => "local".to_owned(),
            Credential::Access { exp } => format!("access-token until {exp}"),
            Credential::SignIn => "signed in at the provider".to_owned(),
        };
        let mut tag = self.mac("credential", &text);
        tag.truncate(32);
        tag
    }

    /// Whether `session` was opened with one of `credentials`.
    pub fn opened_with(&self, session: &Session, credentials: &[Credential]) -> bool {
        credentials.iter().any(|credential| {
            constant_time_eq(
                self.tag(credential).as_bytes(),
                session.credential.as_bytes(),
            )
        })
    }

    /// A new login with `credential` by the identity keyed `identity`, expiring
    /// `LIFETIME_S` after `now_s`; if the identity then has more than `share` logins,
    /// its oldest ends.
    pub fn issue(
        &self,
        now_s: i64,
        credential: &Credential,
        identity: &str,
        share: usize,
    ) -> Option<Issued> {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce).ok()?;
        let body = format!(
            "{}.{}.{}",
            now_s + LIFETIME_S,
            hex::encode(nonce),
            self.tag(credential)
        );
        let mac = self.mac("session", &body);
        let nonce = hex::encode(nonce);
        // Only maps of strings: a poisoned lock still holds consistent ones.
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let expired: Vec<String> = open
            .by_identity
            .get(identity)
            .into_iter()
            .flatten()
            .filter(|nonce| {
                open.by_nonce
                    .get(*nonce)
                    .is_none_or(|(_, exp)| *exp <= now_s)
            })
            .cloned()
            .collect();
        for nonce in &expired {
            open.end(nonce);
        }
        open.by_nonce
            .insert(nonce.clone(), (identity.to_owned(), now_s + LIFETIME_S));
        let nonces = open.by_identity.entry(identity.to_owned()).or_default();
        nonces.push_back(nonce);
        let oldest = (nonces.len() > share.max(1)).then(|| nonces.front().cloned());
        let ended_oldest = oldest.flatten().map(|nonce| open.end(&nonce)).is_some();
        Some(Issued {
            cookie: format!("{body}.{mac}"),
            ended_oldest,
        })
    }

    /// Ends `session` (a logout): its cookie is refused from now on, wherever it is.
    pub fn end(&self, session: &Session) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.end(&session.nonce);
    }

    /// The session a cookie value names, if its signature holds and it has not expired.
    pub fn verify(&self, value: &str, now_s: i64) -> Option<Session> {
        let (body, mac) = value.rsplit_once('.')?;
        let (expiry, rest) = body.split_once('.')?;
        let (nonce, credential) = rest.split_once('.')?;
        let expected = self.mac("session", body);
        if !constant_time_eq(expected.as_bytes(), mac.as_bytes()) {
            return None;
        }
        if expiry.parse::<i64>().ok()? <= now_s {
            return None;
        }
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if !open.by_nonce.contains_key(nonce) {
            return None;
        }
        Some(Session {
            nonce: nonce.to_owned(),
            credential: credential.to_owned(),
        })
    }

    /// The CSRF token of `session`.
    pub fn csrf(&self, session: &Session) -> String {
        self.mac("csrf", &session.nonce)
    }

    /// The CSRF token of the tokenless loopback mode, where there is no session: still
    /// required, so that a cross-site form (which cannot set headers) can do nothing.
    pub fn open_csrf(&self) -> String {
        self.mac("csrf-open", "")
    }

    /// Whether `presented` is `expected`, in time independent of where they differ.
    pub fn csrf_matches(expected: &str, presented: Option<&str>) -> bool {
        presented
            .is_some_and(|presented| constant_time_eq(expected.as_bytes(), presented.as_bytes()))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_verify_until_they_expire_and_not_when_altered() {
        let sessions = Sessions::new().unwrap();
        let admin = Credential::Token([7; 32]);
        let cookie = sessions.issue(1_000, &admin, "ops", 8).unwrap().cookie;
        let session = sessions.verify(&cookie, 1_001).unwrap();
        assert!(sessions.opened_with(&session, &[Credential::Anonymous, admin]));
        assert!(
            !sessions.opened_with(&session, &[Credential::Token([8; 32])]),
            "its token revoked"
        );
        assert_eq!(sessions.csrf(&session).len(), 64);
        assert!(
            sessions.verify(&cookie, 1_000 + LIFETIME_S).is_none(),
            "expired"
        );
        let forged = cookie.replacen('.', "9.", 1);
        assert!(sessions.verify(&forged, 1_001).is_none(), "expiry changed");
        let other = Sessions::new().unwrap();
        assert!(other.verify(&cookie, 1_001).is_none(), "another key");
    }

    #[test]
    fn an_identity_beyond_its_share_loses_its_oldest_login_and_a_logout_ends_one() {
        let sessions = Sessions::new().unwrap();
        let admin = Credential::Token([7; 32]);
        let login = |identity: &str| sessions.issue(1_000, &admin, identity, 2).unwrap();
        let first = login("ops");
        let second = login("ops");
        let others = login("other");
        assert!(!first.ended_oldest && !second.ended_oldest);
        let third = login("ops");
        assert!(third.ended_oldest);
        assert!(
            sessions.verify(&first.cookie, 1_001).is_none(),
            "the oldest ended"
        );
        for live in [&second, &third, &others] {
            assert!(sessions.verify(&live.cookie, 1_001).is_some());
        }
        let session = sessions.verify(&second.cookie, 1_001).unwrap();
        sessions.end(&session);
        assert!(
            sessions.verify(&second.cookie, 1_001).is_none(),
            "logged out"
        );
        assert!(!login("ops").ended_oldest, "the logout made room");
        // Expired logins make room too, and the table forgets them.
        let later = 1_000 + LIFETIME_S;
        let fresh = sessions.issue(later, &admin, "ops", 2).unwrap();
        assert!(!fresh.ended_oldest);
        let open = sessions.open.lock().unwrap();
        assert_eq!(open.by_identity["ops"].len(), 1, "expired ones pruned");
    }
}
