//! Retention by outcome (issue 48): a finished task past its TTL is gone for its client,
//! while the operator's history keeps a summary of it for `[history]`'s time for its
//! outcome (`tasks show`, `tasks list`), across a restart, without its arguments unless
//! configured; then the summary goes too.

use std::time::Duration;

use serde_json::json;

use crate::bulk_actions::{cli, listed, ok, show};
use crate::common::tasks::{self, wait_terminal};
use crate::common::{poll_until, Server};

const LIMIT: Duration = Duration::from_secs(30);

/// Tasks live 300 ms; the janitor runs every 100 ms.
fn config(history: &str) -> String {
    format!(
        "[builtin]\nsets = [\"conformance\"]\n[tasks]\nttl_ms = 300\n\
         [workers]\njanitor_interval_ms = 100\n[history]\n{history}"
    )
}

/// Waits until `id` is known only by its history summary.
fn wait_for_summary(dir: &std::path::Path, id: &str) -> serde_json::Value {
    poll_until(LIMIT, || {
        let shown = cli(dir, &["tasks", "show", id, "--json", "--payload"]);
        let task: serde_json::Value = serde_json::from_slice(&shown.stdout).ok()?;
        (task["history"] == true).then_some(task)
    })
    .expect("the task leaves its summary")
}

#[test]
fn a_failed_task_outlives_its_ttl_in_the_history_for_its_time_then_goes() {
    let config = config("failed = \"6s\"\ncompleted = \"0\"\n");
    let mut server = Server::start(&config);
    let dir = server.dir.clone();
    // The task ends after this: its summary may not go before this plus 6 s.
    let before = now_ms();
    let failed = tasks::create(&server, "protocol_error_job", json!({}), &[]);
    let ended = wait_terminal(&server, &failed, LIMIT);
    assert_eq!(ended["status"], "failed");
    let completed = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    wait_terminal(&server, &completed, LIMIT);

    let summary = wait_for_summary(&dir, &failed);
    // The client's view is bounded by the TTL: the task is unknown to it.
    let gone = tasks::get_raw(&server, &failed, &[]);
    assert_eq!(gone.status, 400, "{}", gone.text());
    assert_eq!(summary["status"], "failed");
    assert_eq!(summary["tool"], "protocol_error_job");
    assert_eq!(summary["attemptCount"], 1);
    assert!(
        summary["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("protocol level")),
        "{summary}"
    );
    assert_eq!(summary["argumentsKept"], false);
    assert!(
        summary["arguments"].is_null(),
        "no arguments unless configured"
    );
    assert!(summary.get("result").is_none());
    // A completed task keeps no summary here ("0").
    poll_until(LIMIT, || {
        (!cli(&dir, &["tasks", "show", &completed]).status.success()).then_some(())
    })
    .expect("the completed task goes whole");
    // Listed, marked; not with --no-history.
    let rows = listed(&dir, &[]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0]["id"].as_str(), &rows[0]["history"]),
        (Some(failed.as_str()), &json!(true))
    );
    assert!(listed(&dir, &["--no-history"]).is_empty());
    assert_eq!(
        listed(&dir, &["--status", "failed", "--since", "1h"]).len(),
        1
    );
    assert!(listed(&dir, &["--status", "working"]).is_empty());
    assert!(ok(&dir, &["tasks", "list"]).contains("failed (history)"));
    assert!(ok(&dir, &["tasks", "show", &failed]).contains("summary kept"));
    // Its arguments are gone: it cannot be re-run.
    let rerun = cli(&dir, &["tasks", "rerun", &failed]);
    assert!(!rerun.status.success());
    assert!(String::from_utf8_lossy(&rerun.stderr).contains("keep_arguments"));

    // Across a restart.
    assert!(server.terminate(LIMIT), "the server stops");
    let server = Server::start_in(&dir, &config);
    let again = show(&dir, &failed);
    assert_eq!(again["history"], true);
    // Then it goes, not before its end plus 6 s.
    poll_until(Duration::from_secs(20), || {
        (!cli(&dir, &["tasks", "show", &failed]).status.success()).then_some(())
    })
    .expect("the summary is pruned past its time");
    let pruned_at = now_ms();
    assert!(
        pruned_at >= before + 6_000,
        "pruned {} ms after the task was created",
        pruned_at - before
    );
    drop(server);
}

#[test]
fn arguments_are_kept_when_configured_and_a_summary_can_be_re_run() {
    let config = config("completed = \"1h\"\nkeep_arguments = true\n");
    let server = Server::start(&config);
    let dir = server.dir.clone();
    let done = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    wait_terminal(&server, &done, LIMIT);
    let summary = wait_for_summary(&dir, &done);
    assert_eq!(summary["arguments"], json!({"seconds": 0}));
    assert_eq!(summary["argumentsKept"], true);
    // A summary without --payload shows no arguments.
    assert!(show(&dir, &done).get("arguments").is_none());
    // Re-run from the summary, and by filter (the summary matches it).
    let again = ok(&dir, &["tasks", "rerun", &done]).trim().to_owned();
    let copy = show(&dir, &again);
    assert_eq!(copy["rerunOf"], done.as_str());
    assert_eq!(wait_terminal(&server, &again, LIMIT)["status"], "completed");
    let bulk = ok(
        &dir,
        &[
            "tasks",
            "rerun",
            "--tool",
            "slow_compute",
            "--yes",
            "--json",
        ],
    );
    let bulk: serde_json::Value = serde_json::from_str(bulk.lines().last().unwrap()).unwrap();
    assert!(bulk["matched"].as_u64().is_some_and(|n| n >= 1), "{bulk}");
    assert_eq!(bulk["counts"]["rerun"], bulk["matched"], "{bulk}");
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// `[history]` is reloadable: the janitor reads it at each round.
#[test]
fn a_reload_changes_what_the_history_keeps_from_then_on() {
    let server = Server::start(&config("completed = \"0\"\n"));
    let dir = server.dir.clone();
    let before = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    wait_terminal(&server, &before, LIMIT);
    poll_until(LIMIT, || {
        (!cli(&dir, &["tasks", "show", &before]).status.success()).then_some(())
    })
    .expect("no summary is kept of a completed task");
    server.rewrite_config(&config("completed = \"1h\"\n"));
    let reloaded = ok(&dir, &["reload"]);
    assert!(reloaded.contains("reloaded"), "{reloaded}");
    let after = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    wait_terminal(&server, &after, LIMIT);
    assert_eq!(wait_for_summary(&dir, &after)["status"], "completed");
    assert!(!cli(&dir, &["tasks", "show", &before]).status.success());
}
