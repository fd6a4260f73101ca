//! `[auth.oauth]`: mcp-taskd as an OAuth 2.1 protected resource, against the test
//! authorization server in `tests/common/idp.rs` (which counts its round trips and can
//! be made slow or unreachable). Discovery (RFC 9728 metadata, 401 challenges), JWT
//! access tokens of every allowed algorithm, the bad-token barrage, the key set's
//! cooldown and outages, scopes (403 step-up), and tasks that belong to the person.

mod tokens;

use std::time::{Duration, Instant};

use jsonwebtoken::Algorithm;
use serde_json::{json, Value};

use crate::common::idp::{now_s, Idp, Mode, SigningKey};
use crate::common::{tasks, HttpResponse, Server};

/// The resource URL of a server on loopback without `server.public_url`.
fn resource(server: &Server) -> String {
    format!("http://{}/mcp", server.addr)
}

/// `[auth.oauth]` for `idp`, plus `extra` lines in that table, and a scoped task tool.
fn config(idp: &Idp, extra: &str) -> String {
    format!(
        "[builtin]\nsets = [\"demo\"]\n\
         [[auth.tokens]]\nprincipal = \"ops\"\nsha256 = \"{static_digest}\"\n\n\
         [auth.oauth]\nissuer = \"{issuer}\"\nscopes_supported = [\"mcp:use\"]\n\
         provider_timeout_ms = 500\n{extra}\n\n\
         [[tools]]\nname = \"report\"\ndescription = \"a scoped task tool\"\n\
         command = [\"/bin/sh\", \"-c\", \"cat >/dev/null; sleep 0.2; echo done\"]\n\
         task_policy = \"optional\"\nscopes = [\"reports:read\", \"reports:write\"]\n",
        issuer = idp.issuer,
        static_digest = sha256_hex(STATIC_TOKEN),
    )
}

/// A static token configured beside OAuth.
const STATIC_TOKEN: &str = "static-ops-token";

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// `echo` called with `authorization` (or none).
fn echo(server: &Server, authorization: Option<&str>) -> HttpResponse {
    let headers: Vec<(&str, &str)> = authorization
        .map(|value| vec![("Authorization", value)])
        .unwrap_or_default();
    server.request_with(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
        json!({}),
        &headers,
    )
}

fn challenge(response: &HttpResponse) -> String {
    response
        .header("WWW-Authenticate")
        .expect("a WWW-Authenticate challenge")
        .to_owned()
}

#[test]
fn a_static_token_deployment_advertises_no_oauth() {
    let server = Server::start(&format!(
        "[[auth.tokens]]\nprincipal = \"ops\"\nsha256 = \"{}\"\n",
        sha256_hex(STATIC_TOKEN)
    ));
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        assert_eq!(server.get(path).status, 404, "{path}");
    }
    let refused = echo(&server, None);
    assert_eq!(refused.status, 401);
    assert_eq!(challenge(&refused), "Bearer");
    assert_eq!(echo(&server, Some(&bearer(STATIC_TOKEN))).status, 200);
}

#[test]
fn metadata_names_the_exact_resource_at_the_path_aware_and_root_urls() {
    let idp = Idp::start(&[]);
    let server = Server::start(&config(&idp, ""));
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let response = server.get(path);
        assert_eq!(response.status, 200, "{path}");
        assert_eq!(response.header("Access-Control-Allow-Origin"), Some("*"));
        let document = response.json();
        assert_eq!(document["resource"], json!(resource(&server)), "{path}");
        assert_eq!(document["authorization_servers"], json!([idp.issuer]));
        assert_eq!(document["scopes_supported"], json!(["mcp:use"]));
        assert_eq!(document["bearer_methods_supported"], json!(["header"]));
    }
    let refused = echo(&server, None);
    assert_eq!(refused.status, 401);
    assert_eq!(
        challenge(&refused),
        format!(
            "Bearer scope=\"mcp:use\", resource_metadata=\"http://{}/.well-known/oauth-protected-resource/mcp\"",
            server.addr
        )
    );
    let invalid = echo(&server, Some("Bearer not-a-token"));
    assert_eq!(invalid.status, 401);
    assert!(
        challenge(&invalid).starts_with("Bearer error=\"invalid_token\", error_description="),
        "{}",
        challenge(&invalid)
    );
    // The static token still works beside OAuth.
    assert_eq!(echo(&server, Some(&bearer(STATIC_TOKEN))).status, 200);
}

/// What a browser-based client (the Inspector on its loopback port) needs to discover
/// OAuth: a preflight for the metadata (it sends `MCP-Protocol-Version`) and a `401`
/// whose challenge the page may read.
#[test]
fn a_browser_page_can_read_the_metadata_and_the_challenge() {
    let idp = Idp::start(&[]);
    let server = Server::start(&config(&idp, ""));
    let inspector = "http://localhost:6274";
    let metadata = server.exchange(&server.raw_request(
        "OPTIONS",
        "/.well-known/oauth-protected-resource/mcp",
        &[
            ("Origin", inspector),
            ("Access-Control-Request-Method", "GET"),
            ("Access-Control-Request-Headers", "mcp-protocol-version"),
        ],
        b"",
    ));
    assert_eq!(metadata.status, 204, "{}", metadata.text());
    assert_eq!(metadata.header("Access-Control-Allow-Origin"), Some("*"));
    assert_eq!(
        metadata.header("Access-Control-Allow-Headers"),
        Some("mcp-protocol-version")
    );
    let headers: Vec<(&str, &str)> = vec![("Origin", inspector)];
    let refused = server.request_with(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}}),
        json!({}),
        &headers,
    );
    assert_eq!(refused.status, 401);
    assert_eq!(
        refused.header("Access-Control-Allow-Origin"),
        Some(inspector)
    );
    let exposed = refused
        .header("Access-Control-Expose-Headers")
        .unwrap_or("");
    assert!(exposed.contains("WWW-Authenticate"), "{exposed}");
    assert!(challenge(&refused).contains("resource_metadata="));
}

#[test]
fn behind_a_proxy_the_public_url_is_the_resource() {
    let idp = Idp::start(&[]);
    let server = Server::start(&format!(
        "[server]\npublic_url = \"https://mcp.example.com/team/\"\n{}",
        config(&idp, "")
    ));
    let document = server
        .get("/.well-known/oauth-protected-resource/team/mcp")
        .json();
    assert_eq!(document["resource"], "https://mcp.example.com/team/mcp");
    assert_eq!(
        server.get("/.well-known/oauth-protected-resource").json()["resource"],
        "https://mcp.example.com/team/mcp"
    );
    assert!(challenge(&echo(&server, None)).contains(
        "resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/team/mcp\""
    ));
}

#[test]
fn advertising_is_a_choice() {
    let key = SigningKey::fixture("rsa1", Algorithm::RS256);
    let idp = Idp::start(&[&key]);
    let server = Server::start(&config(&idp, "advertise = false"));
    assert_eq!(
        server
            .get("/.well-known/oauth-protected-resource/mcp")
            .status,
        404
    );
    let refused = echo(&server, None);
    assert_eq!(refused.status, 401);
    assert!(!challenge(&refused).contains("resource_metadata"));
    // Tokens are accepted all the same.
    let token = key.sign(&idp.claims(&resource(&server), "alice", "mcp:use"));
    assert_eq!(echo(&server, Some(&bearer(&token))).status, 200);
}

#[test]
fn tokens_signed_with_each_allowed_algorithm_are_accepted() {
    let keys = [
        SigningKey::fixture("rsa1", Algorithm::RS256),
        SigningKey::fixture("rsa2", Algorithm::PS256),
        SigningKey::fixture("ec1", Algorithm::ES256),
        SigningKey::fixture("ed1", Algorithm::EdDSA),
    ];
    let idp = Idp::start(&keys.iter().collect::<Vec<_>>());
    let server = Server::start(&config(&idp, ""));
    for key in &keys {
        let token = key.sign(&idp.claims(&resource(&server), "alice", "mcp:use"));
        let response = echo(&server, Some(&bearer(&token)));
        assert_eq!(response.status, 200, "{:?}: {}", key.alg, response.text());
    }
    // Discovery then one key set fetch served them all.
    assert_eq!(idp.jwks_fetches(), 1);
}

#[test]
fn the_audience_may_be_a_configured_alias_or_differ_in_case() {
    let key = SigningKey::fixture("rsa1", Algorithm::RS256);
    let idp = Idp::start(&[&key]);
    let server = Server::start(&config(&idp, "audiences = [\"api://taskd\"]"));
    let upper = format!("HTTP://{}/mcp", server.addr);
    for audience in [
        json!("api://taskd"),
        json!(upper),
        json!(["x", resource(&server)]),
    ] {
        let mut claims = idp.claims("", "alice", "mcp:use");
        claims["aud"] = audience.clone();
        let response = echo(&server, Some(&bearer(&key.sign(&claims))));
        assert_eq!(response.status, 200, "{audience}: {}", response.text());
    }
}

/// Each bad token is refused with 401 `invalid_token`, and none costs a round trip to
/// the provider once its keys are known.
#[test]
fn a_bad_token_barrage_is_refused_without_asking_the_provider() {
    let key = SigningKey::fixture("rsa1", Algorithm::RS256);
    let idp = Idp::start(&[&key]);
    let server = Server::start(&config(&idp, ""));
    let good = idp.claims(&resource(&server), "alice", "mcp:use");
    assert_eq!(echo(&server, Some(&bearer(&key.sign(&good)))).status, 200);
    let fetches = idp.jwks_fetches();
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut claims = good.clone();
        edit(&mut claims);
        key.sign(&claims)
    };
    let now = now_s();
    let barrage: Vec<(&str, String)> = vec![
        ("alg none", tokens::unsigned(&good)),
        (
            "HS256 keyed with the public key",
            tokens::hs256_with_public_key(&key, &good),
        ),
        (
            "wrong iss",
            with(&|c| c["iss"] = json!("http://127.0.0.1:1")),
        ),
        (
            "wrong aud",
            with(&|c| c["aud"] = json!("http://127.0.0.1:1/mcp")),
        ),
        (
            "missing aud",
            with(&|c| drop(c.as_object_mut().unwrap().remove("aud"))),
        ),
        (
            "another resource",
            with(&|c| c["aud"] = json!("https://other.example/mcp")),
        ),
        ("expired", with(&|c| c["exp"] = json!(now - 120))),
        ("not yet valid", with(&|c| c["nbf"] = json!(now + 600))),
        (
            "no exp",
            with(&|c| drop(c.as_object_mut().unwrap().remove("exp"))),
        ),
        (
            "no sub",
            with(&|c| drop(c.as_object_mut().unwrap().remove("sub"))),
        ),
        ("bad signature", tokens::tampered(&key.sign(&good))),
        ("not a JWT", "opaque-but-no-introspection".into()),
        (
            "60 KB",
            format!(
                "{}.{}.{}",
                "e".repeat(20_000),
                "e".repeat(20_000),
                "e".repeat(20_000)
            ),
        ),
    ];
    for (what, token) in &barrage {
        let response = echo(&server, Some(&bearer(token)));
        assert_eq!(response.status, 401, "{what}: {}", response.text());
        assert!(
            challenge(&response).contains("error=\"invalid_token\""),
            "{what}: {}",
            challenge(&response)
        );
    }
    assert_eq!(
        idp.jwks_fetches(),
        fetches,
        "no bad token reached the provider"
    );
    // A 1 MB token does not fit a request head: refused before authentication.
    let huge = format!("Bearer {}", "a".repeat(1 << 20));
    let response = server.try_exchange(
        &server.raw_request("POST", "/mcp", &[("Authorization", &huge)], b"{}"),
        Duration::from_secs(10),
    );
    if let Some(response) = response {
        assert_eq!(response.status, 431);
    }
    assert_eq!(echo(&server, Some(&bearer(&key.sign(&good)))).status, 200);
    assert_eq!(idp.jwks_fetches(), fetches);
}

/// A flood of tokens with unknown `kid`s refetches the key set at most once per
/// cooldown; a key the provider rotated in is found by that one refetch.
#[test]
fn unknown_kids_refetch_the_key_set_at_most_once_per_cooldown() {
    let old = SigningKey::fixture("rsa1", Algorithm::RS256);
    let new = SigningKey::fixture("rsa2", Algorithm::RS256);
    let idp = Idp::start(&[&old]);
    let server = Server::start(&config(&idp, "jwks_cooldown_ms = 3000"));
    let claims = idp.claims(&resource(&server), "alice", "mcp:use");
    assert_eq!(echo(&server, Some(&bearer(&old.sign(&claims)))).status, 200);
    assert_eq!(idp.jwks_fetches(), 1);
    let started = Instant::now();
    let flood: Vec<u16> = (0..40)
        .map(|i| {
            let token = old.sign_as(&format!("unknown-{i}"), &claims);
            echo(&server, Some(&bearer(&token))).status
        })
        .collect();
    let within_cooldown = started.elapsed() < Duration::from_millis(3000);
    assert!(flood.iter().all(|&status| status == 401), "{flood:?}");
    if within_cooldown {
        assert!(
            idp.jwks_fetches() <= 2,
            "{} fetches for 40 unknown kids",
            idp.jwks_fetches()
        );
    }
    // The provider rotates a new key in; once the cooldown has passed, the first token
    // signed with it refetches once and is accepted.
    idp.set_keys(&[&old, &new]);
    std::thread::sleep(Duration::from_millis(3100));
    let before = idp.jwks_fetches();
    assert_eq!(echo(&server, Some(&bearer(&new.sign(&claims)))).status, 200);
    assert_eq!(idp.jwks_fetches(), before + 1);
    assert_eq!(echo(&server, Some(&bearer(&old.sign(&claims)))).status, 200);
}

/// The provider down or slow: tokens signed with known keys keep working, quickly; a
/// token that needs the provider waits at most `provider_timeout_ms`.
#[test]
fn a_provider_outage_keeps_known_keys_working() {
    let key = SigningKey::fixture("rsa1", Algorithm::RS256);
    let idp = Idp::start(&[&key]);
    let server = Server::start(&config(&idp, "jwks_cooldown_ms = 200"));
    let claims = idp.claims(&resource(&server), "alice", "mcp:use");
    assert_eq!(echo(&server, Some(&bearer(&key.sign(&claims)))).status, 200);

    for mode in [Mode::Down, Mode::Slow(Duration::from_secs(3))] {
        idp.set_mode(mode);
        let mut latencies = Vec::new();
        for i in 0..40 {
            // Interleaved: a token with an unknown kid asks the provider each time the
            // cooldown allows.
            let unknown = key.sign_as(&format!("rotated-{i}"), &claims);
            let started = Instant::now();
            let refused = echo(&server, Some(&bearer(&unknown)));
            assert_eq!(refused.status, 401, "{mode:?}");
            assert!(started.elapsed() < Duration::from_millis(1500), "{mode:?}");
            let mut fresh = claims.clone();
            fresh["jti"] = json!(format!("{mode:?}-{i}"));
            let token = key.sign(&fresh);
            let started = Instant::now();
            assert_eq!(echo(&server, Some(&bearer(&token))).status, 200, "{mode:?}");
            latencies.push(started.elapsed());
        }
        latencies.sort();
        let p99 = latencies[latencies.len() * 99 / 100 - 1];
        eprintln!("provider {mode:?}: known-key requests p99 {p99:?}");
        assert!(p99 < Duration::from_millis(300), "{mode:?}: p99 {p99:?}");
    }
}

#[test]
fn a_provider_never_reached_answers_503_to_retry() {
    let key = SigningKey::fixture("rsa1", Algorithm::RS256);
    let idp = Idp::start(&[&key]);
    idp.set_mode(Mode::Down);
    let server = Server::start(&config(&idp, ""));
    let token = key.sign(&idp.claims(&resource(&server), "alice", "mcp:use"));
    let response = echo(&server, Some(&bearer(&token)));
    assert_eq!(response.status, 503, "{}", response.text());
    assert!(response.header("Retry-After").is_some());
    idp.set_mode(Mode::Up);
    // The next attempt (a second later at most) loads the keys.
    let ok = crate::common::poll_until(Duration::from_secs(5), || {
        (echo(&server, Some(&bearer(&token))).status == 200).then_some(())
    });
    assert!(ok.is_some());
}

/// A tool's scopes: without them a call is 403 naming every one of them in one
/// challenge; with them it runs. `tools/list` marks what the token lacks.
#[test]
fn a_call_without_the_tools_scopes_is_403_and_steps_up() {
    let key = SigningKey::fixture("rsa1", Algorithm::RS256);
    let idp = Idp::start(&[&key]);
    let server = Server::start(&config(&idp, ""));
    let narrow =
        bearer(&key.sign(&idp.claims(&resource(&server), "alice", "mcp:use reports:read")));
    let call = |authorization: &str| {
        server.request_with(
            "tools/call",
            json!({"name": "report", "arguments": {}}),
            json!({}),
            &[("Authorization", authorization)],
        )
    };
    let refused = call(&narrow);
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert_eq!(
        challenge(&refused),
        format!(
            "Bearer error=\"insufficient_scope\", error_description=\"the token lacks scopes this operation needs\", scope=\"reports:read reports:write\", resource_metadata=\"http://{}/.well-known/oauth-protected-resource/mcp\"",
            server.addr
        )
    );
    assert_eq!(
        refused.json()["error"]["data"]["requiredScopes"],
        json!(["reports:read", "reports:write"])
    );
    let listed = server.request_with(
        "tools/list",
        json!({}),
        json!({}),
        &[("Authorization", &narrow)],
    );
    let report = listed.result()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "report")
        .cloned()
        .expect("the tool is listed");
    assert_eq!(
        report["_meta"]["dev.mcp-taskd/requiredScopes"],
        json!(["reports:read", "reports:write"])
    );
    assert_eq!(listed.result()["cacheScope"], "private");
    // Step-up: a token with both scopes.
    let wide = bearer(&key.sign(&idp.claims(
        &resource(&server),
        "alice",
        "mcp:use reports:read reports:write",
    )));
    let done = call(&wide);
    assert_eq!(done.status, 200, "{}", done.text());
    // Static tokens reach every tool: scopes are an OAuth notion.
    assert_eq!(call(&bearer(STATIC_TOKEN)).status, 200);
}

#[test]
fn filtered_tool_lists_leave_out_what_the_token_cannot_call() {
    let key = SigningKey::fixture("rsa1", Algorithm::RS256);
    let idp = Idp::start(&[&key]);
    let server = Server::start(&config(&idp, "tools_list = \"filter\""));
    let narrow = bearer(&key.sign(&idp.claims(&resource(&server), "alice", "mcp:use")));
    let names: Vec<Value> = server
        .request_with(
            "tools/list",
            json!({}),
            json!({}),
            &[("Authorization", &narrow)],
        )
        .result()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].clone())
        .collect();
    assert!(names.contains(&json!("echo")));
    assert!(!names.contains(&json!("report")), "{names:?}");
}

/// Tasks belong to (issuer, tenant, principal): a refreshed token of the same person
/// reaches them; another person with the same scopes gets exactly the unknown-id
/// answer; the same person without the tool's scopes gets 403.
#[test]
fn tasks_belong_to_the_person_not_the_token() {
    let key = SigningKey::fixture("rsa1", Algorithm::RS256);
    let idp = Idp::start(&[&key]);
    let server = Server::start(&config(&idp, ""));
    let scopes = "mcp:use reports:read reports:write";
    let token_for = |sub: &str, scope: &str, jti: &str| {
        let mut claims = idp.claims(&resource(&server), sub, scope);
        claims["jti"] = json!(jti);
        bearer(&key.sign(&claims))
    };
    let first = token_for("alice", scopes, "1");
    let task_id = tasks::create(&server, "report", json!({}), &[("Authorization", &first)]);
    let refreshed = token_for("alice", scopes, "2");
    assert_ne!(first, refreshed);
    let read = tasks::get_raw(&server, &task_id, &[("Authorization", &refreshed)]);
    assert_eq!(read.status, 200, "{}", read.text());
    assert_eq!(read.result()["taskId"], json!(task_id));

    let bob = token_for("bob", scopes, "3");
    let foreign = tasks::get_raw(&server, &task_id, &[("Authorization", &bob)]);
    let unknown = tasks::get_raw(
        &server,
        &format!("{}0", &task_id[..task_id.len() - 1]),
        &[("Authorization", &bob)],
    );
    assert_eq!(foreign.status, unknown.status);
    assert_eq!(
        foreign.body, unknown.body,
        "a foreign task reads as an unknown one"
    );

    let narrow = token_for("alice", "mcp:use", "4");
    let forbidden = tasks::get_raw(&server, &task_id, &[("Authorization", &narrow)]);
    assert_eq!(forbidden.status, 403, "{}", forbidden.text());
    let cancel = tasks::cancel(&server, &task_id, &[("Authorization", &narrow)]);
    assert_eq!(cancel.status, 403, "{}", cancel.text());
    let task = tasks::get_raw(&server, &task_id, &[("Authorization", &refreshed)]).result();
    assert_ne!(
        task["status"], "cancelled",
        "a refused cancel changes nothing"
    );
}

/// Opaque tokens go to RFC 7662 introspection: active ones work (and are remembered,
/// by a hash of the token, so the provider is asked once), inactive ones and ones for
/// another resource are refused.
#[test]
fn opaque_tokens_are_introspected_once_and_held_to_the_same_rules() {
    let idp = Idp::start(&[]);
    let secrets = tempfile::tempdir().unwrap();
    let secret_file = secrets.path().join("client-secret");
    std::fs::write(
        &secret_file,
        format!("{}\n", crate::common::idp::CLIENT_SECRET),
    )
    .unwrap();
    let server = Server::start(&config(
        &idp,
        &format!(
            "introspection_endpoint = \"{}/introspect\"\nclient_id = \"{}\"\nclient_secret_file = \"{}\"",
            idp.issuer,
            crate::common::idp::CLIENT_ID,
            secret_file.display()
        ),
    ));
    let exp = now_s() + 600;
    idp.add_opaque(
        "opaque-alice",
        json!({"sub": "alice", "aud": resource(&server), "scope": "mcp:use", "exp": exp, "iss": idp.issuer}),
    );
    idp.add_opaque(
        "opaque-elsewhere",
        json!({"sub": "alice", "aud": "https://other.example/mcp", "exp": exp}),
    );
    for _ in 0..3 {
        assert_eq!(echo(&server, Some("Bearer opaque-alice")).status, 200);
    }
    assert_eq!(idp.introspections(), 1, "remembered after the first answer");
    for token in ["opaque-elsewhere", "opaque-unknown", "opaque-unknown"] {
        let refused = echo(&server, Some(&bearer(token)));
        assert_eq!(refused.status, 401, "{token}");
        assert!(challenge(&refused).contains("invalid_token"));
    }
    assert_eq!(
        idp.introspections(),
        3,
        "an inactive answer is remembered too"
    );
    // Revoked at the provider: still good until the remembered answer ends (at most
    // five minutes, never past exp) — a new token is asked about at once.
    idp.revoke_opaque("opaque-alice");
    assert_eq!(echo(&server, Some("Bearer opaque-alice")).status, 200);
}

mod sign_in {
    //! The dashboard's sign-in at the provider (`[auth.oauth] client_id`): OpenID
    //! Connect's authorization code flow with PKCE, the admin role from the ID token.

    use super::*;

    /// What the dashboard answers at the end of one sign-in: the server sends the
    /// browser to the provider, which redirects it back with a code at once.
    fn sign_in(server: &Server) -> (HttpResponse, String) {
        let start = server.get("/dashboard/sign-in");
        assert_eq!(start.status, 302, "{}", start.text());
        let authorize = start
            .header("Location")
            .expect("to the provider")
            .to_owned();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .max_redirects(0)
            .http_status_as_error(false)
            .build()
            .into();
        let back = agent.get(&authorize).call().expect("the provider answers");
        assert_eq!(back.status().as_u16(), 302);
        let callback = back.headers()["location"]
            .to_str()
            .expect("a location")
            .to_owned();
        let path = callback
            .strip_prefix(&format!("http://{}", server.addr))
            .expect("back to this server")
            .to_owned();
        (server.get(&path), path)
    }

    fn get_with_cookie(server: &Server, path: &str, cookie: &str) -> HttpResponse {
        server.exchange(&server.raw_request("GET", path, &[("Cookie", cookie)], b""))
    }

    fn signed_in_config(idp: &Idp) -> String {
        config(idp, "client_id = \"dash\"\nroles_claim = \"roles\"\n")
    }

    #[test]
    fn an_admin_signs_in_at_the_provider_and_a_callback_works_once() {
        let key = SigningKey::fixture("rsa1", Algorithm::RS256);
        let idp = Idp::start(&[&key]);
        idp.enable_sign_in(&key, json!({"sub": "alice", "roles": ["admin"]}));
        let server = Server::start(&signed_in_config(&idp));

        let unauthenticated = server.get("/dashboard/api/overview");
        assert_eq!(unauthenticated.status, 401);
        assert_eq!(
            unauthenticated.json()["signIn"],
            "sign-in",
            "the page offers it"
        );

        let start = server.get("/dashboard/sign-in");
        let authorize = start.header("Location").expect("to the provider");
        let callback = format!("http://{}/dashboard/sign-in/callback", server.addr);
        for part in [
            format!(
                "{}/authorize?response_type=code&client_id=dash&",
                idp.issuer
            ),
            format!(
                "redirect_uri={}",
                callback.replace(':', "%3A").replace('/', "%2F")
            ),
            "&scope=openid&".to_owned(),
            "&code_challenge_method=S256".to_owned(),
        ] {
            assert!(authorize.contains(&part), "{authorize} lacks {part}");
        }

        let (signed_in, callback_path) = sign_in(&server);
        assert_eq!(signed_in.status, 303, "{}", signed_in.text());
        assert_eq!(signed_in.header("Location"), Some("/dashboard/"));
        let cookie = signed_in
            .header("Set-Cookie")
            .and_then(|value| value.split(';').next())
            .expect("a session cookie")
            .to_owned();
        let overview = get_with_cookie(&server, "/dashboard/api/overview", &cookie);
        assert_eq!(overview.status, 200, "{}", overview.text());

        // The same callback again: its state was used; the provider is not asked.
        let exchanges = idp.exchanges();
        let replayed = server.get(&callback_path);
        assert_eq!(replayed.status, 401, "{}", replayed.text());
        assert_eq!(idp.exchanges(), exchanges);
        // A state this server never handed out, and the provider's own refusal.
        let forged = server.get("/dashboard/sign-in/callback?code=x&state=forged");
        assert_eq!(forged.status, 401);
        assert_eq!(idp.exchanges(), exchanges);
        let denied = server.get("/dashboard/sign-in/callback?error=access_denied&state=s");
        assert_eq!(denied.status, 400);
        assert!(denied.text().contains("denied"), "{}", denied.text());
    }

    #[test]
    fn a_sign_in_without_the_admin_role_or_with_a_foreign_id_token_opens_nothing() {
        let key = SigningKey::fixture("rsa1", Algorithm::RS256);
        let other = SigningKey::fixture("rsa2", Algorithm::RS256);
        let idp = Idp::start(&[&key]);
        let server = Server::start(&signed_in_config(&idp));
        let person = json!({"sub": "bob", "roles": ["viewer"]});
        let refusals = [
            (person.clone(), &key, 403),
            (
                json!({"sub": "alice", "roles": ["admin"], "nonce": "another"}),
                &key,
                401,
            ),
            (
                json!({"sub": "alice", "roles": ["admin"], "aud": "another-client"}),
                &key,
                401,
            ),
            (
                json!({"sub": "alice", "roles": ["admin"], "iss": "https://elsewhere"}),
                &key,
                401,
            ),
            (
                json!({"sub": "alice", "roles": ["admin"], "exp": now_s() - 3600}),
                &key,
                401,
            ),
            // Signed with a key the provider's key set does not hold.
            (json!({"sub": "alice", "roles": ["admin"]}), &other, 401),
        ];
        for (claims, signer, status) in refusals {
            idp.enable_sign_in(signer, claims.clone());
            let exchanges = idp.exchanges();
            let (answer, _) = sign_in(&server);
            assert_eq!(answer.status, status, "{claims}: {}", answer.text());
            assert!(answer.header("Set-Cookie").is_none(), "{claims}");
            assert_eq!(
                idp.exchanges(),
                exchanges + 1,
                "{claims}: the code was exchanged"
            );
        }
    }

    #[test]
    fn without_a_client_id_there_is_no_sign_in() {
        let key = SigningKey::fixture("rsa1", Algorithm::RS256);
        let idp = Idp::start(&[&key]);
        let server = Server::start(&config(&idp, ""));
        assert_eq!(server.get("/dashboard/sign-in").status, 404);
        let unauthenticated = server.get("/dashboard/api/overview");
        assert_eq!(unauthenticated.status, 401);
        assert!(unauthenticated.json().get("signIn").is_none());
    }
}
