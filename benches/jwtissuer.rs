//! A minimal OpenID provider for benches/jwt.sh: OpenID discovery and a key set holding
//! the test fixture key `tests/oauth/keys/rsa1.der` (a test-only key), served on a
//! loopback port for as long as it runs.
//!
//! ```text
//! jwtissuer AUDIENCE
//! ```
//!
//! Prints the issuer URL, then one RS256 access token for AUDIENCE (subject `bench`,
//! scope `mcp:use`, valid for an hour), each on its own line, then serves.
//! Built by `cargo bench --no-run --bench jwtissuer`; not part of `cargo test`.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::json;

fn fail(why: &str) -> ! {
    eprintln!("jwtissuer: {why}");
    std::process::exit(1)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let [audience] = args.as_slice() else {
        fail("usage: jwtissuer AUDIENCE");
    };
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/oauth/keys/rsa1.der");
    let der = std::fs::read(path).unwrap_or_else(|e| fail(&format!("{path}: {e}")));
    let key = EncodingKey::from_rsa_der(&der);
    let mut jwk = serde_json::to_value(
        Jwk::from_encoding_key(&key, Algorithm::RS256).unwrap_or_else(|e| fail(&e.to_string())),
    )
    .unwrap_or_else(|e| fail(&e.to_string()));
    jwk["kid"] = json!("rsa1");
    jwk["use"] = json!("sig");
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap_or_else(|e| fail(&e.to_string()));
    let port = server
        .server_addr()
        .to_ip()
        .map_or_else(|| fail("no port"), |address| address.port());
    let issuer = format!("http://127.0.0.1:{port}");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let claims = json!({"iss": issuer, "aud": audience, "sub": "bench", "scope": "mcp:use",
                        "iat": now, "exp": now + 3600});
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("rsa1".into());
    header.typ = Some("at+jwt".into());
    let token = encode(&header, &claims, &key).unwrap_or_else(|e| fail(&e.to_string()));
    println!("{issuer}\n{token}");
    let discovery = json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks"),
                           "response_types_supported": ["code"],
                           "subject_types_supported": ["public"],
                           "id_token_signing_alg_values_supported": ["RS256"]})
    .to_string();
    let keys = json!({"keys": [jwk]}).to_string();
    for request in server.incoming_requests() {
        let body = match request.url() {
            "/jwks" => keys.clone(),
            url if url.starts_with("/.well-known/") => discovery.clone(),
            _ => {
                let _ = request.respond(tiny_http::Response::empty(404));
                continue;
            }
        };
        let json = tiny_http::Header::from_bytes("Content-Type", "application/json")
            .unwrap_or_else(|()| fail("header"));
        let _ = request.respond(tiny_http::Response::from_string(body).with_header(json));
    }
}
