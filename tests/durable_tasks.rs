//! Durable tasks through the real binary: crashes, restarts, leases, fencing, races,
//! isolation between identities, expiry.

use std::time::{Duration, Instant};

use crate::common::tasks::{self, wait_terminal};
use crate::common::{self, poll_until, tasks_caps, Server};
use serde_json::json;

/// A config with `threads` workers and `lease_ms` leases, plus `extra` TOML.
fn config_with(threads: usize, lease_ms: u64, extra: &str) -> String {
    format!(
        "[builtin]\nsets = [\"conformance\", \"testing\"]\n\
         [workers]\nthreads = {threads}\nlease_ms = {lease_ms}\njanitor_interval_ms = 50\n\
         shutdown_grace_ms = 200\n{extra}"
    )
}

/// Waits until a worker runs the `slow_compute` task (it then says "computing").
fn wait_until_running(server: &Server, id: &str) {
    poll_until(Duration::from_secs(5), || {
        (tasks::get(server, id)["statusMessage"] == "computing").then_some(())
    })
    .expect("a worker claims the task");
}

fn config(extra: &str) -> String {
    config_with(2, 1000, extra)
}

#[test]
fn kill_9_with_tasks_queued_running_and_committing_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = config("");
    let mut ids = Vec::new();
    let mut server = Server::start_in(dir.path(), &config);
    for cycle in 0..3 {
        // Two workers and forty tasks: most are queued, two are running, and others are
        // committing their outcome when the kill lands.
        for i in 0..40 {
            let seconds = 0.05 * f64::from(i % 4);
            ids.push(tasks::create(
                &server,
                "slow_compute",
                json!({"seconds": seconds, "label": format!("c{cycle}-{i}")}),
                &[],
            ));
        }
        let first = ids[ids.len() - 40].clone();
        wait_terminal(&server, &first, Duration::from_secs(10));
        server.kill9();
        server = Server::start_in(dir.path(), &config);
    }
    for id in &ids {
        let task = wait_terminal(&server, id, Duration::from_secs(60));
        assert_eq!(task["status"], "completed", "{task}");
        assert!(task["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("done after"));
    }
}

#[test]
fn a_worker_whose_lease_expired_cannot_commit() {
    // stubborn_sleep ignores its 500 ms deadline and sleeps 1.5 s; its lease (300 ms)
    // stops being renewed at the deadline, the janitor reclaims the job, and the second
    // attempt does the same. Both late "successes" must be fenced off.
    let server = Server::start(&config_with(2, 300, ""));
    let id = tasks::create(&server, "stubborn_sleep", json!({"seconds": 1.5}), &[]);
    let task = wait_terminal(&server, &id, Duration::from_secs(15));
    assert_eq!(task["status"], "failed", "{task}");
    let message = task["error"]["message"].as_str().unwrap();
    assert!(message.contains("after 2 attempts"), "{message}");
    // Both stale attempts wake up within 1.5 s of their start: watch long enough for
    // their commits to have been tried, and see the terminal state hold.
    let watch_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < watch_until {
        assert_eq!(tasks::get(&server, &id)["status"], "failed");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn cancel_racing_completion_ends_in_exactly_one_terminal_state() {
    let server = Server::start(&config_with(8, 1000, ""));
    let ids: Vec<String> = (0..24)
        .map(|_| tasks::create(&server, "slow_compute", json!({"seconds": 0.1}), &[]))
        .collect();
    for (i, id) in ids.iter().enumerate() {
        if i % 3 == 1 {
            std::thread::sleep(Duration::from_millis(15));
        }
        let ack = tasks::cancel(&server, id, &[]);
        assert_eq!(ack.status, 200);
        assert_eq!(ack.result(), json!({"resultType": "complete"}));
    }
    for id in &ids {
        let first = wait_terminal(&server, id, Duration::from_secs(10));
        let status = first["status"].as_str().unwrap().to_owned();
        assert!(status == "completed" || status == "cancelled", "{first}");
        // Terminal means final: a later cancel is acknowledged and changes nothing.
        tasks::cancel(&server, id, &[]).result();
        let again = tasks::get(&server, id);
        assert_eq!(again["status"], status);
        assert_eq!(again["result"], first["result"]);
        assert_eq!(again["lastUpdatedAt"], first["lastUpdatedAt"]);
    }
}

#[test]
fn a_running_task_is_cancelled_within_a_second() {
    let server = Server::start(&config(""));
    let id = tasks::create(&server, "slow_compute", json!({"seconds": 60}), &[]);
    wait_until_running(&server, &id);
    let asked = Instant::now();
    tasks::cancel(&server, &id, &[]).result();
    let task = wait_terminal(&server, &id, Duration::from_secs(5));
    assert_eq!(task["status"], "cancelled");
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "took {:?}",
        asked.elapsed()
    );
}

/// A cancel that arrives while the dispatcher is claiming the job — after the claim's
/// commit, before the attempt started — still reaches the attempt: a long task cancelled
/// right after creation always ends `cancelled`, within a second of the cancel. (The
/// attempt used to be registered for cancellation only after the claim committed, and a
/// cancel landing in between was recorded but never signalled: the task ran to the end.)
#[test]
fn a_task_cancelled_right_after_creation_never_runs_to_the_end() {
    let server = Server::start(&config_with(8, 1000, ""));
    for _ in 0..40 {
        let id = tasks::create(&server, "slow_compute", json!({"seconds": 30}), &[]);
        let asked = Instant::now();
        tasks::cancel(&server, &id, &[]).result();
        let task = wait_terminal(&server, &id, Duration::from_secs(5));
        assert_eq!(task["status"], "cancelled", "{task}");
        assert!(
            asked.elapsed() < Duration::from_secs(1),
            "took {:?}",
            asked.elapsed()
        );
    }
}

const ALICE: &str = "alice-token";
const BOB: &str = "bob-token";

fn tenants() -> String {
    // Digests of "alice-token" and "bob-token".
    config(
        "[[auth.tokens]]\nprincipal = \"alice\"\ntenant = \"a\"\n\
         sha256 = \"9c220f200955d76c0a38d308225e0ef10c5f971acaf2f8d1d8f732affa5bd1dc\"\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntenant = \"b\"\n\
         sha256 = \"97dd3707015dcf069cf73022ed7173b1165db6eff24b441cb57fd069a8c4e525\"\n",
    )
}

#[test]
fn one_identity_cannot_read_cancel_update_or_detect_anothers_task() {
    let server = Server::start(&tenants());
    let bob = format!("Bearer {BOB}");
    let alice = format!("Bearer {ALICE}");
    let as_bob = [("Authorization", bob.as_str())];
    let as_alice = [("Authorization", alice.as_str())];
    let bobs = tasks::create(&server, "slow_compute", json!({"seconds": 2}), &as_bob);
    let random = uuid_like();
    for (method, params) in [
        ("tasks/get", json!({})),
        ("tasks/cancel", json!({})),
        (
            "tasks/update",
            json!({"inputResponses": {"k": {"action": "accept"}}}),
        ),
    ] {
        let ask = |id: &str| {
            let mut params = params.clone();
            params["taskId"] = json!(id);
            server.request_with(method, params, tasks_caps(), &as_alice)
        };
        let foreign = ask(&bobs);
        let unknown = ask(&random);
        assert_eq!(foreign.status, 400, "{method}");
        assert_eq!(foreign.status, unknown.status, "{method}");
        assert_eq!(
            foreign.body, unknown.body,
            "{method}: byte-for-byte identical"
        );
        foreign.expect_error(400, -32602);
    }
    // Bob's task went on untouched and is his to read.
    let task = common::poll_until(Duration::from_secs(10), || {
        let task = tasks::get_raw(&server, &bobs, &as_bob).result();
        tasks::is_terminal(&task).then_some(task)
    })
    .unwrap();
    assert_eq!(task["status"], "completed");
}

fn uuid_like() -> String {
    "0b6c1a9e-3f0d-4d5e-9a51-7c1f2e3d4b5a".into()
}

#[test]
fn an_expired_task_is_gone() {
    let server = Server::start(&config("[tasks]\nttl_ms = 600\n"));
    let id = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    let task = wait_terminal(&server, &id, Duration::from_secs(5));
    assert_eq!(task["ttlMs"], 600);
    let gone = poll_until(Duration::from_secs(5), || {
        let response = tasks::get_raw(&server, &id, &[]);
        (response.status == 400).then_some(response)
    })
    .expect("the task expires");
    let unknown = tasks::get_raw(&server, &uuid_like(), &[]);
    assert_eq!(gone.body, unknown.body);
}

/// The longest `ttl_ms` a configuration accepts keeps tasks (for 292 million years):
/// `created_at + ttl_ms` overflowed, so a debug build panicked while creating the task
/// and a release build stored an expiry in the past, which the janitor acted on at once.
#[test]
fn the_longest_ttl_keeps_tasks() {
    let server = Server::start(&config("[tasks]\nttl_ms = 9223372036854775807\n"));
    let id = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    let task = wait_terminal(&server, &id, Duration::from_secs(5));
    assert_eq!(task["status"], "completed");
    assert_eq!(task["ttlMs"], i64::MAX);
    // Still there after several janitor passes (one every 50 ms).
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(500) {
        assert_eq!(tasks::get(&server, &id)["status"], "completed");
    }
}

#[test]
fn a_panicking_tool_is_retried_then_fails_with_a_clear_message() {
    let server = Server::start(&config(""));
    let id = tasks::create(&server, "always_panics", json!({}), &[]);
    let task = wait_terminal(&server, &id, Duration::from_secs(10));
    assert_eq!(task["status"], "failed");
    assert_eq!(task["error"]["code"], -32603);
    let message = task["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("after 3 attempts") && message.contains("panicked"),
        "{message}"
    );
    assert!(task.get("result").is_none());
    assert!(
        task.get("statusMessage").is_none(),
        "no stale 'retrying': {task}"
    );
}

#[test]
fn a_result_breaking_the_output_schema_is_never_completed() {
    let server = Server::start(&config(""));
    let id = tasks::create(&server, "breaks_contract", json!({}), &[]);
    let task = wait_terminal(&server, &id, Duration::from_secs(5));
    assert_eq!(task["status"], "failed", "{task}");
    // A client without the Tasks extension gets the failure as a tool error.
    let bridged = server
        .call_tool("breaks_contract", json!({}), json!({}))
        .result();
    assert_eq!(bridged["isError"], true, "{bridged}");
}

#[test]
fn graceful_shutdown_releases_running_tasks_without_failing_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = config("");
    let mut server = Server::start_in(dir.path(), &config);
    let id = tasks::create(&server, "slow_compute", json!({"seconds": 2}), &[]);
    wait_until_running(&server, &id);
    assert!(
        server.terminate(Duration::from_secs(5)),
        "exits within its grace period"
    );
    let server = Server::start_in(dir.path(), &config);
    let task = tasks::get(&server, &id);
    assert_eq!(
        task["status"], "working",
        "not failed or cancelled by the shutdown: {task}"
    );
    let task = wait_terminal(&server, &id, Duration::from_secs(10));
    assert_eq!(task["status"], "completed");
}

#[test]
fn creation_is_durable_before_the_handle_is_returned() {
    let dir = tempfile::tempdir().unwrap();
    let config = config("");
    let mut server = Server::start_in(dir.path(), &config);
    let ids: Vec<String> = (0..20)
        .map(|_| tasks::create(&server, "slow_compute", json!({"seconds": 30}), &[]))
        .collect();
    server.kill9();
    let server = Server::start_in(dir.path(), &config);
    for id in &ids {
        let task = tasks::get(&server, id);
        assert_eq!(task["taskId"], id.as_str());
        assert_eq!(task["status"], "working");
    }
}

#[test]
fn start_up_recovery_reclaims_interrupted_attempts_while_serving_and_logs_it() {
    let dir = tempfile::tempdir().unwrap();
    // Minute-long leases: within the test only start-up recovery, not the janitor's
    // pass over expired leases, can reclaim the attempts the kill interrupts.
    let config = config_with(2, 60_000, "");
    let mut server = Server::start_in(dir.path(), &config);
    let ids: Vec<String> = (0..2)
        .map(|_| tasks::create(&server, "slow_compute", json!({"seconds": 30}), &[]))
        .collect();
    for id in &ids {
        wait_until_running(&server, id);
    }
    server.kill9();
    let info = std::ffi::OsStr::new("info");
    let server = Server::start_in_with_env(dir.path(), &config, &[("RUST_LOG", info)]);
    let done = poll_until(Duration::from_secs(10), || {
        server
            .log_lines()
            .into_iter()
            .find(|line| line.contains("start-up recovery: reclaimed"))
    })
    .expect("start-up recovery logs its end");
    assert!(
        done.contains("reclaimed 2 interrupted attempt(s) in ") && done.contains(" ms "),
        "{done}"
    );
    assert!(
        server
            .log_lines()
            .iter()
            .any(|line| line.contains("start-up recovery: 2 attempt(s) were running in the store")),
        "{:?}",
        server.log_lines()
    );
    // Reclaimed as a retry: the attempt counts, and a worker runs the task again.
    for id in &ids {
        let task = tasks::get(&server, id);
        assert_eq!(task["status"], "working", "{task}");
        let message = task["statusMessage"].as_str().unwrap_or_default();
        assert!(
            message == "Attempt 1 of 3 failed; retrying" || message == "computing",
            "{task}"
        );
    }
}

/// The `[[tools]]` entry of `big`, a task tool whose result is 1.5 MB: over the size a
/// `tasks/get` reads without room in the payload budget (1 MiB).
const BIG_RESULT_TOOL: &str = r#"
[[tools]]
name = "big"
description = "a 1.5 MB result"
task_policy = "required"
command = ["/bin/sh", "-c", "cat >/dev/null; printf '{\"result\": {\"content\": [{\"type\": \"text\", \"text\": \"'; head -c 1500000 /dev/zero | tr '\\0' a; printf '\"}]}}\\n'"]
"#;

#[test]
fn a_large_result_is_read_only_within_the_payload_budget_and_a_small_one_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let budget = |bytes: u64| {
        config(&format!(
            "[tasks]\nmax_payload_bytes_in_flight = {bytes}\n{BIG_RESULT_TOOL}"
        ))
    };
    let mut server = Server::start_in(dir.path(), &budget(4_000_000));
    let big = tasks::create(&server, "big", json!({}), &[]);
    let small = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    let done = wait_terminal(&server, &big, Duration::from_secs(20));
    assert_eq!(done["status"], "completed", "{}", done["statusMessage"]);
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(text.len(), 1_500_000, "the whole result, within the budget");
    assert_eq!(
        wait_terminal(&server, &small, Duration::from_secs(10))["status"],
        "completed"
    );
    assert!(server.terminate(Duration::from_secs(10)));

    // A budget smaller than the result: the same task answers a 503 to retry, and a
    // small task is served as before.
    let server = Server::start_in(dir.path(), &budget(1_200_000));
    let refused = tasks::get_raw(&server, &big, &[]);
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert!(
        refused.text().contains("large task payloads"),
        "{}",
        refused.text()
    );
    assert_eq!(tasks::get(&server, &small)["status"], "completed");
}
