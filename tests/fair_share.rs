//! Fair share (issue 29): one identity can neither lock out nor starve the others.
//! Workers take identities with queued jobs in turn, so a task arriving behind another
//! identity's backlog starts at once; priorities go first.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::common::{poll_until, tasks_caps, Listen, Server};

/// A `[[auth.tokens]]` entry for `principal`, whose token is `<principal>-token`, with
/// `extra` lines (weight, priority, quotas).
pub fn token(principal: &str, extra: &str) -> String {
    let digest = hex::encode(Sha256::digest(format!("{principal}-token").as_bytes()));
    format!("[[auth.tokens]]\nprincipal = \"{principal}\"\nsha256 = \"{digest}\"\n{extra}\n")
}

/// The `Authorization` header of `principal`'s token.
pub fn bearer(principal: &str) -> String {
    format!("Bearer {principal}-token")
}

/// `noop_task` as a placeholder that runs one attempt at a time and never ends: every
/// other task of it stays queued (benches/drain.sh fills its backlog the same way).
const FILL: &str = "[builtin]\nsets = []\n[workers]\nshutdown_grace_ms = 100\n\n\
    [[tools]]\nname = \"noop_task\"\ndescription = \"placeholder\"\n\
    task_policy = \"required\"\ncommand = [\"/bin/sleep\", \"3600\"]\nmax_concurrency = 1\n";

/// The demo set, whose `noop_task` completes at once. Two workers: the backlog keeps
/// both busy, and a latency compared with an idle queue's measures the queue, not a box
/// whose every core the drain holds.
const DRAIN: &str = "[builtin]\nsets = [\"demo\"]\n[workers]\nthreads = 2\n";

fn tokens() -> String {
    [token("flood", ""), token("other", "")].concat()
}

/// Creates `count` tasks of `noop_task` as `principal`, from 8 connections at once.
fn flood(server: &Server, principal: &str, count: usize) {
    let auth = bearer(principal);
    std::thread::scope(|scope| {
        for part in 0..8 {
            let auth = auth.as_str();
            scope.spawn(move || {
                for _ in (part..count).step_by(8) {
                    let result = server
                        .request_with(
                            "tools/call",
                            json!({"name": "noop_task", "arguments": {}}),
                            tasks_caps(),
                            &[("Authorization", auth)],
                        )
                        .result();
                    assert_eq!(result["resultType"], "task", "{result}");
                }
            });
        }
    });
}

fn queued_jobs(server: &Server) -> u64 {
    server
        .get("/metrics")
        .text()
        .lines()
        .find_map(|line| line.strip_prefix("mcp_taskd_jobs{state=\"queued\"} "))
        .and_then(|count| count.trim().parse().ok())
        .expect("queued jobs in /metrics")
}

/// Unix milliseconds of an RFC 3339 time as the server writes them
/// (`2026-12-03T08:48:03.775Z`, milliseconds optional).
fn unix_ms(text: &str) -> i64 {
    let number = |range: std::ops::Range<usize>| -> i64 {
        text.get(range)
            .and_then(|digits| digits.parse().ok())
            .expect("an RFC 3339 time")
    };
    let (year, month, day) = (number(0..4), number(5..7), number(8..10));
    let seconds = number(11..13) * 3600 + number(14..16) * 60 + number(17..19);
    let millis = text
        .get(20..text.len() - 1)
        .filter(|_| text.as_bytes().get(19) == Some(&b'.'))
        .map_or(0, |digits| {
            format!("{digits:0<3}").parse::<i64>().unwrap_or(0)
        });
    // Days since 1970-01-01 of a Gregorian date (H. Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (days * 86_400 + seconds) * 1000 + millis
}

/// One `noop_task` of `principal`, from its creation to its completion by the server's
/// own clock (its `createdAt` and `lastUpdatedAt`): how long it waited to start, plus
/// its run and its commit.
fn noop_latency(server: &Server, principal: &str) -> Duration {
    let auth = bearer(principal);
    let headers = [("Authorization", auth.as_str())];
    let created = server
        .request_with(
            "tools/call",
            json!({"name": "noop_task", "arguments": {}}),
            tasks_caps(),
            &headers,
        )
        .result();
    let id = created["taskId"].as_str().expect("taskId").to_owned();
    let done = poll_until(Duration::from_secs(30), || {
        let task = server
            .request_with("tasks/get", json!({"taskId": id}), tasks_caps(), &headers)
            .result();
        (task["status"] == "completed").then_some(task)
    })
    .expect("the task completed");
    let created = unix_ms(done["createdAt"].as_str().expect("createdAt"));
    let ended = unix_ms(done["lastUpdatedAt"].as_str().expect("lastUpdatedAt"));
    Duration::from_millis((ended - created).max(0) as u64)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[test]
fn a_task_behind_another_identitys_backlog_of_ten_thousand_starts_at_once() {
    let _heavy = crate::common::heavy();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut server = Server::start_in(dir.path(), &format!("{FILL}{}", tokens()));
    flood(&server, "flood", 10_000);
    assert!(server.terminate(Duration::from_secs(20)), "stopped");

    // Restarted with the no-op, the backlog drains at once; the other identity's tasks
    // come in behind all of it.
    let server = Server::start_in(dir.path(), &format!("{DRAIN}{}", tokens()));
    let behind: Vec<Duration> = (0..7).map(|_| noop_latency(&server, "other")).collect();
    let left = queued_jobs(&server);
    assert!(
        left >= 2_000,
        "the backlog was still there ({left} queued after the tasks)"
    );
    let drained = poll_until(Duration::from_secs(120), || {
        (queued_jobs(&server) == 0).then_some(())
    });
    assert!(drained.is_some(), "the backlog drained");
    let idle: Vec<Duration> = (0..7).map(|_| noop_latency(&server, "other")).collect();
    eprintln!("behind {behind:?} idle {idle:?}");
    let (behind, idle) = (median(behind), median(idle));
    // The goal: within twice the latency on an idle queue (medians of seven),
    // plus 10 ms: while the backlog drains, its commits share this 2-core box (and, on
    // PostgreSQL, the database) with the task measured, which turns 4 ms into 11 ms there
    // now and then; waiting behind the backlog would take seconds. benches/fair.sh
    // measures the ratio itself, on a box with nothing else running.
    let contention = Duration::from_millis(10);
    assert!(
        behind <= idle * 2 + contention,
        "behind the backlog {behind:?}, on an idle queue {idle:?}"
    );
}

#[test]
fn a_higher_priority_tool_and_token_go_before_a_backlog() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/serial.sh");
    let work = tempfile::tempdir().expect("temp dir");
    // `slow`: four at a time, 0.3 s each; `urgent` runs the same program one priority up.
    let tool = |name: &str, extra: &str| {
        format!(
            "[[tools]]\nname = \"{name}\"\ndescription = \"serial.sh\"\n\
             task_policy = \"required\"\ncommand = [{script:?}]\n\
             env = {{ WORK = {work:?}, PAUSE = \"0.3\" }}\n{extra}\n",
            script = script.to_string_lossy(),
            work = work.path().join(name).to_string_lossy(),
        )
    };
    let config = format!(
        "[builtin]\nsets = []\n[workers]\nthreads = 4\n\n{}{}{}{}{}",
        tool("slow", ""),
        tool("urgent", "priority = 10"),
        token("batch", ""),
        token("host", "priority = 5"),
        token("plain", ""),
    );
    for name in ["slow", "urgent"] {
        std::fs::create_dir_all(work.path().join(name)).expect("work dir");
    }
    let server = Server::start(&config);
    let create = |principal: &str, tool: &str| -> String {
        let result = server
            .request_with(
                "tools/call",
                json!({"name": tool, "arguments": {}}),
                tasks_caps(),
                &[("Authorization", &bearer(principal))],
            )
            .result();
        result["taskId"].as_str().expect("taskId").to_owned()
    };
    // 40 queued jobs of `slow`: 3 s of work for the four workers.
    let backlog: Vec<String> = (0..40).map(|_| create("batch", "slow")).collect();
    let host = create("host", "slow");
    let urgent = create("plain", "urgent");
    let plain = create("plain", "slow");
    let status = |id: &str, principal: &str| -> Value {
        server
            .request_with(
                "tasks/get",
                json!({"taskId": id}),
                tasks_caps(),
                &[("Authorization", &bearer(principal))],
            )
            .result()["status"]
            .clone()
    };
    let first_two = poll_until(Duration::from_secs(10), || {
        (status(&host, "host") == "completed" && status(&urgent, "plain") == "completed")
            .then_some(())
    });
    assert!(first_two.is_some(), "the priority jobs ran");
    // When both are done, most of the backlog is still waiting: they went first.
    let backlog_done = backlog
        .iter()
        .filter(|id| status(id, "batch") == "completed")
        .count();
    assert!(
        backlog_done <= 12,
        "{backlog_done} of the backlog ran first"
    );
    // The plain task came last but takes its identity's turn: it is not behind all 40.
    let plain_done = poll_until(Duration::from_secs(10), || {
        (status(&plain, "plain") == "completed").then_some(())
    });
    assert!(plain_done.is_some());
    let backlog_done = backlog
        .iter()
        .filter(|id| status(id, "batch") == "completed")
        .count();
    assert!(backlog_done < 30, "{backlog_done} of the backlog ran first");
}

#[test]
fn rfc3339_times_read_back_as_unix_milliseconds() {
    assert_eq!(unix_ms("1970-01-01T00:00:00Z"), 0);
    assert_eq!(unix_ms("2026-12-03T08:48:03.775Z"), 1_796_287_683_775);
    assert_eq!(unix_ms("2024-02-29T23:59:59.5Z"), 1_709_251_199_500);
}

/// Creates one `noop_task` as `principal`; the whole answer.
fn create_as(server: &Server, principal: &str) -> crate::common::HttpResponse {
    server.request_with(
        "tools/call",
        json!({"name": "noop_task", "arguments": {}}),
        tasks_caps(),
        &[("Authorization", &bearer(principal))],
    )
}

/// `mcp_taskd_quota_refusals_total` for `quota`.
fn quota_refusals(server: &Server, quota: &str) -> u64 {
    let prefix = format!("mcp_taskd_quota_refusals_total{{quota=\"{quota}\"}} ");
    server
        .get("/metrics")
        .text()
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str())?.trim().parse().ok())
        .expect("the quota's series")
}

/// Asserts a 429 naming `quota`, with `Retry-After`; returns its seconds.
fn refused_by(response: &crate::common::HttpResponse, quota: &str) -> u64 {
    let error = response.expect_error(429, -32603);
    assert_eq!(error["data"]["quota"], quota, "{error}");
    let message = error["message"].as_str().expect("message");
    assert!(message.contains(quota), "{message}");
    let seconds: u64 = response
        .header("retry-after")
        .and_then(|s| s.parse().ok())
        .expect("Retry-After");
    assert_eq!(error["data"]["retryAfterSeconds"], seconds);
    seconds
}

#[test]
fn tasks_not_yet_finished_are_capped_per_identity_from_the_store_across_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Tasks of the placeholder never finish: each stays live until cancelled.
    let config = format!(
        "[tasks]\nmax_live_tasks_per_identity = 3\n{FILL}{}{}{}",
        token("flood", ""),
        token("other", ""),
        token("big", "max_live_tasks = 6"),
    );
    let mut server = Server::start_in(dir.path(), &config);
    let flooded: Vec<String> = (0..3)
        .map(|_| {
            create_as(&server, "flood").result()["taskId"]
                .as_str()
                .expect("id")
                .to_owned()
        })
        .collect();
    for _ in 0..5 {
        refused_by(&create_as(&server, "flood"), "live_tasks");
    }
    assert_eq!(quota_refusals(&server, "live_tasks"), 5);
    // Another identity creates at once; a token's own quota holds for it.
    assert_eq!(create_as(&server, "other").result()["resultType"], "task");
    for _ in 0..6 {
        assert_eq!(create_as(&server, "big").result()["resultType"], "task");
    }
    refused_by(&create_as(&server, "big"), "live_tasks");

    // The operator sees each identity's unfinished tasks and its refusals, most first.
    let stats = operator_stats(dir.path());
    let identities = stats["identities"].as_array().expect("identities");
    let principals: Vec<&str> = identities
        .iter()
        .filter_map(|identity| identity["principal"].as_str())
        .collect();
    assert_eq!(principals, ["big", "flood", "other"], "{stats}");
    let unfinished = |identity: &Value| -> u64 {
        ["queued", "running", "waiting"]
            .iter()
            .map(|state| identity[state].as_u64().unwrap_or(0))
            .sum()
    };
    let counts: Vec<(u64, &Value)> = identities
        .iter()
        .map(|identity| (unfinished(identity), &identity["refusals"]["live_tasks"]))
        .collect();
    assert_eq!(
        counts,
        [(6, &json!(1)), (3, &json!(5)), (1, &json!(0))],
        "{stats}"
    );

    // Counted in the store: a restart changes nothing.
    assert!(server.terminate(Duration::from_secs(20)), "stopped");
    let server = Server::start_in(dir.path(), &config);
    refused_by(&create_as(&server, "flood"), "live_tasks");
    // A task that ends makes room.
    let cancelled = server
        .request_with(
            "tasks/cancel",
            json!({"taskId": flooded[2]}),
            tasks_caps(),
            &[("Authorization", &bearer("flood"))],
        )
        .result();
    assert_eq!(cancelled["resultType"], "complete", "{cancelled}");
    let made_room = poll_until(Duration::from_secs(10), || {
        let created = create_as(&server, "flood");
        (created.status == 200).then_some(())
    });
    assert!(made_room.is_some(), "room after the cancellation");
    refused_by(&create_as(&server, "flood"), "live_tasks");
}

/// `mcp-taskd stats --json` against the server running on the data in `dir`.
fn operator_stats(dir: &Path) -> Value {
    let output = crate::common::binary()
        .args(["stats", "--json", "--config"])
        .arg(dir.join("config.toml"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("run mcp-taskd stats");
    assert!(
        output.status.success(),
        "stats failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("stats JSON")
}

#[test]
fn task_creations_are_paced_per_identity_with_a_burst() {
    let config = format!(
        "[tasks]\ncreations_per_sec_per_identity = 0.5\ncreation_burst_per_identity = 4\n\
         {DRAIN}{}{}{}",
        token("flood", ""),
        token("other", ""),
        token("fast", "creations_per_sec = 1000.0\ncreation_burst = 50"),
    );
    let server = Server::start(&config);
    for _ in 0..4 {
        assert_eq!(create_as(&server, "flood").result()["resultType"], "task");
    }
    let wait = refused_by(&create_as(&server, "flood"), "task_rate");
    assert!((1..=2).contains(&wait), "one creation every 2 s: {wait}");
    assert_eq!(quota_refusals(&server, "task_rate"), 1);
    // Another identity has its own bucket; a token's own rate holds for it.
    assert_eq!(create_as(&server, "other").result()["resultType"], "task");
    for _ in 0..40 {
        assert_eq!(create_as(&server, "fast").result()["resultType"], "task");
    }
}

/// A bridged `generate_report` call (the client speaks no tasks) as `principal`: how long
/// it took, and whether it answered a task handle rather than the report.
fn bridged_call(server: &Server, principal: &str) -> (Duration, bool) {
    let started = std::time::Instant::now();
    let answer = server
        .request_with(
            "tools/call",
            json!({"name": "generate_report", "arguments": {"topic": principal, "sections": 4}}),
            json!({}),
            &[("Authorization", &bearer(principal))],
        )
        .result();
    let handle = answer["structuredContent"]["taskId"].is_string();
    if !handle {
        assert_eq!(answer["structuredContent"]["topic"], principal, "{answer}");
    }
    (started.elapsed(), handle)
}

#[test]
fn an_identity_at_its_waiting_calls_gets_handles_and_another_still_waits() {
    // flood may have one bridged call waiting for its task; other has the default.
    let config = format!(
        "[builtin]\nsets = [\"demo\"]\n{}{}",
        token("flood", "max_inline_waits = 1"),
        token("other", ""),
    );
    let server = Server::start(&config);
    let (flood, other) = std::thread::scope(|scope| {
        let flood: Vec<_> = (0..3)
            .map(|_| scope.spawn(|| bridged_call(&server, "flood")))
            .collect();
        let other = scope.spawn(|| bridged_call(&server, "other"));
        let flood: Vec<(Duration, bool)> = flood
            .into_iter()
            .map(|call| call.join().expect("flood's call"))
            .collect();
        (flood, other.join().expect("other's call"))
    });
    // One of flood's calls waited for its report (2.4 s); the others got their handles
    // at once, long before it.
    let waited: Vec<&(Duration, bool)> = flood.iter().filter(|(_, handle)| !handle).collect();
    assert_eq!(waited.len(), 1, "{flood:?}");
    for (took, _) in flood.iter().filter(|(_, handle)| *handle) {
        assert!(*took < waited[0].0, "{flood:?}");
    }
    // The other identity waited for its report, as if flood had not been there.
    assert!(!other.1, "other got a handle: {other:?}");
    assert_eq!(quota_refusals(&server, "inline_waits"), 2);
}

/// Listen streams: an identity opening stream after stream gets `429` beyond its share,
/// and another identity's stream still opens at once.
#[test]
fn an_identity_flooding_listen_streams_is_capped_and_another_still_listens_at_once() {
    let config = format!(
        "[builtin]\nsets = [\"demo\"]\n\
         [notifications]\nmax_subscriptions = 8\nmax_subscriptions_per_identity = 3\n{}",
        tokens()
    );
    let server = Server::start(&config);
    let filter = json!({"toolsListChanged": true});
    let flood_auth = bearer("flood");
    let flood: Vec<Listen> = (0..20)
        .map(|_| {
            Listen::open(
                &server,
                filter.clone(),
                json!({}),
                &[("Authorization", &flood_auth)],
            )
        })
        .collect();
    let statuses: Vec<u16> = flood.iter().map(|listen| listen.status).collect();
    assert_eq!(
        statuses.iter().filter(|status| **status == 200).count(),
        3,
        "{statuses:?}"
    );
    assert!(
        statuses.iter().all(|status| [200, 429].contains(status)),
        "{statuses:?}"
    );
    let other_auth = bearer("other");
    let started = std::time::Instant::now();
    let mut other = Listen::open(
        &server,
        filter,
        json!({}),
        &[("Authorization", &other_auth)],
    );
    assert_eq!(other.status, 200);
    assert!(
        other.next_message(Duration::from_secs(5)).is_some(),
        "other's stream is acknowledged"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "at once: {:?}",
        started.elapsed()
    );
}
