//! The request body: size and nesting limits, JSON and JSON-RPC shape, ids, and
//! notifications.

use super::{assert_still_serving, id, nested_arrays, padded_body, ID};
use crate::common::{Rpc, Server, CONFORMANCE};
use serde_json::{json, Value};

// ----------------------------------------------------------------------------------------
// Size and nesting limits

const SMALL_LIMITS: &str = "[limits]\nmax_body_bytes = 2048\nmax_json_depth = 8\n\
                            [builtin]\nsets = [\"conformance\"]\n";

#[test]
fn body_over_limit_by_content_length_is_413() {
    let server = Server::start(SMALL_LIMITS);
    let rpc = Rpc::tool("test_simple_text", json!({}));

    // Exactly at the limit: accepted.
    let response = rpc.send_bytes(&server, &padded_body(&rpc, 2048));
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(response.json()["id"], ID);

    // One byte over: refused before the body is parsed, so the id is null.
    let response = rpc.send_bytes(&server, &padded_body(&rpc, 2049));
    response.expect_rpc_error(413, -32600, &Value::Null);

    // A declared length over the limit is refused without waiting for the body.
    let mut headers = rpc.header_pairs();
    headers.push(("Content-Length", "1000000"));
    let response = server.post_raw("/mcp", &headers, rpc.body.to_string().as_bytes());
    response.expect_rpc_error(413, -32600, &Value::Null);
    assert_still_serving(&server);
}

#[test]
fn body_over_limit_without_content_length_is_413() {
    let server = Server::start(SMALL_LIMITS);
    let rpc = Rpc::tool("test_simple_text", json!({}));

    // Chunked and within the limit: accepted (the limit is on the actual size).
    let response = server.post_chunked("/mcp", &rpc.header_pairs(), &padded_body(&rpc, 2048), 100);
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(response.result()["resultType"], "complete");

    // Chunked and over it, by one byte and by a lot.
    for size in [2049, 8192] {
        let response =
            server.post_chunked("/mcp", &rpc.header_pairs(), &padded_body(&rpc, size), 512);
        response.expect_rpc_error(413, -32600, &Value::Null);
    }
    assert_still_serving(&server);
}

#[test]
fn nesting_deeper_than_limit_is_a_parse_error() {
    let server = Server::start(SMALL_LIMITS);
    // The envelope itself nests 3 levels (message, params, _meta); the extra `_meta`
    // field adds its own arrays.
    let at_limit = Rpc::tool("test_simple_text", json!({})).meta("x", nested_arrays(5));
    let response = at_limit.send(&server);
    assert_eq!(response.status, 200, "depth 8: {}", response.text());

    let too_deep = Rpc::tool("test_simple_text", json!({})).meta("x", nested_arrays(6));
    too_deep
        .send(&server)
        .expect_rpc_error(400, -32700, &Value::Null);

    // Brackets inside strings are text, not nesting.
    let in_string = Rpc::tool("test_simple_text", json!({})).meta("x", json!("[[[[[[[[[[{{{{{{"));
    assert_eq!(in_string.send(&server).status, 200);
    assert_still_serving(&server);
}

#[test]
fn a_hundred_thousand_brackets_are_a_parse_error() {
    let server = Server::start(CONFORMANCE);
    let rpc = Rpc::tool("test_simple_text", json!({}));
    for body in [
        "[".repeat(100_000),
        "{\"a\":".repeat(50_000),
        format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
    ] {
        rpc.send_bytes(&server, body.as_bytes())
            .expect_rpc_error(400, -32700, &Value::Null);
    }
    assert_still_serving(&server);
}

// ----------------------------------------------------------------------------------------
// JSON and JSON-RPC shape

#[test]
fn malformed_json_is_a_parse_error_with_null_id() {
    let server = Server::start(CONFORMANCE);
    let rpc = Rpc::tool("test_simple_text", json!({}));
    let valid = rpc.body.to_string();
    let truncated = &valid[..valid.len() / 2];
    let trailing = format!("{valid}{valid}");
    let bodies: Vec<&[u8]> = vec![
        b"",
        b"{",
        b"not json",
        truncated.as_bytes(),
        trailing.as_bytes(),
        b"{\"jsonrpc\":\"2.0\",\"id\":7,}",
        b"{'jsonrpc':'2.0'}",
        b"{\"id\":1e999}",
    ];
    for body in bodies {
        let response = rpc.send_bytes(&server, body);
        response.expect_rpc_error(400, -32700, &Value::Null);
    }
    assert_still_serving(&server);
}

#[test]
fn invalid_utf8_is_a_parse_error() {
    let server = Server::start(CONFORMANCE);
    let rpc = Rpc::tool("test_simple_text", json!({})).meta("x", json!("PLACEHOLDER"));
    let valid = rpc.body.to_string().into_bytes();
    let at = valid
        .windows(11)
        .position(|w| w == b"PLACEHOLDER")
        .expect("placeholder");
    for bad in [&b"\xff\xfe"[..], b"\xc3\x28", b"\xed\xa0\x80", b"\x80"] {
        let mut body = valid[..at].to_vec();
        body.extend_from_slice(bad);
        body.extend_from_slice(&valid[at + 11..]);
        rpc.send_bytes(&server, &body)
            .expect_rpc_error(400, -32700, &Value::Null);
    }
    rpc.send_bytes(&server, b"\xff\xff\xff\xff")
        .expect_rpc_error(400, -32700, &Value::Null);
    assert_still_serving(&server);
}

#[test]
fn batches_and_non_objects_are_invalid_requests() {
    let server = Server::start(CONFORMANCE);
    let rpc = Rpc::tool("test_simple_text", json!({}));
    let batch = json!([rpc.body.clone()]).to_string();
    for body in [batch.as_str(), "[]", "\"hello\"", "42", "null", "true"] {
        rpc.send_bytes(&server, body.as_bytes())
            .expect_rpc_error(400, -32600, &Value::Null);
    }
    assert_still_serving(&server);
}

#[test]
fn jsonrpc_member_must_be_2_0() {
    let server = Server::start(CONFORMANCE);
    let rpc = Rpc::tool("test_simple_text", json!({}));
    let missing = rpc.clone().edit(|body| {
        body.as_object_mut().unwrap().remove("jsonrpc");
    });
    missing.send(&server).expect_rpc_error(400, -32600, &id());
    for version in [
        json!("1.0"),
        json!("2"),
        json!(2.0),
        json!(null),
        json!("2.0 "),
    ] {
        let response = rpc
            .clone()
            .edit(|body| body["jsonrpc"] = version.clone())
            .send(&server);
        response.expect_rpc_error(400, -32600, &id());
    }
    assert_still_serving(&server);
}

#[test]
fn responses_and_bad_methods_are_invalid_requests() {
    let server = Server::start(CONFORMANCE);
    let rpc = Rpc::tool("test_simple_text", json!({}));
    let result = rpc
        .clone()
        .edit(|body| *body = json!({"jsonrpc": "2.0", "id": 9, "result": {}}));
    result
        .send(&server)
        .expect_rpc_error(400, -32600, &json!(9));
    let error = rpc.clone().edit(|body| {
        *body = json!({"jsonrpc": "2.0", "id": "e-1", "error": {"code": -32000, "message": "x"}})
    });
    error
        .send(&server)
        .expect_rpc_error(400, -32600, &json!("e-1"));
    for method in [json!(5), json!(null), json!(["tools/call"]), json!({})] {
        let response = rpc
            .clone()
            .edit(|body| body["method"] = method.clone())
            .send(&server);
        response.expect_rpc_error(400, -32600, &id());
    }
    assert_still_serving(&server);
}

#[test]
fn params_must_be_an_object() {
    let server = Server::start(CONFORMANCE);
    let rpc = Rpc::new("tools/list", json!({}));
    for params in [json!([1, 2]), json!("x"), json!(3), json!(true)] {
        let response = rpc
            .clone()
            .edit(|body| body["params"] = params.clone())
            .send(&server);
        response.expect_rpc_error(400, -32602, &id());
    }
    assert_still_serving(&server);
}

#[test]
fn ids_of_the_wrong_type_are_invalid_requests_with_null_id() {
    let server = Server::start(CONFORMANCE);
    let rpc = Rpc::new("tools/list", json!({}));
    for bad in [json!({"a": 1}), json!([1]), json!(true), json!(null)] {
        let response = rpc.clone().id(bad.clone()).send(&server);
        response.expect_rpc_error(400, -32600, &Value::Null);
    }
    assert_still_serving(&server);
}

#[test]
fn ids_are_echoed_exactly_on_results_and_errors() {
    let server = Server::start(CONFORMANCE);
    let ids = [
        json!(0),
        json!(-1),
        json!("req-1"),
        json!(""),
        json!(1_712_345_678_901_u64),
        json!(9_007_199_254_740_993_u64),
    ];
    for id in &ids {
        let ok = Rpc::new("tools/list", json!({}))
            .id(id.clone())
            .send(&server);
        assert_eq!(ok.status, 200);
        assert_eq!(&ok.json()["id"], id);
        let unknown = Rpc::new("unknown/method", json!({}))
            .id(id.clone())
            .send(&server);
        unknown.expect_rpc_error(404, -32601, id);
        let mismatch = Rpc::new("tools/list", json!({}))
            .id(id.clone())
            .header("Mcp-Method", "prompts/list")
            .send(&server);
        mismatch.expect_rpc_error(400, -32020, id);
    }
    assert_still_serving(&server);
}

#[test]
fn notifications_get_202_and_an_empty_body() {
    let server = Server::start(CONFORMANCE);
    let notification = Rpc::new("notifications/initialized", json!({})).edit(|body| {
        body.as_object_mut().unwrap().remove("id");
    });
    let response = notification.send(&server);
    assert_eq!(response.status, 202, "{}", response.text());
    assert!(response.body.is_empty(), "body: {}", response.text());
    // Even without any MCP header or _meta: a notification is accepted and ignored.
    let bare = server.post_raw(
        "/mcp",
        &[("Content-Type", "application/json")],
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
    );
    assert_eq!(bare.status, 202);
    assert!(bare.body.is_empty());
    assert_still_serving(&server);
}
