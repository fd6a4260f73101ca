//! Forged tokens for the barrage: what an attacker can make without the private key.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::common::idp::SigningKey;

fn part(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(value.to_string())
}

/// `alg: none`, no signature.
pub fn unsigned(claims: &Value) -> String {
    format!(
        "{}.{}.",
        part(&json!({"alg": "none", "typ": "JWT"})),
        part(claims)
    )
}

/// HS256 with the issuer's public key (its JWK as published) as the HMAC secret: the
/// classic algorithm-confusion forgery.
pub fn hs256_with_public_key(key: &SigningKey, claims: &Value) -> String {
    let header = json!({"alg": "HS256", "typ": "JWT", "kid": key.kid});
    let input = format!("{}.{}", part(&header), part(claims));
    let secret = key.jwk().to_string();
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("hmac key");
    mac.update(input.as_bytes());
    format!(
        "{input}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}

/// A valid token with one claim changed after signing.
pub fn tampered(token: &str) -> String {
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    let mut claims: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&parts[1]).expect("b64")).expect("json");
    claims["sub"] = json!("mallory");
    parts[1] = part(&claims);
    parts.join(".")
}
