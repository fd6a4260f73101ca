//! Restarts that no client sees (issue 46). Started with a listener the service manager
//! passes (`LISTEN_FDS`, as systemd passes a socket unit's), a server that stops leaves
//! the connections arriving meanwhile in the kernel's queue for the next process, and
//! still answers requests on the connections it has open, each with its id and
//! `Connection: close`.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

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
