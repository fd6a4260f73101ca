//! Load client for `benches/upstreams.sh`: `tools/call echo {"text": "hello"}` back to
//! back on CONC workers, the same way whatever carries it, so that the latency of a
//! stdio MCP server called directly and through an HTTP bridge can be subtracted.
//!
//! ```text
//! load stdio WARMUP SECONDS CONC -- PROGRAM ARGS…        one upstream process, CONC calls in flight
//! load stdio-procs WARMUP SECONDS CONC -- PROGRAM ARGS…  CONC upstream processes, one call each
//! load http HOST:PORT PATH ERA TOOL WARMUP SECONDS CONC [PID,PID…]
//! load session HOST:PORT PATH
//! ```
//!
//! `stdio` starts PROGRAM once, runs the `initialize` handshake (2025-11-25), then CONC
//! workers share its stdin (a mutex around one `write`) and one reader thread hands each
//! response line to the worker whose id it carries: the upstream has CONC requests in
//! flight on one pipe, as it has behind a bridge that keeps one session for everyone.
//! `stdio-procs` gives each worker a process of its own instead.
//!
//! `http` opens CONC keep-alive HTTP/1.1 connections. ERA `modern`: 2026-07-28 requests
//! (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` headers and the `_meta` of
//! tests/common/rpc.rs), no session. ERA `legacy`: one `initialize` (2025-11-25) and
//! `notifications/initialized` first, then every connection sends that one session's
//! `Mcp-Session-Id` (one session, so a bridge that runs a server process a session runs
//! one). `load session HOST:PORT PATH` opens such a session and prints its id and
//! version; `LOAD_SESSION="ID VERSION"` makes `http … legacy` use it instead of opening
//! one (so that every step of a run uses one upstream process). Responses are read whole, `Content-Length` or chunked, JSON or an SSE stream.
//!
//! Each worker calls until WARMUP + SECONDS have passed; a call counts when it started
//! after WARMUP and ended before the end. Prints one JSON line: calls, calls/s and the
//! latency p50/p90/p99/max in ms of the counted calls, and `cpu_ms`: the CPU time
//! (utime + stime from `/proc/PID/stat`) each process used in the counted window: the
//! PIDs given (`http`), or the upstream processes it started (`stdio`). A response that
//! is not a result with the text "hello", or any I/O error, aborts with exit status 1.
//! `LOAD_ARGUMENTS` and `LOAD_EXPECT` change the arguments and the text (another echo).
//!
//! The standard library only, so that it builds with `rustc` alone (benches/upstreams.sh
//! runs `rustc -O --edition 2021`); it is not a Cargo target.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

const LEGACY: &str = "2025-11-25";
const MODERN: &str = "2026-07-28";

/// The tool's arguments (`LOAD_ARGUMENTS`, default `{"text":"hello"}`) and the text its
/// result must hold (`LOAD_EXPECT`, default `hello`).
fn arguments() -> &'static str {
    static ARGUMENTS: OnceLock<String> = OnceLock::new();
    ARGUMENTS.get_or_init(|| {
        std::env::var("LOAD_ARGUMENTS").unwrap_or_else(|_| r#"{"text":"hello"}"#.to_owned())
    })
}

fn expected() -> &'static str {
    static EXPECT: OnceLock<String> = OnceLock::new();
    EXPECT.get_or_init(|| {
        let text = std::env::var("LOAD_EXPECT").unwrap_or_else(|_| "hello".to_owned());
        format!("\"text\":\"{}\"", text.replace(char::is_whitespace, ""))
    })
}

fn fail(why: &str) -> ! {
    eprintln!("load: {why}");
    std::process::exit(1);
}

/// When the counted window opens and closes.
#[derive(Clone, Copy)]
struct Window {
    from: Instant,
    to: Instant,
}

/// Calls `call` until the window closes; returns the latencies in ns of the counted calls.
fn drive(window: Window, mut call: impl FnMut()) -> Vec<u64> {
    let mut latencies = Vec::with_capacity(1 << 16);
    loop {
        let start = Instant::now();
        if start >= window.to {
            return latencies;
        }
        call();
        let end = Instant::now();
        if start >= window.from && end <= window.to {
            latencies.push((end - start).as_nanos() as u64);
        }
    }
}

fn checked(response: &str) {
    let compact: String = response.chars().filter(|c| !c.is_whitespace()).collect();
    if !compact.contains("\"result\"")
        || !compact.contains(expected())
        || compact.contains("\"isError\":true")
    {
        fail(&format!("not the echo's result: {response}"));
    }
}

/// The number after the first `"id"` key of a JSON-RPC message.
fn message_id(line: &str) -> Option<u64> {
    let rest = &line[line.find("\"id\"")? + 4..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// utime + stime of a process, in ms.
fn cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return f64::NAN;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `after` starts at field 3.
    let ticks: f64 = fields
        .get(11)
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(f64::NAN)
        + fields
            .get(12)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN);
    ticks * 1000.0 / clock_ticks()
}

fn clock_ticks() -> f64 {
    // sysconf(_SC_CLK_TCK) is 100 on every Linux this runs on; getconf says so too.
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Measures the workers' calls and the processes' CPU over the window; prints the line.
fn measure(window: Window, pids: &[u32], workers: Vec<thread::JoinHandle<Vec<u64>>>, conc: usize) {
    let sleep_until = |at: Instant| {
        let now = Instant::now();
        if at > now {
            thread::sleep(at - now);
        }
    };
    sleep_until(window.from);
    let before: Vec<f64> = pids.iter().map(|&pid| cpu_ms(pid)).collect();
    sleep_until(window.to);
    let after: Vec<f64> = pids.iter().map(|&pid| cpu_ms(pid)).collect();
    let mut latencies: Vec<u64> = workers
        .into_iter()
        .flat_map(|worker| worker.join().unwrap_or_else(|_| fail("a worker failed")))
        .collect();
    latencies.sort_unstable();
    let seconds = (window.to - window.from).as_secs_f64();
    let quantile = |q: f64| -> f64 {
        if latencies.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len());
        latencies[rank - 1] as f64 / 1e6
    };
    let cpu: Vec<String> = pids
        .iter()
        .zip(before.iter().zip(&after))
        .map(|(pid, (b, a))| format!("\"{pid}\":{:.0}", a - b))
        .collect();
    println!(
        "{{\"conc\":{conc},\"calls\":{},\"seconds\":{seconds:.3},\"rate\":{:.1},\
         \"p50_ms\":{:.4},\"p90_ms\":{:.4},\"p99_ms\":{:.4},\"max_ms\":{:.4},\"cpu_ms\":{{{}}}}}",
        latencies.len(),
        latencies.len() as f64 / seconds,
        quantile(0.50),
        quantile(0.90),
        quantile(0.99),
        quantile(1.0),
        cpu.join(",")
    );
}

// ---- stdio ----------------------------------------------------------------------------

fn request(id: u64) -> String {
    let arguments = arguments();
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{arguments}}}}}\n"
    )
}

/// Starts the upstream and runs its handshake; its stdin, and its stdout past the
/// `initialize` response.
fn start_upstream(command: &[String]) -> (Child, ChildStdin, BufReader<ChildStdout>) {
    let mut child = Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| fail(&format!("start {}: {e}", command[0])));
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let initialize = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{{\"protocolVersion\":\"{LEGACY}\",\
         \"capabilities\":{{}},\"clientInfo\":{{\"name\":\"upstreams-load\",\"version\":\"1\"}}}}}}\n"
    );
    stdin
        .write_all(initialize.as_bytes())
        .unwrap_or_else(|e| fail(&format!("initialize: {e}")));
    loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap_or(0) == 0 {
            fail("the upstream exited during initialize");
        }
        if message_id(&line) == Some(0) {
            if !line.contains("\"result\"") {
                fail(&format!("initialize failed: {line}"));
            }
            break;
        }
    }
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
        .unwrap_or_else(|e| fail(&format!("initialized: {e}")));
    (child, stdin, stdout)
}

type Started = (
    Vec<Child>,
    Vec<u32>,
    Vec<thread::JoinHandle<Vec<u64>>>,
    Window,
);

fn stdio(lengths: (Duration, Duration), conc: usize, command: &[String]) -> Started {
    let (child, stdin, mut stdout) = start_upstream(command);
    let window = window(lengths);
    let pid = child.id();
    let stdin = Arc::new(Mutex::new(stdin));
    let mut inboxes = Vec::new();
    let mut outboxes = Vec::new();
    for _ in 0..conc {
        let (tx, rx) = mpsc::channel::<String>();
        inboxes.push(rx);
        outboxes.push(tx);
    }
    thread::spawn(move || loop {
        let mut line = String::new();
        match stdout.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        // Responses only; the upstream's notifications and requests are not expected.
        if let Some(id) = message_id(&line) {
            if line.contains("\"method\"") {
                continue;
            }
            let _ = outboxes[(id % conc as u64) as usize].send(line);
        }
    });
    let workers = inboxes
        .into_iter()
        .enumerate()
        .map(|(worker, inbox)| {
            let stdin = Arc::clone(&stdin);
            thread::spawn(move || {
                let mut id = worker as u64 + conc as u64;
                drive(window, || {
                    let line = request(id);
                    id += conc as u64;
                    stdin
                        .lock()
                        .unwrap()
                        .write_all(line.as_bytes())
                        .unwrap_or_else(|e| fail(&format!("write: {e}")));
                    let response = inbox
                        .recv()
                        .unwrap_or_else(|_| fail("the upstream closed its stdout"));
                    checked(&response);
                })
            })
        })
        .collect();
    (vec![child], vec![pid], workers, window)
}

fn stdio_procs(lengths: (Duration, Duration), conc: usize, command: &[String]) -> Started {
    let mut children = Vec::new();
    let mut pids = Vec::new();
    let mut pipes = Vec::new();
    for _ in 0..conc {
        let (child, stdin, stdout) = start_upstream(command);
        pids.push(child.id());
        children.push(child);
        pipes.push((stdin, stdout));
    }
    let window = window(lengths);
    let mut workers = Vec::new();
    for (mut stdin, mut stdout) in pipes {
        workers.push(thread::spawn(move || {
            let mut id = 1;
            let mut response = String::new();
            drive(window, || {
                stdin
                    .write_all(request(id).as_bytes())
                    .unwrap_or_else(|e| fail(&format!("write: {e}")));
                loop {
                    response.clear();
                    if stdout.read_line(&mut response).unwrap_or(0) == 0 {
                        fail("the upstream closed its stdout");
                    }
                    if message_id(&response) == Some(id) && !response.contains("\"method\"") {
                        break;
                    }
                }
                id += 1;
                checked(&response);
            })
        }));
    }
    (children, pids, workers, window)
}

// ---- HTTP -----------------------------------------------------------------------------

struct Connection {
    host: String,
    path: String,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

struct Response {
    status: u16,
    session: Option<String>,
    body: String,
}

impl Connection {
    fn open(host: &str, path: &str) -> Connection {
        let stream =
            TcpStream::connect(host).unwrap_or_else(|e| fail(&format!("connect {host}: {e}")));
        stream.set_nodelay(true).expect("TCP_NODELAY");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("read timeout");
        Connection {
            host: host.to_owned(),
            path: path.to_owned(),
            reader: BufReader::new(stream.try_clone().expect("clone stream")),
            writer: stream,
        }
    }

    fn post(&mut self, headers: &str, body: &str) -> Response {
        let request = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n{headers}Content-Length: {}\r\n\r\n{body}",
            self.path,
            self.host,
            body.len()
        );
        self.writer
            .write_all(request.as_bytes())
            .unwrap_or_else(|e| fail(&format!("send: {e}")));
        self.read_response()
    }

    fn read_response(&mut self) -> Response {
        let mut line = String::new();
        let read_line = |reader: &mut BufReader<TcpStream>, line: &mut String| {
            line.clear();
            if reader.read_line(line).unwrap_or(0) == 0 {
                fail("the server closed the connection");
            }
        };
        read_line(&mut self.reader, &mut line);
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| fail(&format!("bad status line: {line:?}")));
        let mut length = None;
        let mut chunked = false;
        let mut session = None;
        loop {
            read_line(&mut self.reader, &mut line);
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let Some((name, value)) = header.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.parse::<usize>().ok(),
                "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
                "mcp-session-id" => session = Some(value.to_owned()),
                _ => {}
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                read_line(&mut self.reader, &mut line);
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .unwrap_or_else(|_| fail(&format!("bad chunk size: {line:?}")));
                if size == 0 {
                    read_line(&mut self.reader, &mut line); // the CRLF after the last chunk
                    break;
                }
                let start = body.len();
                body.resize(start + size + 2, 0);
                self.reader
                    .read_exact(&mut body[start..])
                    .unwrap_or_else(|e| fail(&format!("chunk: {e}")));
                body.truncate(start + size);
            }
        } else {
            let length = length.unwrap_or_else(|| fail("a response without a length"));
            body.resize(length, 0);
            self.reader
                .read_exact(&mut body)
                .unwrap_or_else(|e| fail(&format!("body: {e}")));
        }
        Response {
            status,
            session,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }
}

/// The JSON-RPC message of a body: the body itself, or the last `data:` of an SSE stream.
fn message(body: &str) -> &str {
    if body.trim_start().starts_with('{') {
        return body;
    }
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .rfind(|data| data.contains("\"id\""))
        .unwrap_or(body)
}

/// A legacy session: its id and negotiated version.
fn open_session(host: &str, path: &str) -> (String, String) {
    let mut connection = Connection::open(host, path);
    let initialize = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{{\"protocolVersion\":\"{LEGACY}\",\
         \"capabilities\":{{}},\"clientInfo\":{{\"name\":\"upstreams-load\",\"version\":\"1\"}}}}}}"
    );
    let response = connection.post(&format!("MCP-Protocol-Version: {LEGACY}\r\n"), &initialize);
    let body = message(&response.body);
    let (Some(session), true) = (
        response.session,
        response.status == 200 && body.contains("\"result\""),
    ) else {
        fail(&format!(
            "initialize: HTTP {}: {}",
            response.status, response.body
        ));
    };
    let version = body
        .split("\"protocolVersion\"")
        .nth(1)
        .and_then(|rest| rest.split('"').nth(1))
        .unwrap_or(LEGACY)
        .to_owned();
    let headers = format!("MCP-Protocol-Version: {version}\r\nMcp-Session-Id: {session}\r\n");
    let response = connection.post(
        &headers,
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
    );
    if response.status / 100 != 2 {
        fail(&format!(
            "notifications/initialized: HTTP {}: {}",
            response.status, response.body
        ));
    }
    (session, version)
}

fn http(args: &[String]) -> ! {
    let [host, path, era, tool, warmup, seconds, conc, rest @ ..] = args else {
        usage();
    };
    let (lengths, conc) = lengths_and_conc(warmup, seconds, conc);
    let pids: Vec<u32> = rest
        .first()
        .map(|list| list.split(',').filter_map(|pid| pid.parse().ok()).collect())
        .unwrap_or_default();
    let (headers, meta) = match era.as_str() {
        "modern" => (
            format!(
                "MCP-Protocol-Version: {MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: {tool}\r\n"
            ),
            format!(
                ",\"_meta\":{{\"io.modelcontextprotocol/protocolVersion\":\"{MODERN}\",\
                 \"io.modelcontextprotocol/clientCapabilities\":{{}}}}"
            ),
        ),
        "legacy" => {
            let (session, version) = match std::env::var("LOAD_SESSION") {
                Ok(given) => match given.split_once(' ') {
                    Some((session, version)) => (session.to_owned(), version.to_owned()),
                    None => (given, LEGACY.to_owned()),
                },
                Err(_) => open_session(host, path),
            };
            (
                format!("MCP-Protocol-Version: {version}\r\nMcp-Session-Id: {session}\r\n"),
                String::new(),
            )
        }
        _ => usage(),
    };
    let connections: Vec<Connection> = (0..conc).map(|_| Connection::open(host, path)).collect();
    let window = window(lengths);
    let workers = connections
        .into_iter()
        .enumerate()
        .map(|(worker, mut connection)| {
            let headers = headers.clone();
            let meta = meta.clone();
            let tool = tool.clone();
            thread::spawn(move || {
                let mut id = worker as u64 + conc as u64;
                drive(window, || {
                    let body = format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"{tool}\",\
                         \"arguments\":{}{meta}}}}}",
                        arguments()
                    );
                    id += conc as u64;
                    let response = connection.post(&headers, &body);
                    if response.status != 200 {
                        fail(&format!("tools/call: HTTP {}: {}", response.status, response.body));
                    }
                    checked(message(&response.body));
                })
            })
        })
        .collect();
    measure(window, &pids, workers, conc);
    std::process::exit(0);
}

// ---- main -----------------------------------------------------------------------------

/// The warm-up and the counted window's lengths, and the concurrency.
fn lengths_and_conc(warmup: &str, seconds: &str, conc: &str) -> ((Duration, Duration), usize) {
    let number = |text: &str| -> f64 { text.parse().unwrap_or_else(|_| usage()) };
    let lengths = (
        Duration::from_secs_f64(number(warmup)),
        Duration::from_secs_f64(number(seconds)),
    );
    let conc = number(conc) as usize;
    if conc == 0 {
        usage();
    }
    (lengths, conc)
}

/// The window that opens `warmup` from now (every connection or process is set up).
fn window((warmup, length): (Duration, Duration)) -> Window {
    let from = Instant::now() + warmup;
    Window {
        from,
        to: from + length,
    }
}

fn usage() -> ! {
    fail(
        "usage: load stdio|stdio-procs WARMUP SECONDS CONC -- PROGRAM ARGS… | \
         load http HOST:PORT PATH modern|legacy TOOL WARMUP SECONDS CONC [PID,PID…] | \
         load session HOST:PORT PATH",
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("http") => http(&args[1..]),
        Some("session") => {
            let [_, host, path] = &args[..] else { usage() };
            let (session, version) = open_session(host, path);
            println!("{session} {version}");
        }
        Some(mode @ ("stdio" | "stdio-procs")) => {
            let [_, warmup, seconds, conc, dashes, command @ ..] = &args[..] else {
                usage();
            };
            if dashes != "--" || command.is_empty() {
                usage();
            }
            let (lengths, conc) = lengths_and_conc(warmup, seconds, conc);
            let (children, pids, workers, window) = if mode == "stdio" {
                stdio(lengths, conc, command)
            } else {
                stdio_procs(lengths, conc, command)
            };
            measure(window, &pids, workers, conc);
            for mut child in children {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        _ => usage(),
    }
}
