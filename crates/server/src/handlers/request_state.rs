//! MRTR `requestState`: the server's state between rounds, carried by the client.
//!
//! The client is untrusted, so the state is signed with HMAC-SHA-256 under a 256-bit key
//! kept in the data dir (`request-state.key`, created on first start, mode 0600), or,
//! on a store several nodes share (PostgreSQL), in the store, so every node opens it. The
//! signed payload binds the state to the caller's identity, the method and target name,
//! a digest of the arguments, and an expiry; any mismatch is `-32602`. Integrity, not
//! secrecy: tools must not put secrets in their state.

use std::io::Write;
use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use taskd_protocol::Identity;
use taskd_protocol::RpcError;

type HmacSha256 = Hmac<Sha256>;

/// Longest `requestState` accepted from a client.
pub const MAX_STATE_BYTES: usize = 64 * 1024;

/// Signs and verifies request states.
pub struct StateSigner {
    key: [u8; 32],
    ttl_ms: u64,
}

/// What a request state is bound to.
pub struct Binding<'a> {
    pub identity: &'a Identity,
    pub method: &'a str,
    pub name: &'a str,
    pub arguments: &'a Map<String, Value>,
}

impl StateSigner {
    /// Loads the key from `data_dir/request-state.key`, creating it on first use.
    pub fn open(data_dir: &Path, ttl_ms: u64) -> std::io::Result<StateSigner> {
        let path = data_dir.join("request-state.key");
        let key = match std::fs::read(&path) {
            Ok(bytes) => bytes.try_into().map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{} must hold exactly 32 bytes", path.display()),
                )
            })?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; 32];
                getrandom::fill(&mut key).map_err(std::io::Error::other)?;
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create_new(true);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
                let mut file = options.open(&path)?;
                file.write_all(&key)?;
                file.sync_all()?;
                key
            }
            Err(error) => return Err(error),
        };
        Ok(StateSigner { key, ttl_ms })
    }

    /// A signer with a key from elsewhere (a store shared by several nodes).
    pub fn with_key(key: [u8; 32], ttl_ms: u64) -> StateSigner {
        StateSigner { key, ttl_ms }
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail.
        HmacSha256::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!())
    }

    /// Seals `state` for the round trip.
    pub fn seal(&self, binding: &Binding<'_>, state: &Value, now_ms: u64) -> String {
        let payload = json!({
            "v": 1,
            "b": binding_digest(binding),
            "exp": now_ms + self.ttl_ms,
            "s": state,
        });
        let payload = payload.to_string();
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        let tag = mac.finalize().into_bytes();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(payload),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// Verifies a state presented by a client and returns what was sealed.
    pub fn open_state(
        &self,
        binding: &Binding<'_>,
        sealed: &str,
        now_ms: u64,
    ) -> Result<Value, RpcError> {
        let invalid = || RpcError::invalid_params("requestState is invalid or expired");
        if sealed.len() > MAX_STATE_BYTES {
            return Err(invalid());
        }
        let (payload, tag) = sealed.split_once('.').ok_or_else(invalid)?;
        let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| invalid())?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| invalid())?;
        let mut mac = self.mac();
        mac.update(&payload);
        mac.verify_slice(&tag).map_err(|_| invalid())?;
        let mut payload: Value = serde_json::from_slice(&payload).map_err(|_| invalid())?;
        let fresh = payload["exp"].as_u64().is_some_and(|exp| now_ms <= exp);
        let bound = payload["b"].as_str() == Some(binding_digest(binding).as_str());
        if payload["v"] != 1 || !fresh || !bound {
            return Err(invalid());
        }
        Ok(payload["s"].take())
    }
}

/// Digest of who asked what: identity, method, name and canonical arguments.
fn binding_digest(binding: &Binding<'_>) -> String {
    let mut hasher = Sha256::new();
    for part in [
        binding.identity.endpoint.as_str(),
        binding.identity.tenant.as_str(),
        binding.identity.principal.as_str(),
        binding.method,
        binding.name,
    ] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.update(canonical(&Value::Object(binding.arguments.clone())).as_bytes());
    // Last and only when set, so that the states of static-token callers sealed before
    // identities had an issuer still open.
    let issuer = binding.identity.issuer.as_str();
    if !issuer.is_empty() {
        hasher.update((issuer.len() as u64).to_be_bytes());
        hasher.update(issuer.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// JSON with object keys sorted, so that argument order does not change the digest.
fn canonical(value: &Value) -> String {
    match value {
        Value::Object(object) => {
            let mut keys: Vec<&String> = object.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|key| format!("{}:{}", Value::String(key.clone()), canonical(&object[key])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> StateSigner {
        StateSigner {
            key: [7; 32],
            ttl_ms: 1000,
        }
    }

    fn identity(principal: &str) -> Identity {
        Identity {
            endpoint: "/mcp".into(),
            issuer: String::new(),
            tenant: String::new(),
            principal: principal.into(),
        }
    }

    #[test]
    fn round_trip_and_tamper_detection() {
        let signer = signer();
        let alice = identity("alice");
        let args = json!({"b": 1, "a": 2});
        let binding = Binding {
            identity: &alice,
            method: "tools/call",
            name: "t",
            arguments: args.as_object().unwrap(),
        };
        let sealed = signer.seal(&binding, &json!({"step": 2}), 0);
        assert_eq!(
            signer.open_state(&binding, &sealed, 10).unwrap(),
            json!({"step": 2})
        );

        let reordered = json!({"a": 2, "b": 1});
        let same_args = Binding {
            arguments: reordered.as_object().unwrap(),
            ..binding
        };
        assert!(signer.open_state(&same_args, &sealed, 10).is_ok());

        assert!(signer
            .open_state(&binding, &format!("{sealed}-TAMPERED"), 10)
            .is_err());
        assert!(
            signer.open_state(&binding, &sealed, 2000).is_err(),
            "expired"
        );
        let bob = identity("bob");
        let other = Binding {
            identity: &bob,
            ..binding
        };
        assert!(
            signer.open_state(&other, &sealed, 10).is_err(),
            "other principal"
        );
        let alice_elsewhere = Identity {
            issuer: "https://idp.example".into(),
            ..identity("alice")
        };
        let other_issuer = Binding {
            identity: &alice_elsewhere,
            ..binding
        };
        assert!(
            signer.open_state(&other_issuer, &sealed, 10).is_err(),
            "same principal, other issuer"
        );
    }
}
