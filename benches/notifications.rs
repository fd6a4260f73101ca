//! Notification fan-out benchmark: N open `subscriptions/listen` streams, each following
//! its own task; each task is cancelled in turn, and we measure the time from the
//! `tasks/cancel` acknowledgement (which returns after the commit) to the
//! `notifications/tasks` frame on the subscriber's stream, plus the server's RSS.
//!
//!     cargo bench --bench notifications            # 1,000 subscriptions
//!     SUBSCRIPTIONS=200 cargo bench --bench notifications

// The benchmark drives the server with a small part of the test harness.
#[path = "../tests/common/mod.rs"]
#[allow(dead_code, unused_imports)]
mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::tasks::{self, wait_for};
use common::{tasks_caps, Listen, Server};
use serde_json::json;

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with(field))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse().ok())
        })
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn main() {
    let count: usize = std::env::var("SUBSCRIPTIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let config = format!(
        "[builtin]\nsets = [\"conformance\"]\n[workers]\nthreads = 8\n\
         [notifications]\nmax_subscriptions_per_identity = {}\n",
        count + 10
    );
    let server = Server::start(&config);
    let pid = server.pid();
    let baseline = rss_kib(pid, "VmRSS:");

    // Tasks parked waiting for input: a cancel is then one committed change.
    let ids: Vec<String> = (0..count)
        .map(|i| {
            tasks::create(
                &server,
                "confirm_delete",
                json!({"filename": format!("f{i}")}),
                &[],
            )
        })
        .collect();
    for id in &ids {
        wait_for(&server, id, "input_required", Duration::from_secs(60));
    }

    // One reader thread per stream records when its first task frame arrives.
    let (arrivals, arrived) = mpsc::channel::<(usize, Instant)>();
    let mut readers = Vec::new();
    for (index, id) in ids.iter().enumerate() {
        let mut listen = Listen::open(&server, json!({"taskIds": [id]}), tasks_caps(), &[]);
        let ack = listen
            .next_message(Duration::from_secs(10))
            .expect("acknowledgement");
        assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]));
        let arrivals = arrivals.clone();
        readers.push(
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    if let Some(message) = listen.next_message(Duration::from_secs(120)) {
                        let at = Instant::now();
                        assert_eq!(message["params"]["status"], "cancelled");
                        let _ = arrivals.send((index, at));
                    }
                })
                .expect("reader thread"),
        );
    }
    let open_rss = rss_kib(pid, "VmRSS:");

    let mut acked = Vec::with_capacity(count);
    let started = Instant::now();
    for id in &ids {
        let ack = tasks::cancel(&server, id, &[]);
        acked.push(Instant::now());
        assert_eq!(ack.status, 200);
    }
    let elapsed = started.elapsed();
    let mut latencies = vec![Duration::ZERO; count];
    for _ in 0..count {
        let (index, at) = arrived
            .recv_timeout(Duration::from_secs(60))
            .expect("every frame arrives");
        latencies[index] = at.saturating_duration_since(acked[index]);
    }
    let peak = rss_kib(pid, "VmHWM:");
    latencies.sort();
    println!("subscriptions: {count}");
    println!(
        "commit -> frame latency: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies[count - 1].as_secs_f64() * 1e3
    );
    println!("cancels: {count} in {:.2} s", elapsed.as_secs_f64());
    println!(
        "server RSS: {:.1} MiB idle, {:.1} MiB with {count} streams open, peak {:.1} MiB",
        baseline as f64 / 1024.0,
        open_rss as f64 / 1024.0,
        peak as f64 / 1024.0
    );
    for reader in readers {
        let _ = reader.join();
    }
}
