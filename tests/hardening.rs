//! Hostile connections (issue #13, findings 1, 2, 3 and 7): a connection flood under a
//! lowered descriptor limit, trickled request bodies, clients that never read a large
//! answer, and duplicate `Authorization` headers. During each fault a well-behaved
//! client's calls must succeed quickly and the server's memory stay bounded; after it,
//! the server must be healthy again within 5 s, without a restart.
//!
//! Latency: the figure is a p99 under 100 ms. Under `cargo test` on a shared,
//! busy machine a debug build cannot promise that, so the bound here defaults to
//! 500 ms and `MCP_TASKD_P99_LIMIT_MS` tightens it; `benches/hardening.sh` runs these
//! tests against the release build with the strict 100 ms.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::tasks::wait_terminal;
use crate::common::{poll_until, tasks_caps, HttpResponse, Rpc, Server, ALL_SETS};
use serde_json::{json, Value};

/// Largest VmHWM accepted during a fault (the figure).
const RSS_LIMIT_KIB: u64 = 256 * 1024;
/// How soon after a fault the server must be fully healthy.
const RECOVERY: Duration = Duration::from_secs(5);

fn p99_limit() -> Duration {
    let ms = std::env::var("MCP_TASKD_P99_LIMIT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    Duration::from_millis(ms)
}

/// `VmHWM` (peak) and `VmRSS` of `pid`, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Reads one HTTP response (with a `Content-Length`) from a kept-alive connection.
fn read_response(reader: &mut BufReader<TcpStream>) -> Option<HttpResponse> {
    let mut head = Vec::new();
    loop {
        let mut line = Vec::new();
        if reader.read_until(b'\n', &mut line).ok()? == 0 {
            return None;
        }
        head.extend_from_slice(&line);
        if line == b"\r\n" {
            break;
        }
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let length: usize = text
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())?;
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    head.extend_from_slice(&body);
    HttpResponse::try_parse(&head)
}

/// A well-behaved client: one small call at a time, each answer read at once, over one
/// kept-alive connection (`keep_alive`) or a fresh connection per call.
struct Probe<'a> {
    server: &'a Server,
    keep_alive: bool,
    connection: Option<BufReader<TcpStream>>,
    latencies: Vec<Duration>,
    failures: Vec<String>,
}

impl<'a> Probe<'a> {
    fn new(server: &'a Server, keep_alive: bool) -> Probe<'a> {
        let mut probe = Probe {
            server,
            keep_alive,
            connection: None,
            latencies: Vec::new(),
            failures: Vec::new(),
        };
        if keep_alive {
            probe.connection = probe.connect();
            assert!(probe.connection.is_some(), "the probe could not connect");
        }
        probe
    }

    fn connect(&self) -> Option<BufReader<TcpStream>> {
        let stream = TcpStream::connect_timeout(&self.server.addr, Duration::from_secs(2)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        stream.set_nodelay(true).ok()?;
        Some(BufReader::new(stream))
    }

    /// Sends `request` and reads its answer, on the probe's connection.
    fn exchange(&mut self, request: &[u8]) -> Option<HttpResponse> {
        if !self.keep_alive {
            self.connection = self.connect();
        }
        let reader = self.connection.as_mut()?;
        reader.get_mut().write_all(request).ok()?;
        read_response(reader)
    }

    /// One timed `tools/call`; a failure is recorded, not fatal.
    fn call(&mut self) {
        let connection = if self.keep_alive {
            "keep-alive"
        } else {
            "close"
        };
        let rpc = Rpc::tool("test_simple_text", json!({})).header("Connection", connection);
        let request = rpc.to_bytes(self.server);
        let started = Instant::now();
        let response = self.exchange(&request);
        let elapsed = started.elapsed();
        match response {
            Some(response) if response.status == 200 => self.latencies.push(elapsed),
            Some(response) => {
                self.failures
                    .push(format!("{} {}", response.status, response.text()))
            }
            None => self.failures.push(format!("no answer after {elapsed:?}")),
        }
    }

    /// `GET /healthz` on the probe's connection.
    fn health(&mut self) -> Option<HttpResponse> {
        let connection = if self.keep_alive {
            "keep-alive"
        } else {
            "close"
        };
        let request = format!(
            "GET /healthz HTTP/1.1\r\nHost: {}\r\nConnection: {connection}\r\n\r\n",
            self.server.addr
        );
        self.exchange(request.as_bytes())
    }

    /// Calls until `until` or `calls` calls, 10 ms apart, sampling the server's memory.
    fn run(&mut self, calls: usize, until: Duration) -> u64 {
        let deadline = Instant::now() + until;
        let mut peak_rss = 0;
        while self.latencies.len() + self.failures.len() < calls && Instant::now() < deadline {
            self.call();
            peak_rss = peak_rss.max(memory_kib(self.server.pid()).1);
            std::thread::sleep(Duration::from_millis(10));
        }
        peak_rss
    }

    fn p99(&self) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let index = (sorted.len() * 99).div_ceil(100).saturating_sub(1);
        sorted.get(index).copied().unwrap_or_default()
    }

    /// Asserts that every call succeeded within the latency bound, and reports.
    fn check(&self, fault: &str, peak_rss_kib: u64) {
        let (hwm, _) = memory_kib(self.server.pid());
        eprintln!(
            "{fault}: {} calls, p99 {:?}, max {:?}, VmRSS peak {} MiB, VmHWM {} MiB",
            self.latencies.len(),
            self.p99(),
            self.latencies.iter().max().copied().unwrap_or_default(),
            peak_rss_kib / 1024,
            hwm / 1024,
        );
        assert!(
            self.failures.is_empty(),
            "{fault}: calls failed: {:?}",
            self.failures
        );
        assert!(self.latencies.len() >= 20, "{fault}: too few calls");
        assert!(
            self.p99() < p99_limit(),
            "{fault}: p99 {:?} over {:?}",
            self.p99(),
            p99_limit()
        );
        assert!(
            hwm < RSS_LIMIT_KIB,
            "{fault}: VmHWM {} MiB over 256 MiB",
            hwm / 1024
        );
    }
}

/// Waits until fresh connections get a healthy `/healthz` and a successful call;
/// returns how long that took.
fn recovery_time(server: &Server) -> Duration {
    let started = Instant::now();
    let healthy = poll_until(RECOVERY, || {
        let mut probe = Probe::new_fresh(server);
        let health = probe.health()?;
        if health.status != 200 {
            return None;
        }
        probe.call();
        probe.failures.is_empty().then_some(())
    });
    assert!(
        healthy.is_some(),
        "not healthy within {RECOVERY:?} after the fault"
    );
    started.elapsed()
}

impl<'a> Probe<'a> {
    fn new_fresh(server: &'a Server) -> Probe<'a> {
        Probe::new(server, false)
    }
}

/// Opens up to `count` connections, keeping those the server keeps open; returns them
/// with the answers of those it refused at once.
fn flood(server: &Server, count: usize) -> (Vec<TcpStream>, Vec<String>) {
    let mut held = Vec::new();
    let mut refusals = Vec::new();
    for _ in 0..count {
        let Ok(stream) = TcpStream::connect_timeout(&server.addr, Duration::from_millis(500))
        else {
            continue;
        };
        held.push(stream);
    }
    // A refused connection is answered and closed at once; a kept one stays silent.
    held.retain(|stream| {
        let _ = stream.set_read_timeout(Some(Duration::from_millis(20)));
        let mut answer = Vec::new();
        match (&*stream).read_to_end(&mut answer) {
            Ok(_) => {
                refusals.push(String::from_utf8_lossy(&answer).into_owned());
                false
            }
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {
                refusals.push(String::new());
                false
            }
            Err(_) => true,
        }
    });
    (held, refusals)
}

/// Finding 1: connections beyond the cap (derived from the descriptor limit: 80 under
/// `ulimit -n 256`) get a 503 with `Retry-After` from the accept thread, `/healthz`
/// says why, kept-alive clients are served throughout, and the listener takes new
/// connections as soon as the flood ends.
#[test]
fn a_connection_flood_is_capped_and_the_listener_survives() {
    let _heavy = crate::common::heavy();
    let server = Server::start_with_fd_limit(ALL_SETS, 256);
    let mut probe = Probe::new(&server, true);
    let (held, refusals) = flood(&server, 300);
    assert!(
        held.len() < 80,
        "{} connections held under a cap of 80",
        held.len()
    );
    assert!(refusals.len() > 200, "only {} refused", refusals.len());
    let answered = refusals
        .iter()
        .filter(|answer| answer.starts_with("HTTP/1.1 503") && answer.contains("Retry-After: 1"))
        .count();
    assert!(
        answered * 2 > refusals.len(),
        "most refusals must be a 503, got: {:?}",
        &refusals[..3]
    );
    let health = probe
        .health()
        .expect("/healthz answered on a kept connection");
    assert_eq!(health.status, 503, "{}", health.text());
    assert_eq!(health.json()["reason"], "connection limit reached");

    let peak = probe.run(100, Duration::from_secs(4));
    probe.check("connection flood", peak);
    drop(held);
    drop(probe);
    eprintln!(
        "connection flood: healthy {:?} after",
        recovery_time(&server)
    );
}

/// Finding 1: with the cap set above what the descriptor limit allows, `accept()`
/// fails with EMFILE. The listener must neither die nor spin: pending connections are
/// told why (the spare descriptor), `/healthz` fails, and once descriptors are free
/// again new connections are served.
#[test]
fn running_out_of_descriptors_does_not_kill_the_listener() {
    let _heavy = crate::common::heavy();
    let config = format!("{ALL_SETS}[server]\nmax_connections = 100000\n");
    let mut server = Server::start_with_fd_limit(&config, 160);
    let mut probe = Probe::new(&server, true);
    let (held, refusals) = flood(&server, 200);
    assert!(
        refusals
            .iter()
            .any(|answer| answer.contains("out of file descriptors")),
        "no connection was told it was refused ({} held, {} refused)",
        held.len(),
        refusals.len()
    );
    let health = probe
        .health()
        .expect("/healthz answered on a kept connection");
    assert_eq!(health.status, 503, "{}", health.text());
    assert!(
        health.json()["reason"]
            .as_str()
            .is_some_and(|r| r.contains("cannot accept")),
        "{}",
        health.text()
    );
    let peak = probe.run(60, Duration::from_secs(3));
    probe.check("descriptor exhaustion", peak);
    drop(held);
    drop(probe);
    assert!(server.is_running(), "the server died");
    eprintln!(
        "descriptor exhaustion: healthy {:?} after",
        recovery_time(&server)
    );
}

/// Writes `bytes` one at a time, `gap` apart, until the server closes the connection
/// or `stop` is set; returns the server's answer.
fn trickle(
    mut stream: TcpStream,
    head: String,
    bytes: impl Iterator<Item = u8>,
    gap: Duration,
    stop: &AtomicBool,
) -> String {
    let _ = stream.write_all(head.as_bytes());
    for byte in bytes {
        if stop.load(Ordering::Acquire) || stream.write_all(&[byte]).is_err() {
            break;
        }
        std::thread::sleep(gap);
    }
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// Finding 2: 70 connections trickle their requests, a byte every 500 ms: a third a
/// body of `Content-Length: 100000`, a third a never-ending chunked body, a third
/// never-ending headers. Requests are read whole on the connection's side under the
/// request deadline (2 s here), so no request thread waits, and each trickler gets a
/// 408 when its deadline passes.
#[test]
fn trickled_bodies_hold_no_request_thread() {
    let _heavy = crate::common::heavy();
    let config = format!("{ALL_SETS}[server]\nrequest_timeout_ms = 2000\n");
    let server = Server::start(&config);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tricklers: Vec<_> = (0..70)
        .map(|index| {
            let stream = TcpStream::connect(server.addr).expect("connect");
            let rpc = Rpc::tool("echo", json!({"text": "x"}));
            let mut head = format!("POST /mcp HTTP/1.1\r\nHost: {}\r\n", server.addr);
            for (name, value) in rpc.header_pairs() {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let gap = Duration::from_millis(500);
                match index % 3 {
                    0 => {
                        head.push_str("Content-Length: 100000\r\n\r\n");
                        trickle(stream, head, std::iter::repeat(b' '), gap, &stop)
                    }
                    1 => {
                        head.push_str("Transfer-Encoding: chunked\r\n\r\n");
                        let chunks = b"1\r\n \r\n".iter().copied().cycle();
                        trickle(stream, head, chunks, gap, &stop)
                    }
                    _ => {
                        let headers = b"X-Slow: a\r\n".iter().copied().cycle();
                        trickle(stream, head, headers, gap, &stop)
                    }
                }
            })
        })
        .collect();
    let mut probe = Probe::new(&server, false);
    let peak = probe.run(100, Duration::from_secs(2));
    probe.check("trickled bodies", peak);
    let answers: Vec<String> = tricklers
        .into_iter()
        .map(|t| t.join().expect("trickler"))
        .collect();
    let cut_off = started.elapsed();
    stop.store(true, Ordering::Release);
    let timed_out = answers
        .iter()
        .filter(|answer| answer.starts_with("HTTP/1.1 408"))
        .count();
    assert_eq!(
        timed_out,
        70,
        "every trickler gets a 408: {:?}",
        &answers[..2]
    );
    assert!(
        cut_off < Duration::from_secs(6),
        "tricklers were cut off after {cut_off:?}"
    );
    eprintln!(
        "trickled bodies: cut off after {cut_off:?}, healthy {:?} after",
        recovery_time(&server)
    );
}

/// A command tool whose answer is `bytes` bytes of text.
fn big_answer_config(bytes: usize) -> String {
    format!(
        "{ALL_SETS}[[tools]]\nname = \"big\"\ndescription = \"prints a lot\"\n\
         command = ['sh', '-c', 'cat > /dev/null; head -c {bytes} /dev/zero | tr \"\\0\" a; echo']\n\
         max_output_bytes = {}\n",
        bytes + 1024
    )
}

/// Finding 3: 70 clients ask for a 12 MB `tasks/get` answer and never read it. Answers
/// are written by their connection's thread, out of a server-wide budget (64 MiB by
/// default; beyond it the connection is closed instead), so request threads stay free
/// and memory stays bounded.
#[test]
fn clients_that_never_read_a_large_answer_stall_nothing() {
    let _heavy = crate::common::heavy();
    const SIZE: usize = 12_000_000;
    let server = Server::start(&big_answer_config(SIZE));
    let created = server.call_tool("big", json!({}), tasks_caps()).result();
    let task_id = created["taskId"].as_str().expect("taskId").to_owned();
    let task = wait_terminal(&server, &task_id, Duration::from_secs(30));
    assert_eq!(task["status"], "completed", "{task}");
    let request = Rpc::new("tasks/get", json!({"taskId": task_id}))
        .caps(tasks_caps())
        .header("Connection", "keep-alive")
        .to_bytes(&server);
    let (hwm_before, rss_before) = memory_kib(server.pid());

    let readers: Vec<TcpStream> = (0..70)
        .map(|_| {
            let mut stream = TcpStream::connect(server.addr).expect("connect");
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            stream.write_all(&request).expect("send tasks/get");
            stream
        })
        .collect();
    let mut probe = Probe::new(&server, false);
    let peak = probe.run(100, Duration::from_secs(3));
    probe.check("unread 12 MB answers", peak);
    eprintln!(
        "unread 12 MB answers: before VmHWM {} MiB VmRSS {} MiB",
        hwm_before / 1024,
        rss_before / 1024
    );
    drop(readers);
    eprintln!(
        "unread 12 MB answers: healthy {:?} after",
        recovery_time(&server)
    );
    // A client that reads gets the whole answer.
    let response = server.exchange(
        &Rpc::new("tasks/get", json!({"taskId": task_id}))
            .caps(tasks_caps())
            .to_bytes(&server),
    );
    assert_eq!(response.status, 200);
    assert!(response.body.len() > SIZE, "{} bytes", response.body.len());
}

/// Finding 7: two `Authorization` headers are ambiguous, whichever is valid: 400.
#[test]
fn more_than_one_authorization_header_is_refused() {
    const TOKEN: &str = "taskd-test-token-alice";
    const DIGEST: &str = "68b74f2ff99b029c6ca3eab04c4be3429bd3a4a7bfc56a59ed88ffcedb4d56b8";
    let config = format!(
        "[[auth.tokens]]\nprincipal = \"alice\"\ntenant = \"t1\"\nsha256 = \"{DIGEST}\"\n{ALL_SETS}"
    );
    let server = Server::start(&config);
    let valid = format!("Bearer {TOKEN}");
    let rpc = Rpc::tool("test_simple_text", json!({}));
    for pair in [
        [valid.as_str(), "garbage"],
        ["garbage", &valid],
        [&valid, &valid],
    ] {
        let mut request = rpc.clone();
        for value in pair {
            request
                .headers
                .push(("Authorization".to_owned(), value.to_owned()));
        }
        let response = request.send(&server);
        let error = response.expect_rpc_error(400, -32600, &Value::Null);
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("Authorization")),
            "{error}"
        );
    }
    let ok = rpc.header("Authorization", &valid).send(&server);
    assert_eq!(ok.status, 200, "{}", ok.text());
}

/// Finding 3, the transport's own bound: answers waiting for clients that do not read
/// them share `limits.max_unsent_answer_bytes` (5 MiB here; the first 64 KiB of each
/// answer are free). Four clients that never read a 4 MB answer: one answer fits, the
/// others are dropped and their connections closed at once. (The one that fits may
/// well end up whole in the kernel's socket buffers on loopback; if not, it is dropped
/// once its write deadline, 1 s + 4 MB at 64 MiB/s, passes.)
#[test]
fn unsent_answers_share_a_bounded_budget() {
    let _heavy = crate::common::heavy();
    const CLIENTS: usize = 4;
    let config = format!(
        "{ALL_SETS}[server]\nwrite_timeout_ms = 1000\nmin_write_bytes_per_sec = 67108864\n\
         [limits]\nmax_unsent_answer_bytes = 5242880\n"
    );
    let server = Server::start(&config);
    let text = "a".repeat(4_000_000);
    let request = Rpc::tool("echo", json!({"text": text}))
        .header("Connection", "keep-alive")
        .to_bytes(&server);
    let started = Instant::now();
    let clients: Vec<TcpStream> = (0..CLIENTS)
        .map(|_| {
            let mut stream = TcpStream::connect(server.addr).expect("connect");
            stream.write_all(&request).expect("send echo");
            stream
        })
        .collect();
    let mut probe = Probe::new(&server, false);
    let peak = probe.run(100, Duration::from_secs(3));
    probe.check("unsent answers over budget", peak);
    let mut received = Vec::new();
    for stream in &clients {
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut answer = Vec::new();
        let _ = (&*stream).read_to_end(&mut answer);
        received.push(answer.len());
    }
    let ended = started.elapsed();
    eprintln!("unsent answers over budget: bytes received {received:?}, read back after {ended:?}");
    let dropped = received.iter().filter(|&&bytes| bytes == 0).count();
    assert!(
        dropped >= CLIENTS - 1,
        "more than one answer was held for clients that did not read: {received:?}"
    );
    drop(clients);
    eprintln!(
        "unsent answers over budget: healthy {:?} after",
        recovery_time(&server)
    );
}
