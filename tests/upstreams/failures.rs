//! Upstream calls that end badly, and what an upstream task keeps as its output (issue
//! 47): tests/scripts/upstream.py's `fail` tool reports a status message, sends a log
//! message and prints to stderr, then exits mid-call, never answers or answers more than
//! 64 MiB. Inline, the caller gets a tool error naming what happened with the end of the
//! run's output; as a task, the same is in its error; the upstream's own JSON-RPC error
//! stays one. A shared session's stderr is nobody's; a `per_call` one's is the call's.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::{json, Value};

use super::{config, work_dir, LIMIT};
use crate::common::tasks::{create, wait_terminal};
use crate::common::Server;

/// `fail` gives up after 1.5 s.
const FAIL_TIMEOUT: &str = "[upstreams.tools.\"fail\"]\ntimeout_ms = 1500";
/// The end of a failed `fail` call's output: its log message (its status message is
/// the task's status; its stderr line is not a shared session's caller's).
const TAIL: &str = "The end of its output:\nerror: disk quota exceeded on /var/build";
const STATUS_LINE: &str = "writing section 4 of 10";
const STDERR_LINE: &str = "Traceback: OSError in /srv/upstream/build.py";

/// Each way `fail` fails, and the reason mcp-taskd gives for it.
/// Those that end the upstream's session last (the session that follows starts after a
/// backoff, which counts against a call's timeout).
fn failures(timeout_ms: u64) -> [(&'static str, String); 3] {
    [
        (
            "hang",
            format!(
                "the upstream MCP server \"up\" did not answer within {timeout_ms} ms (the \
                 tool's timeout)"
            ),
        ),
        (
            "flood",
            "the upstream MCP server \"up\" answered too much: a message larger than 64 MiB, \
             mcp-taskd's limit for one message"
                .into(),
        ),
        (
            "exit",
            "the upstream MCP server \"up\" exited with status 3 before it answered the call"
                .into(),
        ),
    ]
}

/// The text of an inline call's answer, which must be a tool error.
fn tool_error(server: &Server, arguments: Value) -> String {
    let answer = server.call_tool("up_fail", arguments, json!({}));
    assert_eq!(answer.status, 200, "{}", answer.text());
    let result = answer.result();
    assert_eq!(result["isError"], true, "{result}");
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {result}"))
        .to_owned()
}

/// `mcp-taskd tasks logs ID --json` on the server's data: each line's stream and text.
fn logged(server: &Server, task_id: &str) -> Vec<(String, String)> {
    let output: Output = crate::common::binary()
        .args(["tasks", "logs", task_id, "--json"])
        .arg("--config")
        .arg(server.dir.join("config.toml"))
        .arg("--data-dir")
        .arg(server.dir.join("data"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("run mcp-taskd tasks logs");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let line: Value = serde_json::from_str(line).expect("a JSON line");
            let field = |name: &str| line[name].as_str().unwrap_or_default().to_owned();
            (field("stream"), field("text"))
        })
        .collect()
}

/// The text of the task's output resource (`resources/read`).
fn output_resource(server: &Server, task_id: &str) -> String {
    let uri = format!("mcp-taskd://tasks/{task_id}/output");
    let answer = server
        .request("resources/read", json!({"uri": uri}), json!({}))
        .result();
    answer["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no output text: {answer}"))
        .to_owned()
}

fn per_call(work: &Path) -> String {
    config(work, &format!("session = \"per_call\"\n{FAIL_TIMEOUT}"))
}

#[test]
fn a_failed_inline_upstream_call_says_why_with_the_end_of_its_output() {
    let (_temp, work) = work_dir();
    let server = Server::start(&config(&work, FAIL_TIMEOUT));
    // The upstream's own error for the call stays a JSON-RPC error: it is about the
    // request.
    let refused = server
        .call_tool("up_fail", json!({"how": "refuse"}), json!({}))
        .json();
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(
        refused["error"]["message"], "how must be exit, hang or flood",
        "{refused}"
    );
    for (how, reason) in failures(1500) {
        let text = tool_error(&server, json!({"how": how}));
        assert_eq!(
            text,
            format!(
                "The tool failed: {reason}; whether the call had its effect upstream is \
                 unknown. {TAIL}"
            ),
            "{how}"
        );
        // A shared session's stderr is no single caller's.
        assert!(!text.contains(STDERR_LINE), "{how}: {text}");
    }
}

#[test]
fn a_failed_upstream_task_says_why_in_its_error_and_keeps_its_status_and_log_messages() {
    let (_temp, work) = work_dir();
    let server = Server::start(&config(&work, FAIL_TIMEOUT));
    for (how, reason) in failures(1500) {
        let task = create(&server, "up_fail", json!({"how": how}), &[]);
        let failed = wait_terminal(&server, &task, LIMIT);
        assert_eq!(failed["status"], "failed", "{how}: {failed}");
        assert_eq!(
            failed["error"]["message"],
            format!(
                "Task failed: the call to tool \"fail\" of upstream \"up\" was interrupted \
                 ({reason}); its outcome is unknown, and it was not repeated: the tool is not \
                 marked idempotent (set idempotent = true in its [upstreams.tools] settings \
                 if repeating it is safe). {TAIL}"
            ),
            "{how}"
        );
        // Its status and log messages are its output, through the resource and the CLI;
        // a shared session's stderr is not.
        let text = output_resource(&server, &task);
        assert_eq!(
            text,
            format!("{STATUS_LINE}\nerror: disk quota exceeded on /var/build\n"),
            "{how}"
        );
        assert_eq!(
            logged(&server, &task),
            [
                ("status".to_owned(), STATUS_LINE.to_owned()),
                (
                    "log".to_owned(),
                    "error: disk quota exceeded on /var/build".to_owned()
                ),
            ],
            "{how}"
        );
    }
}

#[test]
fn a_per_call_upstreams_stderr_is_its_calls_output() {
    let (_temp, work) = work_dir();
    let server = Server::start(&per_call(&work));
    // Inline: the stderr line and the log message, in whatever order their two streams
    // were read.
    let text = tool_error(&server, json!({"how": "exit"}));
    assert!(
        text.starts_with(
            "The tool failed: the upstream MCP server \"up\" exited with status 3 before it \
             answered the call; whether the call had its effect upstream is unknown. The end \
             of its output:\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(STDERR_LINE) && text.contains("error: disk quota exceeded on /var/build"),
        "{text}"
    );

    let task = create(&server, "up_fail", json!({"how": "exit"}), &[]);
    let failed = wait_terminal(&server, &task, LIMIT);
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(STDERR_LINE), "{failed}");
    let mut lines = logged(&server, &task);
    lines.sort();
    assert_eq!(
        lines,
        [
            (
                "log".to_owned(),
                "error: disk quota exceeded on /var/build".to_owned()
            ),
            ("status".to_owned(), STATUS_LINE.to_owned()),
            ("stderr".to_owned(), STDERR_LINE.to_owned()),
        ]
    );
}

#[test]
fn an_idempotent_upstream_task_that_times_out_is_retried_then_fails_saying_why() {
    let (_temp, work) = work_dir();
    let server = Server::start(&config(
        &work,
        "[upstreams.tools.\"fail\"]\ntimeout_ms = 1000\nidempotent = true",
    ));
    let reason = "the upstream MCP server \"up\" did not answer within 1000 ms (the tool's \
                  timeout)";
    // Inline it is a tool error, with nothing said of an unknown effect.
    assert_eq!(
        tool_error(&server, json!({"how": "hang"})),
        format!("The tool failed: {reason}. {TAIL}")
    );
    let task = create(&server, "up_fail", json!({"how": "hang"}), &[]);
    let failed = wait_terminal(&server, &task, Duration::from_secs(60));
    assert_eq!(
        failed["error"]["message"],
        format!("Task failed after 3 attempts: {reason}. {TAIL}"),
        "{failed}"
    );
    // Each attempt's messages are kept.
    let logs: Vec<(String, String)> = logged(&server, &task)
        .into_iter()
        .filter(|(stream, _)| stream == "log")
        .collect();
    assert_eq!(logs.len(), 3, "{logs:?}");
}

#[test]
fn an_upstream_tasks_status_and_log_messages_are_read_as_its_output() {
    let (_temp, work) = work_dir();
    let server = Server::start(&config(&work, ""));
    // Steps farther apart than the status messages' 200 ms throttle: each is kept.
    let task = create(&server, "up_slow", json!({"steps": 3, "step_ms": 400}), &[]);
    let done = wait_terminal(&server, &task, LIMIT);
    assert_eq!(done["status"], "completed", "{done}");
    let expected: Vec<(String, String)> = (1..=3)
        .flat_map(|step| {
            [
                ("log".to_owned(), format!("info: working on step {step}")),
                ("status".to_owned(), format!("step {step} of 3")),
            ]
        })
        .collect();
    assert_eq!(logged(&server, &task), expected);
    let text: String = expected
        .iter()
        .map(|(_, text)| format!("{text}\n"))
        .collect();
    assert_eq!(output_resource(&server, &task), text);
}

/// tests/scripts/upstream.py over Streamable HTTP, killed when dropped.
struct HttpUpstream {
    child: std::process::Child,
    port: u16,
}

impl HttpUpstream {
    fn start(work: &Path) -> HttpUpstream {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/upstream.py");
        let port_file = work.join("http.port");
        let child = std::process::Command::new("python3")
            .arg(script)
            .arg("--http")
            .arg(&port_file)
            .env("WORK", work)
            .spawn()
            .expect("start the HTTP upstream");
        let port = crate::common::poll_until(LIMIT, || {
            std::fs::read_to_string(&port_file)
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .expect("the HTTP upstream's port");
        HttpUpstream { child, port }
    }
}

impl Drop for HttpUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_failed_call_of_an_http_upstream_says_why_with_the_log_messages_of_its_answer() {
    let (_temp, work) = work_dir();
    let upstream = HttpUpstream::start(&work);
    let server = Server::start(&format!(
        "[builtin]\nsets = []\n[tasks]\nbridge = false\n\n[[upstreams]]\nname = \"up\"\n\
         url = \"http://127.0.0.1:{}/mcp\"\nprotocol_version = \"2025-11-25\"\n",
        upstream.port
    ));
    let echoed = server
        .call_tool("up_echo", json!({"text": "over http"}), json!({}))
        .result();
    assert_eq!(echoed["content"][0]["text"], "over http", "{echoed}");
    let unknown = "whether the call had its effect upstream is unknown";
    let too_much = "the upstream MCP server \"up\" answered too much: a message larger than \
                    64 MiB, mcp-taskd's limit for one message";
    // A log message on the answer's stream is the call's output.
    assert_eq!(
        tool_error(&server, json!({"how": "flood"})),
        format!("The tool failed: {too_much}; {unknown}. {TAIL}")
    );
    assert_eq!(
        tool_error(&server, json!({"how": "flood_json"})),
        format!("The tool failed: {too_much}; {unknown}")
    );
    assert_eq!(
        tool_error(&server, json!({"how": "status"})),
        format!(
            "The tool failed: the upstream MCP server \"up\" answered with HTTP status 502; \
             {unknown}"
        )
    );
    // As a task: the same in its error, and its log message kept.
    let task = create(&server, "up_fail", json!({"how": "flood"}), &[]);
    let failed = wait_terminal(&server, &task, LIMIT);
    assert_eq!(
        failed["error"]["message"],
        format!(
            "Task failed: the call to tool \"fail\" of upstream \"up\" was interrupted \
             ({too_much}); its outcome is unknown, and it was not repeated: the tool is not \
             marked idempotent (set idempotent = true in its [upstreams.tools] settings if \
             repeating it is safe). {TAIL}"
        ),
        "{failed}"
    );
    assert_eq!(
        output_resource(&server, &task),
        "error: disk quota exceeded on /var/build\n"
    );
    // Last: the upstream exits in the middle of its answer.
    assert_eq!(
        tool_error(&server, json!({"how": "exit"})),
        format!(
            "The tool failed: the upstream MCP server \"up\" ended its answer without a \
             response; {unknown}. {TAIL}"
        )
    );
}
