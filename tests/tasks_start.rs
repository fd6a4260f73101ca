//! `mcp-taskd tasks start` (issue 49) through the real binary, on either backend:
//! `--wait` prints the result and exits with the outcome's status; `--at` holds a task
//! until its time across a restart, then starts it within a second; `--key` never makes
//! two tasks, across a restart and with no server running. Times are the store's
//! (`tasks show --json`).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{poll_until, tasks, Server};
use taskd_base::clock::{now_ms, parse_rfc3339};

const LIMIT: Duration = Duration::from_secs(30);

const CONFIG: &str = "[builtin]\nsets = [\"conformance\"]\n\
                      [workers]\nthreads = 4\nshutdown_grace_ms = 200\n";

fn command(dir: &Path, args: &[&str]) -> Command {
    let mut command = crate::common::binary();
    command
        .args(args)
        .arg("--config")
        .arg(dir.join("config.toml"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("RUST_LOG", "warn");
    command
}

fn run(dir: &Path, args: &[&str]) -> Output {
    command(dir, args).output().expect("run mcp-taskd")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("utf-8 output")
}

fn ok_json(dir: &Path, args: &[&str]) -> Value {
    let output = run(dir, args);
    assert!(
        output.status.success(),
        "mcp-taskd {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout(&output)).expect("JSON")
}

fn show(dir: &Path, id: &str) -> Value {
    ok_json(dir, &["tasks", "show", id, "--json"])
}

fn ms(value: &Value) -> i64 {
    parse_rfc3339(value.as_str().expect("a time")).expect("an RFC 3339 time")
}

#[test]
fn wait_prints_the_result_and_exits_with_the_outcome() {
    let server = Server::start(CONFIG);
    let dir = server.dir.clone();
    let done = run(
        &dir,
        &[
            "tasks",
            "start",
            "slow_compute",
            "--args",
            r#"{"seconds": 0.2, "label": "sum"}"#,
            "--wait",
        ],
    );
    assert_eq!(done.status.code(), Some(0), "{done:?}");
    assert_eq!(stdout(&done), "sum: done after 0.2 s\n");

    let tool_error = run(&dir, &["tasks", "start", "failing_job", "--wait"]);
    assert_eq!(tool_error.status.code(), Some(3), "{tool_error:?}");
    assert!(stdout(&tool_error).contains("the input data is invalid"));

    let failed = run(
        &dir,
        &["tasks", "start", "protocol_error_job", "--wait", "--json"],
    );
    assert_eq!(failed.status.code(), Some(4), "{failed:?}");
    let failed: Value = serde_json::from_str(&stdout(&failed)).expect("JSON");
    assert_eq!(failed["status"], "failed");
    assert_eq!(
        failed["error"]["message"],
        "The job failed at the protocol level"
    );

    // Cancelled while it is waited for (the arguments from a file this time).
    let arguments = dir.join("args.json");
    std::fs::write(&arguments, r#"{"seconds": 30}"#).unwrap();
    let at_file = format!("@{}", arguments.display());
    let waiting = command(
        &dir,
        &[
            "tasks",
            "start",
            "slow_compute",
            "--args",
            &at_file,
            "--wait",
            "--json",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn");
    let id = poll_until(LIMIT, || {
        let listed = stdout(&run(
            &dir,
            &["tasks", "list", "--json", "--status", "working"],
        ));
        listed.lines().find_map(|line| {
            let task: Value = serde_json::from_str(line).ok()?;
            (task["statusMessage"] == "computing")
                .then(|| task["id"].as_str().map(str::to_owned))?
        })
    })
    .expect("the task runs");
    assert!(run(&dir, &["tasks", "cancel", &id]).status.success());
    let cancelled = waiting.wait_with_output().expect("wait");
    assert_eq!(cancelled.status.code(), Some(5), "{cancelled:?}");
    let cancelled: Value = serde_json::from_str(&stdout(&cancelled)).expect("JSON");
    assert_eq!(cancelled["id"], id.as_str());

    // Refusals are the command's own failure (1), naming what is wrong.
    let unknown = run(&dir, &["tasks", "start", "no_such_tool"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no tool \"no_such_tool\""));
    let bad = run(
        &dir,
        &[
            "tasks",
            "start",
            "slow_compute",
            "--args",
            r#"{"seconds": "x"}"#,
        ],
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("inputSchema"));
    let not_object = run(&dir, &["tasks", "start", "slow_compute", "--args", "[1]"]);
    assert_eq!(not_object.status.code(), Some(1));
}

#[test]
fn a_later_start_and_a_key_hold_across_a_restart() {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = temp.path();
    let mut server = Server::start_in(dir, CONFIG);
    let args = r#"{"seconds": 0.1}"#;
    let later = ok_json(
        dir,
        &[
            "tasks",
            "start",
            "slow_compute",
            "--args",
            args,
            "--at",
            "+8s",
            "--json",
        ],
    );
    let id = later["id"].as_str().expect("id").to_owned();
    let due = ms(&later["runAfter"]);
    assert_eq!(later["deduplicated"], false);
    // Keyed, and far off, so that it is still live after the restart.
    let keyed_args = [
        "tasks",
        "start",
        "slow_compute",
        "--args",
        args,
        "--key",
        "nightly-42",
    ];
    let mut first = keyed_args.to_vec();
    first.extend(["--at", "+1h", "--json"]);
    let keyed = ok_json(dir, &first);
    let keyed_id = keyed["id"].as_str().expect("id").to_owned();
    assert!(server.terminate(LIMIT), "the server stops");

    // No server: the key still answers with its task, into the store.
    let mut again = keyed_args.to_vec();
    again.push("--json");
    let offline = ok_json(dir, &again);
    assert_eq!(
        (offline["id"].as_str(), &offline["deduplicated"]),
        (Some(keyed_id.as_str()), &Value::Bool(true))
    );

    let server = Server::start_in(dir, CONFIG);
    assert!(
        now_ms() < due,
        "the restart took longer than the task's delay"
    );
    // The later task waited for its time, then started within a second of it.
    poll_until(LIMIT, || {
        (show(dir, &id)["status"] == "completed").then_some(())
    })
    .expect("the later task runs");
    let attempts = show(dir, &id)["attempts"].clone();
    let started = ms(&attempts[0]["startedAt"]);
    assert!(
        (due..=due + 1000).contains(&started),
        "due at {due}, started at {started}: {attempts}"
    );
    // The key, after the restart: the same task; with other arguments, refused.
    let online = ok_json(dir, &again);
    assert_eq!(online["id"].as_str(), Some(keyed_id.as_str()));
    assert_eq!(online["deduplicated"], true);
    let other = run(
        dir,
        &[
            "tasks",
            "start",
            "slow_compute",
            "--args",
            r#"{"seconds": 2}"#,
            "--key",
            "nightly-42",
        ],
    );
    assert_eq!(other.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&other.stderr).contains("other arguments"));
    // A client of the task's identity (anonymous, without tokens) follows it.
    assert_eq!(tasks::get(&server, &keyed_id)["status"], "working");
    let listed = stdout(&run(
        dir,
        &["tasks", "list", "--json", "--tool", "slow_compute"],
    ));
    assert_eq!(listed.lines().count(), 2, "one task per key: {listed}");
}
