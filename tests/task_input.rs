//! Tasks that ask for input: input rounds, tasks/update semantics, the capability check
//! at poll time, MRTR before creation, and idempotent submission.

use std::time::Duration;

use crate::common::tasks::{self, wait_for, wait_terminal};
use crate::common::{tasks_caps, Server};
use serde_json::{json, Value};

const CONFIG: &str = "[builtin]\nsets = [\"conformance\", \"testing\"]\n\
    [workers]\nthreads = 4\nlease_ms = 1000\njanitor_interval_ms = 50\n";

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

#[test]
fn an_input_round_survives_kill_9_before_and_after_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_in(dir.path(), CONFIG);
    let id = tasks::create(
        &server,
        "approval_then_work",
        json!({"work_seconds": 1.0}),
        &[],
    );
    let asking = wait_for(&server, &id, "input_required", Duration::from_secs(5));
    assert_eq!(
        asking["inputRequests"]["approval"]["method"],
        "elicitation/create"
    );

    // Crash between the question and the answer.
    server.kill9();
    server = Server::start_in(dir.path(), CONFIG);
    let asking_again = tasks::get(&server, &id);
    assert_eq!(asking_again["status"], "input_required");
    assert_eq!(asking_again["inputRequests"], asking["inputRequests"]);

    let ack = tasks::update(
        &server,
        &id,
        json!({"approval": accept(json!({"approved": true}))}),
        &[],
    );
    assert_eq!(ack.result(), json!({"resultType": "complete"}));
    // Crash while the resumed run works (it takes a second).
    wait_for(&server, &id, "working", Duration::from_secs(5));
    server.kill9();
    server = Server::start_in(dir.path(), CONFIG);
    let done = wait_terminal(&server, &id, Duration::from_secs(15));
    assert_eq!(done["status"], "completed", "{done}");
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("approved=true"), "{text}");
    assert!(
        text.contains("\"asked\":1"),
        "the tool got its own state back: {text}"
    );
}

#[test]
fn duplicate_stale_unknown_and_wrong_kind_responses_are_ignored() {
    let server = Server::start(CONFIG);
    let id = tasks::create(&server, "multi_input", json!({}), &[]);
    let asking = wait_for(&server, &id, "input_required", Duration::from_secs(5));
    let keys: Vec<String> = asking["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys, ["partial_1", "partial_2"]);

    // Unknown key and wrong kind (a roots answer to an elicitation): ignored.
    let ack = tasks::update(
        &server,
        &id,
        json!({"nope": accept(json!({})), "partial_1": {"roots": []}}),
        &[],
    );
    assert_eq!(ack.result(), json!({"resultType": "complete"}));
    let unchanged = tasks::get(&server, &id);
    assert_eq!(unchanged["inputRequests"], asking["inputRequests"]);

    // The first answer is taken; the next tasks/get already shows it gone.
    tasks::update(
        &server,
        &id,
        json!({"partial_1": accept(json!({"name": "first"}))}),
        &[],
    )
    .result();
    let partial = tasks::get(&server, &id);
    assert_eq!(partial["status"], "input_required");
    assert!(partial["inputRequests"].get("partial_1").is_none());
    assert!(partial["inputRequests"].get("partial_2").is_some());

    // A duplicate answer to an answered key is ignored: it cannot replace the first.
    tasks::update(
        &server,
        &id,
        json!({"partial_1": accept(json!({"name": "second"}))}),
        &[],
    )
    .result();
    tasks::update(
        &server,
        &id,
        json!({"partial_2": accept(json!({"name": "other"}))}),
        &[],
    )
    .result();
    let done = wait_terminal(&server, &id, Duration::from_secs(5));
    assert_eq!(
        done["result"]["content"][0]["text"],
        "Received first and other"
    );

    // After the round (and the task) ended, further answers change nothing.
    tasks::update(
        &server,
        &id,
        json!({"partial_2": accept(json!({"name": "late"}))}),
        &[],
    )
    .result();
    assert_eq!(tasks::get(&server, &id)["result"], done["result"]);
}

#[test]
fn concurrent_updates_for_one_key_accept_exactly_one() {
    let server = Server::start(CONFIG);
    let id = tasks::create(&server, "multi_input", json!({}), &[]);
    wait_for(&server, &id, "input_required", Duration::from_secs(5));
    std::thread::scope(|scope| {
        for n in 0..8 {
            let (server, id) = (&server, &id);
            scope.spawn(move || {
                let answer = json!({"partial_1": accept(json!({"name": format!("v{n}")}))});
                assert_eq!(
                    tasks::update(server, id, answer, &[]).result(),
                    json!({"resultType": "complete"})
                );
            });
        }
    });
    let partial = tasks::get(&server, &id);
    assert!(partial["inputRequests"].get("partial_1").is_none());
    tasks::update(
        &server,
        &id,
        json!({"partial_2": accept(json!({"name": "z"}))}),
        &[],
    )
    .result();
    let done = wait_terminal(&server, &id, Duration::from_secs(5));
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    let winners = (0..8)
        .filter(|n| text.contains(&format!("Received v{n} and")))
        .count();
    assert_eq!(winners, 1, "{text}");
}

#[test]
fn polling_without_the_needed_elicitation_modes_names_only_the_missing_ones() {
    let server = Server::start(CONFIG);
    let id = tasks::create(&server, "asks_url_and_form", json!({}), &[]);
    wait_for(&server, &id, "input_required", Duration::from_secs(5));
    let poll = |caps: Value| server.request("tasks/get", json!({"taskId": id}), caps);
    let tasks_only = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});

    let form_only = json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
    let error = poll(form_only).expect_error(400, -32021);
    assert_eq!(
        error["data"]["requiredCapabilities"],
        json!({"elicitation": {"url": {}}})
    );

    let error = poll(tasks_only.clone()).expect_error(400, -32021);
    assert_eq!(
        error["data"]["requiredCapabilities"],
        json!({"elicitation": {"url": {}, "form": {}}})
    );

    // Unknown tasks still get the neutral error first.
    let unknown = server.request("tasks/get", json!({"taskId": "no-such-task"}), tasks_only);
    unknown.expect_error(400, -32602);

    // Nothing changed: a capable poll sees every outstanding request.
    let both = json!({"elicitation": {"form": {}, "url": {}}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
    let task = poll(both).result();
    assert_eq!(task["status"], "input_required");
    let keys: Vec<&String> = task["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["visit", "fill"]);
}

#[test]
fn cancelling_a_task_waiting_for_input_takes_effect_at_once() {
    let server = Server::start(CONFIG);
    let id = tasks::create(&server, "confirm_delete", json!({"filename": "x"}), &[]);
    wait_for(&server, &id, "input_required", Duration::from_secs(5));
    tasks::cancel(&server, &id, &[]).result();
    let task = tasks::get(&server, &id);
    assert_eq!(task["status"], "cancelled");
    assert!(task.get("inputRequests").is_none());
}

#[test]
fn mrtr_before_creation_creates_the_task_only_once_it_has_the_answer() {
    let server = Server::start(CONFIG);
    let first = server
        .call_tool("test_tool_with_task", json!({}), tasks_caps())
        .result();
    assert_eq!(first["resultType"], "input_required");
    assert!(first.get("taskId").is_none());
    let retry = server
        .request(
            "tools/call",
            json!({"name": "test_tool_with_task", "arguments": {},
                   "inputResponses": {"user_name": accept(json!({"name": "Ada"}))}}),
            tasks_caps(),
        )
        .result();
    assert_eq!(retry["resultType"], "task");
    let id = retry["taskId"].as_str().unwrap();
    let done = wait_terminal(&server, id, Duration::from_secs(5));
    assert!(done["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("Ada"));
}

#[test]
fn a_retried_submission_with_the_same_idempotency_key_returns_the_same_task() {
    const KEYS: &str = "[[auth.tokens]]\nprincipal = \"alice\"\n\
        sha256 = \"9c220f200955d76c0a38d308225e0ef10c5f971acaf2f8d1d8f732affa5bd1dc\"\n\
        [[auth.tokens]]\nprincipal = \"bob\"\n\
        sha256 = \"97dd3707015dcf069cf73022ed7173b1165db6eff24b441cb57fd069a8c4e525\"\n";
    let server = Server::start(&format!("{CONFIG}{KEYS}"));
    let submit = |token: &str, key: &str| {
        let bearer = format!("Bearer {token}");
        let params = json!({"name": "slow_compute", "arguments": {"seconds": 1},
            "_meta": {"dev.mcp-taskd/idempotencyKey": key}});
        server
            .request_with(
                "tools/call",
                params,
                tasks_caps(),
                &[("Authorization", &bearer)],
            )
            .result()["taskId"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let first = submit("alice-token", "report-42");
    assert_eq!(
        submit("alice-token", "report-42"),
        first,
        "same identity, same key"
    );
    assert_ne!(submit("alice-token", "report-43"), first, "another key");
    assert_ne!(
        submit("bob-token", "report-42"),
        first,
        "another identity gets its own task"
    );
}

/// Tasks stored, whatever their status, as `/metrics` counts them.
fn stored_tasks(server: &Server) -> u64 {
    server
        .get("/metrics")
        .text()
        .lines()
        .filter(|line| line.starts_with("mcp_taskd_tasks{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn a_reused_idempotency_key_with_other_arguments_or_another_tool_is_refused_by_name() {
    let server = Server::start(CONFIG);
    let submit = |tool: &str, arguments: Value| {
        server.request(
            "tools/call",
            json!({"name": tool, "arguments": arguments,
                   "_meta": {"dev.mcp-taskd/idempotencyKey": "nightly-7"}}),
            tasks_caps(),
        )
    };
    let first = submit("slow_compute", json!({"seconds": 1, "label": "a"})).result();
    let id = first["taskId"].as_str().unwrap().to_owned();
    // The same arguments in another key order are the same arguments.
    let again = submit("slow_compute", json!({"label": "a", "seconds": 1})).result();
    assert_eq!(again["taskId"], id.as_str(), "same key, same arguments");
    assert_eq!(stored_tasks(&server), 1);

    let other_arguments =
        submit("slow_compute", json!({"seconds": 2, "label": "a"})).expect_error(400, -32602);
    assert_eq!(
        other_arguments["message"],
        "Invalid params: idempotency key \"nightly-7\" was already used with different arguments"
    );
    let other_tool = submit("failing_job", json!({})).expect_error(400, -32602);
    assert_eq!(
        other_tool["message"],
        "Invalid params: idempotency key \"nightly-7\" was already used for tool \"slow_compute\""
    );
    assert_eq!(stored_tasks(&server), 1, "neither refusal stored a task");

    // The original task is untouched, and still answers its key once it has ended.
    let done = wait_terminal(&server, &id, Duration::from_secs(5));
    assert_eq!(done["status"], "completed");
    let after = submit("slow_compute", json!({"seconds": 1, "label": "a"})).result();
    assert_eq!(after["taskId"], id.as_str());
}
