//! Flow control (issue 48) through the real binary, on either backend (and two
//! PostgreSQL nodes at the end): concurrency keys, rate limits and paused tools. What
//! ran when is read from the store (`tasks show --json`: each attempt's start and end
//! as the store recorded them), never from the test's own clock.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{poll_until, postgres, tasks_caps, Server};

const LIMIT: Duration = Duration::from_secs(30);

/// A configuration serving tests/scripts/deploy.py as `deploy` (then `tool_extra` in its
/// table), with `extra` before it.
fn config(work: &Path, extra: &str, tool_extra: &str) -> String {
    config_leased(work, 1000, extra, tool_extra)
}

/// [`config`] with leases of `lease_ms`.
fn config_leased(work: &Path, lease_ms: u64, extra: &str, tool_extra: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/deploy.py");
    format!(
        "[builtin]\nsets = []\n[workers]\nthreads = 8\nlease_ms = {lease_ms}\n\
         janitor_interval_ms = 50\nshutdown_grace_ms = 200\n{extra}\n\
         {}",
        deploy_tool("deploy", &script, work, tool_extra)
    )
}

fn deploy_tool(name: &str, script: &Path, work: &Path, extra: &str) -> String {
    format!(
        "[[tools]]\nname = \"{name}\"\ndescription = \"deploys\"\n\
         command = [\"python3\", \"{script}\"]\nenv = {{ WORK = \"{work}\" }}\n\
         backoff_ms = 50\n\
         input_schema = {{ type = \"object\", properties = {{ environment = {{ type = \"string\" }}, \
         hold = {{ type = \"boolean\" }}, seconds = {{ type = \"number\" }} }} }}\n{extra}\n",
        script = script.display(),
        work = work.display(),
    )
}

const KEYED: &str = "concurrency_key = \"/environment\"";

fn temp() -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().expect("temp dir");
    let path = temp.path().to_path_buf();
    (temp, path)
}

fn start(server: &Server, tool: &str, arguments: Value) -> String {
    let result = server.call_tool(tool, arguments, tasks_caps()).result();
    assert_eq!(result["resultType"], "task", "{result}");
    result["taskId"].as_str().expect("taskId").to_owned()
}

fn get(server: &Server, task_id: &str) -> Value {
    server
        .request("tasks/get", json!({"taskId": task_id}), tasks_caps())
        .result()
}

fn wait_status(server: &Server, task_id: &str, status: &str) -> Value {
    let mut last = Value::Null;
    poll_until(LIMIT, || {
        last = get(server, task_id);
        (last["status"] == status).then_some(())
    })
    .unwrap_or_else(|| panic!("task {task_id} never became {status}: {last}"));
    last
}

fn wait_message(server: &Server, task_id: &str, message: &str) {
    let mut last = Value::Null;
    poll_until(LIMIT, || {
        last = get(server, task_id);
        (last["statusMessage"] == message).then_some(())
    })
    .unwrap_or_else(|| panic!("task {task_id} never said {message:?}: {last}"));
}

fn wait_file(path: &Path) {
    poll_until(LIMIT, || path.exists().then_some(()))
        .unwrap_or_else(|| panic!("{} never appeared", path.display()));
}

/// `mcp-taskd ARGS` on the server's data; its stdout, or a panic with its stderr.
fn cli(server: &Server, args: &[&str]) -> String {
    let output = cli_output(server, args);
    assert!(
        output.status.success(),
        "mcp-taskd {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn cli_output(server: &Server, args: &[&str]) -> std::process::Output {
    crate::common::binary()
        .args(args)
        .arg("--config")
        .arg(server.dir.join("config.toml"))
        .arg("--data-dir")
        .arg(server.dir.join("data"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("run mcp-taskd")
}

/// Each attempt of the task as the store recorded it: (start, end) in Unix ms.
fn attempts(server: &Server, task_id: &str) -> Vec<(i64, Option<i64>)> {
    let shown: Value =
        serde_json::from_str(&cli(server, &["tasks", "show", task_id, "--json"])).expect("JSON");
    shown["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|attempt| {
            (
                rfc3339_ms(attempt["startedAt"].as_str().expect("startedAt")),
                attempt["endedAt"].as_str().map(rfc3339_ms),
            )
        })
        .collect()
}

/// `2026-12-06T07:22:31.569Z` as Unix ms (UTC, as the server writes times).
fn rfc3339_ms(text: &str) -> i64 {
    let number = |range: std::ops::Range<usize>| -> i64 {
        text.get(range)
            .and_then(|digits| digits.parse().ok())
            .unwrap_or_else(|| panic!("not an RFC 3339 time: {text}"))
    };
    let (year, month, day) = (number(0..4), number(5..7), number(8..10));
    let (hour, minute, second) = (number(11..13), number(14..16), number(17..19));
    let fraction: String = text[19..]
        .trim_start_matches('.')
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let millis = format!("{fraction:0<3}")[..3].parse::<i64>().unwrap_or(0);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis
}

/// The most intervals that overlap at any instant (an end equal to a start does not).
fn most_at_once(intervals: &[(i64, i64)]) -> usize {
    let mut edges: Vec<(i64, i32)> = intervals
        .iter()
        .flat_map(|(start, end)| [(*start, 1), (*end, -1)])
        .collect();
    // Ends before starts at the same instant.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

#[test]
fn a_key_runs_one_task_at_a_time_in_order_and_other_keys_are_not_held_up() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&work, "", KEYED));
    let first = start(
        &server,
        "deploy",
        json!({"environment": "prod", "hold": true}),
    );
    wait_file(&work.join(format!("started-{first}-1")));
    let second = start(&server, "deploy", json!({"environment": "prod"}));
    wait_message(
        &server,
        &second,
        "waiting: another run for environment=prod is in progress",
    );
    // Another key goes on meanwhile.
    let other = start(&server, "deploy", json!({"environment": "staging"}));
    wait_status(&server, &other, "completed");
    assert_eq!(get(&server, &second)["status"], "working");
    assert!(attempts(&server, &second).is_empty(), "held: never started");

    std::fs::write(work.join("go"), "").expect("go");
    wait_status(&server, &first, "completed");
    wait_status(&server, &second, "completed");
    let first_end = attempts(&server, &first)[0].1.expect("ended");
    let second_start = attempts(&server, &second)[0].0;
    assert!(
        second_start >= first_end,
        "the second run started ({second_start}) before the first ended ({first_end})"
    );
}

#[test]
fn twenty_tasks_over_three_keys_never_run_beyond_the_limit_as_the_store_records_it() {
    let (_temp, work) = temp();
    let server = Server::start(&config(
        &work,
        "",
        &format!("{KEYED}\nmax_concurrency_per_key = 2"),
    ));
    let keys = ["a", "b", "c"];
    let created: Vec<(String, &str)> = (0..20)
        .map(|i| {
            let key = keys[i % 3];
            let seconds = 0.05 + 0.05 * (i % 4) as f64;
            let id = start(
                &server,
                "deploy",
                json!({"environment": key, "seconds": seconds}),
            );
            (id, key)
        })
        .collect();
    for (id, _) in &created {
        wait_status(&server, id, "completed");
    }
    for key in keys {
        let mut runs: Vec<(String, i64, i64)> = created
            .iter()
            .filter(|(_, k)| *k == key)
            .flat_map(|(id, _)| {
                attempts(&server, id)
                    .into_iter()
                    .map(move |(start, end)| (id.clone(), start, end.expect("ended")))
            })
            .collect();
        let intervals: Vec<(i64, i64)> = runs.iter().map(|(_, s, e)| (*s, *e)).collect();
        assert!(
            most_at_once(&intervals) <= 2,
            "key {key}: more than 2 at once: {runs:?}"
        );
        // In order of creation within the key (ids sort by creation).
        runs.sort_by(|a, b| a.0.cmp(&b.0));
        let starts: Vec<i64> = runs.iter().map(|(_, start, _)| *start).collect();
        assert!(
            starts.windows(2).all(|pair| pair[0] <= pair[1]),
            "key {key} started out of creation order: {runs:?}"
        );
    }
}

#[test]
fn a_held_task_waits_its_turn_across_a_kill_9() {
    let (_temp, work) = temp();
    let dir = tempfile::tempdir().expect("data dir");
    let config = config(&work, "", KEYED);
    let mut server = Server::start_in(dir.path(), &config);
    let first = start(
        &server,
        "deploy",
        json!({"environment": "prod", "hold": true}),
    );
    wait_file(&work.join(format!("started-{first}-1")));
    let second = start(&server, "deploy", json!({"environment": "prod"}));
    wait_message(
        &server,
        &second,
        "waiting: another run for environment=prod is in progress",
    );
    server.kill9();

    let server = Server::start_in(dir.path(), &config);
    // The first task's lease runs out and it runs again; the second still waits.
    wait_file(&work.join(format!("started-{first}-2")));
    wait_message(
        &server,
        &second,
        "waiting: another run for environment=prod is in progress",
    );
    assert!(attempts(&server, &second).is_empty());
    std::fs::write(work.join("go"), "").expect("go");
    wait_status(&server, &second, "completed");
    let first_end = attempts(&server, &first)
        .last()
        .and_then(|(_, end)| *end)
        .expect("ended");
    assert!(attempts(&server, &second)[0].0 >= first_end);
}

#[test]
fn an_inline_call_takes_a_place_of_its_key_and_waits_for_it_up_to_its_timeout() {
    let (_temp, work) = temp();
    let server = Server::start(&config(
        &work,
        "[tasks]\nbridge = false\n",
        &format!("{KEYED}\ntimeout_ms = 600"),
    ));
    let held = start(
        &server,
        "deploy",
        json!({"environment": "prod", "hold": true}),
    );
    wait_file(&work.join(format!("started-{held}-1")));
    let inline = |environment: &str| {
        server
            .call_tool("deploy", json!({"environment": environment}), json!({}))
            .result()
    };
    let refused = inline("prod");
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(
        refused["content"][0]["text"],
        "The tool did not run: the place for environment=prod stayed taken for 600 ms. \
         Try again later."
    );
    assert_eq!(
        inline("staging")["content"][0]["text"],
        "deployed to staging"
    );
    std::fs::write(work.join("go"), "").expect("go");
    wait_status(&server, &held, "completed");
    assert_eq!(inline("prod")["content"][0]["text"], "deployed to prod");
}

#[test]
fn a_rate_limited_tool_starts_no_faster_than_its_rate_and_no_client_sees_an_error() {
    let (_temp, work) = temp();
    // 60 tasks at 60 a second: the last starts at least 59/60 s after the first (the
    // issue's 6/min over 9 minutes, scaled). Leases of 10 s: "one attempt each" is about
    // the rate (a start it defers is no attempt), not about a loaded box where a 1 s
    // lease may lapse and the janitor rightly runs the task again.
    let server = Server::start(&config_leased(&work, 10_000, "", "rate = \"60/s\""));
    let ids: Vec<String> = (0..60)
        .map(|_| start(&server, "deploy", json!({"environment": "api"})))
        .collect();
    for id in &ids {
        let done = wait_status(&server, id, "completed");
        assert!(done.get("error").is_none(), "{done}");
    }
    let starts: Vec<i64> = ids
        .iter()
        .flat_map(|id| attempts(&server, id))
        .map(|(start, _)| start)
        .collect();
    assert_eq!(starts.len(), 60, "one attempt each");
    let span = starts.iter().max().expect("starts") - starts.iter().min().expect("starts");
    assert!(span >= 900, "60 starts at 60/s took only {span} ms");

    // A slow rate: the next task says until when; an inline call gives up in time.
    let (_temp, work) = temp();
    let server = Server::start(&config(
        &work,
        "[tasks]\nbridge = false\n",
        "rate = \"1/min\"\ntimeout_ms = 300",
    ));
    let first = start(&server, "deploy", json!({"environment": "api"}));
    wait_status(&server, &first, "completed");
    let second = start(&server, "deploy", json!({"environment": "api"}));
    let mut last = Value::Null;
    poll_until(LIMIT, || {
        last = get(&server, &second);
        last["statusMessage"]
            .as_str()
            .is_some_and(|m| m.starts_with("waiting for the tool's rate limit until "))
            .then_some(())
    })
    .unwrap_or_else(|| panic!("the waiting task does not say why: {last}"));
    let inline = server
        .call_tool("deploy", json!({"environment": "api"}), json!({}))
        .result();
    assert_eq!(
        inline["content"][0]["text"],
        "The tool did not run: the tool's rate limit allowed no start for 300 ms. Try \
         again later."
    );
    assert!(attempts(&server, &second).is_empty());
}

#[test]
fn a_paused_tool_keeps_its_queue_across_a_reload_and_a_kill_9_then_resumes() {
    let (_temp, work) = temp();
    let dir = tempfile::tempdir().expect("data dir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/deploy.py");
    let strict = deploy_tool("deploy_strict", &script, &work, "on_pause = \"refuse\"");
    let config = config(&work, "", "") + &strict;
    let mut server = Server::start_in(dir.path(), &config);
    cli(
        &server,
        &["tools", "pause", "deploy", "--reason", "deploy freeze"],
    );
    cli(&server, &["tools", "pause", "deploy_strict"]);
    let queued: Vec<String> = (0..2)
        .map(|_| start(&server, "deploy", json!({"environment": "prod"})))
        .collect();
    for id in &queued {
        wait_message(&server, id, "paused: deploy freeze");
    }
    // A tool that refuses while paused says so; an inline call is refused by any.
    let refused = server
        .call_tool(
            "deploy_strict",
            json!({"environment": "prod"}),
            tasks_caps(),
        )
        .result();
    assert_eq!(refused["isError"], true, "{refused}");
    assert_eq!(
        refused["content"][0]["text"],
        "The tool deploy_strict is paused: nothing was started. Try again once an operator \
         resumes it."
    );
    let unknown = cli_output(&server, &["tools", "pause", "no_such_tool"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no tool no_such_tool is served"));

    server.signal("HUP");
    let listed = cli(&server, &["tools", "list"]);
    assert!(listed.contains("PAUSED"), "{listed}");
    server.kill9();
    let server = Server::start_in(dir.path(), &config);
    let listed = cli(&server, &["tools", "list", "--json"]);
    let deploy: Value = listed
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|tool| tool["name"] == "deploy")
        .expect("deploy listed");
    assert_eq!(deploy["paused"], true, "{deploy}");
    assert_eq!(deploy["pauseReason"], "deploy freeze");
    for id in &queued {
        wait_message(&server, id, "paused: deploy freeze");
        assert!(attempts(&server, id).is_empty(), "a paused tool's task ran");
    }

    cli(&server, &["tools", "resume", "deploy"]);
    for id in &queued {
        wait_status(&server, id, "completed");
    }
    let again = cli_output(&server, &["tools", "resume", "deploy"]);
    assert!(!again.status.success(), "resuming twice is an error");
}

#[test]
fn keys_rates_and_pauses_hold_across_two_postgresql_nodes() {
    let Some(cluster) =
        postgres::required_by("keys_rates_and_pauses_hold_across_two_postgresql_nodes")
    else {
        return;
    };
    let url = cluster.url(&cluster.create_database());
    let (_temp, work) = temp();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/deploy.py");
    let node_config = format!(
        "[builtin]\nsets = []\n[workers]\nthreads = 4\nlease_ms = 1000\n\
         janitor_interval_ms = 50\nshutdown_grace_ms = 200\n\
         [store]\nbackend = \"postgres\"\nurl = \"{url}\"\npool_size = 8\n{}{}",
        deploy_tool("deploy", &script, &work, KEYED),
        deploy_tool("api", &script, &work, "rate = \"20/s\""),
    );
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Server::start_in(dir_a.path(), &node_config);
    let b = Server::start_in(dir_b.path(), &node_config);

    // Keys: twelve deploys over three environments, created on both nodes.
    let created: Vec<(String, &str)> = (0..12)
        .map(|i| {
            let key = ["x", "y", "z"][i % 3];
            let node = if i % 2 == 0 { &a } else { &b };
            let id = start(node, "deploy", json!({"environment": key, "seconds": 0.1}));
            (id, key)
        })
        .collect();
    for (id, _) in &created {
        wait_status(&a, id, "completed");
    }
    for key in ["x", "y", "z"] {
        let intervals: Vec<(i64, i64)> = created
            .iter()
            .filter(|(_, k)| *k == key)
            .flat_map(|(id, _)| attempts(&a, id))
            .map(|(start, end)| (start, end.expect("ended")))
            .collect();
        assert_eq!(most_at_once(&intervals), 1, "key {key}: {intervals:?}");
    }

    // Rates: twenty starts at 20/s, whichever node runs them.
    let ids: Vec<String> = (0..20)
        .map(|i| start(if i % 2 == 0 { &a } else { &b }, "api", json!({})))
        .collect();
    for id in &ids {
        wait_status(&b, id, "completed");
    }
    let starts: Vec<i64> = ids
        .iter()
        .flat_map(|id| attempts(&a, id))
        .map(|(s, _)| s)
        .collect();
    let span = starts.iter().max().expect("starts") - starts.iter().min().expect("starts");
    assert!(
        span >= 900,
        "20 starts at 20/s over two nodes took only {span} ms"
    );

    // A pause on one node holds on the other.
    cli(&a, &["tools", "pause", "deploy", "--reason", "freeze"]);
    let waiting = start(&b, "deploy", json!({"environment": "x"}));
    wait_message(&b, &waiting, "paused: freeze");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        attempts(&b, &waiting).is_empty(),
        "node b ran a paused tool's task"
    );
    cli(&b, &["tools", "resume", "deploy"]);
    wait_status(&a, &waiting, "completed");
}
