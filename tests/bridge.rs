//! The task bridge: task tools for clients that do not declare the Tasks extension,
//! answered with ordinary `CallToolResult`s (the result, or a handle that the
//! `task_status` / `task_wait` / `task_cancel` tools serve), in both eras.

use std::path::Path;
use std::time::Duration;

use crate::common::{poll_until, tasks_caps, HttpResponse, Server};
use serde_json::{json, Value};

/// Digests of "alice-token" and "bob-token".
const TENANTS: &str = "[[auth.tokens]]\nprincipal = \"alice\"\ntenant = \"a\"\n\
    sha256 = \"9c220f200955d76c0a38d308225e0ef10c5f971acaf2f8d1d8f732affa5bd1dc\"\n\
    [[auth.tokens]]\nprincipal = \"bob\"\ntenant = \"b\"\n\
    sha256 = \"97dd3707015dcf069cf73022ed7173b1165db6eff24b441cb57fd069a8c4e525\"\n";

/// `report` (optional) and `report_required` (required): tests/scripts/report.py, which
/// takes `sections` × `pace` seconds, with an output schema; a 300 ms inline wait.
fn config(extra: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/report.py");
    let tool = |name: &str, policy: &str| {
        format!(
            "[[tools]]\nname = \"{name}\"\ndescription = \"Writes a report\"\n\
             command = [\"python3\", \"{script}\"]\ntask_policy = \"{policy}\"\n\
             input_schema = '{{\"type\":\"object\",\"properties\":{{\"topic\":{{\"type\":\"string\"}},\
             \"sections\":{{\"type\":\"integer\"}},\"pace\":{{\"type\":\"number\"}}}},\"required\":[\"topic\"]}}'\n\
             output_schema = '{{\"type\":\"object\",\"properties\":{{\"topic\":{{\"type\":\"string\"}},\
             \"sections\":{{\"type\":\"array\",\"items\":{{\"type\":\"string\"}}}}}},\
             \"required\":[\"topic\",\"sections\"]}}'\n",
            script = script.display()
        )
    };
    format!(
        "[builtin]\nsets = []\n\n{extra}\n[tasks]\ninline_wait_ms = 300\n\n{}\n{}",
        tool("report", "optional"),
        tool("report_required", "required"),
    )
}

fn call(server: &Server, name: &str, arguments: Value, headers: &[(&str, &str)]) -> Value {
    server
        .request_with(
            "tools/call",
            json!({"name": name, "arguments": arguments}),
            json!({}),
            headers,
        )
        .result()
}

fn listed(server: &Server, capabilities: Value) -> Vec<Value> {
    let tools = server
        .request("tools/list", json!({}), capabilities)
        .result();
    tools["tools"].as_array().expect("tools").clone()
}

fn named<'a>(tools: &'a [Value], name: &str) -> Option<&'a Value> {
    tools.iter().find(|tool| tool["name"] == name)
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// `task_wait` until the task's result (or anything but a handle) comes back.
fn wait_result(server: &Server, task_id: &str, headers: &[(&str, &str)]) -> Value {
    poll_until(Duration::from_secs(30), || {
        let answer = call(
            server,
            "task_wait",
            json!({"taskId": task_id, "seconds": 5}),
            headers,
        );
        (answer["structuredContent"]["taskId"] != task_id).then_some(answer)
    })
    .expect("task_wait brought the result")
}

#[test]
fn a_call_longer_than_the_inline_wait_gets_a_handle_then_its_result_through_task_wait() {
    let server = Server::start(&config(""));
    let tools = listed(&server, json!({}));
    for name in ["task_status", "task_wait", "task_cancel"] {
        let tool = named(&tools, name).unwrap_or_else(|| panic!("{name} listed: {tools:?}"));
        assert!(tool["description"].as_str().is_some_and(|d| d.len() > 40));
    }
    let schema = named(&tools, "report").expect("report")["outputSchema"].clone();
    assert_eq!(schema["type"], "object", "{schema}");
    let validator = jsonschema::validator_for(&schema).expect("the listed schema compiles");

    // About 2 s of work against a 300 ms wait.
    let arguments = json!({"topic": "churn", "sections": 4, "pace": 0.5});
    let handle = call(&server, "report", arguments, &[]);
    assert_ne!(handle["isError"], true, "{handle}");
    assert!(
        handle.get("resultType").is_some(),
        "a 2026 result: {handle}"
    );
    let task_id = handle["structuredContent"]["taskId"]
        .as_str()
        .expect("a task id in the handle")
        .to_owned();
    assert_eq!(handle["structuredContent"]["status"], "working");
    assert!(handle["structuredContent"]["statusMessage"].is_string());
    assert!(handle["structuredContent"]["pollAfterMs"].is_u64());
    assert!(
        text(&handle).contains(&task_id) && text(&handle).contains("task_wait"),
        "the text names the task and the next tool: {handle}"
    );
    assert!(validator.is_valid(&handle["structuredContent"]), "{handle}");

    let done = wait_result(&server, &task_id, &[]);
    assert_ne!(done["isError"], true, "{done}");
    assert_eq!(done["structuredContent"]["topic"], "churn", "{done}");
    assert_eq!(
        done["structuredContent"]["sections"]
            .as_array()
            .map(Vec::len),
        Some(4)
    );
    assert!(validator.is_valid(&done["structuredContent"]), "{done}");
    // task_status answers the same once the task is done, and the task is durable: a
    // declaring client reads it with tasks/get.
    let status = call(&server, "task_status", json!({"taskId": task_id}), &[]);
    assert_eq!(status["structuredContent"], done["structuredContent"]);
    let task = server
        .request("tasks/get", json!({"taskId": task_id}), tasks_caps())
        .result();
    assert_eq!(task["status"], "completed", "{task}");

    // A "required" tool is no longer refused: it answers the same way.
    let required = call(
        &server,
        "report_required",
        json!({"topic": "x", "pace": 2}),
        &[],
    );
    let required_id = required["structuredContent"]["taskId"]
        .as_str()
        .expect("handle");
    let done = wait_result(&server, required_id, &[]);
    assert_eq!(done["structuredContent"]["topic"], "x", "{done}");
}

#[test]
fn a_task_done_within_the_wait_answers_its_own_result_and_streams_progress() {
    let server =
        Server::start(&config("").replace("inline_wait_ms = 300", "inline_wait_ms = 20000"));
    let response = server.request(
        "tools/call",
        json!({"name": "report", "arguments": {"topic": "q3", "sections": 3, "pace": 0.4},
               "_meta": {"progressToken": "p1"}}),
        json!({}),
    );
    let result = response.result();
    assert_ne!(result["isError"], true, "{result}");
    assert_eq!(result["structuredContent"]["topic"], "q3", "{result}");
    assert_eq!(text(&result), "Report: q3");
    let progress: Vec<Value> = response
        .sse_messages()
        .into_iter()
        .filter(|message| message["method"] == "notifications/progress")
        .collect();
    assert!(
        !progress.is_empty(),
        "progress while waiting: {}",
        response.text()
    );
    assert!(progress
        .iter()
        .all(|p| p["params"]["progressToken"] == "p1"));
    assert!(progress[0]["params"]["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("Writing section")));
}

#[test]
fn unknown_and_foreign_task_ids_get_the_same_answer_from_every_task_tool() {
    let server = Server::start(&config(TENANTS));
    let alice = [("Authorization", "Bearer alice-token")];
    let bob = [("Authorization", "Bearer bob-token")];
    let handle = call(
        &server,
        "report",
        json!({"topic": "a", "sections": 20}),
        &alice,
    );
    let alices = handle["structuredContent"]["taskId"]
        .as_str()
        .expect("handle");
    let unknown = "0".repeat(alices.len());
    for tool in ["task_status", "task_wait", "task_cancel"] {
        let arguments = |id: &str| json!({"taskId": id, "seconds": 0});
        let foreign = call(&server, tool, arguments(alices), &bob);
        let missing = call(&server, tool, arguments(&unknown), &bob);
        assert_eq!(foreign["isError"], true, "{tool}: {foreign}");
        assert_eq!(
            foreign.to_string().replace(alices, "ID"),
            missing.to_string().replace(&unknown, "ID"),
            "{tool}"
        );
    }
    // Bob's cancel reached nothing: Alice's task still runs.
    let status = call(&server, "task_status", json!({"taskId": alices}), &alice);
    assert_eq!(status["structuredContent"]["status"], "working", "{status}");
    let cancelled = call(&server, "task_cancel", json!({"taskId": alices}), &alice);
    assert_eq!(
        cancelled["structuredContent"]["status"], "cancelled",
        "{cancelled}"
    );
    let status = call(&server, "task_status", json!({"taskId": alices}), &alice);
    assert_eq!(status["isError"], true, "{status}");
    assert!(text(&status).contains("cancelled"), "{status}");
}

#[test]
fn declaring_clients_see_no_task_tools_and_get_create_task_results_as_before() {
    let server = Server::start(&config(""));
    let tools = listed(&server, tasks_caps());
    assert!(named(&tools, "task_wait").is_none(), "{tools:?}");
    let schema = &named(&tools, "report").expect("report")["outputSchema"];
    assert!(
        schema.get("anyOf").is_none(),
        "the tool's own schema: {schema}"
    );
    let created = server
        .call_tool("report", json!({"topic": "t", "pace": 0.1}), tasks_caps())
        .result();
    assert_eq!(created["resultType"], "task", "{created}");
    server
        .call_tool(
            "task_status",
            json!({"taskId": created["taskId"]}),
            tasks_caps(),
        )
        .expect_error(400, -32602);
}

#[test]
fn with_the_bridge_off_the_extension_is_strict_again() {
    let server = Server::start(&config("").replace("[tasks]\n", "[tasks]\nbridge = false\n"));
    let tools = listed(&server, json!({}));
    assert!(named(&tools, "task_status").is_none(), "{tools:?}");
    assert!(named(&tools, "report").expect("report")["outputSchema"]
        .get("anyOf")
        .is_none());
    server
        .call_tool("report_required", json!({"topic": "t"}), json!({}))
        .expect_error(400, -32021);
    // An optional tool runs inline for this client, as before the bridge.
    let inline = server
        .call_tool("report", json!({"topic": "t", "pace": 0.1}), json!({}))
        .result();
    assert_eq!(inline["structuredContent"]["topic"], "t", "{inline}");
}

#[test]
fn bad_inline_waits_are_refused_with_the_key_named() {
    for (extra, key) in [
        ("[tasks]\ninline_wait_ms = 999999\n", "tasks.inline_wait_ms"),
        (
            "[[tools]]\nname = \"t\"\ndescription = \"d\"\ncommand = [\"true\"]\n\
             task_policy = \"inline\"\ninline_wait_ms = 10\n",
            "inline_wait_ms",
        ),
    ] {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, extra).expect("write config");
        let output = crate::common::binary()
            .args(["serve", "--config"])
            .arg(&path)
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .output()
            .expect("run mcp-taskd");
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(key), "{key}: {stderr}");
    }
}

/// A legacy (initialize) session's request.
fn legacy(server: &Server, session: &str, method: &str, params: Value) -> HttpResponse {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    server.post_raw(
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Mcp-Session-Id", session),
        ],
        body.to_string().as_bytes(),
    )
}

#[test]
fn legacy_sessions_that_do_not_speak_tasks_get_the_same_bridge() {
    let server = Server::start(&config(""));
    for version in ["2025-11-25", "2025-06-18"] {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "bridge-test", "version": "1"}}});
        let opened = server.post_raw(
            "/mcp",
            &[
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
            ],
            body.to_string().as_bytes(),
        );
        let session = opened.header("mcp-session-id").expect("session").to_owned();
        let tools = legacy(&server, &session, "tools/list", json!({})).result();
        let tools = tools["tools"].as_array().expect("tools").clone();
        assert!(named(&tools, "task_wait").is_some(), "{version}: {tools:?}");
        if version == "2025-11-25" {
            // Callable without params.task, so never "required" for this session.
            let required = named(&tools, "report_required").expect("listed");
            assert_eq!(required["execution"]["taskSupport"], "optional");
        }
        let handle = legacy(
            &server,
            &session,
            "tools/call",
            json!({"name": "report_required", "arguments": {"topic": "l", "sections": 3}}),
        )
        .result();
        assert!(handle.get("resultType").is_none(), "legacy shape: {handle}");
        let task_id = handle["structuredContent"]["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("{version}: a handle: {handle}"))
            .to_owned();
        let done = poll_until(Duration::from_secs(30), || {
            let answer = legacy(
                &server,
                &session,
                "tools/call",
                json!({"name": "task_wait", "arguments": {"taskId": task_id}}),
            )
            .result();
            (answer["structuredContent"]["taskId"] != task_id.as_str()).then_some(answer)
        })
        .expect("the result");
        assert_eq!(done["structuredContent"]["topic"], "l", "{version}: {done}");
    }
}
