//! Each identity's share of the server (issue 29): its weight and priority in the job
//! queue, and its quotas. Built from the configuration: a token's own settings for the
//! identity it grants, the defaults for every other identity (the anonymous one
//! included).
//!
//! Held in the live configuration (`live::Settings::shares`), rebuilt by a reload.

use std::collections::HashMap;

use crate::auth::Identity;
use crate::config::{Config, ConfigError, TokenConfig};

/// One identity's share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// Turns it takes in the queue for one of an identity of weight 1.
    pub weight: u32,
    /// Added to its jobs' tool priorities.
    pub priority: i32,
    /// Legacy sessions it may have open (`sessions.max_sessions_per_identity`).
    pub max_sessions: usize,
}

impl Share {
    /// The share of an identity without a token of its own.
    pub fn defaults(config: &Config) -> Share {
        Share {
            weight: 1,
            priority: 0,
            max_sessions: config.sessions.max_sessions_per_identity,
        }
    }

    fn of_token(token: &TokenConfig, defaults: &Share) -> Share {
        Share {
            weight: token.weight,
            priority: token.priority,
            max_sessions: token.max_sessions.unwrap_or(defaults.max_sessions),
        }
    }
}

/// A token's share as it sets it: an unset quota differs from one set to the default,
/// a mistake waiting for the default to change.
fn as_set(token: &TokenConfig) -> (u32, i32, Option<usize>) {
    (token.weight, token.priority, token.max_sessions)
}

/// Every identity's share: the tokens' by (tenant, principal), the default for the rest.
#[derive(Debug)]
pub struct Shares {
    default: Share,
    by_identity: HashMap<(String, String), Share>,
}

impl Shares {
    pub fn new(config: &Config) -> Shares {
        let default = Share::defaults(config);
        let mut by_identity = HashMap::new();
        for token in &config.auth.tokens {
            by_identity
                .entry((token.tenant.clone(), token.principal.clone()))
                .or_insert_with(|| Share::of_token(token, &default));
        }
        Shares {
            default,
            by_identity,
        }
    }

    /// Refuses tokens that grant one identity with different shares: which one a request
    /// got would depend on the token it showed.
    pub fn check(tokens: &[TokenConfig]) -> Result<(), ConfigError> {
        let mut first: HashMap<(&str, &str), usize> = HashMap::new();
        for (index, token) in tokens.iter().enumerate() {
            let key = (token.tenant.as_str(), token.principal.as_str());
            match first.get(&key) {
                Some(&earlier) if as_set(&tokens[earlier]) != as_set(token) => {
                    return Err(ConfigError::TokenShares {
                        first: earlier,
                        index,
                    });
                }
                Some(_) => {}
                None => {
                    first.insert(key, index);
                }
            }
        }
        Ok(())
    }

    /// The share of `identity`. Static tokens grant identities without an issuer; an
    /// OAuth identity has the default share.
    pub fn of(&self, identity: &Identity) -> &Share {
        if !identity.issuer.is_empty() {
            return &self.default;
        }
        // Borrowed lookups of a tuple key need owned parts; identities are short.
        self.by_identity
            .get(&(identity.tenant.clone(), identity.principal.clone()))
            .unwrap_or(&self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(tenant: &str, principal: &str, weight: u32, priority: i32) -> TokenConfig {
        TokenConfig {
            principal: principal.into(),
            tenant: tenant.into(),
            sha256: "0".repeat(64),
            roles: Vec::new(),
            weight,
            priority,
            max_sessions: None,
        }
    }

    fn shares_of(tokens: Vec<TokenConfig>) -> (Shares, Share) {
        let mut config = Config::parse("").unwrap();
        config.sessions.max_sessions_per_identity = 7;
        config.auth.tokens = tokens;
        (Shares::new(&config), Share::defaults(&config))
    }

    #[test]
    fn a_tokens_share_applies_to_its_identity_and_the_default_to_the_rest() {
        let mut ide = token("t", "ide", 3, 5);
        ide.max_sessions = Some(2);
        let (shares, default) = shares_of(vec![token("t", "batch", 1, -5), ide]);
        let who = |principal: &str| Identity {
            endpoint: "/mcp".into(),
            issuer: String::new(),
            tenant: "t".into(),
            principal: principal.into(),
        };
        assert_eq!(shares.of(&who("batch")).priority, -5);
        assert_eq!(shares.of(&who("batch")).max_sessions, 7, "the default");
        assert_eq!(shares.of(&who("ide")).weight, 3);
        assert_eq!(shares.of(&who("ide")).max_sessions, 2, "its own");
        assert_eq!(*shares.of(&who("other")), default);
        assert_eq!(default.weight, 1);
        assert_eq!(*shares.of(&Identity::anonymous("/mcp")), default);
        let oauth = Identity {
            issuer: "https://idp.example".into(),
            ..who("ide")
        };
        assert_eq!(*shares.of(&oauth), default, "another identity");
    }

    #[test]
    fn tokens_of_one_identity_must_agree_on_its_share() {
        let same = [
            token("t", "a", 2, 0),
            token("t", "a", 2, 0),
            token("u", "a", 1, 0),
        ];
        assert!(Shares::check(&same).is_ok());
        let differ = [
            token("t", "a", 2, 0),
            token("u", "a", 1, 0),
            token("t", "a", 1, 0),
        ];
        let error = Shares::check(&differ).unwrap_err().to_string();
        assert!(
            error.contains("auth.tokens[0] and auth.tokens[2]"),
            "{error}"
        );
        let mut capped = token("t", "a", 2, 0);
        capped.max_sessions = Some(64);
        assert!(Shares::check(&[token("t", "a", 2, 0), capped]).is_err());
    }
}
