//! Every error path of the transport and protocol layers, against the real binary over
//! raw HTTP: the HTTP status, the JSON-RPC code, the echoed id (null when the body was
//! never parsed), and that nothing else happened — the server keeps answering, and a
//! tool whose call was refused never ran (observed through the side effect of
//! `test_trigger_tool_change` on a `subscriptions/listen` stream).
//!
//! One module per part of a request that can be wrong; the helpers they share are here.

mod auth;
mod body;
mod calls;
mod headers;
mod http;
mod refusals;
mod request_state;

use crate::common::{Rpc, Server};
use serde_json::{json, Value};

const ID: i64 = 7;

fn id() -> Value {
    json!(ID)
}

/// A normal `tools/call` still succeeds on `server`.
fn assert_still_serving(server: &Server) {
    let response = Rpc::tool("test_simple_text", json!({})).send(server);
    assert_eq!(response.status, 200, "follow-up call: {}", response.text());
    let result = response.result();
    assert_eq!(
        result["content"][0]["text"],
        "This is a simple text response for testing."
    );
    assert!(result.get("isError").is_none());
}

/// A body of exactly `size` bytes: `rpc`'s JSON padded with trailing spaces.
fn padded_body(rpc: &Rpc, size: usize) -> Vec<u8> {
    let mut body = rpc.body.to_string().into_bytes();
    assert!(body.len() <= size, "request already {} bytes", body.len());
    body.resize(size, b' ');
    body
}

/// `depth` nested arrays, e.g. `[[[]]]` for 3.
fn nested_arrays(depth: usize) -> Value {
    let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    serde_json::from_str(&text).expect("nested arrays")
}

// Keys of `params._meta`.
const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

// ----------------------------------------------------------------------------------------
// MRTR retries

const ACCEPT_OK: &str = r#"{"confirm": {"action": "accept", "content": {"ok": true}}}"#;

fn retry(tool: &str, state: Value, responses: Value) -> Rpc {
    Rpc::tool(tool, json!({}))
        .caps(json!({"elicitation": {}, "sampling": {}, "roots": {}}))
        .param("inputResponses", responses)
        .param("requestState", state)
}

fn accept_ok() -> Value {
    serde_json::from_str(ACCEPT_OK).unwrap()
}

// ----------------------------------------------------------------------------------------
// Authentication

// Tokens and their SHA-256 digests (`printf %s TOKEN | sha256sum`).
const ALICE: &str = "taskd-test-token-alice";
const ALICE_SHA256: &str = "68b74f2ff99b029c6ca3eab04c4be3429bd3a4a7bfc56a59ed88ffcedb4d56b8";
const BOB: &str = "taskd-test-token-bob";
const BOB_SHA256: &str = "2287fb08f688ff4aacb26736dd6323cceffe31999cd2cff7556e3f8cae797481";

fn auth_config(extra: &str) -> String {
    format!(
        "[[auth.tokens]]\nprincipal = \"alice\"\ntenant = \"t1\"\nsha256 = \"{ALICE_SHA256}\"\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntenant = \"t1\"\nsha256 = \"{BOB_SHA256}\"\n\
         {extra}[builtin]\nsets = [\"conformance\"]\n"
    )
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}
