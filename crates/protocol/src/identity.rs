//! Who is asking, and what the credential lets it reach: the identity every task is
//! bound to and every task operation is authorized against. Authentication (`taskd-auth`)
//! produces them; the engine, the notifications hub and the handlers only compare them.

use std::sync::Arc;

/// Who is asking, as far as task authorization is concerned. Every task is bound to the
/// identity that created it and is visible to that identity only.
///
/// A static token's identity has an empty `issuer`; an OAuth access token's names the
/// authorization server that vouches for its principal, so that two issuers' `sub`
/// claims (or a static token's principal that happens to read like one) never meet.
/// The identity is the person, never the token: a refreshed token of the same
/// (issuer, tenant, principal) reaches the same tasks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    pub endpoint: String,
    /// The OAuth issuer (`iss`) that vouched for `principal`; empty for static tokens
    /// and anonymous callers.
    pub issuer: String,
    pub tenant: String,
    pub principal: String,
}

impl Identity {
    /// Everyone's identity on `endpoint` when no tokens are configured (and the local
    /// host's over stdio).
    pub fn anonymous(endpoint: &str) -> Identity {
        Identity {
            endpoint: endpoint.to_owned(),
            issuer: String::new(),
            tenant: String::new(),
            principal: "anonymous".into(),
        }
    }

    /// The identity as one string, the key that fair claiming and quotas count by
    /// (stored with each job as `owner`): every field, in order, as its length in
    /// characters, `:`, and the field itself, so that no two identities share a key.
    /// The schemas' migrations compute the same text in SQL
    /// (`length(f) || ':' || f`, for endpoint, issuer, tenant and principal).
    pub fn key(&self) -> String {
        let mut key = String::new();
        for field in [&self.endpoint, &self.issuer, &self.tenant, &self.principal] {
            key.push_str(&field.chars().count().to_string());
            key.push(':');
            key.push_str(field);
        }
        key
    }

    /// The identity a [`Identity::key`] was made from; `None` for text that is not one.
    pub fn from_key(key: &str) -> Option<Identity> {
        let mut rest = key;
        let mut fields = Vec::with_capacity(4);
        for _ in 0..4 {
            let (length, tail) = rest.split_once(':')?;
            let length: usize = length.parse().ok()?;
            let end = tail
                .char_indices()
                .nth(length)
                .map_or(tail.len(), |(at, _)| at);
            if tail[..end].chars().count() != length {
                return None;
            }
            fields.push(tail[..end].to_owned());
            rest = &tail[end..];
        }
        let [endpoint, issuer, tenant, principal] = <[String; 4]>::try_from(fields).ok()?;
        rest.is_empty().then_some(Identity {
            endpoint,
            issuer,
            tenant,
            principal,
        })
    }
}

/// What a caller's credential lets it reach, by OAuth scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scopes {
    /// Static tokens and anonymous callers: scopes are an OAuth notion, and these
    /// credentials reach every tool.
    Unrestricted,
    /// The scopes an access token was granted. Matched exactly: a scope implies no
    /// other (configure every scope a tool accepts as its own).
    Granted(Arc<[String]>),
}

impl Scopes {
    pub fn granted(scopes: Vec<String>) -> Scopes {
        Scopes::Granted(scopes.into())
    }

    /// Whether any of `required` is missing.
    pub fn lacks(&self, required: &[String]) -> bool {
        match self {
            Scopes::Unrestricted => false,
            Scopes::Granted(granted) => required.iter().any(|scope| !granted.contains(scope)),
        }
    }
}

/// RFC 6749 §3.3 `scope-token`: one or more of %x21 / %x23-5B / %x5D-7E (no space, `"`
/// or `\`), so that a scope can be quoted in a `WWW-Authenticate` header as it is.
pub fn is_scope_token(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_reads_back_from_its_key_and_nothing_else_does() {
        let identity = Identity {
            endpoint: "/mcp".into(),
            issuer: "https://idp.example/".into(),
            tenant: "t:1".into(),
            principal: "é3:x".into(),
        };
        assert_eq!(Identity::from_key(&identity.key()), Some(identity.clone()));
        let anonymous = Identity::anonymous("/mcp");
        assert_eq!(Identity::from_key(&anonymous.key()), Some(anonymous));
        for bad in [
            "",
            "4:/mcp",
            "4:/mcp0:0:1:ab",
            "x:/mcp0:0:0:",
            "9:/mcp0:0:0:",
        ] {
            assert_eq!(Identity::from_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn identity_keys_tell_every_identity_apart() {
        let who = |issuer: &str, tenant: &str, principal: &str| Identity {
            endpoint: "/mcp".into(),
            issuer: issuer.into(),
            tenant: tenant.into(),
            principal: principal.into(),
        };
        assert_eq!(Identity::anonymous("/mcp").key(), "4:/mcp0:0:9:anonymous");
        assert_eq!(
            who("", "é", "a").key(),
            "4:/mcp0:1:é1:a",
            "characters, not bytes"
        );
        // Concatenated, these would be the same text.
        assert_ne!(who("", "ab", "c").key(), who("", "a", "bc").key());
        assert_ne!(who("", "1:a", "").key(), who("", "", "1:a").key());
        assert_ne!(who("i", "", "p").key(), who("", "i", "p").key());
    }

    #[test]
    fn scopes_must_be_quotable_as_they_are() {
        assert!(is_scope_token("tasks:write"));
        assert!(is_scope_token("https://graph.example/.default"));
        for bad in ["", "a b", "a\"b", "a\\b", "é"] {
            assert!(!is_scope_token(bad), "{bad:?}");
        }
    }
}
