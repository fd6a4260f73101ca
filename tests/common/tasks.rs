//! Task helpers over the harness, for a client declaring the Tasks extension.

use super::{poll_until, tasks_caps, HttpResponse, Server};
use serde_json::{json, Value};
use std::time::Duration;

/// `tools/call` that must create a task; returns its id.
pub fn create(server: &Server, tool: &str, arguments: Value, headers: &[(&str, &str)]) -> String {
    let response = server.request_with(
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
        tasks_caps(),
        headers,
    );
    let result = response.result();
    assert_eq!(result["resultType"], "task", "expected a task: {result}");
    result["taskId"].as_str().expect("taskId").to_owned()
}

pub fn get_raw(server: &Server, task_id: &str, headers: &[(&str, &str)]) -> HttpResponse {
    server.request_with(
        "tasks/get",
        json!({"taskId": task_id}),
        tasks_caps(),
        headers,
    )
}

pub fn get(server: &Server, task_id: &str) -> Value {
    get_raw(server, task_id, &[]).result()
}

pub fn cancel(server: &Server, task_id: &str, headers: &[(&str, &str)]) -> HttpResponse {
    server.request_with(
        "tasks/cancel",
        json!({"taskId": task_id}),
        tasks_caps(),
        headers,
    )
}

pub fn update(
    server: &Server,
    task_id: &str,
    responses: Value,
    headers: &[(&str, &str)],
) -> HttpResponse {
    server.request_with(
        "tasks/update",
        json!({"taskId": task_id, "inputResponses": responses}),
        tasks_caps(),
        headers,
    )
}

pub fn is_terminal(task: &Value) -> bool {
    matches!(
        task["status"].as_str(),
        Some("completed" | "failed" | "cancelled")
    )
}

/// Polls until the task reaches `status` (or any terminal status); returns it.
pub fn wait_for(server: &Server, task_id: &str, status: &str, limit: Duration) -> Value {
    poll_until(limit, || {
        let task = get(server, task_id);
        (task["status"] == status || is_terminal(&task)).then_some(task)
    })
    .unwrap_or_else(|| panic!("task {task_id} did not reach {status} in {limit:?}"))
}

pub fn wait_terminal(server: &Server, task_id: &str, limit: Duration) -> Value {
    poll_until(limit, || {
        let task = get(server, task_id);
        is_terminal(&task).then_some(task)
    })
    .unwrap_or_else(|| panic!("task {task_id} did not end in {limit:?}"))
}
