//! MCP request metadata checked against the body: the MCP headers, `params._meta`,
//! protocol versions, unknown and removed methods, the order the checks run in, and
//! `x-mcp-header` parameter headers.

use super::{assert_still_serving, id, CLIENT_CAPABILITIES, PROTOCOL_VERSION};
use crate::common::{Rpc, Server, ALL_SETS, CONFORMANCE, VERSION};
use serde_json::{json, Value};

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
