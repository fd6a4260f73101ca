//! Restarts that no client sees (issue 46). Started with a listener the service manager
//! passes (`LISTEN_FDS`, as systemd passes a socket unit's), a server that stops leaves
//! the connections arriving meanwhile in the kernel's queue for the next process, and
//! still answers requests on the connections it has open, each with its id and
//! `Connection: close`. Streams end with their response, so a stop is quick.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{poll_until, HttpResponse, Rpc, Server};

/// The demo tools (`echo`), nothing else.
const CONFIG: &str = "[builtin]\nsets = [\"demo\"]\n";

fn echo(id: i64, text: &str) -> Rpc {
    Rpc::tool("echo", json!({"text": text}))
        .id(json!(id))
        .header("Connection", "keep-alive")
}

fn assert_echo(response: &HttpResponse, id: i64, text: &str) -> Value {
    assert_eq!(response.status, 200, "{}", response.text());
    let message = response.json();
    assert_eq!(
        message["id"], id,
        "the answer carries its request's id: {message}"
    );
    assert_eq!(message["result"]["content"][0]["text"], text, "{message}");
    message
}

#[test]
fn a_request_queued_while_the_server_restarts_is_answered_by_the_next_process() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut first = Server::start_in_with_listener(dir.path(), CONFIG, &listener, &[]);
    assert_eq!(first.addr, address, "it serves on the socket it was passed");
    assert_echo(&echo(1, "before").send(&first), 1, "before");
    assert!(
        first.terminate(Duration::from_secs(30)),
        "the server stopped"
    );

    // No process accepts now; the socket (held here, as systemd holds it) queues.
    let mut stream = TcpStream::connect(address).expect("connect while no server runs");
    stream
        .write_all(&echo(2, "queued").to_bytes(&first))
        .expect("send");
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut byte = [0u8; 1];
    assert!(
        matches!(stream.read(&mut byte), Err(ref e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
        "nothing answers while no server runs, and nothing refuses"
    );

    let second = Server::start_in_with_listener(dir.path(), CONFIG, &listener, &[]);
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    assert_echo(&HttpResponse::read_one(&mut stream), 2, "queued");
    assert_echo(&echo(3, "after").send(&second), 3, "after");
}

#[test]
fn a_draining_server_answers_its_open_connections_with_their_ids_and_closes_them() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let dir = tempfile::tempdir().expect("temp dir");
    let info = [("RUST_LOG", OsStr::new("info"))];
    let server = Server::start_in_with_listener(dir.path(), CONFIG, &listener, &info);
    let mut stream = TcpStream::connect(server.addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    stream
        .write_all(&echo(1, "one").to_bytes(&server))
        .expect("send");
    let first = HttpResponse::read_one(&mut stream);
    assert_echo(&first, 1, "one");
    assert_ne!(
        first.header("connection"),
        Some("close"),
        "kept alive while serving"
    );

    server.signal("TERM");
    let draining = poll_until(Duration::from_secs(10), || {
        server
            .log_lines()
            .iter()
            .any(|line| line.contains("shutting down"))
            .then_some(())
    });
    assert!(draining.is_some(), "the server started its drain");
    // The next request on the open connection, sent as a client does right after its
    // last answer: answered here, with its own id, and the connection ends after it.
    stream
        .write_all(&echo(2, "two").to_bytes(&server))
        .expect("send");
    let second = HttpResponse::read_one(&mut stream);
    assert_echo(&second, 2, "two");
    assert_eq!(
        second.header("connection"),
        Some("close"),
        "{:?}",
        second.headers
    );
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(rest.is_empty(), "nothing after the last answer: {rest:?}");
}

/// A 2025-era client's session: `initialize` and `notifications/initialized`, as the
/// SDKs run them. Returns the session id.
fn legacy_session(server: &Server) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {},
        "clientInfo": {"name": "restart-test", "version": "1.0.0"}}});
    let opened = legacy_post(server, None, &initialize);
    assert_eq!(opened.status, 200, "{}", opened.text());
    let session = opened
        .header("mcp-session-id")
        .expect("a session id")
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let acknowledged = legacy_post(server, Some(&session), &initialized);
    assert_eq!(acknowledged.status, 202, "{}", acknowledged.text());
    session
}

/// The legacy revision the test's client speaks (as Codex CLI and Gemini CLI do).
const LEGACY: &str = "2025-06-18";

fn legacy_post(server: &Server, session: Option<&str>, body: &Value) -> HttpResponse {
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", LEGACY),
    ];
    headers.extend(session.map(|id| ("Mcp-Session-Id", id)));
    server.post_raw("/mcp", &headers, body.to_string().as_bytes())
}

/// The bytes of the session's standalone GET request, on a kept-alive connection as the
/// hosts' clients send it.
fn get_stream_request(server: &Server, session: &str) -> Vec<u8> {
    let headers = [
        ("Mcp-Session-Id", session),
        ("MCP-Protocol-Version", LEGACY),
        ("Accept", "text/event-stream"),
        ("Connection", "keep-alive"),
    ];
    server.raw_request("GET", "/mcp", &headers, b"")
}

/// Reads the head of a GET stream's response, which must be a chunked `200`; returns it
/// in lower case.
fn read_stream_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            other => panic!(
                "the stream's head broke off ({other:?}): {}",
                String::from_utf8_lossy(&head)
            ),
        }
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    head
}

/// Reads a GET stream's body up to its last chunk (the end of the response), which must
/// come before the connection ends or fails.
fn read_stream_body(stream: &mut TcpStream) -> String {
    let mut body = Vec::new();
    let mut buffer = [0u8; 4096];
    while !body.ends_with(b"0\r\n\r\n") {
        match stream.read(&mut buffer) {
            Ok(0) => panic!(
                "the connection ended before the response did: {:?}",
                String::from_utf8_lossy(&body)
            ),
            Ok(n) => body.extend_from_slice(&buffer[..n]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => panic!(
                "the stream broke off ({error}) after {:?}",
                String::from_utf8_lossy(&body)
            ),
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

#[test]
fn a_stop_ends_a_legacy_get_stream_at_once_and_the_session_goes_on_in_the_next_process() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut first = Server::start_in_with_listener(dir.path(), CONFIG, &listener, &[]);
    let session = legacy_session(&first);
    let mut stream = TcpStream::connect(first.addr).expect("connect");
    stream
        .write_all(&get_stream_request(&first, &session))
        .expect("send");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let head = read_stream_head(&mut stream);
    assert!(!head.contains("connection: close"), "{head}");

    // Codex CLI and Gemini CLI keep such a stream open: the stop must end it (it used to
    // wait out its 10 s connection drain), with the end of its response.
    let stopping = Instant::now();
    first.signal("TERM");
    read_stream_body(&mut stream);
    // The client opens it again at once, on the same connection: answered here, as the
    // connection's last answer, with what it missed and the end.
    stream
        .write_all(&get_stream_request(&first, &session))
        .expect("send");
    let head = read_stream_head(&mut stream);
    assert!(head.contains("connection: close"), "{head}");
    read_stream_body(&mut stream);
    let mut rest = Vec::new();
    let ended = stream.read_to_end(&mut rest);
    assert!(
        ended.is_ok() && rest.is_empty(),
        "the connection ended with {ended:?} after {:?}",
        String::from_utf8_lossy(&rest)
    );
    let stopped = poll_until(Duration::from_secs(30), || {
        (!first.is_running()).then(|| stopping.elapsed())
    });
    let took = stopped.expect("the server stopped");
    assert!(
        took < Duration::from_secs(3),
        "a stop with a GET stream open took {took:?}"
    );

    // Its next try goes to a new connection, which waits in the socket's queue; the
    // next process, on the same data dir, answers it, and the session serves on.
    let mut again = TcpStream::connect(first.addr).expect("connect while no server runs");
    again
        .write_all(&get_stream_request(&first, &session))
        .expect("send");
    again
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let second = Server::start_in_with_listener(dir.path(), CONFIG, &listener, &[]);
    read_stream_head(&mut again);
    let ping = legacy_post(
        &second,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
    );
    assert_eq!(ping.status, 200, "the session lives on: {}", ping.text());
    assert_eq!(ping.json()["result"], json!({}), "{}", ping.text());
}
