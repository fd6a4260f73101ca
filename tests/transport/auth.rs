//! Bearer-token authentication, and a `requestState` bound to the caller.

use super::{accept_ok, auth_config, bearer, id, retry, ALICE, ALICE_SHA256, BOB};
use crate::common::{Rpc, Server};
use serde_json::{json, Value};

#[test]
fn bearer_token_is_required_when_tokens_are_configured() {
    let server = Server::start(&auth_config(""));
    let rpc = Rpc::tool("test_simple_text", json!({}));
    let unauthorized = [
        None,
        Some("Bearer wrong-token".to_owned()),
        Some(format!("Basic {ALICE}")),
        Some("Bearer".to_owned()),
        Some(format!("Bearer {ALICE_SHA256}")),
        Some(format!("Bearer {ALICE}x")),
    ];
    for authorization in unauthorized {
        let request = match &authorization {
            Some(value) => rpc.clone().header("Authorization", value),
            None => rpc.clone(),
        };
        let response = request.send(&server);
        response.expect_rpc_error(401, -32600, &Value::Null);
        assert_eq!(
            response.header("www-authenticate"),
            Some("Bearer"),
            "{authorization:?}"
        );
    }
    for token in [ALICE, BOB] {
        let ok = rpc
            .clone()
            .header("Authorization", &bearer(token))
            .send(&server);
        assert_eq!(ok.status, 200, "{}", ok.text());
        assert_eq!(ok.result()["resultType"], "complete");
    }
    // The scheme is case-insensitive.
    let lower = rpc
        .clone()
        .header("Authorization", &format!("bearer {ALICE}"))
        .send(&server);
    assert_eq!(lower.status, 200, "{}", lower.text());
    // DNS-rebinding protection comes first: a foreign Host is 403 even without a token.
    rpc.clone()
        .header("Host", "evil.example.com")
        .send(&server)
        .expect_rpc_error(403, -32600, &Value::Null);
}

#[test]
fn request_state_is_bound_to_the_caller() {
    let server = Server::start(&auth_config(""));
    let tool = "test_input_required_result_tampered_state";
    let as_alice = |rpc: Rpc| rpc.header("Authorization", &bearer(ALICE));
    let round_one = as_alice(Rpc::tool(tool, json!({})).caps(json!({"elicitation": {}})))
        .send(&server)
        .result();
    let state = round_one["requestState"]
        .as_str()
        .expect("state")
        .to_owned();
    retry(tool, json!(state), accept_ok())
        .header("Authorization", &bearer(BOB))
        .send(&server)
        .expect_rpc_error(400, -32602, &id());
    let ok = as_alice(retry(tool, json!(state), accept_ok()))
        .send(&server)
        .result();
    assert_eq!(ok["content"][0]["text"], "State verified");
}
