//! Standard Webhooks signatures (<https://www.standardwebhooks.com>): HMAC-SHA256 over
//! `{webhook-id}.{webhook-timestamp}.{body}` with each secret's key, base64, each
//! prefixed `v1,` and separated by spaces (several secrets during a rotation).

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The `webhook-signature` header of `body` sent as `id` at `timestamp` (Unix seconds).
pub fn signature(keys: &[Vec<u8>], id: &str, timestamp: i64, body: &[u8]) -> String {
    let signed: Vec<String> = keys
        .iter()
        .filter_map(|key| {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
            mac.update(id.as_bytes());
            mac.update(b".");
            mac.update(timestamp.to_string().as_bytes());
            mac.update(b".");
            mac.update(body);
            let digest = mac.finalize().into_bytes();
            Some(format!(
                "v1,{}",
                base64::engine::general_purpose::STANDARD.encode(digest)
            ))
        })
        .collect();
    signed.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification's reference libraries
    /// (their test suites): secret `whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw`, id
    /// `msg_p5jXN8AQM9LWM0D4loKWxJek`, timestamp 1614265330, body `{"test": 2432232314}`.
    #[test]
    fn signs_as_the_reference_libraries_do() {
        let key = base64::engine::general_purpose::STANDARD
            .decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .unwrap();
        let signed = signature(
            &[key],
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(signed, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn each_key_signs() {
        let signed = signature(&[vec![1; 32], vec![2; 32]], "msg_1", 1, b"{}");
        assert_eq!(signed.split(' ').count(), 2);
        assert!(signed.split(' ').all(|part| part.starts_with("v1,")));
    }
}
