//! Load client for `benches/tasks.sh`: the end-to-end throughput of no-op durable tasks,
//! which `oha` cannot express (it must read each created task's id and poll it).
//!
//! ```text
//! taskload HOST:PORT e2e N CONC [TOOL [POLL_MS]]
//! taskload HOST:PORT create N CONC [TOOL]
//! taskload HOST:PORT get IDS_FILE SECONDS CONC
//! taskload HOST:PORT latency K TOKEN [TOOL]
//! ```
//!
//! `create` stops after phase 1 (benches/drain.sh fills a backlog with it). With
//! `TASKLOAD_TOKENS=M` in the environment, creation i presents the bearer token
//! `t{i % M}`: a backlog of M identities (benches/fair.sh). With `TASKLOAD_KEYS=K`,
//! creation i passes the arguments `{"key": "k{i % K}"}` instead of `{}`: a backlog
//! spread over K values of a tool's `concurrency_key = "/key"` (benches/flow.sh).
//!
//! `latency` (for `benches/fair.sh`): K tasks of TOOL one after the other, each created
//! with the bearer token TOKEN and polled every 0.2 ms until it is completed; prints one
//! JSON line with each task's time from the `tools/call` to the poll that saw it
//! completed, in ms.
//!
//! `get` (for `benches/scale.sh`): CONC connections each send `tasks/get` for ids drawn
//! at random from IDS_FILE (one id a line) for SECONDS, back to back; prints one JSON
//! line with requests/s and the latency p50/p99/max in ms. Any error aborts.
//!
//! Opens CONC keep-alive connections. Phase 1: creates N tasks of TOOL (default
//! `noop_task`) with `tools/call`, declaring the Tasks extension, each connection
//! creating its share back to back. Phase 2, once every connection has created its
//! share: each connection polls `tasks/get` for the ids it created, in creation order,
//! until every one is `completed`, pausing POLL_MS (default 50) whenever the task it
//! polled was still working (tasks are claimed oldest first, so later ones are unlikely
//! to be done). The pause bounds polling to CONC * 1000 / POLL_MS requests/s, which
//! would otherwise take CPU from the server's own workers; it also bounds how late the
//! last completion is seen. Prints one JSON line: creation time and rate, the time until the
//! last task was seen completed, end-to-end tasks/s (N over that time, measured from the
//! first creation) and the number of polls. Any HTTP or JSON-RPC error, or a task that
//! ends other than `completed`, aborts with exit status 1.
//!
//! Plain HTTP/1.1 over `std::net` (the server always answers these requests with a
//! `Content-Length`), so the client stays small and its cost is a few syscalls a request.
//! Built by `cargo bench --no-run --bench taskload`; not part of `cargo test`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const VERSION: &str = "2026-07-28";
const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// Default pause after polling a task that is still working.
const POLL_PAUSE_MS: u64 = 50;

struct Connection {
    host: String,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    next_id: u64,
    /// An `Authorization` header line (with its CRLF) for the next requests, if any.
    authorization: String,
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
            next_id: 1,
            authorization: String::new(),
        }
    }

    /// Presents bearer `token` from the next request on (`None`: no token).
    fn present(&mut self, token: Option<&str>) {
        self.authorization = token.map_or_else(String::new, |token| {
            format!("Authorization: Bearer {token}\r\n")
        });
    }

    /// One MCP request with the 2026-07-28 headers; returns the JSON-RPC `result`.
    fn call(&mut self, method: &str, name: &str, mut params: Value) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": { "extensions": { TASKS_EXTENSION: {} } },
        });
        let id = self.next_id;
        self.next_id += 1;
        let body =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {VERSION}\r\n\
             Mcp-Method: {method}\r\nMcp-Name: {name}\r\n{}Content-Length: {}\r\n\r\n{body}",
            self.host,
            self.authorization,
            body.len()
        );
        self.writer
            .write_all(request.as_bytes())
            .unwrap_or_else(|e| fail(&format!("send: {e}")));
        let (status, body) = self.read_response();
        let message: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| fail(&format!("{method}: response is not JSON: {e}")));
        if status != 200 || message.get("result").is_none() {
            fail(&format!("{method}: HTTP {status}: {message}"));
        }
        message["result"].clone()
    }

    fn read_response(&mut self) -> (u16, Vec<u8>) {
        let mut line = String::new();
        let mut status = 0;
        let mut length = None;
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
                }
            }
        }
        let length = length.unwrap_or_else(|| fail("response without Content-Length"));
        let mut body = vec![0; length];
        self.reader
            .read_exact(&mut body)
            .unwrap_or_else(|e| fail(&format!("receive body: {e}")));
        (status, body)
    }
}

fn fail(why: &str) -> ! {
    eprintln!("taskload: {why}");
    std::process::exit(1)
}

/// `get` mode: random existing ids, latency percentiles.
fn random_gets(host: &str, ids_file: &str, seconds: f64, conc: usize) {
    let text = std::fs::read_to_string(ids_file)
        .unwrap_or_else(|e| fail(&format!("reading {ids_file}: {e}")));
    let ids: Vec<&str> = text.lines().filter(|line| !line.is_empty()).collect();
    if ids.is_empty() {
        fail("no ids");
    }
    let run = Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut latencies: Vec<u32> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..conc)
            .map(|index| {
                let ids = &ids;
                scope.spawn(move || {
                    let mut connection = Connection::open(host);
                    // xorshift64*, seeded per connection: no dependency for a dice roll.
                    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ (index as u64 + 1) << 17;
                    let mut latencies = Vec::new();
                    while started.elapsed() < run {
                        state ^= state >> 12;
                        state ^= state << 25;
                        state ^= state >> 27;
                        let pick = state.wrapping_mul(0x2545_f491_4f6c_dd1d) % ids.len() as u64;
                        let id = ids[pick as usize];
                        let sent = Instant::now();
                        let task = connection.call("tasks/get", id, json!({"taskId": id}));
                        latencies.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        if task["taskId"].as_str() != Some(id) {
                            fail(&format!("tasks/get answered another task: {task}"));
                        }
                    }
                    latencies
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().expect("worker thread"))
            .collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let at = |q: f64| {
        let index = ((latencies.len() as f64 * q) as usize).min(latencies.len() - 1);
        f64::from(latencies[index]) / 1000.0
    };
    println!(
        "{}",
        json!({
            "requests": latencies.len(),
            "conc": conc,
            "rps": latencies.len() as f64 / elapsed,
            "p50_ms": at(0.50),
            "p99_ms": at(0.99),
            "max_ms": at(1.0),
        })
    );
}

/// `latency` mode: K tasks one after the other, each polled until completed.
fn latencies(host: &str, k: usize, token: &str, tool: &str) {
    let mut connection = Connection::open(host);
    connection.present(Some(token));
    let mut samples = Vec::with_capacity(k);
    for _ in 0..k {
        let sent = Instant::now();
        let created = connection.call("tools/call", tool, json!({"name": tool, "arguments": {}}));
        let Some(id) = created["taskId"].as_str().map(str::to_owned) else {
            fail(&format!("tools/call did not create a task: {created}"));
        };
        loop {
            let task = connection.call("tasks/get", &id, json!({"taskId": id}));
            match task["status"].as_str() {
                Some("completed") => break,
                Some("working") => std::thread::sleep(Duration::from_micros(200)),
                other => fail(&format!("task {id} ended as {other:?}: {task}")),
            }
        }
        samples.push(sent.elapsed().as_secs_f64() * 1000.0);
    }
    println!("{}", json!({ "k": k, "latency_ms": samples }));
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; ignore flags.
    let args: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if let [host, "get", ids_file, seconds, conc] = args.as_slice() {
        let seconds = seconds
            .parse()
            .unwrap_or_else(|_| fail("SECONDS must be a number"));
        let conc = conc
            .parse::<usize>()
            .unwrap_or_else(|_| fail("CONC must be a number"));
        return random_gets(host, ids_file, seconds, conc.max(1));
    }
    if let [host, "latency", k, token, rest @ ..] = args.as_slice() {
        let k = k.parse().unwrap_or_else(|_| fail("K must be a number"));
        return latencies(host, k, token, rest.first().copied().unwrap_or("noop_task"));
    }
    // Creation i presents token t{i % tokens}, when set.
    let tokens: Option<usize> = std::env::var("TASKLOAD_TOKENS").ok().map(|m| {
        m.parse()
            .unwrap_or_else(|_| fail("TASKLOAD_TOKENS must be a number"))
    });
    let keys: Option<usize> = std::env::var("TASKLOAD_KEYS").ok().map(|k| {
        k.parse::<usize>()
            .unwrap_or_else(|_| fail("TASKLOAD_KEYS must be a number"))
            .max(1)
    });
    let (host, mode, n, conc, tool, poll_pause) = match args.as_slice() {
        [host, mode @ ("e2e" | "create"), n, conc, rest @ ..] => (
            host.to_string(),
            *mode,
            n.parse::<usize>()
                .unwrap_or_else(|_| fail("N must be a number")),
            conc.parse::<usize>()
                .unwrap_or_else(|_| fail("CONC must be a number"))
                .max(1),
            rest.first().copied().unwrap_or("noop_task").to_owned(),
            Duration::from_millis(match rest.get(1) {
                Some(ms) => ms
                    .parse()
                    .unwrap_or_else(|_| fail("POLL_MS must be a number")),
                None => POLL_PAUSE_MS,
            }),
        ),
        _ => fail(
            "usage: taskload HOST:PORT e2e|create N CONC [TOOL [POLL_MS]] | get IDS_FILE SECONDS CONC \
             | latency K TOKEN [TOOL]",
        ),
    };
    let polls = AtomicU64::new(0);
    let created_all = Barrier::new(conc);
    let started = Instant::now();
    let (created_at, completed_at) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..conc)
            .map(|index| {
                let (host, tool, polls, created_all) = (&host, &tool, &polls, &created_all);
                let poll_pause = &poll_pause;
                // Connection `index` creates tasks index, index + conc, …
                let share = n / conc + usize::from(index < n % conc);
                scope.spawn(move || {
                    let mut connection = Connection::open(host);
                    let mut ids = Vec::with_capacity(share);
                    for k in 0..share {
                        if let Some(tokens) = tokens {
                            let token = format!("t{}", (index + k * conc) % tokens.max(1));
                            connection.present(Some(&token));
                        }
                        let arguments = match keys {
                            Some(keys) => json!({"key": format!("k{}", (index + k * conc) % keys)}),
                            None => json!({}),
                        };
                        let result = connection.call(
                            "tools/call",
                            tool,
                            json!({"name": tool, "arguments": arguments}),
                        );
                        match (result["resultType"].as_str(), result["taskId"].as_str()) {
                            (Some("task"), Some(id)) => ids.push(id.to_owned()),
                            _ => fail(&format!("tools/call did not create a task: {result}")),
                        }
                    }
                    let created = started.elapsed();
                    if mode == "create" {
                        return (created, created);
                    }
                    // Poll only once every task exists, so that polling never slows
                    // creation down.
                    created_all.wait();
                    // Tasks are claimed oldest first, so each pass polls in creation
                    // order and stops at the first task still working: a client polling
                    // that way costs the server little while it drains the queue.
                    let mut pending = std::collections::VecDeque::from(ids);
                    let mut last_done = created;
                    while let Some(id) = pending.front() {
                        let task = connection.call("tasks/get", id, json!({"taskId": id}));
                        polls.fetch_add(1, Ordering::Relaxed);
                        match task["status"].as_str() {
                            Some("completed") => {
                                last_done = started.elapsed();
                                pending.pop_front();
                            }
                            Some("working") => std::thread::sleep(*poll_pause),
                            other => fail(&format!("task {id} ended as {other:?}: {task}")),
                        }
                    }
                    (created, last_done)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("worker thread"))
            .fold((Duration::ZERO, Duration::ZERO), |(c, d), (wc, wd)| {
                (c.max(wc), d.max(wd))
            })
    });
    let create_s = created_at.as_secs_f64();
    let complete_s = completed_at.as_secs_f64();
    println!(
        "{}",
        json!({
            "n": n,
            "conc": conc,
            "tool": tool,
            "create_s": create_s,
            "creations_per_s": n as f64 / create_s,
            "complete_s": complete_s,
            "tasks_per_s": n as f64 / complete_s,
            "poll_ms": poll_pause.as_millis() as u64,
            "polls": polls.load(Ordering::Relaxed),
        })
    );
}
