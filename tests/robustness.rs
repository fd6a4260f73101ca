//! Robustness: hostile and broken input against one real server, which must keep
//! answering correctly afterwards — and HTTP framing that a refusal must not break.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::{
    self, assert_mrtr_round_trip, postgres, HttpResponse, Listen, Rpc, Server, ALL_SETS,
};
use serde_json::{json, Value};
use taskd_protocol::METHODS;

/// xorshift64: a tiny deterministic PRNG (fixed seed, so every run sends the same bytes).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// Bytes that tend to matter to JSON and HTTP parsers.
const INTERESTING: &[u8] = b"{}[]\",:\\0123456789-.eE \t\r\n\x00\x7f\x80\xc3\xff";

/// Applies 1-4 random edits (replace, bit flip, insert, delete one, delete a run).
fn mutate(rng: &mut XorShift, bytes: &mut Vec<u8>) {
    for _ in 0..=rng.below(4) {
        if bytes.is_empty() {
            bytes.push(rng.next() as u8);
            continue;
        }
        let at = rng.below(bytes.len());
        match rng.below(5) {
            0 => bytes[at] = rng.next() as u8,
            1 => bytes[at] ^= 1 << rng.below(8),
            2 => bytes.insert(at, INTERESTING[rng.below(INTERESTING.len())]),
            3 => {
                bytes.remove(at);
            }
            _ => {
                let end = (at + 1 + rng.below(16)).min(bytes.len());
                bytes.drain(at..end);
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// Every position in `value` (not the root), depth first.
fn positions(value: &Value, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match value {
        Value::Object(object) => {
            for (key, child) in object {
                prefix.push(Step::Key(key.clone()));
                out.push(prefix.clone());
                positions(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                prefix.push(Step::Index(index));
                out.push(prefix.clone());
                positions(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

/// `value` with the node at `path` replaced by `new` (or removed when `None`).
fn with_node(value: &Value, path: &[Step], new: Option<&Value>) -> Value {
    let mut copy = value.clone();
    let (last, parents) = path.split_last().expect("non-root path");
    let mut node = &mut copy;
    for step in parents {
        node = match step {
            Step::Key(key) => &mut node[key.as_str()],
            Step::Index(index) => &mut node[*index],
        };
    }
    match (last, new) {
        (Step::Key(key), Some(new)) => node[key.as_str()] = new.clone(),
        (Step::Key(key), None) => {
            node.as_object_mut().expect("object").remove(key);
        }
        (Step::Index(index), Some(new)) => node[*index] = new.clone(),
        (Step::Index(index), None) => {
            node.as_array_mut().expect("array").remove(*index);
        }
    }
    copy
}

/// The id a server must echo for a request body `body` that parsed as JSON.
fn expected_id(body: &Value) -> Option<Value> {
    match body.get("id") {
        None => None,
        Some(id) if id.is_string() || id.is_number() => Some(id.clone()),
        Some(_) => Some(Value::Null),
    }
}

/// Checks a response to a well-framed HTTP request whose body is JSON (possibly nonsense):
/// a 2xx/4xx answer, never a server error; JSON-RPC with the right id whenever there is
/// a body.
fn check_json_answer(what: &str, body: &Value, response: Option<HttpResponse>) {
    let response = response.unwrap_or_else(|| panic!("{what}: no response"));
    assert!(
        matches!(response.status, 200 | 202 | 400 | 404),
        "{what}: status {} {}",
        response.status,
        response.text()
    );
    match expected_id(body) {
        // A valid notification is acknowledged; an invalid one is an error with null id.
        None if response.status == 202 => {
            assert!(response.body.is_empty(), "{what}: {}", response.text())
        }
        None => {
            let message = response.json();
            assert_eq!(response.status, 400, "{what}: {message}");
            assert_eq!(message["id"], Value::Null, "{what}: {message}");
            assert!(message["error"]["code"].is_i64(), "{what}: {message}");
        }
        Some(id) => {
            let message = response.json();
            assert_eq!(message["jsonrpc"], "2.0", "{what}: {message}");
            assert_eq!(message["id"], id, "{what}: id not echoed: {message}");
            let is_error = message.get("error").is_some();
            assert_eq!(is_error, response.status != 200, "{what}: {message}");
            if is_error {
                assert!(message["error"]["code"].is_i64(), "{what}: {message}");
            }
        }
    }
}

/// Sends `body` (bytes) with `rpc`'s headers and a correct Content-Length.
fn send_body(server: &Server, rpc: &Rpc, body: &[u8]) -> Option<HttpResponse> {
    let request = server.raw_request("POST", "/mcp", &rpc.header_pairs(), body);
    server.try_exchange(&request, Duration::from_secs(10))
}

/// Every answer to bytes that are not a well-formed request: whatever comes back (if
/// anything) is an HTTP response that is not a server error.
fn check_no_server_error(what: &str, response: Option<HttpResponse>) {
    if let Some(response) = response {
        assert!(
            response.status < 500 || response.status == 505,
            "{what}: status {} {}",
            response.status,
            response.text()
        );
    }
}

#[test]
fn one_server_survives_a_barrage_of_hostile_input() {
    let started = Instant::now();
    let mut server = Server::start(ALL_SETS);
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);

    let echo = Rpc::tool("echo", json!({"text": "hi"}));
    let state = Rpc::tool("test_input_required_result_tampered_state", json!({}))
        .caps(json!({"elicitation": {}}))
        .send(&server)
        .result()["requestState"]
        .as_str()
        .expect("requestState")
        .to_owned();
    let templates = [
        echo.clone(),
        Rpc::tool("test_input_required_result_tampered_state", json!({}))
            .caps(json!({"elicitation": {}, "sampling": {}}))
            .param(
                "inputResponses",
                json!({"confirm": {"action": "accept", "content": {"ok": true}}}),
            )
            .param("requestState", json!(state)),
        Rpc::tool("test_custom_header", json!({"region": "eu"})).header("Mcp-Param-Region", "eu"),
        Rpc::new(
            "prompts/get",
            json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "a", "arg2": "b"}}),
        ),
        Rpc::new("resources/read", json!({"uri": "test://template/1/data"})),
        Rpc::new("tools/list", json!({"cursor": null})),
        Rpc::new(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"},
                   "argument": {"name": "arg1", "value": "t"}}),
        ),
        Rpc::new("server/discover", json!({}))
            .meta("io.modelcontextprotocol/logLevel", json!("debug"))
            .meta("progressToken", json!("p")),
    ];
    for template in &templates {
        let response = template.send(&server);
        assert_eq!(response.status, 200, "template: {}", response.text());
    }

    // 1. Malformed JSON.
    let malformed: &[&[u8]] = &[
        b"",
        b" ",
        b"{",
        b"}",
        b"{{}}",
        b"{\"jsonrpc\":",
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"",
        b"{\"a\":1,}",
        b"[1,2,",
        b"\"unterminated",
        b"\"\\u12\"",
        b"\"\\ud800\"",
        b"{\"id\":1e999999}",
        b"{\"id\":-}",
        b"{\"id\":01}",
        b"{\"id\":NaN}",
        b"{\"id\":Infinity}",
        b"{\"id\":1}garbage",
        b"\x00\x00\x00",
        b"\xef\xbb\xbf{}",
        b"{\"a\":\"\x00\"}",
        b"{\"a\":\"\xff\xfe\"}",
        b"\xc0\xaf",
        b"true false",
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"_meta\":}}",
        b"{\"jsonrpc\":\"2.0\",\"id\":99999999999999999999999,\"method\":\"x\"}",
        b"{\"jsonrpc\":\"2.0\",\"id\":1.5e308,\"method\":\"x\",\"params\":{}}",
        b"{\"\":\"\",\"\\\"\":{\"\\\\\":[]}}",
    ];
    for (i, body) in malformed.iter().enumerate() {
        let response = send_body(&server, &echo, body);
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        match parsed {
            Some(value @ Value::Object(_)) => {
                check_json_answer(&format!("malformed {i}"), &value, response)
            }
            _ => {
                let response = response.unwrap_or_else(|| panic!("malformed {i}: no response"));
                assert_eq!(response.status, 400, "malformed {i}: {}", response.text());
                assert!(response.json()["error"]["code"].is_i64());
            }
        }
    }

    // 2. Every position of every template: removed, or replaced by each JSON type.
    let replacements = [
        json!(null),
        json!(true),
        json!(0),
        json!(-1),
        json!(1.5),
        json!(18_446_744_073_709_551_615_u64),
        json!(""),
        json!("x"),
        json!("=?base64?!!?="),
        json!([]),
        json!([null]),
        json!({}),
        json!({"": {}}),
    ];
    let mut sent = 0;
    for template in &templates {
        let mut paths = Vec::new();
        positions(&template.body, &mut Vec::new(), &mut paths);
        for path in &paths {
            for new in replacements.iter().map(Some).chain([None]) {
                let body = with_node(&template.body, path, new);
                let response = send_body(&server, template, body.to_string().as_bytes());
                check_json_answer(&format!("{path:?} = {new:?}"), &body, response);
                sent += 1;
            }
        }
    }
    assert!(sent > 500, "only {sent} typed variants");

    // 3. Deep nesting and big bodies.
    let deep_bodies: Vec<Vec<u8>> = vec![
        b"[".repeat(100_000),
        b"{\"a\":".repeat(100_000),
        [b"[".repeat(50_000), b"]".repeat(50_000)].concat(),
        format!("{{\"s\":\"{}\"}}", "[".repeat(1_000_000)).into_bytes(),
        [
            b"{\"s\":\"".to_vec(),
            b"\\\"[".repeat(10_000),
            b"\"}".to_vec(),
        ]
        .concat(),
    ];
    for (i, body) in deep_bodies.iter().enumerate() {
        let response =
            send_body(&server, &echo, body).unwrap_or_else(|| panic!("deep {i}: no response"));
        assert_eq!(response.status, 400, "deep {i}: {}", response.text());
        assert_eq!(response.json()["id"], Value::Null);
    }
    let huge = vec![b' '; 5 * 1024 * 1024];
    let response = send_body(&server, &echo, &huge).expect("huge body");
    assert_eq!(response.status, 413);
    let mut headers = echo.header_pairs();
    headers.push(("Transfer-Encoding", "chunked"));
    let mut chunked = server.raw_request("POST", "/mcp", &headers, b"");
    for piece in huge.chunks(64 * 1024) {
        chunked.extend_from_slice(format!("{:X}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let response = server
        .try_exchange(&chunked, Duration::from_secs(10))
        .expect("huge chunked body");
    assert_eq!(response.status, 413);

    // 4. Unknown methods (with matching headers): always 404 / -32601 with the id.
    for i in 0..100 {
        let len = 1 + rng.below(24);
        let method: String = (0..len)
            .map(|_| b"abcdefghijklmnopqrstuvwxyz/_.-ABCXYZ0189"[rng.below(40)] as char)
            .collect();
        if METHODS.contains(&method.as_str()) {
            continue;
        }
        let response = Rpc::new(&method, json!({})).id(json!(i)).send(&server);
        response.expect_rpc_error(404, -32601, &json!(i));
    }

    // 5. Truncated HTTP requests, cut at every few bytes.
    let full = echo.to_bytes(&server);
    for cut in (0..full.len()).step_by(3) {
        let response = server.try_exchange(&full[..cut], Duration::from_secs(5));
        check_no_server_error(&format!("cut at {cut}"), response);
    }

    // 6. Garbage instead of HTTP, and broken HTTP framing. (Not HTTP/2.0 or 3.0 request
    //    lines: see `unsupported_http_versions_are_answered_and_closed`.)
    let addr = server.addr.to_string();
    let mut garbage: Vec<Vec<u8>> = vec![
        b"\r\n\r\n".to_vec(),
        b"GET\r\n\r\n".to_vec(),
        b"POST /mcp HTTP/9.9\r\n\r\n".to_vec(),
        b"POST  /mcp  HTTP/1.1\r\n\r\n".to_vec(),
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03".to_vec(),
        format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Length: -1\r\n\r\n{{}}").into_bytes(),
        format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Length: abc\r\n\r\n{{}}").into_bytes(),
        format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 2\r\nContent-Length: 900\r\n\r\n{{}}")
            .into_bytes(),
        format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 99999999999999999999999\r\n\r\n{{}}")
            .into_bytes(),
        format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{{}}\r\n0\r\n\r\n")
            .into_bytes(),
        format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFF\r\n{{}}")
            .into_bytes(),
        format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n")
            .into_bytes(),
        format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nExpect: 100-continue\r\nContent-Length: 2000\r\n\r\n")
            .into_bytes(),
        format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nExpect: teapot\r\nContent-Length: 2\r\n\r\n{{}}")
            .into_bytes(),
        format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nNo-Colon-Header\r\n\r\n").into_bytes(),
        format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nMcp-Name: café\r\n\r\n").into_bytes(),
        format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nX-Long: {}\r\n\r\n", "a".repeat(256 * 1024))
            .into_bytes(),
        format!("POST http://{addr}/mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 2\r\n\r\n{{}}").into_bytes(),
        b"POST /mcp HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}".to_vec(),
        [full.clone(), full.clone(), full.clone()].concat(),
    ];
    for _ in 0..150 {
        let len = 1 + rng.below(2048);
        garbage.push(rng.bytes(len));
    }
    for (i, bytes) in garbage.iter().enumerate() {
        let response = server.try_exchange(bytes, Duration::from_secs(5));
        check_no_server_error(&format!("garbage {i}"), response);
    }

    // 7. Random mutations of valid requests: of the JSON body alone (correctly framed:
    //    every answer is a proper JSON-RPC answer), and of the whole HTTP request.
    let mut body_mutations = 0;
    for i in 0..2000 {
        let template = &templates[rng.below(templates.len())];
        if i % 2 == 0 {
            let mut body = template.body.to_string().into_bytes();
            mutate(&mut rng, &mut body);
            let response = send_body(&server, template, &body);
            match serde_json::from_slice::<Value>(&body) {
                Ok(value @ Value::Object(_)) => {
                    check_json_answer(&format!("mutation {i}"), &value, response)
                }
                _ => {
                    let response = response.unwrap_or_else(|| panic!("mutation {i}: no response"));
                    assert_eq!(response.status, 400, "mutation {i}: {}", response.text());
                    let message = response.json();
                    assert!(message["error"]["code"].is_i64(), "mutation {i}: {message}");
                }
            }
            body_mutations += 1;
        } else {
            let mut request = template.to_bytes(&server);
            mutate(&mut rng, &mut request);
            let response = server.try_exchange(&request, Duration::from_secs(5));
            check_no_server_error(&format!("mutation {i}"), response);
        }
    }
    assert_eq!(body_mutations, 1000);

    // Still alive, still correct.
    assert!(server.is_running(), "the server process died");
    assert_eq!(server.get("/healthz").status, 200);
    let result = Rpc::tool("echo", json!({"text": "still alive"}))
        .send(&server)
        .result();
    assert_eq!(result["content"][0]["text"], "still alive");
    assert!(result.get("isError").is_none());
    let tools = Rpc::new("tools/list", json!({})).send(&server).result();
    assert_eq!(tools["tools"][0]["name"], "test_simple_text");
    assert_mrtr_round_trip(&server, &server);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the barrage took {:?}",
        started.elapsed()
    );
}

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
    let mut listener = Listen::open(
        &server,
        json!({"toolsListChanged": true, "promptsListChanged": true}),
        json!({}),
        &[],
    );
    listener
        .next_message(Duration::from_secs(10))
        .expect("acknowledgement");
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

/// The JSON bodies of the responses in `raw`, in order, framed by Content-Length.
fn response_bodies(mut raw: &[u8]) -> Vec<Value> {
    let mut bodies = Vec::new();
    while let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
        let Some(length) = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse::<usize>().ok())
        else {
            break;
        };
        let end = (split + 4 + length).min(raw.len());
        bodies.push(serde_json::from_slice(&raw[split + 4..end]).unwrap_or(Value::Null));
        raw = &raw[end..];
    }
    bodies
}

/// Requests pipelined on one connection are answered in order, each exactly once —
/// including task creations, which are answered from a completion thread after their
/// commit rather than by the request thread. Before patch 5 of
/// vendor/tiny_http/PATCHES.md, tiny_http handed pipelined requests to several threads
/// at once and each answer waited for the one before it, so an answer queued behind a
/// later one on the same completion thread deadlocked the connection.
#[test]
fn pipelined_requests_are_answered_in_order() {
    let server = Server::start(ALL_SETS);
    let count = 40;
    let mut pipelined = Vec::new();
    for id in 0..count {
        let rpc = if id % 4 == 3 {
            Rpc::tool("test_simple_text", json!({}))
        } else {
            Rpc::tool("noop_task", json!({})).caps(common::tasks_caps())
        };
        let connection = if id + 1 == count {
            "close"
        } else {
            "keep-alive"
        };
        pipelined.extend(
            rpc.id(json!(id))
                .header("Connection", connection)
                .to_bytes(&server),
        );
    }
    let raw = server
        .try_exchange_raw(&pipelined, Duration::from_secs(20))
        .expect("connection");
    let bodies = response_bodies(&raw);
    let ids: Vec<Value> = bodies.iter().map(|body| body["id"].clone()).collect();
    let expected: Vec<Value> = (0..count).map(|id| json!(id)).collect();
    assert_eq!(ids, expected, "answers out of order or missing");
    for (id, body) in bodies.iter().enumerate() {
        let kind = if id % 4 == 3 { "complete" } else { "task" };
        assert_eq!(body["result"]["resultType"], kind, "{body}");
    }
}

/// tiny_http 0.12 drains an unread Content-Length body on drop with
/// `vec![0; remaining]`, so one request declaring more bytes than the machine has
/// (sending none) makes the allocation fail and aborts the whole server, whatever the
/// handler answered (tiny-http/tiny-http PR #290, not released). Fixed by patch 1 of
/// vendor/tiny_http/PATCHES.md.
#[test]
fn a_huge_declared_content_length_does_not_kill_the_server() {
    let mut server = Server::start(ALL_SETS);
    for length in ["1000000000000000", "9223372036854775807"] {
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Length: {length}\r\n\r\n{{}}",
            server.addr
        );
        let response = server.try_exchange(request.as_bytes(), Duration::from_secs(5));
        assert_eq!(response.map(|r| r.status), Some(413));
        // The abort follows the answer: give it a moment to show.
        let died = common::poll_until(Duration::from_secs(1), || {
            (!server.is_running()).then_some(())
        });
        assert!(died.is_none(), "Content-Length {length} killed the server");
    }
    let request = Rpc::tool("test_simple_text", json!({})).to_bytes(&server);
    let response = server.try_exchange(&request, Duration::from_secs(5));
    assert_eq!(response.map(|r| r.status), Some(200));
}

/// tiny_http 0.12 answers a request line with HTTP/2.0 or HTTP/3.0 by writing a 505 on a
/// second response writer while the request's own writer is still alive, so the write
/// waits forever: the client never gets an answer and the connection's thread and
/// sockets are never released, even after the client has gone (a thread and two file
/// descriptors leaked per request). Happens inside tiny_http before any request
/// reaches the server's code; fixed by patch 2 of vendor/tiny_http/PATCHES.md.
#[test]
fn unsupported_http_versions_are_answered_and_closed() {
    let server = Server::start(ALL_SETS);
    for request in [
        "POST /mcp HTTP/2.0\r\n\r\n",
        "GET /healthz HTTP/3.0\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ] {
        let started = Instant::now();
        let response = server.try_exchange(request.as_bytes(), Duration::from_secs(5));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{request:?}: the connection was neither answered nor closed"
        );
        if let Some(response) = response {
            assert_eq!(response.status, 505, "{request:?}");
        }
    }
}

/// Whatever version a request line names, the answer's status line is HTTP/1.x.
/// Upstream tiny_http echoed it: a refused `HTTP/2.0` request (refused here before the
/// version check, by its `Expect` or a malformed header) got `HTTP/2.0 417`, and an
/// `HTTP/0.9` one `HTTP/0.9 200`. Found by `fuzz::http`; fixed in vendor/tiny_http
/// (PATCHES.md, "status lines").
#[test]
fn status_lines_are_http_1_whatever_the_request_line_names() {
    let server = Server::start(ALL_SETS);
    let host = server.addr.to_string();
    for (request, expected) in [
        (
            format!("POST /mcp HTTP/2.0\r\nHost: {host}\r\nExpect: nothing\r\n\r\n"),
            "HTTP/1.1 417 ",
        ),
        (
            format!("POST /mcp HTTP/3.0\r\nHost: {host}\r\nNo colon\r\n\r\n"),
            "HTTP/1.1 400 ",
        ),
        (
            format!("GET /healthz HTTP/0.9\r\nHost: {host}\r\n\r\n"),
            "HTTP/1.0 200 ",
        ),
    ] {
        let raw = server
            .try_exchange_raw(request.as_bytes(), Duration::from_secs(5))
            .expect("connect");
        let answer = String::from_utf8_lossy(&raw);
        assert!(answer.starts_with(expected), "{request:?} got {answer:?}");
    }
}

/// A byte outside ASCII in the request line or a header (RFC 9110 allows obs-text in
/// field values, but tiny_http keeps a head as ASCII) is a 400, then a close. It closed
/// the connection without an answer, which a client cannot tell from a crash. Found by
/// `fuzz::http`; vendor/tiny_http (PATCHES.md, "non-ASCII heads").
#[test]
fn a_non_ascii_head_is_refused_with_400() {
    let server = Server::start(ALL_SETS);
    let host = server.addr.to_string();
    for request in [
        format!("GET /healthz\u{e9} HTTP/1.1\r\nHost: {host}\r\n\r\n"),
        format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\nX-Name: caf\u{e9}\r\n\r\n"),
    ] {
        let raw = server
            .try_exchange_raw(request.as_bytes(), Duration::from_secs(5))
            .expect("connect");
        let answer = String::from_utf8_lossy(&raw);
        assert!(
            answer.starts_with("HTTP/1.1 400 "),
            "{request:?} got {answer:?}"
        );
    }
}

/// A chunked body may end with a trailer section and carry chunk extensions (RFC 9112
/// §7.1). Upstream tiny_http's decoder took the first trailer byte for the end of the
/// body and parsed the rest as the next request on the connection: two answers, the
/// second a 400. Found by `fuzz::http`; fixed in vendor/tiny_http (PATCHES.md,
/// "chunked request bodies").
#[test]
fn chunked_bodies_may_carry_extensions_and_trailers() {
    let server = Server::start(ALL_SETS);
    let body = Rpc::new("tools/list", json!({})).body.to_string();
    let (head, tail) = body.split_at(body.len() / 2);
    let encoded = format!(
        "{:x};ext=1\r\n{head}\r\n{:x}\r\n{tail}\r\n0\r\nX-Trailer: 1\r\nX-Other: 2\r\n\r\n",
        head.len(),
        tail.len()
    );
    let mut request = Rpc::new("tools/list", json!({}))
        .header("Transfer-Encoding", "chunked")
        .header("Connection", "keep-alive");
    request.headers.retain(|(name, _)| name != "Content-Length");
    let once = server.raw_request("POST", "/mcp", &request.header_pairs(), encoded.as_bytes());
    // Twice on one connection: the second request starts right after the trailer.
    let twice = [once.clone(), once].concat();
    let raw = server
        .try_exchange_raw(&twice, Duration::from_secs(5))
        .expect("connect");
    let answers = String::from_utf8_lossy(&raw);
    assert_eq!(answers.matches("HTTP/1.1 200 ").count(), 2, "{answers}");
    assert!(!answers.contains("HTTP/1.1 400"), "{answers}");
}

/// tiny_http 0.12's connection pool can lose the wake-up of a queued connection when
/// connections arrive in a burst (`TaskPool::spawn` trusts a stale count of idle
/// workers), and a connection that stalls mid-request holds its worker for as long as
/// the client likes (no read timeout). So a burst of stalled connections on a fresh
/// server can leave the next, well-formed request unanswered indefinitely. Observed on
/// about 4 of 10 fresh servers; each attempt below uses a fresh one. Happens before any
/// request reaches the server's code; fixed by patches 3 and 4 of vendor/tiny_http/PATCHES.md.
#[test]
fn stalled_connections_do_not_starve_new_requests() {
    for attempt in 0..10 {
        let server = Server::start(ALL_SETS);
        let stalled: Vec<TcpStream> = (0..32)
            .map(|_| {
                let mut stream = TcpStream::connect(server.addr).expect("connect");
                stream
                    .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
                    .expect("partial write");
                stream
            })
            .collect();
        let request = format!(
            "GET /healthz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            server.addr
        );
        let response = server.try_exchange(request.as_bytes(), Duration::from_secs(3));
        assert_eq!(
            response.map(|r| r.status),
            Some(200),
            "attempt {attempt}: /healthz unanswered behind {} stalled connections",
            stalled.len()
        );
    }
}

/// One server per data dir: a second server on it refuses to start, and while the first
/// runs no other process can open its database (SQLite's `unix-excl` VFS holds it).
#[test]
fn the_data_dir_belongs_to_one_running_server() {
    if postgres::sqlite_only(
        "the exclusive lock is on tasks.db; PostgreSQL nodes share their database",
    ) {
        return;
    }
    let server = Server::start(ALL_SETS);
    let data = server.dir.join("data");
    let second = crate::common::binary()
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .output()
        .expect("run a second server");
    assert!(
        !second.status.success(),
        "a second server started on the data dir"
    );
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("in use by another mcp-taskd"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );

    let outsider = rusqlite::Connection::open(data.join("tasks.db")).expect("open the file");
    let read = outsider.query_row("SELECT COUNT(*) FROM tasks", [], |row| row.get::<_, i64>(0));
    let error = read.expect_err("another process read the live database");
    assert!(error.to_string().contains("locked"), "{error}");
    drop(outsider);

    // The refusals changed nothing: the server still answers.
    let echoed = server.call_tool("echo", json!({"text": "still here"}), json!({}));
    assert_eq!(echoed.result()["content"][0]["text"], "still here");
}

/// A server stopped and continued (`kill -STOP`/`-CONT`: a debugger, a cgroup freeze, a
/// suspended container) keeps its connections. On Linux a socket read with a timeout
/// returns `EINTR` after such a stop, and upstream tiny_http closed the connection on
/// it; any handled signal landing on a connection thread did the same (vendor/tiny_http
/// PATCHES.md, "interrupted socket calls").
#[test]
fn a_stopped_and_continued_server_keeps_its_connections() {
    use std::io::{Read, Write};
    let server = Server::start(ALL_SETS);
    let host = server.addr.to_string();
    let mut stream = std::net::TcpStream::connect(server.addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    // Once the connection's thread waits for the request (a TCP receive: in
    // `wait_woken`), stop and continue the whole server under it.
    let reading = common::poll_until(Duration::from_secs(5), || {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", server.pid())).ok()?;
        tasks.flatten().find_map(|task| {
            let wchan = std::fs::read_to_string(task.path().join("wchan")).ok()?;
            (wchan == "wait_woken").then_some(())
        })
    });
    assert!(reading.is_some(), "no connection thread is reading");
    let pid = server.pid().to_string();
    let signal = |signal: &str| {
        let status = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal}");
    };
    signal("-STOP");
    let stopped = common::poll_until(Duration::from_secs(5), || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.contains(") T ").then_some(())
    });
    signal("-CONT");
    assert!(stopped.is_some(), "the server did not stop");
    stream
        .write_all(
            format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .expect("request");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 200 "),
        "after a stop and continue the connection got {answer:?}"
    );
}
