//! Robustness: hostile and broken input against one real server, which must keep
//! answering correctly afterwards — and HTTP framing that a refusal must not break.

mod common;

use std::time::Duration;

use common::{HttpResponse, Listener, Rpc, Server};
use serde_json::json;

/// How many HTTP responses `raw` holds, framed by their Content-Length.
fn count_responses(mut raw: &[u8]) -> usize {
    let mut count = 0;
    while let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
        if !raw.starts_with(b"HTTP/") {
            break;
        }
        count += 1;
        let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse::<usize>().ok())
            .unwrap_or(raw.len());
        raw = &raw[(split + 4 + length).min(raw.len())..];
    }
    count
}

/// `body` as one HTTP chunk plus the terminating chunk.
fn one_chunk(body: &[u8]) -> Vec<u8> {
    let mut encoded = format!("{:X}\r\n", body.len()).into_bytes();
    encoded.extend_from_slice(body);
    encoded.extend_from_slice(b"\r\n0\r\n\r\n");
    encoded
}

/// A chunked body the server refuses without reading it all must not leave its unread
/// rest on a kept-alive connection, where it would be parsed as the next request (a
/// request-smuggling desync behind any proxy that forwarded the body as one request).
#[test]
fn unread_chunked_bodies_are_never_parsed_as_requests() {
    let server =
        Server::start("[limits]\nmax_body_bytes = 2048\n[builtin]\nsets = [\"conformance\"]\n");
    let mut listener = Listener::open(
        &server,
        json!({"toolsListChanged": true, "promptsListChanged": true}),
    );
    let smuggled = Rpc::tool("test_trigger_tool_change", json!({}))
        .header("Connection", "keep-alive")
        .to_bytes(&server);
    let rpc = Rpc::tool("test_simple_text", json!({})).header("Connection", "keep-alive");

    // Over the limit: the server stops reading after limit + 1 bytes.
    let mut over = vec![b' '; 2049];
    over.extend_from_slice(&smuggled);
    // Refusals before the body is read at all (foreign Host, wrong path, wrong method).
    let cases: Vec<(Rpc, &str, &str, Vec<u8>)> = vec![
        (rpc.clone(), "POST", "/mcp", over),
        (
            rpc.clone().header("Host", "evil.example.com"),
            "POST",
            "/mcp",
            smuggled.clone(),
        ),
        (rpc.clone(), "POST", "/elsewhere", smuggled.clone()),
        (rpc.clone(), "PUT", "/mcp", smuggled.clone()),
    ];
    let mut desynced = Vec::new();
    for (rpc, method, path, body) in cases {
        let mut headers = rpc.header_pairs();
        headers.push(("Transfer-Encoding", "chunked"));
        let mut request = server.raw_request(method, path, &headers, b"");
        request.extend_from_slice(&one_chunk(&body));
        let raw = server
            .try_exchange_raw(&request, Duration::from_secs(10))
            .expect("connection");
        let response = HttpResponse::try_parse(&raw).expect("a response");
        assert!(
            matches!(response.status, 403 | 404 | 405 | 413),
            "{method} {path}: {}",
            response.status
        );
        if count_responses(&raw) != 1 {
            desynced.push(format!(
                "{method} {path}: {}",
                String::from_utf8_lossy(&raw)
            ));
        }
    }
    assert!(
        desynced.is_empty(),
        "unread bodies were answered as requests:\n{}",
        desynced.join("\n")
    );

    // Nothing ran: the next frame is the sentinel's.
    let sentinel = Rpc::tool("test_trigger_prompt_change", json!({})).send(&server);
    assert_eq!(sentinel.status, 200);
    let first = listener
        .next_message(Duration::from_secs(10))
        .expect("frame");
    assert_eq!(
        first["method"], "notifications/prompts/list_changed",
        "{first}"
    );
    let ok = Rpc::tool("test_simple_text", json!({})).send(&server);
    assert_eq!(ok.status, 200);
}
