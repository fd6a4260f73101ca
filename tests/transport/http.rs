//! HTTP routing (`/healthz`, the `/mcp` endpoint and its methods) and the DNS-rebinding
//! protection (`Host` and `Origin`).

use super::{assert_still_serving, ID};
use crate::common::{Rpc, Server, CONFORMANCE};
use serde_json::{json, Value};

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
// CORS (browser-based clients such as the Inspector)

/// A preflight as a browser sends it before a POST with the MCP and auth headers.
fn preflight(server: &Server, origin: &str) -> crate::common::HttpResponse {
    server.exchange(&server.raw_request(
        "OPTIONS",
        "/mcp",
        &[
            ("Origin", origin),
            ("Access-Control-Request-Method", "POST"),
            (
                "Access-Control-Request-Headers",
                "authorization, content-type, mcp-protocol-version, mcp-method, mcp-name",
            ),
        ],
        b"",
    ))
}

#[test]
fn allowed_origins_get_cors_and_foreign_ones_get_nothing() {
    let server = Server::start(
        "[server]\nallowed_origins = [\"https://app.example.com\"]\n\
         [builtin]\nsets = [\"conformance\"]\n",
    );
    for origin in ["http://localhost:6274", "https://app.example.com"] {
        let answer = preflight(&server, origin);
        assert_eq!(answer.status, 204, "{origin}: {}", answer.text());
        assert_eq!(answer.header("Access-Control-Allow-Origin"), Some(origin));
        let methods = answer.header("Access-Control-Allow-Methods").unwrap_or("");
        assert!(methods.contains("POST"), "{methods}");
        assert_eq!(
            answer.header("Access-Control-Allow-Headers"),
            Some("authorization, content-type, mcp-protocol-version, mcp-method, mcp-name")
        );
        assert_eq!(answer.header("Vary"), Some("Origin"));

        // The call itself: readable, with the headers clients read exposed.
        let response = Rpc::tool("test_simple_text", json!({}))
            .header("Origin", origin)
            .send(&server);
        assert_eq!(response.status, 200, "{}", response.text());
        assert_eq!(response.header("Access-Control-Allow-Origin"), Some(origin));
        let exposed = response
            .header("Access-Control-Expose-Headers")
            .unwrap_or("");
        for name in ["WWW-Authenticate", "Mcp-Session-Id", "MCP-Protocol-Version"] {
            assert!(exposed.contains(name), "{name} not in {exposed}");
        }
    }
    // No request without an Origin (not a browser) carries CORS headers.
    let response = Rpc::tool("test_simple_text", json!({})).send(&server);
    assert_eq!(response.status, 200);
    assert_eq!(response.header("Access-Control-Allow-Origin"), None);

    // A foreign origin: no preflight approval, and its request is still refused by the
    // DNS-rebinding check, with nothing a page could read.
    let answer = preflight(&server, "https://evil.example.com");
    assert_ne!(answer.status, 204);
    assert_eq!(answer.header("Access-Control-Allow-Origin"), None);
    let response = Rpc::tool("test_simple_text", json!({}))
        .header("Origin", "https://evil.example.com")
        .send(&server);
    response.expect_rpc_error(403, -32600, &Value::Null);
    assert_eq!(response.header("Access-Control-Allow-Origin"), None);
    // An allowed origin with a foreign Host (DNS rebinding) is refused too.
    let response = Rpc::tool("test_simple_text", json!({}))
        .header("Origin", "http://localhost:6274")
        .header("Host", "evil.example.com")
        .send(&server);
    response.expect_rpc_error(403, -32600, &Value::Null);
    assert_eq!(response.header("Access-Control-Allow-Origin"), None);
    assert_still_serving(&server);
}

#[test]
fn a_streamed_answer_carries_the_cors_headers() {
    let server = Server::start(CONFORMANCE);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": {
        "notifications": {"toolsListChanged": true},
        "_meta": {"io.modelcontextprotocol/protocolVersion": crate::common::VERSION,
                  "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    let request = server.raw_request(
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", crate::common::VERSION),
            ("Mcp-Method", "subscriptions/listen"),
            ("Origin", "http://127.0.0.1:6274"),
        ],
        body.as_bytes(),
    );
    let raw = server
        .try_exchange_raw(&request, std::time::Duration::from_millis(1500))
        .expect("connect");
    let text = String::from_utf8_lossy(&raw);
    let head = text.split("\r\n\r\n").next().unwrap_or("");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/event-stream"), "{head}");
    assert!(
        head.contains("Access-Control-Allow-Origin: http://127.0.0.1:6274\r\n"),
        "{head}"
    );
    assert!(head.contains("Access-Control-Expose-Headers: "), "{head}");
}
