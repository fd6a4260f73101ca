//! The demo tools of the embedded default: a task with progress and one that asks for
//! input, as a first-time user meets them.

use std::time::Duration;

use crate::common::{poll_until, tasks_caps, Server};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(20);

fn get_task(server: &Server, task_id: &str) -> Value {
    server
        .request("tasks/get", json!({"taskId": task_id}), tasks_caps())
        .result()
}

fn wait_for(server: &Server, task_id: &str, status: &str) -> Value {
    poll_until(LIMIT, || {
        let task = get_task(server, task_id);
        (task["status"] == status).then_some(task)
    })
    .unwrap_or_else(|| panic!("not {status}: {}", get_task(server, task_id)))
}

fn start_task(server: &Server, tool: &str, arguments: Value) -> String {
    let result = server.call_tool(tool, arguments, tasks_caps()).result();
    assert_eq!(result["resultType"], "task", "{result}");
    result["taskId"].as_str().expect("taskId").to_owned()
}

#[test]
fn generate_report_reports_progress_and_returns_structured_content() {
    let server = Server::start("");
    let task = start_task(
        &server,
        "generate_report",
        json!({"topic": "uptime", "sections": 2}),
    );
    poll_until(LIMIT, || {
        let task = get_task(&server, &task);
        task["statusMessage"]
            .as_str()
            .is_some_and(|m| m.starts_with("Writing section"))
            .then_some(())
    })
    .expect("progress shows as the status message");
    let done = wait_for(&server, &task, "completed");
    assert_eq!(
        done["result"]["structuredContent"]["sections"],
        json!(["1. Background on uptime", "2. Findings on uptime"])
    );
    // Without the Tasks extension the same tool answers its result within the call.
    let inline = server
        .call_tool(
            "generate_report",
            json!({"topic": "x", "sections": 1}),
            json!({}),
        )
        .result();
    assert_eq!(inline["resultType"], "complete");
}

#[test]
fn generate_report_stops_when_cancelled() {
    let server = Server::start("");
    let task = start_task(
        &server,
        "generate_report",
        json!({"topic": "long", "sections": 10}),
    );
    poll_until(LIMIT, || {
        get_task(&server, &task)["statusMessage"]
            .as_str()
            .map(|_| ())
    })
    .expect("running");
    server
        .request("tasks/cancel", json!({"taskId": task}), tasks_caps())
        .result();
    wait_for(&server, &task, "cancelled");
}

#[test]
fn approve_deployment_asks_for_approval_then_deploys_or_stands_down() {
    let server = Server::start("");
    let arguments = json!({"service": "api", "version": "1.2.3"});
    for (answer, expected) in [
        (
            json!({"action": "accept", "content": {"approve": true}}),
            "Deployed api@1.2.3.",
        ),
        (
            json!({"action": "decline"}),
            "Deployment of api@1.2.3 was not approved; nothing changed.",
        ),
    ] {
        let task = start_task(&server, "approve_deployment", arguments.clone());
        let waiting = wait_for(&server, &task, "input_required");
        assert_eq!(
            waiting["inputRequests"]["approval"]["method"],
            "elicitation/create"
        );
        server
            .request(
                "tasks/update",
                json!({"taskId": task, "inputResponses": {"approval": answer}}),
                tasks_caps(),
            )
            .result();
        let done = wait_for(&server, &task, "completed");
        assert_eq!(done["result"]["content"][0]["text"], expected);
    }
    // A client without the Tasks extension (the bridge): the task waits for a person,
    // and the answer says so without offering the model a way to answer it.
    let waiting = server
        .call_tool("approve_deployment", arguments, json!({"elicitation": {}}))
        .result();
    assert_eq!(
        waiting["structuredContent"]["status"], "input_required",
        "{waiting}"
    );
    let text = waiting["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("Deploy api@1.2.3 to production?"),
        "{waiting}"
    );
    assert!(text.contains("Only a person can answer"), "{waiting}");
    assert!(!text.contains("task_answer"), "{waiting}");
}
