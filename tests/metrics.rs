//! `GET /metrics` through the real binary: task counts, per-tool totals and histograms
//! move with creation, completion, failure and cancellation, and the counts (kept by
//! the store's triggers, not by counting the tasks table) stay right across a restart
//! and a `kill -9`.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::tasks::{self, wait_terminal};
use crate::common::{poll_until, tasks_caps, Rpc, Server};

/// The built-in conformance and testing tools on `threads` workers, 1 s leases.
fn config(threads: usize) -> String {
    format!(
        "[builtin]\nsets = [\"conformance\", \"testing\"]\n\
         [workers]\nthreads = {threads}\nlease_ms = 1000\nshutdown_grace_ms = 200\n"
    )
}

/// Every sample of the page, by series (name and labels as printed).
fn samples(server: &Server) -> HashMap<String, f64> {
    let page = server.get("/metrics");
    assert_eq!(page.status, 200);
    page.text()
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// Waits until every `(series, value)` of `expected` reads as given; panics with the
/// page otherwise.
fn expect_samples(server: &Server, expected: &[(&str, f64)]) {
    let mut last = HashMap::new();
    let matched = poll_until(Duration::from_secs(10), || {
        last = samples(server);
        expected
            .iter()
            .all(|(series, value)| last.get(*series) == Some(value))
            .then_some(())
    });
    if matched.is_none() {
        let wrong: Vec<String> = expected
            .iter()
            .filter(|(series, value)| last.get(*series) != Some(value))
            .map(|(series, value)| format!("{series}: want {value}, got {:?}", last.get(*series)))
            .collect();
        panic!("metrics never read as expected: {wrong:#?}");
    }
}

#[test]
fn counts_totals_and_histograms_follow_create_complete_fail_and_cancel() {
    let server = Server::start(&config(2));
    expect_samples(
        &server,
        &[
            ("mcp_taskd_tasks{status=\"working\"}", 0.0),
            ("mcp_taskd_jobs{state=\"queued\"}", 0.0),
            (
                "mcp_taskd_attempt_duration_seconds_count{tool=\"slow_compute\"}",
                0.0,
            ),
        ],
    );

    let done = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    assert_eq!(
        wait_terminal(&server, &done, Duration::from_secs(5))["status"],
        "completed"
    );
    let broken = tasks::create(&server, "protocol_error_job", json!({}), &[]);
    assert_eq!(
        wait_terminal(&server, &broken, Duration::from_secs(5))["status"],
        "failed"
    );
    let long = tasks::create(&server, "slow_compute", json!({"seconds": 60}), &[]);
    poll_until(Duration::from_secs(5), || {
        (tasks::get(&server, &long)["statusMessage"] == "computing").then_some(())
    })
    .expect("a worker runs the long task");
    expect_samples(
        &server,
        &[
            ("mcp_taskd_tasks{status=\"working\"}", 1.0),
            ("mcp_taskd_tasks{status=\"completed\"}", 1.0),
            ("mcp_taskd_tasks{status=\"failed\"}", 1.0),
            ("mcp_taskd_jobs{state=\"running\"}", 1.0),
            ("mcp_taskd_jobs{state=\"queued\"}", 0.0),
            ("mcp_taskd_tasks_created_total{tool=\"slow_compute\"}", 2.0),
            (
                "mcp_taskd_tasks_created_total{tool=\"protocol_error_job\"}",
                1.0,
            ),
            (
                "mcp_taskd_tasks_ended_total{tool=\"slow_compute\",status=\"completed\"}",
                1.0,
            ),
            (
                "mcp_taskd_tasks_ended_total{tool=\"protocol_error_job\",status=\"failed\"}",
                1.0,
            ),
            (
                "mcp_taskd_queue_wait_seconds_count{tool=\"slow_compute\"}",
                2.0,
            ),
            (
                "mcp_taskd_attempt_duration_seconds_count{tool=\"slow_compute\"}",
                1.0,
            ),
            (
                "mcp_taskd_attempt_duration_seconds_count{tool=\"protocol_error_job\"}",
                1.0,
            ),
        ],
    );

    tasks::cancel(&server, &long, &[]).result();
    expect_samples(
        &server,
        &[
            ("mcp_taskd_tasks{status=\"working\"}", 0.0),
            ("mcp_taskd_tasks{status=\"cancelled\"}", 1.0),
            ("mcp_taskd_jobs{state=\"running\"}", 0.0),
            (
                "mcp_taskd_tasks_ended_total{tool=\"slow_compute\",status=\"cancelled\"}",
                1.0,
            ),
            (
                "mcp_taskd_tasks_ended_total{tool=\"slow_compute\",status=\"completed\"}",
                1.0,
            ),
            (
                "mcp_taskd_attempt_duration_seconds_count{tool=\"slow_compute\"}",
                2.0,
            ),
        ],
    );
    let page = server.get("/metrics").text();
    for secret in [&done, &broken, &long] {
        assert!(!page.contains(secret.as_str()), "no task id in the page");
    }
}

/// Tasks by status, counted by listing every task (a scan, by the operator command on
/// the stopped server's database): the truth the trigger-kept counts must match.
fn scanned_counts(dir: &Path) -> HashMap<String, f64> {
    let output = crate::common::binary()
        .args(["tasks", "list", "--json", "--limit", "100000", "--config"])
        .arg(dir.join("config.toml"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("run mcp-taskd tasks list");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut counts = HashMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let task: Value = serde_json::from_str(line).expect("a JSON line");
        let status = task["status"].as_str().expect("status").to_owned();
        *counts.entry(status).or_insert(0.0) += 1.0;
    }
    counts
}

/// The page's task counts agree with `scanned`, status by status.
fn expect_counts(server: &Server, scanned: &HashMap<String, f64>) {
    let expected: Vec<(String, f64)> = [
        "working",
        "input_required",
        "completed",
        "failed",
        "cancelled",
    ]
    .iter()
    .map(|status| {
        (
            format!("mcp_taskd_tasks{{status=\"{status}\"}}"),
            scanned.get(*status).copied().unwrap_or(0.0),
        )
    })
    .collect();
    let expected: Vec<(&str, f64)> = expected
        .iter()
        .map(|(series, value)| (series.as_str(), *value))
        .collect();
    expect_samples(server, &expected);
}

/// Four workers: the two 60-second tasks hold two of them, and after the kill the
/// burst's queued tasks must all complete on the other two whichever the claim takes
/// first (the 60-second jobs, reclaimed once their leases expire, get fair-share turns
/// that may come before the burst's last jobs; with two workers those would then wait
/// a minute).
const FOUR_WORKERS: usize = 4;

#[test]
fn counts_stay_right_after_a_restart_and_after_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_in(dir.path(), &config(FOUR_WORKERS));
    for _ in 0..3 {
        let id = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
        wait_terminal(&server, &id, Duration::from_secs(5));
    }
    let cancelled = tasks::create(&server, "slow_compute", json!({"seconds": 60}), &[]);
    tasks::cancel(&server, &cancelled, &[]).result();
    for _ in 0..2 {
        tasks::create(&server, "slow_compute", json!({"seconds": 60}), &[]);
    }
    assert!(server.terminate(Duration::from_secs(10)), "a clean stop");
    let scanned = scanned_counts(dir.path());
    assert_eq!(scanned.get("completed"), Some(&3.0));
    assert_eq!(scanned.get("working"), Some(&2.0));

    let mut server = Server::start_in(dir.path(), &config(FOUR_WORKERS));
    expect_counts(&server, &scanned);
    expect_samples(
        &server,
        &[
            ("mcp_taskd_tasks_created_total{tool=\"slow_compute\"}", 6.0),
            (
                "mcp_taskd_tasks_ended_total{tool=\"slow_compute\",status=\"completed\"}",
                3.0,
            ),
            (
                "mcp_taskd_tasks_ended_total{tool=\"slow_compute\",status=\"cancelled\"}",
                1.0,
            ),
        ],
    );

    // A burst of creations and completions cut by SIGKILL: whatever committed is
    // counted, and nothing that did not.
    let create = Rpc::tool("slow_compute", json!({"seconds": 0}))
        .caps(tasks_caps())
        .to_bytes(&server);
    let (under_way, killed) = std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                // Until the server is gone: a refused or cut connection ends the loop.
                while server
                    .try_exchange(&create, Duration::from_secs(5))
                    .is_some()
                {}
            });
        }
        // The server is killed whatever happens: the creators stop only then.
        let under_way = poll_until(Duration::from_secs(10), || {
            let created = samples(&server)
                .get("mcp_taskd_tasks_created_total{tool=\"slow_compute\"}")
                .copied()
                .unwrap_or(0.0);
            (created >= 30.0).then_some(())
        });
        let killed = Command::new("kill")
            .args(["-KILL", &server.pid().to_string()])
            .status();
        (under_way, killed)
    });
    server.kill9();
    assert!(killed.is_ok_and(|status| status.success()), "kill -KILL");
    assert!(under_way.is_some(), "the burst got under way");
    let scanned = scanned_counts(dir.path());
    let stored: f64 = scanned.values().sum();
    assert_eq!(scanned.get("cancelled"), Some(&1.0));
    let server = Server::start_in(dir.path(), &config(FOUR_WORKERS));
    // Recovery runs the unfinished tasks again at once, so statuses move; what a crash
    // must not break: every stored task counted once, created and ended once.
    let statuses = [
        "working",
        "input_required",
        "completed",
        "failed",
        "cancelled",
    ];
    let counted = poll_until(Duration::from_secs(10), || {
        let page = samples(&server);
        let sum: f64 = statuses
            .iter()
            .map(|status| page[&format!("mcp_taskd_tasks{{status=\"{status}\"}}")])
            .sum();
        (sum == stored).then_some(sum)
    });
    assert_eq!(counted, Some(stored), "every stored task counted once");
    expect_samples(
        &server,
        &[
            (
                "mcp_taskd_tasks_created_total{tool=\"slow_compute\"}",
                stored,
            ),
            ("mcp_taskd_tasks{status=\"working\"}", 2.0),
            ("mcp_taskd_tasks{status=\"cancelled\"}", 1.0),
            ("mcp_taskd_tasks{status=\"completed\"}", stored - 3.0),
            (
                "mcp_taskd_tasks_ended_total{tool=\"slow_compute\",status=\"completed\"}",
                stored - 3.0,
            ),
            ("mcp_taskd_jobs{state=\"queued\"}", 0.0),
            ("mcp_taskd_jobs{state=\"running\"}", 2.0),
        ],
    );
}

#[test]
fn outcomes_the_fence_refused_are_counted() {
    // stubborn_sleep ignores its 500 ms deadline and sleeps 1.5 s; its lease (300 ms)
    // stops being renewed at the deadline, and the janitor takes the job over, twice
    // (two attempts). Each attempt's late success reaches the store and is refused:
    // two outcomes discarded, none before.
    let server = Server::start(
        "[builtin]\nsets = [\"testing\"]\n\
         [workers]\nthreads = 2\nlease_ms = 300\njanitor_interval_ms = 50\n",
    );
    expect_samples(
        &server,
        &[("mcp_taskd_attempt_outcomes_discarded_total", 0.0)],
    );
    let id = tasks::create(&server, "stubborn_sleep", json!({"seconds": 1.5}), &[]);
    let task = wait_terminal(&server, &id, Duration::from_secs(15));
    assert_eq!(task["status"], "failed", "{task}");
    expect_samples(
        &server,
        &[
            ("mcp_taskd_attempt_outcomes_discarded_total", 2.0),
            ("mcp_taskd_leases_reclaimed_total", 2.0),
        ],
    );
}
