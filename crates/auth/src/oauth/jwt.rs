//! JWT access tokens (RFC 9068), verified with `jsonwebtoken`.
//!
//! What a token must be to pass, each check made here:
//! - at most [`MAX_TOKEN_BYTES`] long (before any parsing);
//! - signed with one of [`ALLOWED`] (RS256, PS256, ES256, EdDSA) by a key of the
//!   issuer's key set that fits the algorithm: `none` and every HMAC algorithm are
//!   refused before a key is looked up, so that no public key can be used as an HMAC
//!   secret;
//! - `iss` exactly the configured issuer;
//! - `aud` (a string or an array) naming this resource or one of its configured aliases
//!   (compared with the scheme and host in lowercase and no trailing slash, RFC 8707);
//! - `exp` present and not past, `nbf` (when present) reached, both with [`LEEWAY_S`];
//! - the principal claim present, a non-empty string.

use jsonwebtoken::{decode, decode_header, Validation};
use serde_json::{Map, Value};

use super::keys::{KeyStore, Lookup, ALLOWED};
use super::{Claims, Grant, Refusal};

/// Longest token looked at (Entra tokens with many groups run to a few KiB).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Clock skew allowed on `exp` and `nbf`, in seconds.
pub const LEEWAY_S: u64 = 30;

/// Whether `token` has the shape of a JWS compact serialization (three base64url
/// parts): such tokens are verified here, others go to introspection.
pub fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// Verifies the access token `token`; the grant carries the claims that matter here.
pub fn verify(token: &str, keys: &KeyStore, claims: &Claims) -> Result<(Grant, u64), Refusal> {
    claims.grant(&verified_claims(token, keys, &claims.issuer)?)
}

/// The claims of `token` once its length, algorithm, key, signature, `iss` (exactly
/// `issuer`), `exp` and `nbf` are checked: everything but the audience, which depends on
/// what the token is for (an access token for this resource, an ID token for this
/// server's client).
pub fn verified_claims(
    token: &str,
    keys: &KeyStore,
    issuer: &str,
) -> Result<Map<String, Value>, Refusal> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(Refusal::Invalid("the token is too long"));
    }
    let header = decode_header(token).map_err(|_| Refusal::Invalid("a malformed token"))?;
    if !ALLOWED.contains(&header.alg) {
        return Err(Refusal::Invalid("the token's algorithm is not accepted"));
    }
    let candidates = match keys.find(header.kid.as_deref(), header.alg) {
        Lookup::Found(candidates) => candidates,
        Lookup::Unknown => return Err(Refusal::Invalid("the token's key is not the issuer's")),
        Lookup::Unavailable => return Err(Refusal::Unavailable),
    };
    let mut validation = Validation::new(header.alg);
    validation.leeway = LEEWAY_S;
    validation.validate_exp = true;
    validation.validate_nbf = true;
    // The audience is checked below, with RFC 8707's case rules.
    validation.validate_aud = false;
    validation.set_issuer(&[issuer]);
    validation.set_required_spec_claims(&["exp", "iss", "aud"]);
    let mut refusal = Refusal::Invalid("the token's signature does not verify");
    for key in candidates {
        match decode::<Map<String, Value>>(token, &key.decoding, &validation) {
            Ok(data) => return Ok(data.claims),
            Err(error) => {
                use jsonwebtoken::errors::ErrorKind;
                refusal = Refusal::Invalid(match error.kind() {
                    ErrorKind::InvalidSignature => "the token's signature does not verify",
                    ErrorKind::ExpiredSignature => "the token has expired",
                    ErrorKind::ImmatureSignature => "the token is not valid yet",
                    ErrorKind::InvalidIssuer => "the token is from another issuer",
                    ErrorKind::MissingRequiredClaim(_) => "the token lacks exp, iss or aud",
                    _ => "the token does not verify",
                });
                if !matches!(error.kind(), ErrorKind::InvalidSignature) {
                    // The signature held: the claims are what is wrong.
                    break;
                }
            }
        }
    }
    Err(refusal)
}
