//! The dashboard's API for issue 48: pausing and resuming a tool, cancelling and
//! re-running every task of a filtered list (counted first, then batch by batch), the
//! link of a rerun, and the history summaries of tasks past their TTL; admin-only and
//! CSRF-protected like every dashboard action.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::tasks;
use crate::common::{poll_until, HttpResponse, Server};
use crate::dashboard::{admin_get, get, login, origin, ADMIN, ALICE, CONFIG};

const LIMIT: Duration = Duration::from_secs(30);

/// A server on [`CONFIG`] that logs at info (the dashboard's actions are logged so).
fn logging_server(dir: &std::path::Path) -> Server {
    Server::start_in_with_env(dir, CONFIG, &[("RUST_LOG", std::ffi::OsStr::new("info"))])
}

/// A POST to the dashboard's API with `body`, as an admin script (bearer token).
fn admin_post(server: &Server, path: &str, body: &Value) -> HttpResponse {
    server.post_raw(
        path,
        &[
            ("Authorization", ADMIN),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

/// Waits until the dashboard shows task `id` in `status`.
fn wait_status(server: &Server, id: &str, status: &str) -> Value {
    poll_until(LIMIT, || {
        let detail = admin_get(server, &format!("/dashboard/api/tasks/{id}"));
        (detail["status"] == status).then_some(detail)
    })
    .unwrap_or_else(|| panic!("task {id} is not {status} within {LIMIT:?}"))
}

fn tool<'v>(tools: &'v Value, name: &str) -> &'v Value {
    tools["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|tool| tool["name"] == name))
        .unwrap_or_else(|| panic!("{name} is not listed: {tools}"))
}

#[test]
fn a_tool_is_paused_and_resumed_from_the_dashboard_by_admins_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = logging_server(dir.path());
    let tools = admin_get(&server, "/dashboard/api/tools");
    assert_eq!(tool(&tools, "slow_compute")["paused"], false, "{tools}");
    assert_eq!(
        get(&server, "/dashboard/api/tools", &[("Authorization", ALICE)]).status,
        403
    );

    // From a browser session: the CSRF token and an Origin, as for every action.
    let cookie = login(&server, "admin-token").expect("an admin logs in");
    let csrf = get(&server, "/dashboard/api/session", &[("Cookie", &cookie)]).json()["csrf"]
        .as_str()
        .expect("csrf")
        .to_owned();
    let ours = origin(&server);
    let pause = "/dashboard/api/tools/slow_compute/pause";
    let body = json!({"reason": "upstream maintenance"}).to_string();
    let forged = server.post_raw(
        pause,
        &[("Cookie", &cookie), ("Origin", &ours)],
        body.as_bytes(),
    );
    assert_eq!(forged.status, 403, "no CSRF token: {}", forged.text());
    assert_eq!(
        tool(&admin_get(&server, "/dashboard/api/tools"), "slow_compute")["paused"],
        false
    );
    let paused = server.post_raw(
        pause,
        &[
            ("Cookie", &cookie),
            ("Origin", &ours),
            ("X-CSRF-Token", &csrf),
            ("Content-Type", "application/json"),
        ],
        body.as_bytes(),
    );
    assert_eq!(paused.status, 200, "{}", paused.text());
    let listed = admin_get(&server, "/dashboard/api/tools");
    let shown = tool(&listed, "slow_compute");
    assert_eq!(shown["paused"], true, "{listed}");
    assert_eq!(shown["pauseReason"], "upstream maintenance");

    // A task of the paused tool waits, and says why.
    let task = tasks::create(
        &server,
        "slow_compute",
        json!({"seconds": 0}),
        &[("Authorization", ALICE)],
    );
    let waiting = poll_until(LIMIT, || {
        let detail = tasks::get_raw(&server, &task, &[("Authorization", ALICE)]).result();
        detail["statusMessage"]
            .as_str()
            .is_some_and(|message| message.contains("upstream maintenance"))
            .then_some(detail)
    })
    .expect("the queued task says the tool is paused");
    assert_eq!(waiting["status"], "working");

    // Unknown tools and bad bodies are refused; a non-admin token cannot pause.
    let unknown = admin_post(
        &server,
        "/dashboard/api/tools/no_such_tool/pause",
        &json!({}),
    );
    assert_eq!(unknown.status, 400, "{}", unknown.text());
    let garbage = server.post_raw(pause, &[("Authorization", ADMIN)], b"not json");
    assert_eq!(garbage.status, 400);
    let alice = server.post_raw(
        "/dashboard/api/tools/slow_compute/resume",
        &[("Authorization", ALICE)],
        b"{}",
    );
    assert_eq!(alice.status, 403);

    let resumed = admin_post(
        &server,
        "/dashboard/api/tools/slow_compute/resume",
        &json!({}),
    );
    assert_eq!(resumed.status, 200, "{}", resumed.text());
    assert_eq!(
        tool(&admin_get(&server, "/dashboard/api/tools"), "slow_compute")["paused"],
        false
    );
    let again = admin_post(
        &server,
        "/dashboard/api/tools/slow_compute/resume",
        &json!({}),
    );
    assert_eq!(again.status, 400, "not paused: {}", again.text());
    wait_status(&server, &task, "completed");
    let logged = server.log_lines();
    assert!(logged
        .iter()
        .any(|line| line.contains("dashboard: paused tool slow_compute")));
    assert!(
        !logged
            .iter()
            .any(|line| line.contains("upstream maintenance")),
        "the reason is not logged"
    );
}

/// Five of alice's long tasks among seven: the count for a cancel of `principal=alice`
/// is five, the action needs that count's bound, and then cancels those five; a rerun
/// of the cancelled ones links each new task to its original.
#[test]
fn a_filtered_list_is_cancelled_and_re_run_in_counted_batches() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = logging_server(dir.path());
    let admin = [("Authorization", ADMIN)];
    let theirs: Vec<String> = (0..2)
        .map(|_| tasks::create(&server, "slow_compute", json!({"seconds": 60}), &admin))
        .collect();
    let alices: Vec<String> = (0..5)
        .map(|_| {
            tasks::create(
                &server,
                "slow_compute",
                json!({"seconds": 60}),
                &[("Authorization", ALICE)],
            )
        })
        .collect();

    let counted = admin_get(
        &server,
        "/dashboard/api/tasks/count?action=cancel&principal=alice",
    );
    assert_eq!(counted["count"], 5, "{counted}");
    assert_eq!(counted["atLeast"], false);
    let through = counted["through"].as_str().expect("through").to_owned();
    assert_eq!(Some(&through), alices.iter().max(), "the newest match");
    // No filter, no count; no count's bound, no action.
    let unfiltered = get(&server, "/dashboard/api/tasks/count?action=cancel", &admin);
    assert_eq!(unfiltered.status, 400);
    let unbounded = admin_post(
        &server,
        "/dashboard/api/tasks/bulk",
        &json!({"action": "cancel", "principal": "alice"}),
    );
    assert_eq!(unbounded.status, 400, "{}", unbounded.text());
    let nothing = admin_post(
        &server,
        "/dashboard/api/tasks/bulk",
        &json!({"action": "cancel", "through": through}),
    );
    assert_eq!(
        nothing.status,
        400,
        "a filter is needed: {}",
        nothing.text()
    );
    for id in &alices {
        assert_eq!(
            admin_get(&server, &format!("/dashboard/api/tasks/{id}"))["status"],
            "working"
        );
    }

    let batch = admin_post(
        &server,
        "/dashboard/api/tasks/bulk",
        &json!({"action": "cancel", "principal": "alice", "through": through}),
    );
    assert_eq!(batch.status, 200, "{}", batch.text());
    let batch = batch.json();
    assert_eq!(batch["tasks"].as_array().map(Vec::len), Some(5), "{batch}");
    assert_eq!(batch["next"], Value::Null, "one batch holds them all");
    for id in &alices {
        wait_status(&server, id, "cancelled");
    }
    for id in &theirs {
        assert_eq!(
            admin_get(&server, &format!("/dashboard/api/tasks/{id}"))["status"],
            "working"
        );
    }

    // Re-run the cancelled ones: the count includes them, and each new task links back.
    let counted = admin_get(
        &server,
        "/dashboard/api/tasks/count?action=rerun&principal=alice&status=cancelled",
    );
    assert_eq!(counted["count"], 5, "{counted}");
    let rerun = admin_post(
        &server,
        "/dashboard/api/tasks/bulk",
        &json!({"action": "rerun", "principal": "alice", "status": "cancelled",
                "through": counted["through"]}),
    );
    assert_eq!(rerun.status, 200, "{}", rerun.text());
    let rerun = rerun.json();
    let first = &rerun["tasks"][0];
    assert_eq!(first["outcome"], "rerun", "{rerun}");
    let new = first["newId"].as_str().expect("newId");
    let copy = admin_get(&server, &format!("/dashboard/api/tasks/{new}"));
    assert_eq!(copy["rerunOf"], first["id"], "{copy}");
    assert_eq!(copy["principal"], "alice");
    let listed = admin_get(&server, "/dashboard/api/tasks?principal=alice&limit=200");
    let linked = listed["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter(|row| !row["rerunOf"].is_null())
        .count();
    assert_eq!(linked, 5, "{listed}");
    assert!(server
        .log_lines()
        .iter()
        .any(|line| line.contains("dashboard: bulk cancel of 5 task(s)")));
}

/// Past its TTL, a failed task is listed and shown by its history summary, marked.
#[test]
fn history_rows_show_for_finished_tasks_past_their_ttl() {
    let config = CONFIG.replace(
        "shutdown_grace_ms = 200\n",
        "shutdown_grace_ms = 200\njanitor_interval_ms = 100\n[tasks]\nttl_ms = 300\n",
    );
    let server = Server::start(&config);
    let failed = tasks::create(
        &server,
        "protocol_error_job",
        json!({}),
        &[("Authorization", ALICE)],
    );
    let summary = poll_until(LIMIT, || {
        let detail = get(
            &server,
            &format!("/dashboard/api/tasks/{failed}"),
            &[("Authorization", ADMIN)],
        );
        (detail.status == 200 && detail.json()["history"] == true).then(|| detail.json())
    })
    .expect("the task leaves its history summary");
    assert_eq!(summary["status"], "failed", "{summary}");
    assert_eq!(summary["attemptCount"], 1);
    assert_eq!(summary["argumentsKept"], false);
    assert!(summary["keptUntil"].is_string() && summary["removedAt"].is_string());
    let listed = admin_get(&server, "/dashboard/api/tasks?status=failed");
    let rows = listed["tasks"].as_array().expect("tasks");
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(rows[0]["history"], true);
    // Its output went with the task; a rerun needs the arguments it no longer has.
    let output = get(
        &server,
        &format!("/dashboard/api/tasks/{failed}/output"),
        &[("Authorization", ADMIN)],
    );
    assert_eq!(output.status, 404);
    let rerun = admin_post(
        &server,
        &format!("/dashboard/api/tasks/{failed}/rerun"),
        &json!({}),
    );
    assert_ne!(rerun.status, 200, "{}", rerun.text());
    // Not for anyone else.
    let theirs = get(
        &server,
        &format!("/dashboard/api/tasks/{failed}"),
        &[("Authorization", ALICE)],
    );
    assert_eq!(theirs.status, 403);
}
