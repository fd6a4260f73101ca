//! Load client comparing the two protocol eras on one server: inline `tools/call echo`
//! as a 2026-07-28 stateless client sends it, and as a legacy (2025-11-25) session client
//! sends it after its `initialize` handshake (one session per connection).
//!
//! ```text
//! eraload HOST:PORT modern|legacy SECONDS CONC
//! ```
//!
//! Opens CONC keep-alive connections, each calling back to back for SECONDS, and prints
//! one JSON line: era, concurrency, calls, seconds and calls/s. With `ERALOAD_TOKEN`
//! set, every request presents it as a bearer token. Any HTTP or JSON-RPC
//! error aborts with exit status 1. Plain HTTP/1.1 over `std::net`, as `taskload` does.
//! Built by `cargo bench --no-run --bench eraload`; not part of `cargo test`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";

struct Connection {
    host: String,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    /// The legacy session, once initialized.
    session: Option<String>,
}

struct Response {
    status: u16,
    session: Option<String>,
    body: Vec<u8>,
}

impl Connection {
    fn open(host: &str) -> Connection {
        let stream = TcpStream::connect(host).unwrap_or_else(|e| fail(&format!("connect: {e}")));
        stream.set_nodelay(true).expect("TCP_NODELAY");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("read timeout");
        Connection {
            host: host.to_owned(),
            reader: BufReader::new(stream.try_clone().expect("clone stream")),
            writer: stream,
            session: None,
        }
    }

    fn send(&mut self, headers: &str, body: &str) -> Response {
        let authorization = std::env::var("ERALOAD_TOKEN")
            .map(|token| format!("Authorization: Bearer {token}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n{authorization}{headers}\
             Content-Length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        self.writer
            .write_all(request.as_bytes())
            .unwrap_or_else(|e| fail(&format!("send: {e}")));
        self.read_response()
    }

    /// The legacy handshake: `initialize`, then `notifications/initialized`.
    fn initialize(&mut self) {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {},
            "clientInfo": {"name": "eraload", "version": "1"}}});
        let response = self.send("", &body.to_string());
        let session = response.session.unwrap_or_else(|| {
            fail(&format!(
                "initialize: HTTP {} without a session",
                response.status
            ))
        });
        let headers = format!("Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: {LEGACY}\r\n");
        let initialized = self.send(
            &headers,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        );
        if initialized.status != 202 {
            fail(&format!("initialized: HTTP {}", initialized.status));
        }
        self.session = Some(session);
    }

    fn echo(&mut self, id: u64) {
        let (headers, body) = match &self.session {
            Some(session) => (
                format!("Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: {LEGACY}\r\n"),
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": "hello"}}}),
            ),
            None => (
                format!(
                    "MCP-Protocol-Version: {MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n"
                ),
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": "hello"}, "_meta": {
                        "io.modelcontextprotocol/protocolVersion": MODERN,
                        "io.modelcontextprotocol/clientCapabilities": {}}}}),
            ),
        };
        let response = self.send(&headers, &body.to_string());
        let message: Value = serde_json::from_slice(&response.body)
            .unwrap_or_else(|e| fail(&format!("response is not JSON: {e}")));
        if response.status != 200 || message.get("result").is_none() {
            fail(&format!("tools/call: HTTP {}: {message}", response.status));
        }
    }

    fn read_response(&mut self) -> Response {
        let mut line = String::new();
        let mut status = 0;
        let mut length = None;
        let mut session = None;
        loop {
            line.clear();
            let read = self
                .reader
                .read_line(&mut line)
                .unwrap_or_else(|e| fail(&format!("receive: {e}")));
            if read == 0 {
                fail("the server closed the connection");
            }
            let text = line.trim_end();
            if text.is_empty() {
                break;
            }
            if status == 0 {
                status = text
                    .split(' ')
                    .nth(1)
                    .and_then(|code| code.parse().ok())
                    .unwrap_or_else(|| fail(&format!("bad status line {text:?}")));
            } else if let Some((name, value)) = text.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse::<usize>().ok();
                } else if name.eq_ignore_ascii_case("mcp-session-id") {
                    session = Some(value.trim().to_owned());
                }
            }
        }
        let length = length.unwrap_or_else(|| fail("response without Content-Length"));
        let mut body = vec![0; length];
        self.reader
            .read_exact(&mut body)
            .unwrap_or_else(|e| fail(&format!("receive body: {e}")));
        Response {
            status,
            session,
            body,
        }
    }
}

fn fail(why: &str) -> ! {
    eprintln!("eraload: {why}");
    std::process::exit(1)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; ignore flags.
    let args: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let [host, era, seconds, conc] = args.as_slice() else {
        fail("usage: eraload HOST:PORT modern|legacy SECONDS CONC");
    };
    let legacy = match *era {
        "modern" => false,
        "legacy" => true,
        _ => fail("era must be modern or legacy"),
    };
    let seconds: f64 = seconds.parse().unwrap_or_else(|_| fail("bad SECONDS"));
    let conc: usize = conc.parse().unwrap_or_else(|_| fail("bad CONC"));
    let calls = AtomicU64::new(0);
    let ready = Barrier::new(conc + 1);
    let started = std::thread::scope(|scope| {
        for _ in 0..conc {
            scope.spawn(|| {
                let mut connection = Connection::open(host);
                if legacy {
                    connection.initialize();
                }
                ready.wait();
                let deadline = Instant::now() + Duration::from_secs_f64(seconds);
                let mut id = 1;
                while Instant::now() < deadline {
                    connection.echo(id);
                    id += 1;
                }
                calls.fetch_add(id - 1, Ordering::Relaxed);
            });
        }
        ready.wait();
        Instant::now()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let calls = calls.load(Ordering::Relaxed);
    println!(
        "{}",
        json!({"era": era, "conc": conc, "calls": calls, "seconds": elapsed,
            "calls_per_s": (calls as f64 / elapsed).round()})
    );
}
