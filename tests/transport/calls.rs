//! Refused `tools/call`, `resources/read`, `prompts/get` and list requests: unknown
//! targets, bad arguments, missing capabilities, invalid cursors.

use super::{assert_still_serving, id, ID};
use crate::common::{Rpc, Server, ALL_SETS, CONFORMANCE};
use serde_json::{json, Value};

// ----------------------------------------------------------------------------------------
// tools/call

#[test]
fn unknown_tool_is_invalid_params() {
    let server = Server::start(ALL_SETS);
    for name in ["no_such_tool", "ECHO", "echo ", ""] {
        Rpc::tool(name, json!({}))
            .header("Mcp-Name", &format!("=?base64?{}?=", base64(name)))
            .send(&server)
            .expect_rpc_error(400, -32602, &id());
    }
    // `name` missing or not a string: the handler's -32602, not a header mismatch.
    for name in [json!(null), json!(5), json!(["echo"])] {
        Rpc::tool("echo", json!({"text": "x"}))
            .param("name", name)
            .send(&server)
            .expect_rpc_error(400, -32602, &id());
    }
    assert_still_serving(&server);
}

#[test]
fn tool_arguments_must_be_an_object() {
    let server = Server::start(ALL_SETS);
    for arguments in [json!([1]), json!("text"), json!(5), json!(true)] {
        Rpc::tool("echo", arguments)
            .send(&server)
            .expect_rpc_error(400, -32602, &id());
    }
    // Absent and null arguments mean `{}`.
    let absent = Rpc::new("tools/call", json!({"name": "test_simple_text"})).send(&server);
    assert_eq!(absent.status, 200, "{}", absent.text());
    let null = Rpc::tool("test_simple_text", json!(null)).send(&server);
    assert_eq!(null.status, 200, "{}", null.text());
}

#[test]
fn arguments_violating_the_input_schema_are_a_tool_error() {
    let server = Server::start(ALL_SETS);
    for arguments in [
        json!({"text": 5}),
        json!({}),
        json!({"text": "hi", "extra": true}),
        json!({"text": null}),
    ] {
        let response = Rpc::tool("echo", arguments.clone()).send(&server);
        assert_eq!(response.status, 200, "{arguments}: {}", response.text());
        let message = response.json();
        assert_eq!(message["id"], ID);
        let result = &message["result"];
        assert_eq!(result["isError"], true, "{result}");
        assert_eq!(result["resultType"], "complete");
        let text = result["content"][0]["text"].as_str().expect("text");
        // The tool would have echoed the text (or nothing); this is the validator.
        assert!(text.contains("inputSchema"), "{text}");
    }
    let fine = Rpc::tool("echo", json!({"text": "hi"}))
        .send(&server)
        .result();
    assert_eq!(fine["content"][0]["text"], "hi");
    assert!(fine.get("isError").is_none());
}

#[test]
fn missing_capability_is_32021_with_required_capabilities() {
    let server = Server::start(CONFORMANCE);
    for capabilities in [
        json!({}),
        json!({"elicitation": {}, "roots": {"listChanged": true}}),
    ] {
        let error = Rpc::tool("test_missing_capability", json!({}))
            .caps(capabilities)
            .id(json!(401))
            .send(&server)
            .expect_rpc_error(400, -32021, &json!(401));
        assert_eq!(
            error["data"]["requiredCapabilities"],
            json!({"sampling": {}}),
            "{error}"
        );
    }
    let ok = Rpc::tool("test_missing_capability", json!({}))
        .caps(json!({"sampling": {}}))
        .send(&server);
    assert_eq!(ok.result()["content"][0]["text"], "Success");
}

// ----------------------------------------------------------------------------------------
// resources, prompts, cursors

#[test]
fn unknown_resource_is_invalid_params_with_the_uri() {
    let server = Server::start(CONFORMANCE);
    for uri in [
        "test://nonexistent-resource-for-conformance-testing",
        "test://template//data",
        "test://template/1/2/data",
        "not a uri",
    ] {
        let error = Rpc::new("resources/read", json!({"uri": uri}))
            .header("Mcp-Name", &format!("=?base64?{}?=", base64(uri)))
            .send(&server)
            .expect_rpc_error(400, -32602, &id());
        assert_eq!(error["data"]["uri"], uri, "{error}");
    }
    for uri in [json!(null), json!(5)] {
        Rpc::new("resources/read", json!({"uri": "x"}))
            .param("uri", uri)
            .send(&server)
            .expect_rpc_error(400, -32602, &id());
    }
    assert_still_serving(&server);
}

#[test]
fn prompt_errors_are_invalid_params() {
    let server = Server::start(ALL_SETS);
    let with_args = |arguments: Value| {
        Rpc::new(
            "prompts/get",
            json!({"name": "test_prompt_with_arguments", "arguments": arguments}),
        )
    };
    for arguments in [
        json!({"arg1": "a"}),
        json!({}),
        json!({"arg1": "a", "arg2": 2}),
        json!({"arg1": null, "arg2": "b"}),
        json!(["a", "b"]),
        json!("a"),
    ] {
        with_args(arguments)
            .send(&server)
            .expect_rpc_error(400, -32602, &id());
    }
    Rpc::new("prompts/get", json!({"name": "summarize"}))
        .send(&server)
        .expect_rpc_error(400, -32602, &id());
    Rpc::new("prompts/get", json!({"name": "no_such_prompt"}))
        .send(&server)
        .expect_rpc_error(400, -32602, &id());
    let ok = with_args(json!({"arg1": "a", "arg2": "b"})).send(&server);
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert!(ok.result()["messages"].is_array());
}

#[test]
fn invalid_cursors_are_invalid_params() {
    let server = Server::start(CONFORMANCE);
    let far = base64_url("offset:100000");
    let junk = base64_url("garbage");
    for method in [
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
    ] {
        for cursor in [
            json!("!!!"),
            json!(far),
            json!(junk),
            json!(5),
            json!({}),
            json!("offset:1"),
        ] {
            Rpc::new(method, json!({"cursor": cursor}))
                .send(&server)
                .expect_rpc_error(400, -32602, &id());
        }
        let first = Rpc::new(method, json!({"cursor": null})).send(&server);
        assert_eq!(first.status, 200, "{method}: {}", first.text());
    }
}

// ----------------------------------------------------------------------------------------
// Base64, for `Mcp-Name` values and cursors

fn base64(text: &str) -> String {
    encode(
        text.as_bytes(),
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        true,
    )
}

fn base64_url(text: &str) -> String {
    encode(
        text.as_bytes(),
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
        false,
    )
}

/// Standard Base64 (RFC 4648) with the given alphabet, padded or not.
fn encode(bytes: &[u8], alphabet: &[u8; 64], pad: bool) -> String {
    let mut out = String::new();
    for group in bytes.chunks(3) {
        let n =
            group.iter().fold(0u32, |acc, &b| (acc << 8) | u32::from(b)) << (8 * (3 - group.len()));
        for i in 0..=group.len() {
            out.push(alphabet[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
        if pad {
            for _ in group.len()..3 {
                out.push('=');
            }
        }
    }
    out
}
