//! A task's output (issue 47), through the real binary on either backend: what a command
//! tool prints is kept with its task and read through the output resource, the bridge's
//! `task_status` and `mcp-taskd tasks logs`, within a second of being printed; it
//! survives a `kill -9`; only the task's owner reads it; the cap, the per-tool switch
//! and redaction hold, also under a 100 MB flood; and a failed call says why.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{poll_until, tasks_caps, Server};

const LIMIT: Duration = Duration::from_secs(30);
/// How soon a printed line must be readable: the attempt writes its output at most
/// every 250 ms; the rest is the read.
const VISIBLE_WITHIN: Duration = Duration::from_secs(1);

/// Digests of "alice-token" and "bob-token".
const TENANTS: &str = "[[auth.tokens]]\nprincipal = \"alice\"\ntenant = \"a\"\n\
    sha256 = \"9c220f200955d76c0a38d308225e0ef10c5f971acaf2f8d1d8f732affa5bd1dc\"\n\
    [[auth.tokens]]\nprincipal = \"bob\"\ntenant = \"b\"\n\
    sha256 = \"97dd3707015dcf069cf73022ed7173b1165db6eff24b441cb57fd069a8c4e525\"\n";
const ALICE: (&str, &str) = ("Authorization", "Bearer alice-token");
const BOB: (&str, &str) = ("Authorization", "Bearer bob-token");

/// A configuration serving tests/scripts/chatty.py as `chatty` (then `extra_tool`
/// lines in its `[[tools]]` table), with `extra` before it.
fn config(work: &Path, extra: &str, extra_tool: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/chatty.py");
    format!(
        "[builtin]\nsets = []\n[workers]\nlease_ms = 1000\njanitor_interval_ms = 50\n\
         {extra}\n\
         [[tools]]\nname = \"chatty\"\ndescription = \"prints\"\n\
         command = [\"python3\", \"{script}\"]\nenv = {{ WORK = \"{work}\" }}\n\
         backoff_ms = 50\n{extra_tool}\n",
        script = script.display(),
        work = work.display(),
    )
}

fn temp() -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().expect("temp dir");
    let path = temp.path().to_path_buf();
    (temp, path)
}

fn start_task(server: &Server, arguments: Value, headers: &[(&str, &str)]) -> String {
    let result = server
        .request_with(
            "tools/call",
            json!({"name": "chatty", "arguments": arguments}),
            tasks_caps(),
            headers,
        )
        .result();
    assert_eq!(result["resultType"], "task", "{result}");
    result["taskId"].as_str().expect("taskId").to_owned()
}

fn output_uri(task_id: &str) -> String {
    format!("mcp-taskd://tasks/{task_id}/output")
}

/// `resources/read` of `uri`: the whole JSON-RPC message.
fn read(server: &Server, uri: &str, headers: &[(&str, &str)]) -> Value {
    server
        .request_with("resources/read", json!({"uri": uri}), json!({}), headers)
        .json()
}

/// The text of the task's output resource, and its `_meta` (a read that must succeed).
fn output(server: &Server, task_id: &str, headers: &[(&str, &str)]) -> (String, Value) {
    let answer = read(server, &output_uri(task_id), headers);
    let contents = &answer["result"]["contents"][0];
    let text = contents["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no output text: {answer}"))
        .to_owned();
    (text, contents["_meta"]["dev.mcp-taskd/output"].clone())
}

/// Polls tasks/get until the task ends; returns it.
fn wait_ended(server: &Server, task_id: &str, headers: &[(&str, &str)]) -> Value {
    let mut last = Value::Null;
    poll_until(LIMIT, || {
        last = server
            .request_with(
                "tasks/get",
                json!({"taskId": task_id}),
                tasks_caps(),
                headers,
            )
            .result();
        matches!(
            last["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        )
        .then_some(())
    })
    .unwrap_or_else(|| panic!("task {task_id} did not end: {last}"));
    last
}

/// Waits for `$WORK/<name>`, which the script touches once it has printed.
fn wait_for_file(path: &Path) {
    poll_until(LIMIT, || path.exists().then_some(()))
        .unwrap_or_else(|| panic!("{} never appeared", path.display()));
}

/// `mcp-taskd tasks logs ARGS` on the server's data.
fn logs(server: &Server, args: &[&str]) -> Output {
    crate::common::binary()
        .args(["tasks", "logs"])
        .args(args)
        .arg("--config")
        .arg(server.dir.join("config.toml"))
        .arg("--data-dir")
        .arg(server.dir.join("data"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("run mcp-taskd tasks logs")
}

/// Polls `check` until it holds, for at most [`VISIBLE_WITHIN`] from `since`.
fn visible(what: &str, since: Instant, mut check: impl FnMut() -> bool) {
    let left = VISIBLE_WITHIN.saturating_sub(since.elapsed());
    assert!(
        poll_until(left, || check().then_some(())).is_some(),
        "{what}: not readable within {VISIBLE_WITHIN:?} of being printed"
    );
}

#[test]
fn a_printed_line_is_readable_everywhere_within_a_second_and_the_whole_output_at_the_end() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&work, "", ""));
    let task = start_task(&server, json!({"mode": "hold"}), &[]);
    wait_for_file(&work.join("printed-1"));
    let printed = Instant::now();

    visible("the resource", printed, || {
        output(&server, &task, &[]).0.contains("compiling alpha")
    });
    visible("task_status", printed, || {
        // A client without the Tasks extension, through the bridge.
        let answer = server
            .call_tool("task_status", json!({"taskId": task}), json!({}))
            .result();
        let latest = &answer["structuredContent"]["latestOutput"];
        latest.as_array().is_some_and(|lines| {
            lines
                .iter()
                .any(|line| line == "compiling alpha (attempt 1)")
        }) && answer["content"][0]["text"]
            .as_str()
            .is_some_and(|text| text.contains("linking beta"))
    });
    visible("tasks logs", printed, || {
        let cli = logs(&server, &[&task]);
        cli.status.success() && String::from_utf8_lossy(&cli.stdout).contains("linking beta")
    });

    // The CLI follows the task to its end.
    let follow = {
        let mut command = crate::common::binary();
        command
            .args(["tasks", "logs", &task, "--follow"])
            .arg("--config")
            .arg(server.dir.join("config.toml"))
            .arg("--data-dir")
            .arg(server.dir.join("data"))
            .env("RUST_LOG", "warn");
        std::thread::spawn(move || command.output().expect("run tasks logs --follow"))
    };
    std::fs::write(work.join("go"), "").expect("go");
    let done = wait_ended(&server, &task, &[]);
    assert_eq!(done["status"], "completed", "{done}");
    let followed = follow.join().expect("the follower");
    assert!(followed.status.success(), "{followed:?}");
    let mut followed: Vec<String> = String::from_utf8_lossy(&followed.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    followed.sort();
    assert_eq!(
        followed,
        [
            "building",
            "compiling alpha (attempt 1)",
            "done gamma",
            "linking beta"
        ],
        "every line once, the protocol's lines not among them"
    );

    let (text, meta) = output(&server, &task, &[]);
    assert_eq!(text.lines().count(), 4, "{text}");
    assert_eq!(meta["final"], true, "{meta}");
    assert_eq!(meta["taskStatus"], "completed");
    assert_eq!(meta["dropped"], 0);
    // Reading after the last position gives nothing new, and says so.
    let next = meta["next"].as_str().expect("next").to_owned();
    let answer = read(&server, &next, &[]);
    assert_eq!(answer["result"]["contents"][0]["text"], "", "{answer}");
    assert_eq!(
        answer["result"]["contents"][0]["_meta"]["dev.mcp-taskd/output"]["next"],
        next
    );
    assert_eq!(answer["result"]["cacheScope"], "private");
    assert_eq!(answer["result"]["ttlMs"], 0);

    // Each line with its stream, in the order read from that stream (two pipes read
    // in one turn have no order between them).
    let json_lines = logs(&server, &[&task, "--json"]);
    let lines: Vec<Value> = String::from_utf8_lossy(&json_lines.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    let of = |stream: &str| -> Vec<&str> {
        lines
            .iter()
            .filter(|line| line["stream"] == stream)
            .map(|line| line["text"].as_str().expect("text"))
            .collect()
    };
    assert_eq!(of("stderr"), ["compiling alpha (attempt 1)", "done gamma"]);
    assert_eq!(of("stdout"), ["linking beta"]);
    assert_eq!(of("status"), ["building"]);
    let positions: Vec<i64> = lines
        .iter()
        .filter_map(|line| line["position"].as_i64())
        .collect();
    assert_eq!(positions, [1, 2, 3, 4]);
    assert!(lines.iter().all(|line| line["attempt"] == 1));

    let templates = server
        .request("resources/templates/list", json!({}), json!({}))
        .result();
    assert_eq!(
        templates["resourceTemplates"][0]["uriTemplate"],
        "mcp-taskd://tasks/{taskId}/output"
    );
}

#[test]
fn output_kept_before_a_kill_9_survives_it_and_the_retry_adds_its_own() {
    let (_temp, work) = temp();
    let dir = tempfile::tempdir().expect("data dir");
    let config = config(&work, "", "");
    let mut server = Server::start_in(dir.path(), &config);
    let task = start_task(&server, json!({"mode": "hold"}), &[]);
    wait_for_file(&work.join("printed-1"));
    poll_until(LIMIT, || {
        output(&server, &task, &[])
            .0
            .contains("linking beta")
            .then_some(())
    })
    .expect("the first attempt's lines were written");
    server.kill9();

    let server = Server::start_in(dir.path(), &config);
    let (text, _) = output(&server, &task, &[]);
    for line in ["compiling alpha (attempt 1)", "building", "linking beta"] {
        assert!(text.contains(line), "{text}");
    }
    // The lease runs out, the task runs again: its second attempt's lines follow.
    wait_for_file(&work.join("printed-2"));
    std::fs::write(work.join("go"), "").expect("go");
    assert_eq!(wait_ended(&server, &task, &[])["status"], "completed");
    let (text, _) = output(&server, &task, &[]);
    let (first, second) = text.split_once("--- attempt 2 ---\n").expect("a separator");
    assert!(
        first.contains("(attempt 1)") && !first.contains("(attempt 2)"),
        "{text}"
    );
    assert!(second.contains("compiling alpha (attempt 2)\n"), "{text}");
    let second = logs(&server, &[&task, "--attempt", "2"]);
    let second = String::from_utf8_lossy(&second.stdout);
    assert!(second.contains("compiling alpha (attempt 2)\n"), "{second}");
    assert!(!second.contains("attempt 1"), "{second}");
}

#[test]
fn only_the_tasks_owner_reads_its_output_and_a_stranger_learns_nothing() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&work, TENANTS, ""));
    let task = start_task(&server, json!({"mode": "lines", "count": 3}), &[ALICE]);
    wait_ended(&server, &task, &[ALICE]);
    assert!(output(&server, &task, &[ALICE]).0.contains("line 000003"));

    let foreign = read(&server, &output_uri(&task), &[BOB]);
    let unknown_uri = output_uri("00000000000000000000000000000000");
    let unknown = read(&server, &unknown_uri, &[BOB]);
    assert!(foreign.get("result").is_none(), "{foreign}");
    assert_eq!(foreign["error"]["code"], -32602, "{foreign}");
    assert_eq!(foreign["error"]["code"], unknown["error"]["code"]);
    assert_eq!(foreign["error"]["message"], unknown["error"]["message"]);
    assert_eq!(foreign["error"]["data"], json!({"uri": output_uri(&task)}));
    assert_eq!(unknown["error"]["data"], json!({"uri": unknown_uri}));

    // Through the bridge: the same words as for a task that does not exist.
    let status = |id: &str| {
        server
            .request_with(
                "tools/call",
                json!({"name": "task_status", "arguments": {"taskId": id}}),
                json!({}),
                &[BOB],
            )
            .result()
    };
    let foreign = status(&task);
    assert_eq!(foreign["isError"], true, "{foreign}");
    assert!(!foreign.to_string().contains("line 0000"), "{foreign}");
    let unknown = status("00000000000000000000000000000000");
    assert_eq!(
        foreign["content"][0]["text"]
            .as_str()
            .map(|text| text.replace(&task, "ID")),
        unknown["content"][0]["text"]
            .as_str()
            .map(|text| text.replace("00000000000000000000000000000000", "ID"))
    );
}

#[test]
fn the_cap_keeps_the_newest_lines_and_counts_the_rest() {
    let (_temp, work) = temp();
    // 400 lines of 50 bytes: 20,000 bytes, of which 1,000 are kept.
    let server = Server::start(&config(&work, "", "output_max_bytes = 1000"));
    let task = start_task(
        &server,
        json!({"mode": "lines", "count": 400, "width": 50}),
        &[],
    );
    assert_eq!(wait_ended(&server, &task, &[])["status"], "completed");
    let (text, meta) = output(&server, &task, &[]);
    let kept: Vec<&str> = text.lines().collect();
    assert_eq!(kept.len(), 20, "{text}");
    assert!(kept[19].starts_with("line 000400 "), "the newest: {text}");
    assert!(kept[0].starts_with("line 000381 "), "{text}");
    assert_eq!(meta["dropped"], 380, "{meta}");

    // The server-wide cap, and a tool that keeps nothing.
    let server = Server::start(&config(&work, "[output]\nmax_bytes_per_task = 500\n", ""));
    let task = start_task(
        &server,
        json!({"mode": "lines", "count": 400, "width": 50}),
        &[],
    );
    wait_ended(&server, &task, &[]);
    assert_eq!(output(&server, &task, &[]).0.lines().count(), 10);
    let server = Server::start(&config(&work, "", "output_max_bytes = 0"));
    let task = start_task(&server, json!({"mode": "lines", "count": 5}), &[]);
    wait_ended(&server, &task, &[]);
    let (text, meta) = output(&server, &task, &[]);
    assert_eq!(text, "", "output_max_bytes = 0 keeps nothing");
    assert_eq!(meta["final"], true);
}

#[test]
fn redaction_applies_before_anything_is_stored_or_shown() {
    let (_temp, work) = temp();
    let redact = "[output]\nredact = ['ghp_[A-Za-z0-9]{8,}', '(?i)bearer [a-z0-9._~+/-]+']\n";
    let dir = tempfile::tempdir().expect("data dir");
    let mut server = Server::start_in(dir.path(), &config(&work, redact, ""));
    let task = start_task(&server, json!({"mode": "secrets"}), &[]);
    wait_ended(&server, &task, &[]);
    let (text, _) = output(&server, &task, &[]);
    assert_eq!(
        text,
        "cloning with token [redacted] into /src\nAuthorization: [redacted]\nnothing secret here\n"
    );
    assert!(server.terminate(LIMIT), "the server stops");
    // Nothing stored holds the token: not the database, not its log.
    if crate::common::postgres::backend() == crate::common::postgres::Backend::Sqlite {
        for file in std::fs::read_dir(dir.path().join("data")).expect("data dir") {
            let path = file.expect("entry").path();
            let bytes = std::fs::read(&path).unwrap_or_default();
            assert!(
                !bytes.windows(12).any(|window| window == b"ghp_abcdefgh"),
                "{} holds the token",
                path.display()
            );
        }
    }

    // A pattern that does not compile stops the server from starting, naming it.
    let check = crate::common::binary()
        .arg("check-config")
        .arg("--config")
        .arg({
            let path = work.join("bad.toml");
            std::fs::write(&path, "[output]\nredact = ['(unclosed']\n").expect("config");
            path
        })
        .output()
        .expect("check-config");
    assert!(!check.status.success());
    assert!(
        String::from_utf8_lossy(&check.stderr).contains("output.redact: \"(unclosed\""),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn a_100_mb_flood_keeps_its_cap_counts_every_dropped_line_and_leaves_the_server_answering() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&work, "", ""));
    let task = start_task(&server, json!({"mode": "flood", "megabytes": 100}), &[]);
    // Meanwhile another task's reads are answered (their latency is measured in
    // benches/output_flood.py, not here).
    let other = start_task(&server, json!({"mode": "lines", "count": 1}), &[]);
    while server
        .request("tasks/get", json!({"taskId": task}), tasks_caps())
        .result()["status"]
        == "working"
    {
        let answer = server
            .request("tasks/get", json!({"taskId": other}), tasks_caps())
            .result();
        assert!(answer["status"].is_string(), "{answer}");
    }
    let done = wait_ended(&server, &task, &[]);
    assert_eq!(done["status"], "completed", "{done}");
    let mut kept_lines = 0;
    let mut kept_bytes = 0;
    let mut uri = output_uri(&task);
    let dropped = loop {
        let answer = read(&server, &uri, &[]);
        let contents = &answer["result"]["contents"][0];
        let text = contents["text"].as_str().expect("text");
        kept_lines += text.lines().count();
        kept_bytes += text.lines().map(str::len).sum::<usize>();
        let meta = &contents["_meta"]["dev.mcp-taskd/output"];
        uri = meta["next"].as_str().expect("next").to_owned();
        if meta["more"] == false {
            break meta["dropped"].as_u64().expect("dropped");
        }
    };
    assert!(kept_bytes <= 256 * 1024, "kept {kept_bytes} bytes");
    assert!(kept_bytes > 200 * 1024, "kept only {kept_bytes} bytes");
    assert_eq!(
        kept_lines as u64 + dropped,
        1_000_000,
        "every line printed is kept or counted as dropped"
    );
}

#[test]
fn a_failed_inline_call_says_why_with_the_end_of_its_output() {
    let (_temp, work) = temp();
    let server = Server::start(&config(
        &work,
        "[tasks]\nbridge = false\n",
        "task_policy = \"inline\"",
    ));
    let answer = server.call_tool("chatty", json!({"mode": "fail"}), json!({}));
    assert_eq!(answer.status, 200, "{}", answer.text());
    let result = answer.result();
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(
        result["content"][0]["text"],
        "The tool failed: the program exited with status 2 without a final result line. \
         The end of its output:\nerror: disk quota exceeded on /var/build"
    );

    // As a task, the same reason and lines are in its error, and in the bridge's answer.
    let server = Server::start(&config(&work, "", "max_attempts = 1"));
    let task = start_task(&server, json!({"mode": "fail"}), &[]);
    let failed = wait_ended(&server, &task, &[]);
    assert_eq!(
        failed["error"]["message"],
        "Task failed after 1 attempt: the program exited with status 2 without a final \
         result line. The end of its output:\nerror: disk quota exceeded on /var/build",
        "{failed}"
    );
    let status = server
        .call_tool("task_status", json!({"taskId": task}), json!({}))
        .result();
    let text = status["content"][0]["text"].as_str().expect("text");
    assert!(
        text.ends_with("The end of its output:\nerror: disk quota exceeded on /var/build"),
        "{text}"
    );

    // A tool that keeps no output shows none, not even in a failure's message.
    let server = Server::start(&config(&work, "", "max_attempts = 1\noutput_max_bytes = 0"));
    let task = start_task(&server, json!({"mode": "fail"}), &[]);
    assert_eq!(
        wait_ended(&server, &task, &[])["error"]["message"],
        "Task failed after 1 attempt: the program exited with status 2 without a final \
         result line"
    );
    let inline = server
        .request(
            "tools/call",
            json!({"name": "chatty", "arguments": {"mode": "fail"}}),
            json!({}),
        )
        .result();
    assert!(!inline.to_string().contains("disk quota"), "{inline}");
}

#[test]
fn the_output_expires_with_its_task() {
    let (_temp, work) = temp();
    let dir = tempfile::tempdir().expect("data dir");
    let mut server = Server::start_in(dir.path(), &config(&work, "", "ttl_ms = 2000"));
    let task = start_task(&server, json!({"mode": "lines", "count": 50}), &[]);
    wait_ended(&server, &task, &[]);
    assert_eq!(output(&server, &task, &[]).0.lines().count(), 50);
    // Past its TTL the task is invisible at once; the janitor deletes it (and, in the
    // same write, its output) at its next round: `tasks show` then knows only its
    // history summary (issue 48), which keeps no output.
    poll_until(LIMIT, || {
        let shown = crate::common::binary()
            .args(["tasks", "show", &task, "--json", "--config"])
            .arg(server.dir.join("config.toml"))
            .arg("--data-dir")
            .arg(server.dir.join("data"))
            .env("RUST_LOG", "warn")
            .output()
            .expect("run tasks show");
        let shown: Value = serde_json::from_slice(&shown.stdout).ok()?;
        (shown["history"] == true).then_some(())
    })
    .expect("the task is deleted");
    let answer = read(&server, &output_uri(&task), &[]);
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert!(server.terminate(LIMIT), "the server stops");
    if crate::common::postgres::backend() == crate::common::postgres::Backend::Sqlite {
        let conn = rusqlite::Connection::open(dir.path().join("data/tasks.db")).expect("open");
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM task_output", [], |row| row.get(0))
            .expect("count");
        assert_eq!(rows, 0, "no line outlives its task");
    }
}
