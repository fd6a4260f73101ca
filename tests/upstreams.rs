//! Upstream MCP servers (`[[upstreams]]`) end to end: tests/scripts/upstream.py, a
//! stdio MCP server, behind the real binary; every call observed through tools/list,
//! tools/call and tasks/get|update|cancel, and what the upstream saw through its
//! events log. Real upstream servers that no one here wrote are run by .ci/interop.sh.
//! Calls that fail, and an upstream task's output, are in [`failures`].

mod failures;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::common::tasks::{cancel, create, get, update, wait_for, wait_terminal};
use crate::common::{poll_until, Server};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(30);

/// A configuration with the test upstream as `up`, its events in `work`; `extra` goes
/// into its `[[upstreams]]` table.
fn config(work: &Path, extra: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/upstream.py");
    format!(
        "[builtin]\nsets = []\n[tasks]\nbridge = false\n\n[[upstreams]]\nname = \"up\"\n\
         command = [\"python3\", \"{script}\"]\nenv = {{ WORK = \"{work}\" }}\n\
         exclude = [\"hidden_*\"]\n{extra}\n",
        script = script.display(),
        work = work.display(),
    )
}

fn work_dir() -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().expect("temp dir");
    let path = temp.path().to_path_buf();
    (temp, path)
}

/// The upstream's events so far.
fn events(work: &Path) -> Vec<String> {
    std::fs::read_to_string(work.join("events.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn wait_for_event(work: &Path, what: &str) {
    poll_until(LIMIT, || {
        events(work)
            .iter()
            .any(|e| e.starts_with(what))
            .then_some(())
    })
    .unwrap_or_else(|| panic!("the upstream never logged {what}: {:?}", events(work)));
}

fn tool_names(server: &Server) -> Vec<String> {
    let result = server.request("tools/list", json!({}), json!({})).result();
    result["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|tool| tool["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn tool<'a>(tools: &'a Value, name: &str) -> &'a Value {
    tools["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|tool| tool["name"] == name))
        .unwrap_or_else(|| panic!("{name} is not listed: {tools}"))
}

#[test]
fn upstream_tools_are_listed_under_the_prefix_with_their_schemas_and_filters() {
    let (_temp, work) = work_dir();
    let server = Server::start(&config(&work, ""));
    let tools = server.request("tools/list", json!({}), json!({})).result();
    let names = tool_names(&server);
    for name in [
        "up_echo",
        "up_slow",
        "up_ask",
        "up_record",
        "up_lookup",
        "up_structured",
    ] {
        assert!(
            names.contains(&name.to_owned()),
            "{name} missing from {names:?}"
        );
    }
    assert!(
        !names.iter().any(|name| name.contains("hidden")),
        "{names:?}"
    );
    assert_eq!(
        tool(&tools, "up_lookup")["annotations"]["readOnlyHint"],
        true
    );
    assert_eq!(
        tool(&tools, "up_structured")["outputSchema"]["required"],
        json!(["n"])
    );
    assert_eq!(tool(&tools, "up_echo")["description"], "Returns the text.");
    // The upstream was asked as a client that passes elicitation and sampling on.
    let initialize = events(&work)
        .into_iter()
        .find(|e| e.starts_with("initialize"))
        .expect("initialize event");
    assert!(initialize.contains("elicitation") && initialize.contains("sampling"));
}

#[test]
fn an_upstream_call_is_answered_inline_for_a_client_without_tasks() {
    let (_temp, work) = work_dir();
    let server = Server::start(&config(&work, ""));
    let result = server
        .call_tool("up_echo", json!({"text": "hello"}), json!({}))
        .result();
    assert_eq!(result["content"][0]["text"], "hello", "{result}");
    // Only structuredContent upstream: a text block is added, and the output schema holds.
    let result = server
        .call_tool("up_structured", json!({}), json!({}))
        .result();
    assert_eq!(result["structuredContent"], json!({"n": 7}), "{result}");
    assert_eq!(result["content"][0]["text"], "{\"n\":7}", "{result}");
}

#[test]
fn an_upstream_call_is_a_task_whose_status_message_follows_the_upstreams_progress() {
    let (_temp, work) = work_dir();
    let server = Server::start(&config(&work, ""));
    let task_id = create(
        &server,
        "up_slow",
        json!({"steps": 20, "step_ms": 150}),
        &[],
    );
    let seen = poll_until(LIMIT, || {
        let task = get(&server, &task_id);
        task["statusMessage"]
            .as_str()
            .filter(|message| message.starts_with("step "))
            .map(str::to_owned)
    });
    assert!(seen.is_some(), "no progress reached the task");
    let task = wait_terminal(&server, &task_id, LIMIT);
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["result"]["content"][0]["text"], "done after 20 steps");
}

#[test]
fn cancelling_the_task_cancels_the_upstream_call() {
    let (_temp, work) = work_dir();
    let server = Server::start(&config(&work, ""));
    let task_id = create(
        &server,
        "up_slow",
        json!({"steps": 300, "step_ms": 100}),
        &[],
    );
    poll_until(LIMIT, || {
        get(&server, &task_id)["statusMessage"]
            .as_str()
            .is_some_and(|m| m.starts_with("step "))
            .then_some(())
    })
    .expect("the call started");
    assert_eq!(cancel(&server, &task_id, &[]).status, 200);
    wait_for_event(&work, "cancel-notice");
    wait_for_event(&work, "cancelled");
    let task = wait_terminal(&server, &task_id, LIMIT);
    assert_eq!(task["status"], "cancelled", "{task}");
}

#[test]
fn an_upstreams_elicitation_is_answered_through_the_task_and_the_call_goes_on() {
    let (_temp, work) = work_dir();
    let server = Server::start(&config(&work, ""));
    let task_id = create(&server, "up_ask", json!({}), &[]);
    let task = wait_for(&server, &task_id, "input_required", LIMIT);
    let requests = task["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1, "{task}");
    let (key, request) = requests.iter().next().expect("one request");
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "Approve?");
    let answer = json!({"action": "accept", "content": {"ok": true}});
    let updated = update(&server, &task_id, json!({ key.clone(): answer }), &[]);
    assert_eq!(updated.status, 200, "{}", updated.text());
    let task = wait_terminal(&server, &task_id, LIMIT);
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(
        task["result"]["content"][0]["text"],
        "heard {\"action\": \"accept\", \"content\": {\"ok\": true}}"
    );
}

#[test]
fn after_kill_9_an_idempotent_call_runs_again_and_another_fails_saying_it_was_not_repeated() {
    let (_temp, work) = work_dir();
    let data = tempfile::tempdir().expect("data dir");
    let text = config(&work, "");
    let mut server = Server::start_in(data.path(), &text);
    let record = create(
        &server,
        "up_record",
        json!({"key": "r", "wait_ms": 60000}),
        &[],
    );
    let lookup = create(
        &server,
        "up_lookup",
        json!({"key": "l", "wait_ms": 60000}),
        &[],
    );
    wait_for_event(&work, "call record r");
    wait_for_event(&work, "call lookup l");
    server.kill9();
    // The run guard takes the upstream down with the server.
    let upstream_gone = poll_until(LIMIT, || {
        let starts: Vec<String> = events(&work)
            .into_iter()
            .filter(|e| e.starts_with("start "))
            .collect();
        let pid = starts.last()?.trim_start_matches("start ").to_owned();
        (!Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    });
    if cfg!(target_os = "linux") {
        assert!(upstream_gone.is_some(), "the upstream outlived the server");
    }
    let server = Server::start_in(data.path(), &text);
    let record_task = wait_terminal(&server, &record, Duration::from_secs(60));
    assert_eq!(record_task["status"], "failed", "{record_task}");
    let message = record_task["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("interrupted") && message.contains("not repeated"),
        "{message}"
    );
    let calls = |what: &str| events(&work).iter().filter(|e| e.as_str() == what).count();
    assert_eq!(
        calls("call record r"),
        1,
        "a call that is not idempotent ran again"
    );
    // The read-only one is called again (its 60 s wait then runs again).
    poll_until(Duration::from_secs(60), || {
        (calls("call lookup l") == 2).then_some(())
    })
    .expect("the read-only call was not repeated");
    assert_eq!(get(&server, &lookup)["status"], "working");
}

#[test]
fn a_crashed_upstream_is_started_again_for_the_next_call() {
    let (_temp, work) = work_dir();
    let server = Server::start(&config(&work, ""));
    // Inline, the call that died with its upstream is a tool error saying so.
    let crashed = server.call_tool("up_crash", json!({}), json!({})).result();
    assert_eq!(crashed["isError"], true, "{crashed}");
    let message = crashed["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"up\" exited with status 3 before it answered the call"),
        "{crashed}"
    );
    wait_for_event(&work, "crash");
    let result = poll_until(LIMIT, || {
        let result = server
            .call_tool("up_echo", json!({"text": "again"}), json!({}))
            .result();
        (result["isError"] != true).then_some(result)
    })
    .expect("the upstream did not come back");
    assert_eq!(result["content"][0]["text"], "again");
    let starts = events(&work)
        .iter()
        .filter(|e| e.starts_with("start "))
        .count();
    assert_eq!(starts, 2, "{:?}", events(&work));
    // Health and metrics tell the operator; the server itself stayed healthy.
    let health = server.get("/healthz");
    assert_eq!(health.status, 200);
    let upstream = &health.json()["upstreams"][0];
    assert_eq!(upstream["name"], "up", "{upstream}");
    assert_eq!(upstream["restarts"], 1, "{upstream}");
    assert_eq!(upstream["state"], "up", "{upstream}");
    // The echo that answered is timed (the crash gave no answer: not a latency).
    let latency = &upstream["latency_seconds"];
    assert!(latency["count"].as_u64() >= Some(1), "{upstream}");
    assert!(
        latency["p50"]
            .as_f64()
            .is_some_and(|s| s > 0.0 && s <= 30.0),
        "{upstream}"
    );
    let metrics = server.get("/metrics").text();
    for line in [
        "mcp_taskd_upstream_restarts_total{upstream=\"up\"} 1",
        "# TYPE mcp_taskd_upstream_call_duration_seconds histogram",
        "mcp_taskd_upstream_call_duration_seconds_bucket{upstream=\"up\",le=\"+Inf\"} ",
        "mcp_taskd_upstream_call_duration_seconds_count{upstream=\"up\"} ",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}

#[test]
fn an_inline_call_from_a_client_without_tasks_answers_the_upstreams_question_by_mrtr() {
    let (_temp, work) = work_dir();
    let server = Server::start(&config(&work, ""));
    let caps = json!({"elicitation": {}});
    let first = server.call_tool("up_ask", json!({}), caps.clone()).result();
    assert_eq!(first["resultType"], "input_required", "{first}");
    let requests = first["inputRequests"].as_object().expect("inputRequests");
    let (key, request) = requests.iter().next().expect("one request");
    assert_eq!(request["method"], "elicitation/create");
    let state = first["requestState"].as_str().expect("requestState");
    let second = server
        .request(
            "tools/call",
            json!({"name": "up_ask", "arguments": {},
                   "inputResponses": { key.clone(): {"action": "decline"} },
                   "requestState": state}),
            caps,
        )
        .result();
    assert_eq!(
        second["content"][0]["text"], "heard {\"action\": \"decline\"}",
        "{second}"
    );
    // The upstream asked once, in one session: the retried request reached it.
    let starts = events(&work)
        .iter()
        .filter(|e| e.starts_with("start "))
        .count();
    assert_eq!(starts, 1, "{:?}", events(&work));
}

#[test]
fn a_client_that_cannot_answer_gets_the_upstreams_refusal_not_a_hang() {
    let (_temp, work) = work_dir();
    let server = Server::start(&config(&work, ""));
    // No elicitation capability: the upstream hears that the caller cannot answer.
    let result = server.call_tool("up_ask", json!({}), json!({})).result();
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("heard ") && text.contains("-32601"),
        "{result}"
    );
}

#[test]
fn per_identity_sessions_keep_callers_apart() {
    let (_temp, work) = work_dir();
    let tokens = [
        crate::fair_share::token("alice", ""),
        crate::fair_share::token("bob", ""),
    ]
    .concat();
    let server = Server::start(&format!(
        "{}{tokens}",
        config(&work, "session = \"per_identity\"")
    ));
    let call = |principal: &str, tool: &str, arguments: Value| {
        let bearer = crate::fair_share::bearer(principal);
        let result = server
            .request_with(
                "tools/call",
                json!({"name": tool, "arguments": arguments}),
                json!({}),
                &[("Authorization", &bearer)],
            )
            .result();
        result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(
        call("alice", "up_remember", json!({"value": "alice's"})),
        "kept"
    );
    // Bob's session is another one: he does not see what Alice's keeps.
    assert_eq!(call("bob", "up_recall", json!({})), "nothing");
    assert_eq!(
        call("bob", "up_remember", json!({"value": "bob's"})),
        "kept"
    );
    assert_eq!(call("alice", "up_recall", json!({})), "alice's");
    assert_eq!(call("bob", "up_recall", json!({})), "bob's");
    // One process listed the tools at start (and closed), then one per identity.
    let starts = events(&work)
        .iter()
        .filter(|e| e.starts_with("start "))
        .count();
    assert_eq!(starts, 3, "{:?}", events(&work));
    poll_until(LIMIT, || {
        let closed = events(&work)
            .iter()
            .filter(|e| *e == "stdin closed")
            .count();
        (closed == 1).then_some(())
    })
    .expect("the listing session was not closed");
}

#[test]
fn a_changed_upstream_tool_list_changes_ours() {
    let (_temp, work) = work_dir();
    let server = Server::start(&config(&work, ""));
    assert!(!tool_names(&server).contains(&"up_extra".to_owned()));
    let grown = server.call_tool("up_grow", json!({}), json!({})).result();
    assert_eq!(grown["content"][0]["text"], "grown");
    poll_until(LIMIT, || {
        tool_names(&server)
            .contains(&"up_extra".to_owned())
            .then_some(())
    })
    .expect("up_extra never appeared");
    let result = server.call_tool("up_extra", json!({}), json!({})).result();
    assert_eq!(result["content"][0]["text"], "extra");
}

#[test]
fn upstream_declarations_are_checked_naming_the_entry_and_field() {
    let (_temp, dir) = work_dir();
    let path = dir.join("config.toml");
    let cases = [
        ("command = [\"/nonexistent/server\"]", "/nonexistent/server"),
        (
            "command = [\"/bin/sh\"]\nsession = \"sometimes\"",
            "session",
        ),
        ("command = [\"/bin/sh\"]\nprefix = \"bad prefix\"", "prefix"),
        ("command = [\"/bin/sh\"]\ninclude = [\"[\"]", "include"),
        (
            "command = [\"/bin/sh\"]\n[upstreams.tools.\"*\"]\ntimeout_ms = 0",
            "timeout_ms",
        ),
        ("command = [\"/bin/sh\"]\nurl_typo = 1", "url_typo"),
        (
            "command = [\"/bin/sh\"]\nurl = \"http://127.0.0.1:1/mcp\"",
            "not both",
        ),
        ("url = \"ftp://example.com/mcp\"", "url"),
        (
            "url = \"http://127.0.0.1:1/mcp\"\nprotocol_version = \"2024-01-01\"",
            "protocol_version",
        ),
        (
            "command = [\"/bin/sh\"]\nprotocol_version = \"2025-11-25\"",
            "protocol_version",
        ),
        (
            "url = \"http://127.0.0.1:1/mcp\"\nbearer_token_file = \"missing.token\"",
            "bearer_token_file",
        ),
    ];
    for (declaration, field) in cases {
        std::fs::write(
            &path,
            format!("[[upstreams]]\nname = \"broken\"\n{declaration}\n"),
        )
        .expect("write config");
        let output = crate::common::binary()
            .arg("check-config")
            .arg("--config")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("run check-config");
        assert!(
            !output.status.success(),
            "check-config accepted {declaration}"
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("upstreams[0] (\"broken\")") && stderr.contains(field),
            "{declaration}: {stderr}"
        );
    }
}

#[test]
fn the_dashboard_overview_shows_each_upstream() {
    let (_temp, work) = work_dir();
    let admin = crate::fair_share::token("boss", "roles = [\"admin\"]");
    let server = Server::start(&format!("{}{admin}", config(&work, "")));
    let bearer = crate::fair_share::bearer("boss");
    let headers = [("Authorization", bearer.as_str())];
    let echoed = server
        .request_with(
            "tools/call",
            json!({"name": "up_echo", "arguments": {"text": "x"}}),
            json!({}),
            &headers,
        )
        .result();
    assert_eq!(echoed["content"][0]["text"], "x");
    let overview =
        server.exchange(&server.raw_request("GET", "/dashboard/api/overview", &headers, b""));
    assert_eq!(overview.status, 200, "{}", overview.text());
    let upstream = &overview.json()["upstreams"][0];
    assert_eq!(upstream["name"], "up", "{upstream}");
    assert_eq!(upstream["state"], "up", "{upstream}");
    assert_eq!(upstream["calls"], 1, "{upstream}");
    assert_eq!(upstream["latency_seconds"]["count"], 1, "{upstream}");
    assert!(upstream["tools"].as_u64().unwrap_or(0) >= 8, "{upstream}");
}

#[test]
fn an_upstream_over_http_is_called_with_its_own_token_and_asks_through_the_task() {
    // 2026-07-28, as server/discover finds: stateless requests, its tasks of the Tasks
    // extension polled, its questions by input_required and tasks/update.
    called_over_http_with_its_own_token("");
}

#[test]
fn an_upstream_over_http_in_2025_11_25_sessions_is_called_and_asks_through_the_task() {
    // 2025-11-25 sessions: its tasks followed by tasks/result, its questions requests
    // on that stream.
    called_over_http_with_its_own_token("protocol_version = \"2025-11-25\"");
}

/// The upstream: another mcp-taskd, its demo tools behind a token, spoken to over
/// Streamable HTTP in the era `era` (a `protocol_version` line, or none).
fn called_over_http_with_its_own_token(era: &str) {
    let inner = Server::start(&format!(
        "[builtin]\nsets = [\"demo\"]\n{}",
        crate::fair_share::token("relay", "")
    ));
    let (_temp, dir) = work_dir();
    std::fs::write(dir.join("upstream.token"), "relay-token\n").expect("token file");
    let outer = Server::start(&format!(
        "[builtin]\nsets = []\n[tasks]\nbridge = false\n\n[[upstreams]]\nname = \"remote\"\n\
         url = \"http://{}/mcp\"\nbearer_token_file = \"{}\"\ninclude = [\"echo\", \"generate_report\", \"approve_deployment\"]\n{era}\n",
        inner.addr,
        dir.join("upstream.token").display()
    ));
    let names = tool_names(&outer);
    assert_eq!(
        names,
        [
            "remote_echo",
            "remote_generate_report",
            "remote_approve_deployment"
        ],
        "{names:?}"
    );
    let echoed = outer
        .call_tool("remote_echo", json!({"text": "over http"}), json!({}))
        .result();
    assert_eq!(echoed["content"][0]["text"], "over http", "{echoed}");

    let report = create(
        &outer,
        "remote_generate_report",
        json!({"topic": "wires"}),
        &[],
    );
    let report = wait_terminal(&outer, &report, LIMIT);
    assert_eq!(report["status"], "completed", "{report}");
    assert_eq!(report["result"]["structuredContent"]["topic"], "wires");

    let deploy = create(
        &outer,
        "remote_approve_deployment",
        json!({"service": "api", "version": "1.2"}),
        &[],
    );
    let task = wait_for(&outer, &deploy, "input_required", LIMIT);
    let requests = task["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("inputRequests: {task}"));
    let (key, request) = requests.iter().next().expect("one request");
    assert_eq!(request["method"], "elicitation/create", "{task}");
    let answer = json!({"action": "accept", "content": {"approve": true}});
    assert_eq!(
        update(&outer, &deploy, json!({ key.clone(): answer }), &[]).status,
        200
    );
    let task = wait_terminal(&outer, &deploy, LIMIT);
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["result"]["content"][0]["text"], "Deployed api@1.2.");
}

#[test]
fn the_upstreams_resources_and_prompts_are_passed_through_under_its_prefix() {
    let (_temp, work) = work_dir();
    let server = Server::start(&config(&work, ""));
    let resources = server
        .request("resources/list", json!({}), json!({}))
        .result();
    let readme = resources["resources"]
        .as_array()
        .and_then(|all| all.iter().find(|r| r["uri"] == "note://readme"))
        .unwrap_or_else(|| panic!("no readme: {resources}"));
    assert_eq!(readme["name"], "up_readme");
    let read = |uri: &str| server.request("resources/read", json!({"uri": uri}), json!({}));
    let contents = read("note://readme").result();
    assert_eq!(contents["contents"][0]["text"], "text of note://readme");
    let item = read("note://items/42").result();
    assert_eq!(item["contents"][0]["text"], "text of note://items/42");
    let templates = server
        .request("resources/templates/list", json!({}), json!({}))
        .result();
    assert_eq!(
        templates["resourceTemplates"][1]["name"], "up_item",
        "after our task output's: {templates}"
    );

    let prompts = server
        .request("prompts/list", json!({}), json!({}))
        .result();
    let greet = prompts["prompts"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["name"] == "up_greet"))
        .unwrap_or_else(|| panic!("no up_greet: {prompts}"));
    assert_eq!(greet["arguments"][0]["name"], "who");
    let got = server
        .request(
            "prompts/get",
            json!({"name": "up_greet", "arguments": {"who": "Ada"}}),
            json!({}),
        )
        .result();
    assert_eq!(got["messages"][0]["content"]["text"], "Hello, Ada", "{got}");
}

#[test]
fn a_killed_upstream_is_noticed_and_the_next_call_starts_a_new_one() {
    let (_temp, work) = work_dir();
    let server = Server::start(&config(&work, ""));
    let first = server
        .call_tool("up_echo", json!({"text": "one"}), json!({}))
        .result();
    assert_eq!(first["content"][0]["text"], "one");
    let pid = events(&work)
        .iter()
        .rev()
        .find_map(|e| e.strip_prefix("start ").map(str::to_owned))
        .expect("the upstream's pid");
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    // A call sent in the instant between the kill and its exit is honestly
    // "interrupted"; once the exit is seen, the next call starts a new upstream.
    poll_until(LIMIT, || {
        let health = server.get("/healthz").json();
        (health["upstreams"][0]["restarts"] == 1).then_some(())
    })
    .expect("the upstream's exit was not noticed");
    let second = server
        .call_tool("up_echo", json!({"text": "two"}), json!({}))
        .result();
    assert_eq!(second["content"][0]["text"], "two", "{second}");
    let starts = events(&work)
        .iter()
        .filter(|e| e.starts_with("start "))
        .count();
    assert_eq!(starts, 2, "{:?}", events(&work));
}

/// Another mcp-taskd as an upstream over HTTP (its conformance tools behind the
/// `relay` token), and our configuration naming it, with `tools` included.
fn task_serving_upstream(dir: &Path, tools: &str, era: &str) -> (Server, String) {
    let inner = Server::start(&format!(
        "[builtin]\nsets = [\"conformance\"]\n{}",
        crate::fair_share::token("relay", "")
    ));
    std::fs::write(dir.join("upstream.token"), "relay-token\n").expect("token file");
    let config = format!(
        "[builtin]\nsets = []\n[tasks]\nbridge = false\n[workers]\nshutdown_grace_ms = 100\n\n\
         [[upstreams]]\nname = \"remote\"\nurl = \"http://{}/mcp\"\n\
         bearer_token_file = \"{}\"\ninclude = [{tools}]\n{era}\n",
        inner.addr,
        dir.join("upstream.token").display()
    );
    (inner, config)
}

/// How many tasks of `tool` the server has created, by its `/metrics`.
fn tasks_created(server: &Server, tool: &str) -> u64 {
    let prefix = format!("mcp_taskd_tasks_created_total{{tool=\"{tool}\"}} ");
    server
        .get("/metrics")
        .text()
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_call_the_upstream_serves_as_a_task_is_followed_again_after_kill_9_not_repeated() {
    // A task of the Tasks extension (2026-07-28), polled with tasks/get.
    followed_again_after_kill_9("");
}

#[test]
fn a_call_a_2025_upstream_serves_as_a_task_is_followed_again_after_kill_9_not_repeated() {
    // A 2025-11-25 task, followed with tasks/result.
    followed_again_after_kill_9("protocol_version = \"2025-11-25\"");
}

fn followed_again_after_kill_9(era: &str) {
    let (_temp, dir) = work_dir();
    let (inner, config) = task_serving_upstream(&dir, "\"slow_compute\"", era);
    let data = tempfile::tempdir().expect("data dir");
    let mut outer = Server::start_in(data.path(), &config);
    // slow_compute has no idempotency hint: were it called again, it would fail as
    // "not repeated". Followed as the upstream's task, it completes.
    let task = create(
        &outer,
        "remote_slow_compute",
        json!({"seconds": 3, "label": "once"}),
        &[],
    );
    // The upstream task's status message, read by tasks/get, is ours.
    let working = poll_until(LIMIT, || {
        let task = get(&outer, &task);
        (task["statusMessage"] == "computing").then_some(task)
    });
    assert!(working.is_some(), "{}", get(&outer, &task));
    assert_eq!(tasks_created(&inner, "slow_compute"), 1);
    outer.kill9();
    let outer = Server::start_in(data.path(), &config);
    let done = wait_terminal(&outer, &task, LIMIT);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "once: done after 3 s");
    assert!(
        done["result"]["_meta"]["io.modelcontextprotocol/related-task"].is_null(),
        "the upstream's task id leaked into the result: {done}"
    );
    assert_eq!(
        tasks_created(&inner, "slow_compute"),
        1,
        "the upstream was called again"
    );
}

#[test]
fn cancelling_a_task_the_upstream_serves_as_one_cancels_the_upstream_task() {
    let (_temp, dir) = work_dir();
    let (inner, config) = task_serving_upstream(&dir, "\"slow_compute\"", "");
    let outer = Server::start(&config);
    let task = create(&outer, "remote_slow_compute", json!({"seconds": 600}), &[]);
    wait_for(&outer, &task, "working", LIMIT);
    poll_until(LIMIT, || {
        (get(&outer, &task)["statusMessage"] == "computing").then_some(())
    })
    .expect("the upstream task never reported");
    assert_eq!(cancel(&outer, &task, &[]).status, 200);
    // The upstream's own task is cancelled too.
    let cancelled = poll_until(LIMIT, || {
        let metrics = inner.get("/metrics").text();
        metrics
            .lines()
            .any(|line| {
                line.starts_with("mcp_taskd_tasks{status=\"cancelled\"} ") && !line.ends_with(" 0")
            })
            .then_some(())
    });
    assert!(
        cancelled.is_some(),
        "the upstream's task was not cancelled: {}",
        inner.get("/metrics").text()
    );
}

#[test]
fn a_remote_upstreams_changed_tool_list_comes_on_its_get_stream_and_changes_ours() {
    // Nothing is called: the upstream's list_changed can only come on the GET stream.
    remote_list_change_heard("protocol_version = \"2025-11-25\"");
}

#[test]
fn a_2026_upstreams_changed_tool_list_comes_on_its_subscription_and_changes_ours() {
    // The same through subscriptions/listen.
    remote_list_change_heard("");
}

fn remote_list_change_heard(era: &str) {
    let inner_config = format!(
        "[builtin]\nsets = [\"demo\"]\n{}",
        crate::fair_share::token("relay", "")
    );
    let inner = Server::start(&inner_config);
    let (_temp, dir) = work_dir();
    std::fs::write(dir.join("upstream.token"), "relay-token\n").expect("token file");
    let outer = Server::start(&format!(
        "[builtin]\nsets = []\n[tasks]\nbridge = false\n\n[[upstreams]]\nname = \"remote\"\n\
         url = \"http://{}/mcp\"\nbearer_token_file = \"{}\"\ninclude = [\"echo\", \"fresh\"]\n\
         {era}\n",
        inner.addr,
        dir.join("upstream.token").display()
    ));
    assert_eq!(tool_names(&outer), ["remote_echo"]);
    // The upstream gains a tool (a reload): our list follows, and says so.
    inner.rewrite_config(&format!(
        "{inner_config}\n[[tools]]\nname = \"fresh\"\ndescription = \"new\"\n\
         command = [\"/bin/echo\", \"fresh\"]\n"
    ));
    inner.signal("HUP");
    let names = poll_until(LIMIT, || {
        let names = tool_names(&outer);
        (names.len() == 2).then_some(names)
    });
    assert_eq!(
        names.as_deref(),
        Some(&["remote_echo".to_owned(), "remote_fresh".to_owned()][..]),
        "{:?}",
        tool_names(&outer)
    );
}

#[test]
fn a_2026_upstream_gets_its_x_mcp_header_arguments_as_headers() {
    // The upstream (mcp-taskd) refuses a stateless tools/call whose Mcp-Param-Region
    // header does not match its region argument.
    let (_temp, dir) = work_dir();
    let (_inner, config) = task_serving_upstream(
        &dir,
        "\"test_custom_header\"",
        "protocol_version = \"2026-07-28\"",
    );
    let outer = Server::start(&config);
    for (region, header) in [
        ("us-west1", "us-west1".to_owned()),
        (
            "Zürich ",
            format!("=?base64?{}?=", STANDARD.encode("Zürich ")),
        ),
    ] {
        // Our own client mirrors the argument too: the outer server checks it as well.
        let result = outer
            .request_with(
                "tools/call",
                json!({"name": "remote_test_custom_header", "arguments": {"region": region}}),
                json!({}),
                &[("Mcp-Param-Region", header.as_str())],
            )
            .result();
        assert_eq!(
            result["content"][0]["text"],
            format!("Region: {region}"),
            "{result}"
        );
    }
}

#[test]
fn a_2026_upstreams_questions_reach_the_caller_by_mrtr_and_its_roots_too() {
    // The upstream asks by input_required results (no requests of its own): our
    // caller sees the same questions, and its answers go back with the upstream's
    // requestState in the next round.
    let (_temp, dir) = work_dir();
    let (_inner, config) = task_serving_upstream(
        &dir,
        "\"test_input_required_result_list_roots\", \"test_input_required_result_request_state\"",
        "",
    );
    let outer = Server::start(&config);
    let caps = json!({"roots": {}, "elicitation": {}});
    let round = |name: &str, responses: Value, state: Option<&str>| {
        let mut params = json!({"name": name, "arguments": {}, "inputResponses": responses});
        if let Some(state) = state {
            params["requestState"] = json!(state);
        }
        outer.request("tools/call", params, caps.clone()).result()
    };
    let name = "remote_test_input_required_result_list_roots";
    let first = round(name, json!({}), None);
    assert_eq!(first["resultType"], "input_required", "{first}");
    assert_eq!(
        first["inputRequests"]["roots_request"]["method"], "roots/list",
        "{first}"
    );
    let state = first["requestState"].as_str().expect("requestState");
    let roots = json!({"roots_request": {"roots": [{"uri": "file:///a"}, {"uri": "file:///b"}]}});
    let second = round(name, roots, Some(state));
    assert_eq!(second["content"][0]["text"], "Received 2 roots", "{second}");

    // The upstream's own requestState survives the round trip through ours.
    let name = "remote_test_input_required_result_request_state";
    let first = round(name, json!({}), None);
    assert_eq!(first["resultType"], "input_required", "{first}");
    let (key, _) = first["inputRequests"]
        .as_object()
        .and_then(|requests| requests.iter().next())
        .expect("a question");
    let state = first["requestState"].as_str().expect("requestState");
    let answer = json!({ key.clone(): {"action": "accept", "content": {"ok": true}} });
    let second = round(name, answer, Some(state));
    assert_eq!(
        second["content"][0]["text"], "state-ok (confirmed: true)",
        "{second}"
    );
}
