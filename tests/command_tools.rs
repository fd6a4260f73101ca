//! Command tools end to end: real shell and Python programs under tests/scripts/, run by
//! the real binary, observed through tools/call and tasks/get|update|cancel.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::common::{poll_until, tasks_caps, Rpc, Server};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(20);

fn script(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scripts")
        .join(name);
    path.to_string_lossy().into_owned()
}

/// A TOML basic string.
fn toml_str(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A configuration serving only `tools` (TOML `[[tools]]` entries). The task bridge is
/// off: these tests pin how optional tools run inline for clients without the Tasks
/// extension (tests/bridge.rs covers the bridge).
fn config(tools: &str) -> String {
    format!("[builtin]\nsets = []\n[tasks]\nbridge = false\n\n{tools}")
}

/// A `[[tools]]` entry running tests/scripts/modes.py with python3 from PATH.
fn modes_tool(name: &str, work: &Path, extra: &str) -> String {
    format!(
        "[[tools]]\nname = \"{name}\"\ndescription = \"modes.py\"\n\
         command = [\"python3\", {script}]\nenv = {{ WORK = {work}, CUSTOM = \"set in config\" }}\n\
         backoff_ms = 50\n{extra}\n\
         input_schema = {{ type = \"object\", properties = {{ mode = {{ type = \"string\" }}, name = {{ type = \"string\" }} }} }}\n",
        script = toml_str(&script("modes.py")),
        work = toml_str(&work.to_string_lossy()),
    )
}

/// A `[[tools]]` entry running the shell script `file` directly (by its shebang).
fn shell_tool(name: &str, file: &str, work: &Path, extra: &str) -> String {
    format!(
        "[[tools]]\nname = \"{name}\"\ndescription = \"{file}\"\ncommand = [{script}]\n\
         env = {{ WORK = {work} }}\nbackoff_ms = 50\n{extra}\n",
        script = toml_str(&script(file)),
        work = toml_str(&work.to_string_lossy()),
    )
}

fn start_task(server: &Server, tool: &str, arguments: Value) -> String {
    let result = server.call_tool(tool, arguments, tasks_caps()).result();
    assert_eq!(result["resultType"], "task", "{result}");
    result["taskId"].as_str().expect("taskId").to_owned()
}

fn get_task(server: &Server, task_id: &str) -> Value {
    server
        .request("tasks/get", json!({"taskId": task_id}), tasks_caps())
        .result()
}

/// Polls tasks/get until the task is in `status`; fails early on another final status.
fn wait_for(server: &Server, task_id: &str, status: &str) -> Value {
    let mut last = Value::Null;
    let found = poll_until(LIMIT, || {
        last = get_task(server, task_id);
        let now = last["status"].as_str().unwrap_or_default().to_owned();
        let terminal = matches!(now.as_str(), "completed" | "failed" | "cancelled");
        if now == status {
            Some(Ok(last.clone()))
        } else if terminal {
            Some(Err(last.clone()))
        } else {
            None
        }
    });
    match found {
        Some(Ok(task)) => task,
        Some(Err(task)) => panic!(
            "task ended {} while waiting for {status}: {task}",
            task["status"]
        ),
        None => panic!("task not {status} within {LIMIT:?}: {last}"),
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether a process is gone: no /proc entry, or a zombie waiting for its reaper.
fn process_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state == 'Z' || state == 'X'),
    }
}

fn assert_gone(pids: &[String]) {
    assert!(!pids.is_empty(), "no pids were recorded");
    for pid in pids {
        assert!(
            poll_until(LIMIT, || process_gone(pid).then_some(())).is_some(),
            "process {pid} is still running"
        );
    }
}

fn temp() -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().expect("temp dir");
    let path = temp.path().to_path_buf();
    (temp, path)
}

#[test]
fn inline_calls_answer_with_the_programs_result() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&modes_tool("modes", &work, "")));
    // Plain text convenience: exit 0 without a final JSON line.
    let text = server
        .call_tool("modes", json!({"mode": "text", "name": "ada"}), json!({}))
        .result();
    assert_eq!(text["resultType"], "complete");
    assert_eq!(text["content"][0]["text"], "hello ada\nsecond line");
    // A final {"result": …} line.
    let result = server
        .call_tool("modes", json!({"mode": "result"}), json!({}))
        .result();
    assert_eq!(result["content"][0]["text"], "a JSON result");
    // Inline runs carry no task variables; the environment is the config's, not ours.
    let env = server
        .call_tool("modes", json!({"mode": "env"}), json!({}))
        .result()["structuredContent"]
        .clone();
    assert_eq!(env["MCP_TASK_ID"], Value::Null);
    assert_eq!(env["HOME"], Value::Null, "the server's HOME leaked: {env}");
    assert_eq!(env["PATH"], "/usr/local/bin:/usr/bin:/bin");
    assert_eq!(env["CUSTOM"], "set in config");
}

#[test]
fn tool_errors_complete_and_json_rpc_errors_fail() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&modes_tool("modes", &work, "")));
    let inline = server
        .call_tool("modes", json!({"mode": "tool_error"}), json!({}))
        .result();
    assert_eq!(inline["isError"], true);
    assert_eq!(inline["content"][0]["text"], "bad input: name is empty");

    let task = start_task(&server, "modes", json!({"mode": "tool_error"}));
    let done = wait_for(&server, &task, "completed");
    assert_eq!(done["result"]["isError"], true, "{done}");

    let task = start_task(&server, "modes", json!({"mode": "rpc_error"}));
    let failed = wait_for(&server, &task, "failed");
    assert_eq!(failed["error"]["code"], -32602, "{failed}");
    assert_eq!(failed["error"]["message"], "the widget does not exist");
    assert_eq!(failed["error"]["data"]["widget"], 7);
    assert_eq!(lines(&work.join("runs")).len(), 3, "nothing was retried");
}

#[test]
fn structured_output_is_checked_against_the_output_schema() {
    let (_temp, work) = temp();
    let schema = "output_schema = { type = \"object\", required = [\"count\"], \
                  properties = { count = { type = \"integer\" } } }";
    let server = Server::start(&config(&modes_tool("counted", &work, schema)));
    let task = start_task(&server, "counted", json!({"mode": "structured"}));
    let done = wait_for(&server, &task, "completed");
    assert_eq!(done["result"]["structuredContent"]["count"], 3);
    // Only structuredContent was printed: its JSON is added as a text block.
    let text = done["result"]["content"][0]["text"].as_str().expect("text");
    assert_eq!(
        serde_json::from_str::<Value>(text).expect("JSON text"),
        json!({"count": 3, "label": "three"})
    );

    let task = start_task(&server, "counted", json!({"mode": "bad_structured"}));
    let failed = wait_for(&server, &task, "failed");
    assert_eq!(failed["error"]["code"], -32603, "{failed}");
    assert!(failed.get("result").is_none());
    // Inline, the same contract breach is an internal error.
    server
        .call_tool("counted", json!({"mode": "bad_structured"}), json!({}))
        .expect_error(500, -32603);
}

#[test]
fn task_runs_get_their_task_id_and_attempt() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&modes_tool("modes", &work, "")));
    let task = start_task(&server, "modes", json!({"mode": "env"}));
    let done = wait_for(&server, &task, "completed");
    let env = &done["result"]["structuredContent"];
    assert_eq!(env["MCP_TASK_ID"], task.as_str());
    assert_eq!(env["MCP_TASK_ATTEMPT"], "1");
    assert_eq!(env["HOME"], Value::Null);
}

#[test]
fn progress_lines_become_the_status_message() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&shell_tool("steps", "progress.sh", &work, "")));
    let task = start_task(&server, "steps", json!({}));
    let seen = poll_until(LIMIT, || {
        let task = get_task(&server, &task);
        (task["statusMessage"] == "Step 1 of 2: warming up").then_some(task)
    })
    .expect("the progress message shows in tasks/get");
    assert_eq!(seen["status"], "working");
    std::fs::write(work.join("go"), "").expect("release the script");
    let done = wait_for(&server, &task, "completed");
    // Progress lines are not part of the plain-text result.
    assert_eq!(
        done["result"]["content"][0]["text"],
        "report ready\nall good"
    );
}

#[test]
fn inline_progress_lines_become_progress_notifications() {
    let (_temp, work) = temp();
    std::fs::write(work.join("go"), "").expect("no waiting");
    let server = Server::start(&config(&shell_tool("steps", "progress.sh", &work, "")));
    let response = server.request(
        "tools/call",
        json!({"name": "steps", "arguments": {}, "_meta": {"progressToken": "p"}}),
        json!({}),
    );
    let messages = response.sse_messages();
    let progress: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 2, "{messages:?}");
    assert_eq!(progress[0]["params"]["message"], "Step 1 of 2: warming up");
    assert_eq!(progress[1]["params"]["progress"], 2.0);
    let last = messages.last().expect("the response");
    assert_eq!(
        last["result"]["content"][0]["text"],
        "report ready\nall good"
    );
}

#[test]
fn an_input_round_goes_through_input_required_and_tasks_update() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&modes_tool("asker", &work, "")));
    let task = start_task(&server, "asker", json!({"mode": "ask"}));
    let waiting = wait_for(&server, &task, "input_required");
    let request = &waiting["inputRequests"]["confirm"];
    assert_eq!(request["method"], "elicitation/create", "{waiting}");
    assert_eq!(request["params"]["message"], "Proceed?");
    let update = server.request(
        "tasks/update",
        json!({"taskId": task, "inputResponses": {
            "confirm": {"action": "accept", "content": {"ok": true}}}}),
        tasks_caps(),
    );
    assert_eq!(update.result()["resultType"], "complete");
    let done = wait_for(&server, &task, "completed");
    assert_eq!(
        done["result"]["content"][0]["text"],
        "answer=accept ok=True state=1:kept by the server"
    );
    assert_eq!(lines(&work.join("runs")).len(), 2, "one run per round");
}

#[test]
fn an_inline_input_round_uses_request_state() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&modes_tool(
        "asker",
        &work,
        "task_policy = \"inline\"",
    )));
    let caps = json!({"elicitation": {}});
    let first = server
        .call_tool("asker", json!({"mode": "ask"}), caps.clone())
        .result();
    assert_eq!(first["resultType"], "input_required", "{first}");
    assert_eq!(
        first["inputRequests"]["confirm"]["method"],
        "elicitation/create"
    );
    let state = first["requestState"].as_str().expect("requestState");
    let second = server
        .request(
            "tools/call",
            json!({"name": "asker", "arguments": {"mode": "ask"},
                   "inputResponses": {"confirm": {"action": "decline"}},
                   "requestState": state}),
            caps,
        )
        .result();
    assert_eq!(
        second["content"][0]["text"],
        "answer=decline ok=None state=1:kept by the server"
    );
}

#[test]
fn a_timeout_kills_the_attempt_which_is_retried_then_fails() {
    let (_temp, work) = temp();
    // Long enough for the script to record itself even on a loaded machine.
    let extra = "timeout_ms = 2000\nmax_attempts = 2";
    let server = Server::start(&config(&shell_tool("slow", "linger.sh", &work, extra)));
    let task = start_task(&server, "slow", json!({}));
    let failed = wait_for(&server, &task, "failed");
    let message = failed["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("Task failed after 2 attempts") && message.contains("timeout 2000 ms"),
        "{failed}"
    );
    let runs = lines(&work.join("runs"));
    assert_eq!(runs, vec![format!("{task}:1"), format!("{task}:2")]);
    assert_gone(&lines(&work.join("children")));
    assert_gone(&lines(&work.join("grandchildren")));
}

#[test]
fn cancellation_kills_the_whole_process_group() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&shell_tool("slow", "linger.sh", &work, "")));
    let task = start_task(&server, "slow", json!({}));
    let grandchild = poll_until(LIMIT, || lines(&work.join("grandchildren")).pop())
        .expect("the script started its grandchild");
    let child = poll_until(LIMIT, || lines(&work.join("children")).pop()).expect("child pid");
    assert!(!process_gone(&grandchild) && !process_gone(&child));
    let cancel = server.request("tasks/cancel", json!({"taskId": task}), tasks_caps());
    assert_eq!(cancel.result()["resultType"], "complete");
    assert_gone(&[child, grandchild]);
    wait_for(&server, &task, "cancelled");
    assert_eq!(
        lines(&work.join("runs")).len(),
        1,
        "a cancelled task is not retried"
    );
}

#[test]
fn a_crash_is_retried_then_fails() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&modes_tool("modes", &work, "max_attempts = 2")));
    let task = start_task(&server, "modes", json!({"mode": "crash"}));
    let failed = wait_for(&server, &task, "failed");
    assert_eq!(failed["error"]["code"], -32603);
    assert_eq!(
        failed["error"]["message"],
        "Task failed after 2 attempts: the program exited with status 3 without a final result \
         line. The end of its output:\nmodes.py: simulated crash"
    );
    assert_eq!(lines(&work.join("runs")).len(), 2);

    let task = start_task(&server, "modes", json!({"mode": "malformed"}));
    let failed = wait_for(&server, &task, "failed");
    let message = failed["error"]["message"].as_str().expect("message");
    assert!(message.contains("final line is malformed"), "{failed}");

    // Inline there is no retry: a tool error saying why, with the end of the output.
    let result = server
        .call_tool("modes", json!({"mode": "crash"}), json!({}))
        .result();
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(
        result["content"][0]["text"],
        "The tool failed: the program exited with status 3 without a final result line. The \
         end of its output:\nmodes.py: simulated crash"
    );
}

#[test]
fn output_over_the_limit_is_rejected() {
    let (_temp, work) = temp();
    let extra = "max_output_bytes = 1000\nmax_attempts = 1";
    let server = Server::start(&config(&modes_tool("loud", &work, extra)));
    let task = start_task(&server, "loud", json!({"mode": "flood"}));
    let failed = wait_for(&server, &task, "failed");
    assert_eq!(
        failed["error"]["message"],
        "Task failed after 1 attempt: the program wrote more than 1000 bytes to stdout and was killed"
    );
    // Below the limit the same tool answers.
    let ok = server
        .call_tool("loud", json!({"mode": "text"}), json!({}))
        .result();
    assert_eq!(ok["content"][0]["text"], "hello world\nsecond line");
}

#[test]
fn max_concurrency_runs_one_at_a_time() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&shell_tool(
        "serial",
        "serial.sh",
        &work,
        "max_concurrency = 1",
    )));
    let tasks: Vec<String> = (0..3)
        .map(|_| start_task(&server, "serial", json!({})))
        .collect();
    for task in &tasks {
        wait_for(&server, task, "completed");
    }
    let log = lines(&work.join("log"));
    assert_eq!(log.len(), 6, "{log:?}");
    for pair in log.chunks(2) {
        let started = pair[0].strip_prefix("start ").expect("a start");
        assert_eq!(
            pair[1],
            format!("end {started}"),
            "runs overlapped: {log:?}"
        );
    }
}

#[test]
fn a_server_crash_mid_run_reruns_the_attempt_after_restart() {
    let (_temp, work) = temp();
    let (_data, dir) = temp();
    // A short lease: SQLite reclaims the dead run's job at start-up, PostgreSQL (whose
    // other nodes' leases look the same) once its lease has expired.
    let tools = format!(
        "[workers]\nlease_ms = 3000\njanitor_interval_ms = 100\n\n{}",
        config(&shell_tool(
            "durable",
            "restart.sh",
            &work,
            "max_attempts = 3",
        ))
    );
    let mut server = Server::start_in(&dir, &tools);
    // The caller's trace context is stored with the task: the run after the restart
    // joins the same trace.
    let created = Rpc::tool("durable", json!({}))
        .caps(tasks_caps())
        .meta("traceparent", json!(TRACEPARENT))
        .send(&server)
        .result();
    let task = created["taskId"].as_str().expect("taskId").to_owned();
    let pid = poll_until(LIMIT, || {
        let pid = std::fs::read_to_string(work.join("pid")).ok()?;
        Some(pid.trim().to_owned()).filter(|pid| !pid.is_empty())
    })
    .expect("the first run started");
    server.kill9();
    // The run guard saw the server die and killed the program.
    assert_gone(std::slice::from_ref(&pid));

    let server = Server::start_in(&dir, &tools);
    let done = wait_for(&server, &task, "completed");
    assert_eq!(done["result"]["content"][0]["text"], "finished on run 2");
    assert_eq!(
        lines(&work.join("runs")),
        vec![format!("{task}:1"), format!("{task}:2")]
    );
    assert_eq!(lines(&work.join("traces")), vec![TRACEPARENT; 2]);
}

/// A client's W3C trace context (telemetry is off in these tests: programs see it as
/// it came).
const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";

#[test]
fn programs_see_the_callers_trace_context() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&modes_tool("modes", &work, "")));
    let env = |rpc: Rpc| -> Value {
        let answer = rpc.send(&server).result();
        let answer = match answer["taskId"].as_str() {
            Some(task) => wait_for(&server, task, "completed")["result"].clone(),
            None => answer,
        };
        answer["structuredContent"].clone()
    };
    // From `_meta`, as a task: both values.
    let task = env(Rpc::tool("modes", json!({"mode": "env"}))
        .caps(tasks_caps())
        .meta("traceparent", json!(TRACEPARENT))
        .meta("tracestate", json!("vendor=abc")));
    assert_eq!(task["TRACEPARENT"], TRACEPARENT, "{task}");
    assert_eq!(task["TRACESTATE"], "vendor=abc", "{task}");
    // From the HTTP headers, inline; `_meta` wins over them.
    let header = "00-11111111111111111111111111111111-2222222222222222-00";
    let inline = env(Rpc::tool("modes", json!({"mode": "env"})).header("traceparent", header));
    assert_eq!(inline["TRACEPARENT"], header, "{inline}");
    assert_eq!(inline["TRACESTATE"], Value::Null, "{inline}");
    let both = env(Rpc::tool("modes", json!({"mode": "env"}))
        .header("traceparent", header)
        .meta("traceparent", json!(TRACEPARENT)));
    assert_eq!(both["TRACEPARENT"], TRACEPARENT, "{both}");
    // What breaks the W3C format is ignored, and the call goes on.
    for bad in [json!("00-zz-00f067aa0ba902b7-01"), json!(42)] {
        let none = env(Rpc::tool("modes", json!({"mode": "env"}))
            .caps(tasks_caps())
            .meta("traceparent", bad));
        assert_eq!(none["TRACEPARENT"], Value::Null, "{none}");
    }
}

#[test]
fn a_graceful_shutdown_stops_the_program_and_the_next_start_runs_it_again() {
    let (_temp, work) = temp();
    let (_data, dir) = temp();
    let tools = format!(
        "[workers]\nshutdown_grace_ms = 200\n\n{}",
        config(&shell_tool("slow", "linger.sh", &work, ""))
    );
    let mut server = Server::start_in(&dir, &tools);
    let task = start_task(&server, "slow", json!({}));
    let grandchild = poll_until(LIMIT, || lines(&work.join("grandchildren")).pop())
        .expect("the script started its grandchild");
    let child = poll_until(LIMIT, || lines(&work.join("children")).pop()).expect("child pid");
    assert!(server.terminate(LIMIT), "the server exits on SIGTERM");
    assert_gone(&[child, grandchild]);

    let server = Server::start_in(&dir, &tools);
    poll_until(LIMIT, || {
        (lines(&work.join("runs")).len() == 2).then_some(())
    })
    .expect("the released attempt runs again");
    // A shutdown releases the attempt uncounted: the rerun is attempt 1 again.
    assert_eq!(
        lines(&work.join("runs")),
        vec![format!("{task}:1"), format!("{task}:1")]
    );
    server
        .request("tasks/cancel", json!({"taskId": task}), tasks_caps())
        .result();
    wait_for(&server, &task, "cancelled");
    assert_gone(&lines(&work.join("grandchildren")));
}

#[test]
fn a_bad_declaration_fails_check_config_and_serve_naming_tool_and_field() {
    let (_temp, dir) = temp();
    let path = dir.join("bad.toml");
    let cases = [
        ("command = [\"/nonexistent/program\"]", "command"),
        ("command = [\"/bin/sh\"]\ntimeout_ms = 0", "timeout_ms"),
        (
            "command = [\"/bin/sh\"]\ntask_policy = \"sometimes\"",
            "task_policy",
        ),
        (
            "command = [\"/bin/sh\"]\ninput_schema = \"{not json\"",
            "input_schema",
        ),
        (
            "command = [\"/bin/sh\"]\nenviron = { A = \"1\" }",
            "environ",
        ),
    ];
    for (declaration, field) in cases {
        std::fs::write(
            &path,
            format!("[[tools]]\nname = \"broken\"\ndescription = \"x\"\n{declaration}\n"),
        )
        .expect("write config");
        for command in ["check-config", "serve"] {
            let mut run = crate::common::binary();
            run.arg(command).arg("--config").arg(&path);
            if command == "serve" {
                run.args(["--listen", "127.0.0.1:0", "--data-dir"])
                    .arg(dir.join("data"));
            }
            let mut child = run
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run mcp-taskd");
            let exited = poll_until(LIMIT, || child.try_wait().ok().flatten());
            if exited.is_none() {
                let _ = child.kill();
            }
            let output = child.wait_with_output().expect("mcp-taskd output");
            assert!(!output.status.success(), "{command} accepted {declaration}");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                stderr.contains("tools[0] (\"broken\")") && stderr.contains(field),
                "{command} with {declaration}: {stderr}"
            );
        }
    }
}

#[test]
fn programs_start_with_no_signal_blocked() {
    // The server blocks SIGCHLD in all its threads (see `block_child_exit_signal`); a
    // program must not inherit that (a shell that waits for its children would hang).
    let tool = "[[tools]]\nname = \"mask\"\ndescription = \"blocked signals\"\n\
                command = [\"/bin/sh\", \"-c\", \"grep SigBlk /proc/self/status\"]\n";
    let server = Server::start(&config(tool));
    let result = server.call_tool("mask", json!({}), json!({})).result();
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert_eq!(text.trim(), "SigBlk:\t0000000000000000", "{result}");
}
