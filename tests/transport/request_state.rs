//! MRTR: a sealed `requestState` and its `inputResponses`, which the server must not
//! trust beyond what it sealed.

use super::{accept_ok, assert_still_serving, id, retry};
use crate::common::{Rpc, Server, CONFORMANCE};
use serde_json::json;

/// Round 1 of `tool` (no arguments, default capabilities): its sealed requestState.
fn first_round_state(server: &Server, tool: &str) -> String {
    let result = Rpc::tool(tool, json!({}))
        .caps(json!({"elicitation": {}, "sampling": {}, "roots": {}}))
        .send(server)
        .result();
    assert_eq!(result["resultType"], "input_required", "{result}");
    result["requestState"]
        .as_str()
        .expect("requestState")
        .to_owned()
}

#[test]
fn tampered_request_state_is_rejected() {
    let server = Server::start(CONFORMANCE);
    let tool = "test_input_required_result_tampered_state";
    let state = first_round_state(&server, tool);
    // Control: the untouched state completes the call.
    let ok = retry(tool, json!(state), accept_ok())
        .send(&server)
        .result();
    assert_eq!(ok["content"][0]["text"], "State verified", "{ok}");

    let (payload, tag) = state.split_once('.').expect("payload.tag");
    let mut flipped = payload.as_bytes().to_vec();
    flipped[payload.len() / 2] = if flipped[payload.len() / 2] == b'A' {
        b'B'
    } else {
        b'A'
    };
    let flipped = String::from_utf8(flipped).unwrap();
    for tampered in [
        format!("{state}-TAMPERED"),
        format!("{flipped}.{tag}"),
        format!("{payload}.{}", &tag[1..]),
        payload.to_owned(),
        String::new(),
        "not-a-state".to_owned(),
        "x".repeat(70_000),
    ] {
        retry(tool, json!(tampered), accept_ok())
            .send(&server)
            .expect_rpc_error(400, -32602, &id());
    }
    assert_still_serving(&server);
}

#[test]
fn request_state_must_be_a_string() {
    let server = Server::start(CONFORMANCE);
    let tool = "test_input_required_result_tampered_state";
    for state in [json!(42), json!({}), json!(["x"]), json!(true)] {
        retry(tool, state, accept_ok())
            .send(&server)
            .expect_rpc_error(400, -32602, &id());
    }
    assert_still_serving(&server);
}

#[test]
fn input_responses_must_be_an_object() {
    let server = Server::start(CONFORMANCE);
    for tool in [
        "test_input_required_result_elicitation",
        "test_input_required_result_tampered_state",
    ] {
        for responses in [json!(null), json!([]), json!("accept"), json!(1)] {
            Rpc::tool(tool, json!({}))
                .caps(json!({"elicitation": {}}))
                .param("inputResponses", responses)
                .send(&server)
                .expect_rpc_error(400, -32602, &id());
        }
    }
    // The same for prompts/get.
    Rpc::new(
        "prompts/get",
        json!({"name": "test_input_required_result_prompt", "inputResponses": null}),
    )
    .caps(json!({"elicitation": {}}))
    .send(&server)
    .expect_rpc_error(400, -32602, &id());
    assert_still_serving(&server);
}

#[test]
fn request_state_is_bound_to_its_tool_method_and_arguments() {
    let server = Server::start(CONFORMANCE);
    let state = first_round_state(&server, "test_input_required_result_request_state");
    // Control: on its own tool the state completes the call.
    let ok = retry(
        "test_input_required_result_request_state",
        json!(state),
        accept_ok(),
    )
    .send(&server)
    .result();
    assert!(
        ok["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("state-ok")),
        "{ok}"
    );
    // Another tool.
    retry(
        "test_input_required_result_tampered_state",
        json!(state),
        accept_ok(),
    )
    .send(&server)
    .expect_rpc_error(400, -32602, &id());
    // The same tool with other arguments.
    retry(
        "test_input_required_result_request_state",
        json!(state),
        accept_ok(),
    )
    .param("arguments", json!({"extra": 1}))
    .send(&server)
    .expect_rpc_error(400, -32602, &id());
    // Another method with the same name.
    Rpc::new(
        "prompts/get",
        json!({"name": "test_input_required_result_prompt", "requestState": state}),
    )
    .caps(json!({"elicitation": {}}))
    .send(&server)
    .expect_rpc_error(400, -32602, &id());
}
