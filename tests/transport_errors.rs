//! Every error path of the transport and protocol layers, against the real binary over
//! raw HTTP: the HTTP status, the JSON-RPC code, the echoed id (null when the body was
//! never parsed), and that nothing else happened — the server keeps answering, and a
//! tool whose call was refused never ran (observed through the side effect of
//! `test_trigger_tool_change` on a `subscriptions/listen` stream).

use std::time::Duration;

use crate::common::{Listen, Rpc, Server, ALL_SETS, CONFORMANCE, VERSION};
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

// ----------------------------------------------------------------------------------------
// HTTP routing

#[test]
fn healthz_is_200_and_unknown_paths_are_404() {
    let server = Server::start(CONFORMANCE);
    let health = server.get("/healthz");
    assert_eq!(health.status, 200);
    assert_eq!(health.json(), json!({"status": "ok"}));

    let valid = Rpc::tool("test_simple_text", json!({}));
    for path in ["/", "/mcp/", "/mcp/extra", "/MCP", "/healthz/x", "/other"] {
        let response = server.post_raw(
            path,
            &valid.header_pairs(),
            valid.body.to_string().as_bytes(),
        );
        assert_eq!(response.status, 404, "POST {path}: {}", response.text());
        assert_eq!(server.get(path).status, 404, "GET {path}");
    }
    // A query string does not change the endpoint.
    let response = server.post_raw(
        "/mcp?x=1",
        &valid.header_pairs(),
        valid.body.to_string().as_bytes(),
    );
    assert_eq!(response.status, 200, "{}", response.text());
    assert_still_serving(&server);
}

#[test]
fn mcp_endpoint_only_accepts_post() {
    let server = Server::start(CONFORMANCE);
    let valid = Rpc::tool("test_simple_text", json!({}));
    let body = valid.body.to_string();
    for method in ["GET", "PUT", "DELETE", "PATCH", "OPTIONS"] {
        let request = server.raw_request(method, "/mcp", &valid.header_pairs(), body.as_bytes());
        let response = server.exchange(&request);
        assert_eq!(response.header("allow"), Some("POST"), "{method}");
        // The body is never read, so there is no id to echo.
        response.expect_rpc_error(405, -32600, &Value::Null);
    }
    let head = server.exchange(&server.raw_request("HEAD", "/mcp", &[], b""));
    assert_eq!(head.status, 405);
    assert_eq!(head.header("allow"), Some("POST"));
    assert!(head.body.is_empty(), "HEAD answer with a body");

    let post_health = server.post_raw("/healthz", &[], b"");
    assert_eq!(post_health.status, 405);
    assert_eq!(post_health.header("allow"), Some("GET"));
    assert_still_serving(&server);
}

// ----------------------------------------------------------------------------------------
// DNS-rebinding protection

#[test]
fn foreign_host_is_403() {
    let server = Server::start(CONFORMANCE);
    let valid = Rpc::new("server/discover", json!({}));
    for host in [
        "evil.example.com",
        "evil.example.com:80",
        "localhost.evil.example.com",
        "127.0.0.1.nip.io",
        "localhost:notaport",
        "0.0.0.0",
    ] {
        let response = valid.clone().header("Host", host).send(&server);
        response.expect_rpc_error(403, -32600, &Value::Null);
    }
    assert_still_serving(&server);
}

#[test]
fn foreign_origin_is_403() {
    let server = Server::start(CONFORMANCE);
    let valid = Rpc::new("server/discover", json!({}));
    for origin in [
        "http://evil.example.com",
        "https://evil.example.com:443",
        "http://localhost.evil.example.com",
        "null",
        "file://",
        "chrome-extension://localhost",
    ] {
        let response = valid.clone().header("Origin", origin).send(&server);
        response.expect_rpc_error(403, -32600, &Value::Null);
    }
    // Both foreign: still 403, never anything later in the pipeline.
    let response = valid
        .clone()
        .header("Host", "evil.example.com")
        .header("Origin", "http://evil.example.com")
        .without_header("MCP-Protocol-Version")
        .send(&server);
    response.expect_rpc_error(403, -32600, &Value::Null);
    assert_still_serving(&server);
}

#[test]
fn loopback_host_and_origin_are_accepted() {
    let server = Server::start(CONFORMANCE);
    let port = server.addr.port();
    let valid = Rpc::new("server/discover", json!({}));
    let hosts = [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
        format!("[::1]:{port}"),
        "localhost".to_owned(),
    ];
    for host in &hosts {
        let response = valid.clone().header("Host", host).send(&server);
        assert_eq!(response.status, 200, "Host {host}: {}", response.text());
        assert_eq!(response.json()["id"], ID);
    }
    let origins = [
        format!("http://localhost:{port}"),
        format!("http://127.0.0.1:{port}"),
        "https://localhost".to_owned(),
        format!("http://[::1]:{port}"),
    ];
    for origin in &origins {
        let response = valid.clone().header("Origin", origin).send(&server);
        assert_eq!(response.status, 200, "Origin {origin}: {}", response.text());
        assert_eq!(response.json()["result"]["resultType"], "complete");
    }
}

#[test]
fn configured_hosts_and_origins_are_accepted() {
    let server = Server::start(
        "[server]\nallowed_hosts = [\"mcp.example.com\"]\n\
         allowed_origins = [\"https://app.example.com\"]\n\
         [builtin]\nsets = [\"conformance\"]\n",
    );
    let valid = Rpc::new("server/discover", json!({}));
    for host in ["mcp.example.com", "mcp.example.com:8443", "MCP.Example.COM"] {
        let response = valid.clone().header("Host", host).send(&server);
        assert_eq!(response.status, 200, "Host {host}: {}", response.text());
    }
    for origin in ["https://app.example.com", "https://app.example.com/"] {
        let response = valid.clone().header("Origin", origin).send(&server);
        assert_eq!(response.status, 200, "Origin {origin}: {}", response.text());
    }
    let response = valid
        .clone()
        .header("Host", "mcp.example.com")
        .header("Origin", "https://app.example.com")
        .send(&server);
    assert_eq!(response.status, 200, "{}", response.text());

    // Only what was configured.
    for (name, value) in [
        ("Host", "other.example.com"),
        ("Host", "sub.mcp.example.com"),
        ("Origin", "https://other.example.com"),
        ("Origin", "http://app.example.com"),
        ("Origin", "https://app.example.com:8443"),
    ] {
        let response = valid.clone().header(name, value).send(&server);
        response.expect_rpc_error(403, -32600, &Value::Null);
    }
    assert_still_serving(&server);
}

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

// ----------------------------------------------------------------------------------------
// MCP headers against the body

#[test]
fn missing_protocol_version_header_is_32020() {
    let server = Server::start(CONFORMANCE);
    for rpc in [
        Rpc::new("tools/list", json!({})),
        Rpc::new("server/discover", json!({})),
        Rpc::tool("test_simple_text", json!({})),
    ] {
        let response = rpc.without_header("MCP-Protocol-Version").send(&server);
        response.expect_rpc_error(400, -32020, &id());
    }
    assert_still_serving(&server);
}

#[test]
fn mcp_method_header_must_match_the_body_exactly() {
    let server = Server::start(CONFORMANCE);
    let rpc = Rpc::new("tools/list", json!({}));
    rpc.clone()
        .without_header("Mcp-Method")
        .send(&server)
        .expect_rpc_error(400, -32020, &id());
    for value in [
        "prompts/list",
        "TOOLS/LIST",
        "Tools/List",
        "tools/list/",
        "tools",
    ] {
        let response = rpc.clone().header("Mcp-Method", value).send(&server);
        response.expect_rpc_error(400, -32020, &id());
    }
    // Surrounding optional whitespace is not part of the value.
    let padded = rpc
        .clone()
        .header("Mcp-Method", " \ttools/list\t ")
        .send(&server);
    assert_eq!(padded.status, 200, "{}", padded.text());
    assert_still_serving(&server);
}

#[test]
fn header_names_are_case_insensitive() {
    let server = Server::start(CONFORMANCE);
    let rpc = Rpc::tool("test_simple_text", json!({}));
    let renamed = |name: &str| {
        let mut rpc = rpc.clone();
        for header in &mut rpc.headers {
            if header.0.eq_ignore_ascii_case(name) {
                header.0 = name.to_owned();
            }
        }
        rpc
    };
    for name in [
        "mcp-method",
        "MCP-METHOD",
        "mCp-MeThOd",
        "mcp-protocol-version",
        "MCP-NAME",
        "mcp-name",
    ] {
        let response = renamed(name).send(&server);
        assert_eq!(response.status, 200, "{name}: {}", response.text());
        assert_eq!(response.result()["resultType"], "complete");
    }
}

#[test]
fn mcp_name_is_required_and_checked_where_the_method_names_a_target() {
    let server = Server::start(ALL_SETS);
    let targets = [
        Rpc::tool("test_simple_text", json!({})),
        Rpc::new("prompts/get", json!({"name": "test_simple_prompt"})),
        Rpc::new("resources/read", json!({"uri": "test://static-text"})),
    ];
    for rpc in targets {
        let method = rpc.body["method"].as_str().unwrap().to_owned();
        let ok = rpc.send(&server);
        assert_eq!(ok.status, 200, "{method}: {}", ok.text());
        for wrong in [
            "wrong_name",
            "test://static-binary",
            "TEST_SIMPLE_TEXT",
            "=?base64?!!!?=",
            "=?base64?d3Jvbmc=?=",
        ] {
            let response = rpc.clone().header("Mcp-Name", wrong).send(&server);
            response.expect_rpc_error(400, -32020, &id());
        }
        rpc.clone()
            .without_header("Mcp-Name")
            .send(&server)
            .expect_rpc_error(400, -32020, &id());
    }
    assert_still_serving(&server);
}

#[test]
fn mcp_name_whitespace_is_trimmed() {
    let server = Server::start(CONFORMANCE);
    for value in [
        "  test_simple_text  ",
        "\ttest_simple_text",
        "test_simple_text \t",
    ] {
        let response = Rpc::tool("test_simple_text", json!({}))
            .header("Mcp-Name", value)
            .send(&server);
        assert_eq!(response.status, 200, "{value:?}: {}", response.text());
        assert_eq!(response.result()["resultType"], "complete");
    }
}

#[test]
fn mcp_name_base64_sentinel_is_decoded() {
    let server = Server::start(CONFORMANCE);
    // base64("test_simple_text") and base64("test://static-text")
    let tool = Rpc::tool("test_simple_text", json!({}))
        .header("Mcp-Name", "=?base64?dGVzdF9zaW1wbGVfdGV4dA==?=")
        .send(&server);
    assert_eq!(tool.status, 200, "{}", tool.text());
    assert_eq!(tool.result()["resultType"], "complete");
    let resource = Rpc::new("resources/read", json!({"uri": "test://static-text"}))
        .header("Mcp-Name", "=?base64?dGVzdDovL3N0YXRpYy10ZXh0?=")
        .send(&server);
    assert_eq!(resource.status, 200, "{}", resource.text());

    for invalid in [
        "=?base64?dGVzdF9zaW1wbGVfdGV4dA?=",      // missing padding
        "=?base64?dGVzdF9zaW1w!!!bGVfdGV4dA==?=", // outside the alphabet
        "=?base64?/w==?=",                        // decodes to invalid UTF-8
    ] {
        Rpc::tool("test_simple_text", json!({}))
            .header("Mcp-Name", invalid)
            .send(&server)
            .expect_rpc_error(400, -32020, &id());
    }
    assert_still_serving(&server);
}

#[test]
fn mcp_name_is_not_required_on_other_methods() {
    let server = Server::start(CONFORMANCE);
    for method in [
        "tools/list",
        "prompts/list",
        "resources/list",
        "server/discover",
    ] {
        let response = Rpc::new(method, json!({})).send(&server);
        assert_eq!(response.status, 200, "{method}: {}", response.text());
    }
    // An unknown method never needs Mcp-Name: it is 404, not a header mismatch.
    Rpc::new("tasks/result", json!({"taskId": "t-1"}))
        .send(&server)
        .expect_rpc_error(404, -32601, &id());
}

// ----------------------------------------------------------------------------------------
// _meta

const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";

#[test]
fn meta_fields_are_required_and_typed() {
    let server = Server::start(CONFORMANCE);
    let rpc = Rpc::new("server/discover", json!({}));
    let cases = vec![
        rpc.clone().edit(|body| body["params"] = json!({})),
        rpc.clone().edit(|body| {
            body.as_object_mut().unwrap().remove("params");
        }),
        rpc.clone().param("_meta", json!("2026-07-28")),
        rpc.clone().param("_meta", json!(null)),
        rpc.clone().param("_meta", json!([])),
        rpc.clone().without_meta(PROTOCOL_VERSION),
        rpc.clone().meta(PROTOCOL_VERSION, json!(20260728)),
        rpc.clone().meta(PROTOCOL_VERSION, json!(null)),
        rpc.clone().meta(PROTOCOL_VERSION, json!(["2026-07-28"])),
        rpc.clone().without_meta(CLIENT_CAPABILITIES),
        rpc.clone().meta(CLIENT_CAPABILITIES, json!([])),
        rpc.clone().meta(CLIENT_CAPABILITIES, json!("sampling")),
        rpc.clone().meta(CLIENT_CAPABILITIES, json!(null)),
        rpc.clone()
            .meta("io.modelcontextprotocol/logLevel", json!("loud")),
        rpc.clone()
            .meta("io.modelcontextprotocol/logLevel", json!(3)),
    ];
    for case in cases {
        let response = case.send(&server);
        response.expect_rpc_error(400, -32602, &id());
    }
    assert_still_serving(&server);
}

#[test]
fn client_info_is_optional() {
    let server = Server::start(CONFORMANCE);
    let without = Rpc::new("server/discover", json!({}))
        .without_meta(CLIENT_INFO)
        .send(&server);
    assert_eq!(without.status, 200, "{}", without.text());
    let with = Rpc::new("server/discover", json!({}))
        .meta(CLIENT_INFO, json!({"name": "c", "version": "1"}))
        .send(&server);
    assert_eq!(with.status, 200, "{}", with.text());
    assert_eq!(with.result()["resultType"], "complete");
}

// ----------------------------------------------------------------------------------------
// Protocol versions

#[test]
fn header_and_meta_version_mismatch_is_32020() {
    let server = Server::start(CONFORMANCE);
    let rpc = Rpc::new("server/discover", json!({}));
    rpc.clone()
        .meta(PROTOCOL_VERSION, json!("v999.0.0"))
        .send(&server)
        .expect_rpc_error(400, -32020, &id());
    rpc.clone()
        .header("MCP-Protocol-Version", "v999.0.0")
        .send(&server)
        .expect_rpc_error(400, -32020, &id());
    rpc.clone()
        .header("MCP-Protocol-Version", "2025-06-18")
        .send(&server)
        .expect_rpc_error(400, -32020, &id());
    assert_still_serving(&server);
}

#[test]
fn unsupported_version_is_32022_with_supported_and_requested() {
    let server = Server::start(CONFORMANCE);
    for version in ["v999.0.0", "2025-06-18", "2026-07-29", ""] {
        let error = Rpc::new("server/discover", json!({}))
            .header("MCP-Protocol-Version", version)
            .meta(PROTOCOL_VERSION, json!(version))
            .send(&server)
            .expect_rpc_error(400, -32022, &id());
        let supported = error["data"]["supported"].as_array().expect("supported");
        assert!(supported.contains(&json!(VERSION)), "{error}");
        assert!(supported.iter().all(Value::is_string), "{error}");
        assert_eq!(error["data"]["requested"], version, "{error}");
    }
    assert_still_serving(&server);
}

// ----------------------------------------------------------------------------------------
// Methods

#[test]
fn unknown_methods_are_404() {
    let server = Server::start(CONFORMANCE);
    for method in [
        "unknown/method",
        "tools/lis",
        "Tools/List",
        "",
        "tools/call/x",
        "rpc.discover",
    ] {
        Rpc::new(method, json!({}))
            .send(&server)
            .expect_rpc_error(404, -32601, &id());
    }
    assert_still_serving(&server);
}

#[test]
fn removed_methods_are_404() {
    let server = Server::start(CONFORMANCE);
    for method in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "tasks/list",
        "tasks/result",
    ] {
        Rpc::new(method, json!({}))
            .id(json!(500))
            .send(&server)
            .expect_rpc_error(404, -32601, &json!(500));
    }
    assert_still_serving(&server);
}

#[test]
fn validation_runs_in_the_pinned_order() {
    let server = Server::start(CONFORMANCE);
    let rpc = Rpc::new("unknown/method", json!({}));
    // A foreign Host wins over everything else.
    rpc.clone()
        .header("Host", "evil.example.com")
        .edit(|body| body["jsonrpc"] = json!("1.0"))
        .send(&server)
        .expect_rpc_error(403, -32600, &Value::Null);
    // JSON-RPC shape before headers.
    rpc.clone()
        .without_header("MCP-Protocol-Version")
        .edit(|body| body["jsonrpc"] = json!("1.0"))
        .send(&server)
        .expect_rpc_error(400, -32600, &id());
    // Headers before _meta.
    rpc.clone()
        .without_header("Mcp-Method")
        .param("_meta", json!({}))
        .send(&server)
        .expect_rpc_error(400, -32020, &id());
    // _meta before the version match (the "missing protocolVersion" probe).
    rpc.clone()
        .without_meta(PROTOCOL_VERSION)
        .send(&server)
        .expect_rpc_error(400, -32602, &id());
    // Mismatch before support: -32020, not -32022.
    rpc.clone()
        .meta(PROTOCOL_VERSION, json!("v999.0.0"))
        .send(&server)
        .expect_rpc_error(400, -32020, &id());
    // Version support before the method.
    rpc.clone()
        .header("MCP-Protocol-Version", "v999.0.0")
        .meta(PROTOCOL_VERSION, json!("v999.0.0"))
        .send(&server)
        .expect_rpc_error(400, -32022, &id());
    // Headers and version before the capability gate.
    Rpc::tool("test_missing_capability", json!({}))
        .header("Mcp-Name", "test_simple_text")
        .send(&server)
        .expect_rpc_error(400, -32020, &id());
    Rpc::tool("test_missing_capability", json!({}))
        .header("MCP-Protocol-Version", "v999.0.0")
        .meta(PROTOCOL_VERSION, json!("v999.0.0"))
        .send(&server)
        .expect_rpc_error(400, -32022, &id());
    // Mcp-Param-* before the handler (here: before the unexpected-argument check would
    // even matter, and with capabilities the tool does not need).
    Rpc::tool("test_custom_header", json!({"region": "eu"}))
        .header("Mcp-Param-Region", "us")
        .send(&server)
        .expect_rpc_error(400, -32020, &id());
}

// ----------------------------------------------------------------------------------------
// x-mcp-header parameters (test_custom_header mirrors `region` into Mcp-Param-Region)

fn region_call(region: Value) -> Rpc {
    Rpc::tool("test_custom_header", json!({"region": region}))
}

#[test]
fn param_headers_must_mirror_the_body() {
    let server = Server::start(CONFORMANCE);
    // Missing header while the body has a value.
    region_call(json!("test-value"))
        .send(&server)
        .expect_rpc_error(400, -32020, &id());
    // Mismatch, including case and a different encoded value.
    for header in ["eu-west", "TEST-VALUE", "=?base64?ZXUtd2VzdA==?=", ""] {
        region_call(json!("test-value"))
            .header("Mcp-Param-Region", header)
            .send(&server)
            .expect_rpc_error(400, -32020, &id());
    }
    // Invalid sentinel encodings (the conformance probes).
    for header in ["=?base64?SGVsbG8?=", "=?base64?SGVs!!!bG8=?="] {
        region_call(json!("Hello"))
            .header("Mcp-Param-Region", header)
            .send(&server)
            .expect_rpc_error(400, -32020, &id());
    }
    assert_still_serving(&server);
}

#[test]
fn param_headers_that_match_are_accepted() {
    let server = Server::start(CONFORMANCE);
    let cases = [
        ("Hello", "=?base64?SGVsbG8=?="),
        ("SGVsbG8=", "SGVsbG8="),
        ("=?base64?SGVsbG8=", "=?base64?SGVsbG8="),
        ("eu-west-1", "  eu-west-1 "),
        ("Grüße", "=?base64?R3LDvMOfZQ==?="),
    ];
    for (body, header) in cases {
        let response = region_call(json!(body))
            .header("mcp-param-region", header)
            .send(&server);
        assert_eq!(
            response.status,
            200,
            "{body:?}/{header:?}: {}",
            response.text()
        );
        let result = response.result();
        assert_eq!(result["content"][0]["text"], format!("Region: {body}"));
        assert!(result.get("isError").is_none(), "{result}");
    }
    // No value in the body: no header expected; the schema then refuses the call.
    let response = Rpc::tool("test_custom_header", json!({})).send(&server);
    assert_eq!(response.status, 200);
    assert_eq!(response.result()["isError"], true);
}

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
// MRTR requestState / inputResponses

const ACCEPT_OK: &str = r#"{"confirm": {"action": "accept", "content": {"ok": true}}}"#;

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

fn retry(tool: &str, state: Value, responses: Value) -> Rpc {
    Rpc::tool(tool, json!({}))
        .caps(json!({"elicitation": {}, "sampling": {}, "roots": {}}))
        .param("inputResponses", responses)
        .param("requestState", state)
}

fn accept_ok() -> Value {
    serde_json::from_str(ACCEPT_OK).unwrap()
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

// ----------------------------------------------------------------------------------------
// Refused calls never run the tool

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

// ----------------------------------------------------------------------------------------

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
