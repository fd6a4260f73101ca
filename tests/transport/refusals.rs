//! Refused calls never run the tool, whatever the reason for the refusal.

use std::time::Duration;

use super::{
    auth_config, bearer, id, nested_arrays, padded_body, ALICE, CLIENT_CAPABILITIES,
    PROTOCOL_VERSION,
};
use crate::common::{Listen, Rpc, Server};
use serde_json::{json, Value};

/// Every kind of refusal, aimed at `test_trigger_tool_change` (whose only effect is a
/// `notifications/tools/list_changed` on open listen streams). A listener sees nothing
/// from them: the first frame after them is the prompts sentinel, and then a valid call
/// does produce the tools frame (so the witness works).
#[test]
fn refused_tool_calls_never_run_the_tool() {
    let server = Server::start(&auth_config(
        "[limits]\nmax_body_bytes = 4096\nmax_json_depth = 16\n",
    ));
    let auth = bearer(ALICE);
    let authed = |rpc: Rpc| rpc.header("Authorization", &auth);
    let mut listener = Listen::open(
        &server,
        json!({"toolsListChanged": true, "promptsListChanged": true}),
        json!({}),
        &[("Authorization", auth.as_str())],
    );
    listener
        .next_message(Duration::from_secs(10))
        .expect("acknowledgement");
    let trigger = || authed(Rpc::tool("test_trigger_tool_change", json!({})));
    let expect = |rpc: Rpc, status: u16, code: i64, id: Value| {
        rpc.send(&server).expect_rpc_error(status, code, &id);
    };

    expect(
        trigger().header("Host", "evil.example.com"),
        403,
        -32600,
        Value::Null,
    );
    expect(
        trigger().header("Origin", "http://evil.example.com"),
        403,
        -32600,
        Value::Null,
    );
    expect(
        trigger().without_header("Authorization"),
        401,
        -32600,
        Value::Null,
    );
    expect(
        trigger().header("Authorization", "Bearer nope"),
        401,
        -32600,
        Value::Null,
    );
    expect(
        trigger().without_header("MCP-Protocol-Version"),
        400,
        -32020,
        id(),
    );
    expect(
        trigger().header("Mcp-Method", "tools/list"),
        400,
        -32020,
        id(),
    );
    expect(trigger().without_header("Mcp-Name"), 400, -32020, id());
    expect(
        trigger().header("Mcp-Name", "test_simple_text"),
        400,
        -32020,
        id(),
    );
    expect(
        trigger().header("Mcp-Name", "=?base64?***?="),
        400,
        -32020,
        id(),
    );
    expect(trigger().param("_meta", json!({})), 400, -32602, id());
    expect(
        trigger().without_meta(CLIENT_CAPABILITIES),
        400,
        -32602,
        id(),
    );
    expect(
        trigger().meta(PROTOCOL_VERSION, json!("v999.0.0")),
        400,
        -32020,
        id(),
    );
    expect(
        trigger()
            .header("MCP-Protocol-Version", "v999.0.0")
            .meta(PROTOCOL_VERSION, json!("v999.0.0")),
        400,
        -32022,
        id(),
    );
    expect(trigger().param("arguments", json!([])), 400, -32602, id());
    expect(trigger().param("requestState", json!(1)), 400, -32602, id());
    expect(
        trigger().param("requestState", json!("forged")),
        400,
        -32602,
        id(),
    );
    expect(
        trigger().param("inputResponses", json!(null)),
        400,
        -32602,
        id(),
    );
    expect(
        trigger().edit(|body| body["jsonrpc"] = json!("1.0")),
        400,
        -32600,
        id(),
    );
    expect(trigger().id(json!({"x": 1})), 400, -32600, Value::Null);
    expect(
        trigger().meta("deep", nested_arrays(20)),
        400,
        -32700,
        Value::Null,
    );
    let big = trigger();
    big.send_bytes(&server, &padded_body(&big, 5000))
        .expect_rpc_error(413, -32600, &Value::Null);
    let put = trigger();
    let response = server.exchange(&server.raw_request(
        "PUT",
        "/mcp",
        &put.header_pairs(),
        put.body.to_string().as_bytes(),
    ));
    response.expect_rpc_error(405, -32600, &Value::Null);
    let elsewhere = trigger();
    let response = server.post_raw(
        "/mcp/",
        &elsewhere.header_pairs(),
        elsewhere.body.to_string().as_bytes(),
    );
    assert_eq!(response.status, 404);
    // A notification is acknowledged, never executed.
    let notification = trigger().edit(|body| {
        body.as_object_mut().unwrap().remove("id");
    });
    assert_eq!(notification.send(&server).status, 202);

    // Sentinel: a valid prompts change. Frames are queued in publish order, so a tools
    // frame from any refused call would come first.
    let sentinel = authed(Rpc::tool("test_trigger_prompt_change", json!({}))).send(&server);
    assert_eq!(sentinel.status, 200, "{}", sentinel.text());
    let first = listener
        .next_message(Duration::from_secs(10))
        .expect("sentinel frame");
    assert_eq!(
        first["method"], "notifications/prompts/list_changed",
        "a refused call ran the tool: {first}"
    );

    // The witness works: a valid call does produce the tools frame.
    let valid = trigger().send(&server);
    assert_eq!(valid.status, 200, "{}", valid.text());
    let next = listener
        .next_message(Duration::from_secs(10))
        .expect("tools frame");
    assert_eq!(next["method"], "notifications/tools/list_changed", "{next}");
}
