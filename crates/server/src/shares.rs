//! Each identity's share of the server (issue 29): its weight and priority in the job
//! queue, and its quotas. Built from the configuration: a token's own settings for the
//! identity it grants, the defaults for every other identity (the anonymous one
//! included).
//!
//! Held in the live configuration (`live::Settings::shares`), rebuilt by a reload. The
//! engine applies a share ([`Share`], `taskd_engine::shares`); this is which identity
//! gets which.

use std::collections::HashMap;

use taskd_auth::TokenConfig;
use taskd_engine::shares::Share;
use taskd_protocol::Identity;

use crate::config::Config;

/// The share of an identity without a token of its own.
pub fn default_share(config: &Config) -> Share {
    Share {
        weight: 1,
        priority: 0,
        max_sessions: config.sessions.max_sessions_per_identity,
        max_live_tasks: config.tasks.max_live_tasks_per_identity,
        creations_per_sec: config.tasks.creations_per_sec_per_identity,
        creation_burst: config.tasks.creation_burst_per_identity,
        max_inline_waits: config.tasks.max_inline_waits_per_identity,
        max_dashboard_logins: config.dashboard.max_logins_per_identity,
    }
}

fn share_of_token(token: &TokenConfig, defaults: &Share) -> Share {
    Share {
        weight: token.weight,
        priority: token.priority,
        max_sessions: token.max_sessions.unwrap_or(defaults.max_sessions),
        max_live_tasks: token.max_live_tasks.unwrap_or(defaults.max_live_tasks),
        creations_per_sec: token
            .creations_per_sec
            .unwrap_or(defaults.creations_per_sec),
        creation_burst: token.creation_burst.unwrap_or(defaults.creation_burst),
        max_inline_waits: token.max_inline_waits.unwrap_or(defaults.max_inline_waits),
        max_dashboard_logins: token
            .max_dashboard_logins
            .unwrap_or(defaults.max_dashboard_logins),
    }
}

/// Every identity's share: the tokens' by (tenant, principal), the default for the rest.
#[derive(Debug)]
pub struct Shares {
    default: Share,
    by_identity: HashMap<(String, String), Share>,
}

impl Shares {
    pub fn new(config: &Config) -> Shares {
        let default = default_share(config);
        let mut by_identity = HashMap::new();
        for token in &config.auth.tokens {
            by_identity
                .entry((token.tenant.clone(), token.principal.clone()))
                .or_insert_with(|| share_of_token(token, &default));
        }
        Shares {
            default,
            by_identity,
        }
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
            max_live_tasks: None,
            creations_per_sec: None,
            creation_burst: None,
            max_inline_waits: None,
            max_dashboard_logins: None,
        }
    }

    fn shares_of(tokens: Vec<TokenConfig>) -> (Shares, Share) {
        let mut config = Config::parse("").unwrap();
        config.sessions.max_sessions_per_identity = 7;
        config.auth.tokens = tokens;
        (Shares::new(&config), default_share(&config))
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
}
