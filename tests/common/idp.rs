//! A test authorization server on a loopback port: OpenID Connect discovery, a key set
//! whose fetches it counts (and that it can serve slowly, or not at all), RFC 7662
//! introspection of the opaque tokens it was told about, signing of access tokens with
//! the fixture keys in `tests/oauth/keys/` (test-only keys), and, once told who signs
//! in ([`Idp::enable_sign_in`]), OpenID Connect's authorization code flow with PKCE:
//! `/authorize` redirects at once with a code, `/token` checks the verifier and answers
//! with an ID token for that person. A real provider, npm
//! `oauth2-mock-server`, is the referee in `tests/interop/oauth2_mock_server.mjs`
//! (`.ci/interop.sh`); this one lets a test count round trips and break the provider on
//! purpose.

use std::collections::HashMap;
use std::io::Cursor;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

/// A signing key: its `kid`, algorithm, and private half.
#[derive(Clone)]
pub struct SigningKey {
    pub kid: String,
    pub alg: Algorithm,
    key: EncodingKey,
}

impl SigningKey {
    /// A fixture key: `rsa1`, `rsa2` (RS256, or PS256 with `alg`), `ec1` (ES256),
    /// `ed1` (EdDSA).
    pub fn fixture(name: &str, alg: Algorithm) -> SigningKey {
        let path = format!("{}/tests/oauth/keys/{name}.der", env!("CARGO_MANIFEST_DIR"));
        let der = std::fs::read(&path).expect("fixture key");
        let key = match alg {
            Algorithm::RS256 | Algorithm::PS256 => EncodingKey::from_rsa_der(&der),
            Algorithm::ES256 => EncodingKey::from_ec_der(&der),
            Algorithm::EdDSA => EncodingKey::from_ed_der(&der),
            other => panic!("no fixture for {other:?}"),
        };
        SigningKey {
            kid: name.to_owned(),
            alg,
            key,
        }
    }

    /// The public JWK (with `kid`, `alg` and `use`).
    pub fn jwk(&self) -> Value {
        let jwk = Jwk::from_encoding_key(&self.key, self.alg).expect("jwk");
        let mut value = serde_json::to_value(jwk).expect("jwk json");
        value["kid"] = json!(self.kid);
        value["use"] = json!("sig");
        value
    }

    /// A JWS over `claims` with this key (header `typ: at+jwt`).
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        header.typ = Some("at+jwt".into());
        encode(&header, claims, &self.key).expect("sign")
    }

    /// A JWS with a `kid` that no key set holds.
    pub fn sign_as(&self, kid: &str, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(kid.to_owned());
        encode(&header, claims, &self.key).expect("sign")
    }
}

/// How the provider answers its key set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Up,
    /// 503 for every request.
    Down,
    /// Every answer waits this long first.
    Slow(Duration),
}

struct State {
    keys: Vec<Value>,
    mode: Mode,
    max_age: Option<u64>,
    /// Opaque token -> its introspection answer.
    opaque: HashMap<String, Value>,
    /// Who signs in at `/authorize`: the key their ID token is signed with, and its
    /// claims besides `iss`, `aud`, `nonce`, `iat` and `exp` (which a test may
    /// override too).
    sign_in: Option<(SigningKey, Value)>,
    /// Codes handed out: their request's `client_id`, `redirect_uri`, PKCE challenge
    /// and nonce.
    codes: HashMap<String, (String, String, String, String)>,
    /// Token requests answered.
    exchanges: usize,
}

/// The running provider; stopped on drop.
pub struct Idp {
    pub issuer: String,
    state: Arc<Mutex<State>>,
    jwks_fetches: Arc<AtomicUsize>,
    introspections: Arc<AtomicUsize>,
    server: Arc<tiny_http::Server>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Client credentials the provider accepts at its introspection endpoint.
pub const CLIENT_ID: &str = "taskd";
pub const CLIENT_SECRET: &str = "s3cr3t introspection";

impl Idp {
    /// Serves `keys` (public halves) at `/jwks`.
    pub fn start(keys: &[&SigningKey]) -> Idp {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("idp bind"));
        let port = server.server_addr().to_ip().expect("ip").port();
        let issuer = format!("http://127.0.0.1:{port}");
        let state = Arc::new(Mutex::new(State {
            keys: keys.iter().map(|k| k.jwk()).collect(),
            mode: Mode::Up,
            max_age: Some(300),
            opaque: HashMap::new(),
            sign_in: None,
            codes: HashMap::new(),
            exchanges: 0,
        }));
        let jwks_fetches = Arc::new(AtomicUsize::new(0));
        let introspections = Arc::new(AtomicUsize::new(0));
        let threads = (0..4)
            .map(|_| {
                let (server, state, issuer) =
                    (Arc::clone(&server), Arc::clone(&state), issuer.clone());
                let (fetches, introspections) =
                    (Arc::clone(&jwks_fetches), Arc::clone(&introspections));
                std::thread::spawn(move || {
                    for request in server.incoming_requests() {
                        answer(request, &issuer, &state, &fetches, &introspections);
                    }
                })
            })
            .collect();
        Idp {
            issuer,
            state,
            jwks_fetches,
            introspections,
            server,
            threads,
        }
    }

    /// Claims of a valid access token for `audience` and `sub`, valid for an hour.
    pub fn claims(&self, audience: &str, sub: &str, scope: &str) -> Value {
        let now = now_s();
        json!({
            "iss": self.issuer, "aud": audience, "sub": sub, "scope": scope,
            "iat": now, "exp": now + 3600, "client_id": "test-client",
        })
    }

    pub fn set_keys(&self, keys: &[&SigningKey]) {
        self.lock().keys = keys.iter().map(|k| k.jwk()).collect();
    }

    pub fn set_mode(&self, mode: Mode) {
        self.lock().mode = mode;
    }

    /// Makes `token` an active opaque token with these introspection fields.
    pub fn add_opaque(&self, token: &str, fields: Value) {
        self.lock().opaque.insert(token.to_owned(), fields);
    }

    pub fn revoke_opaque(&self, token: &str) {
        self.lock().opaque.remove(token);
    }

    /// Makes `/authorize` sign in the person whose ID token claims are `claims`,
    /// signed with `key`.
    pub fn enable_sign_in(&self, key: &SigningKey, claims: Value) {
        self.lock().sign_in = Some((key.clone(), claims));
    }

    /// Authorization codes exchanged at `/token`.
    pub fn exchanges(&self) -> usize {
        self.lock().exchanges
    }

    pub fn jwks_fetches(&self) -> usize {
        self.jwks_fetches.load(Ordering::SeqCst)
    }

    pub fn introspections(&self) -> usize {
        self.introspections.load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Idp {
    fn drop(&mut self) {
        self.server.unblock();
        for _ in 1..self.threads.len() {
            self.server.unblock();
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

pub fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

fn answer(
    mut request: tiny_http::Request,
    issuer: &str,
    state: &Mutex<State>,
    fetches: &AtomicUsize,
    introspections: &AtomicUsize,
) {
    let path = request.url().split('?').next().unwrap_or("").to_owned();
    let (mode, max_age) = {
        let state = state.lock().unwrap_or_else(|p| p.into_inner());
        (state.mode, state.max_age)
    };
    let respond =
        |request: tiny_http::Request, status: u16, body: Value, headers: &[(&str, String)]| {
            let mut response = tiny_http::Response::new(
                tiny_http::StatusCode(status),
                vec![tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap()],
                Cursor::new(body.to_string().into_bytes()),
                None,
                None,
            );
            for (name, value) in headers {
                response
                    .add_header(tiny_http::Header::from_bytes(*name, value.as_bytes()).unwrap());
            }
            let _ = request.respond(response);
        };
    if path == "/jwks" {
        fetches.fetch_add(1, Ordering::SeqCst);
    }
    match mode {
        Mode::Down => return respond(request, 503, json!({"error": "down"}), &[]),
        Mode::Slow(delay) => std::thread::sleep(delay),
        Mode::Up => {}
    }
    match path.as_str() {
        "/.well-known/openid-configuration" => respond(
            request,
            200,
            json!({
                "issuer": issuer,
                "jwks_uri": format!("{issuer}/jwks"),
                "authorization_endpoint": format!("{issuer}/authorize"),
                "token_endpoint": format!("{issuer}/token"),
                "introspection_endpoint": format!("{issuer}/introspect"),
                "code_challenge_methods_supported": ["S256"],
            }),
            &[],
        ),
        "/jwks" => {
            let keys = state.lock().unwrap_or_else(|p| p.into_inner()).keys.clone();
            let headers: Vec<(&str, String)> = max_age
                .map(|age| vec![("Cache-Control", format!("public, max-age={age}"))])
                .unwrap_or_default();
            respond(request, 200, json!({ "keys": keys }), &headers)
        }
        "/introspect" => {
            introspections.fetch_add(1, Ordering::SeqCst);
            let authorized = request
                .headers()
                .iter()
                .find(|h| h.field.equiv("Authorization"))
                .map(|h| h.value.as_str().to_owned())
                == Some(basic(CLIENT_ID, CLIENT_SECRET));
            let mut body = String::new();
            let _ = std::io::Read::read_to_string(request.as_reader(), &mut body);
            if !authorized {
                return respond(request, 401, json!({"error": "invalid_client"}), &[]);
            }
            let token = body
                .split('&')
                .find_map(|pair| pair.strip_prefix("token="))
                .map(decode_form)
                .unwrap_or_default();
            let known = state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .opaque
                .get(&token)
                .cloned();
            let answer = match known {
                Some(mut fields) => {
                    fields["active"] = json!(true);
                    fields
                }
                None => json!({"active": false}),
            };
            respond(request, 200, answer, &[])
        }
        "/authorize" => {
            let url = request.url().to_owned();
            let query = url.split_once('?').map_or("", |(_, query)| query);
            let param = |name: &str| form_value(query, name).unwrap_or_default();
            let code = format!("code-{}", now_nanos());
            let redirect = param("redirect_uri");
            state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .codes
                .insert(
                    code.clone(),
                    (
                        param("client_id"),
                        redirect.clone(),
                        param("code_challenge"),
                        param("nonce"),
                    ),
                );
            let location = format!("{redirect}?code={code}&state={}", param("state"));
            respond(request, 302, json!({}), &[("Location", location)])
        }
        "/token" => {
            let mut body = String::new();
            let _ = std::io::Read::read_to_string(request.as_reader(), &mut body);
            let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
            state.exchanges += 1;
            let field = |name: &str| form_value(&body, name).unwrap_or_default();
            let known = state.codes.remove(&field("code"));
            let Some((client_id, redirect, challenge, nonce)) = known else {
                drop(state);
                return respond(request, 400, json!({"error": "invalid_grant"}), &[]);
            };
            use base64::Engine;
            use sha2::Digest;
            let verified = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(sha2::Sha256::digest(field("code_verifier").as_bytes()))
                == challenge;
            let fits = field("grant_type") == "authorization_code"
                && field("client_id") == client_id
                && field("redirect_uri") == redirect;
            let Some((key, person)) = state.sign_in.clone().filter(|_| verified && fits) else {
                drop(state);
                return respond(request, 400, json!({"error": "invalid_grant"}), &[]);
            };
            drop(state);
            let now = now_s();
            let mut claims = json!({
                "iss": issuer, "aud": client_id, "nonce": nonce, "iat": now, "exp": now + 300,
            });
            for (name, value) in person.as_object().into_iter().flatten() {
                claims[name] = value.clone();
            }
            let id_token = key.sign(&claims);
            respond(
                request,
                200,
                json!({"access_token": "opaque-access", "token_type": "Bearer",
                       "expires_in": 300, "id_token": id_token}),
                &[],
            )
        }
        _ => respond(request, 404, json!({"error": "not found"}), &[]),
    }
}

/// The decoded value of `name` in a form or query string.
fn form_value(form: &str, name: &str) -> Option<String> {
    form.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == name).then(|| decode_form(value))
    })
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos()
}

/// `Basic` credentials as RFC 6749 §2.3.1 writes them (each part form-encoded).
fn basic(id: &str, secret: &str) -> String {
    use base64::Engine;
    let encode = |s: &str| s.replace('%', "%25").replace(' ', "+");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            encode(id),
            encode(secret)
        ))
    )
}

fn decode_form(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("00");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(0));
                i += 2;
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
