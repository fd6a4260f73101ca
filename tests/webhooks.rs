//! Webhooks (issue 49): the real binary delivers task events to a receiver on loopback
//! that verifies every signature with the `standardwebhooks` package from PyPI
//! (tests/scripts/webhook_receiver.py; the venv is .ci/webhooks.sh's). Every event of
//! 1,000 tasks arrives exactly once after dedup by `webhook-id`, across two `kill -9`s;
//! a receiver that was down gets the backlog in order per task; a delivery past its
//! horizon is dead until `mcp-taskd webhooks retry`; an https URL on loopback reaches
//! nothing. Both backends (`MCP_TASKD_TEST_BACKEND`).
//!
//! Without the venv these tests say so and pass, unless `MCP_TASKD_REQUIRE_WEBHOOKS`
//! is set (CI sets it).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::tasks;
use crate::common::{poll_until, Server};

/// A Standard Webhooks secret (24 bytes), as `whsec_` and base64.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The venv's python (.ci/webhooks.sh), or `None` (and a note) when it is not there.
fn verifier_python() -> Option<PathBuf> {
    let python = std::env::var_os("MCP_TASKD_WEBHOOKS_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            let home = std::env::var_os("HOME")?;
            Some(Path::new(&home).join(".cache/mcp-taskd-webhooks/venv/bin/python"))
        })
        .filter(|python| python.is_file());
    if python.is_none() {
        assert!(
            std::env::var_os("MCP_TASKD_REQUIRE_WEBHOOKS").is_none(),
            "MCP_TASKD_REQUIRE_WEBHOOKS is set and no standardwebhooks venv was found: run .ci/webhooks.sh"
        );
        eprintln!("skipped: no standardwebhooks venv (run .ci/webhooks.sh)");
    }
    python
}

/// The receiver: a child process appending what it verified to a file.
struct Receiver {
    child: Child,
    port: u16,
    out: PathBuf,
    python: PathBuf,
}

impl Receiver {
    fn start(python: &Path, out: &Path, port: u16) -> Receiver {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/webhook_receiver.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg(SECRET)
            .arg(out)
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the receiver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the receiver's port");
        Receiver {
            child,
            port: line.trim().parse().expect("a port"),
            out: out.to_owned(),
            python: python.to_owned(),
        }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Started again on the same port.
    fn restart(&mut self) {
        self.stop();
        let again = poll_until(Duration::from_secs(10), || {
            TcpListener::bind(("127.0.0.1", self.port)).ok().map(drop)
        });
        assert!(again.is_some(), "the receiver's port stays taken");
        *self = Receiver::start(&self.python.clone(), &self.out.clone(), self.port);
    }

    /// Makes it answer 500 (`true`) or verify and record again (`false`).
    fn failing(&self, fail: bool) {
        let flag = self.out.with_extension("jsonl.fail");
        if fail {
            std::fs::write(flag, "").expect("fail flag");
        } else {
            let _ = std::fs::remove_file(flag);
        }
    }

    /// Everything received so far, in arrival order.
    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A configuration with one webhook to the receiver on `port`.
fn config(dir: &Path, port: u16, events: &[&str], extra: &str) -> String {
    let secret = dir.join("webhook.secret");
    std::fs::write(&secret, format!("{SECRET}\n")).expect("secret file");
    format!(
        "[builtin]\nsets = [\"conformance\"]\n\
         [[webhooks]]\nname = \"receiver\"\nurl = \"http://127.0.0.1:{port}/hook\"\n\
         events = {events:?}\nsecret_file = {:?}\nallow_http = [\"127.0.0.1\"]\n{extra}",
        secret.display().to_string()
    )
}

/// Received events, verified, deduplicated by `webhook-id`: for each task, its
/// (event, id) in the order they first arrived.
fn by_task(received: &[Value]) -> BTreeMap<String, Vec<(String, String)>> {
    let mut seen = BTreeSet::new();
    let mut tasks: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for entry in received {
        assert_eq!(entry["ok"], true, "a signature did not verify: {entry}");
        let id = entry["id"].as_str().expect("webhook-id").to_owned();
        if !seen.insert(id.clone()) {
            continue;
        }
        let task = entry["taskId"].as_str().expect("taskId").to_owned();
        let event = entry["type"].as_str().expect("type").to_owned();
        tasks.entry(task).or_default().push((event, id));
    }
    tasks
}

/// Runs `mcp-taskd ARGS` on the server's configuration and data.
fn cli(dir: &Path, args: &[&str]) -> Output {
    crate::common::binary()
        .args(args)
        .arg("--config")
        .arg(dir.join("config.toml"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("run mcp-taskd")
}

fn cli_json(dir: &Path, args: &[&str]) -> Vec<Value> {
    let output = cli(dir, args);
    assert!(
        output.status.success(),
        "mcp-taskd {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

#[test]
fn every_event_of_a_thousand_tasks_arrives_once_after_dedup_across_two_kill_9s() {
    let Some(python) = verifier_python() else {
        return;
    };
    let _heavy = crate::common::heavy();
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(&python, &dir.path().join("received.jsonl"), 0);
    let config = config(
        dir.path(),
        receiver.port,
        &["task.created", "task.completed", "task.failed"],
        "concurrency = 8\n",
    );
    let mut server = Server::start_in(dir.path(), &config);
    let mut created = Vec::new();
    for n in 0..1000 {
        if n == 350 || n == 700 {
            // Deliveries are in flight (the receiver is slower than creations).
            server.kill9();
            server = Server::start_in(dir.path(), &config);
        }
        let (tool, arguments) = if n % 10 == 9 {
            ("protocol_error_job", json!({}))
        } else {
            ("slow_compute", json!({"seconds": 0}))
        };
        created.push((tasks::create(&server, tool, arguments, &[]), tool));
    }
    let expected = 2 * created.len();
    let all = poll_until(Duration::from_secs(120), || {
        let tasks = by_task(&receiver.received());
        (tasks.values().map(Vec::len).sum::<usize>() >= expected).then_some(tasks)
    });
    let received = receiver.received();
    let tasks = all.unwrap_or_else(|| {
        let got = by_task(&received);
        panic!(
            "{} distinct events of {expected} after 120 s ({} received)",
            got.values().map(Vec::len).sum::<usize>(),
            received.len()
        )
    });
    for (id, tool) in &created {
        let events: Vec<&str> = tasks
            .get(id)
            .map(|events| events.iter().map(|(event, _)| event.as_str()).collect())
            .unwrap_or_default();
        let end = if *tool == "protocol_error_job" {
            "task.failed"
        } else {
            "task.completed"
        };
        // Exactly one webhook-id per event, created first.
        assert_eq!(events, ["task.created", end], "task {id}");
    }
    assert_eq!(tasks.len(), created.len(), "events of tasks never created");
    eprintln!(
        "{} deliveries received for {expected} events ({} duplicates, dropped by webhook-id)",
        received.len(),
        received.len() - expected
    );
    // Nothing pending once all has arrived (the last outcomes are recorded promptly).
    let settled = poll_until(Duration::from_secs(10), || {
        let list = cli_json(dir.path(), &["webhooks", "list", "--json"]);
        (list[0]["pending"] == 0).then_some(list)
    });
    assert!(settled.is_some(), "deliveries still pending");
    server.terminate(Duration::from_secs(10));
}

#[test]
fn a_receiver_down_for_a_while_gets_the_backlog_in_order_per_task() {
    let Some(python) = verifier_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut receiver = Receiver::start(&python, &dir.path().join("received.jsonl"), 0);
    let config = config(
        dir.path(),
        receiver.port,
        &[
            "task.created",
            "task.input_required",
            "task.completed",
            "task.failed",
            "task.cancelled",
        ],
        "include_result = true\n",
    );
    let server = Server::start_in(dir.path(), &config);
    receiver.stop();
    let mut created = Vec::new();
    for n in 0..40 {
        let tool = match n % 4 {
            0 => "protocol_error_job",
            _ => "slow_compute",
        };
        let arguments = if tool == "slow_compute" {
            json!({"seconds": 0})
        } else {
            json!({})
        };
        created.push(tasks::create(&server, tool, arguments, &[]));
    }
    // A task that asks for input, answered while the receiver is down.
    let asking = tasks::create(&server, "confirm_delete", json!({"filename": "x"}), &[]);
    let task = tasks::wait_for(&server, &asking, "input_required", Duration::from_secs(20));
    let key = task["inputRequests"]
        .as_object()
        .and_then(|requests| requests.keys().next().cloned())
        .expect("an input request");
    tasks::update(
        &server,
        &asking,
        json!({key: {"action": "accept", "content": {"confirm": true}}}),
        &[],
    );
    for id in created.iter().chain([&asking]) {
        tasks::wait_terminal(&server, id, Duration::from_secs(30));
    }
    // Attempts failed (no receiver) and are waiting for their retries.
    let failing = poll_until(Duration::from_secs(20), || {
        let metrics = String::from_utf8_lossy(&server.get("/metrics").body).into_owned();
        metrics
            .lines()
            .any(|line| {
                line.starts_with(
                    "mcp_taskd_webhook_deliveries_total{webhook=\"receiver\",outcome=\"retried\"}",
                ) && !line.ends_with(" 0")
            })
            .then_some(())
    });
    assert!(failing.is_some(), "no failed attempt counted");
    let pending = cli_json(dir.path(), &["webhooks", "list", "--json"]);
    assert_eq!(pending[0]["name"], "receiver");
    assert!(
        pending[0]["pending"].as_u64().unwrap_or(0) > 0,
        "{pending:?}"
    );
    std::thread::sleep(Duration::from_secs(3));
    receiver.restart();
    let expected = 2 * created.len() + 3;
    let tasks = poll_until(Duration::from_secs(60), || {
        let tasks = by_task(&receiver.received());
        (tasks.values().map(Vec::len).sum::<usize>() >= expected).then_some(tasks)
    })
    .expect("the backlog arrives once the receiver is back");
    for (n, id) in created.iter().enumerate() {
        let events: Vec<&str> = tasks[id].iter().map(|(event, _)| event.as_str()).collect();
        let end = if n % 4 == 0 {
            "task.failed"
        } else {
            "task.completed"
        };
        assert_eq!(events, ["task.created", end], "task {id}");
    }
    let events: Vec<&str> = tasks[&asking].iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(
        events,
        ["task.created", "task.input_required", "task.completed"],
        "the asking task's events, in order"
    );
    // include_result: a completed task's result, a failed task's error.
    let received = receiver.received();
    assert!(received
        .iter()
        .filter(|entry| entry["type"] == "task.completed")
        .all(|entry| entry["hasResult"] == true));
    assert!(received
        .iter()
        .filter(|entry| entry["type"] == "task.failed")
        .all(|entry| entry["hasError"] == true));
    let metrics = String::from_utf8_lossy(&server.get("/metrics").body).into_owned();
    assert!(
        metrics.contains("mcp_taskd_webhook_delivery_lag_seconds_count{webhook=\"receiver\"}"),
        "lag histogram"
    );
}

#[test]
fn a_delivery_past_its_horizon_is_dead_until_retried() {
    let Some(python) = verifier_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(&python, &dir.path().join("received.jsonl"), 0);
    receiver.failing(true);
    let config = config(
        dir.path(),
        receiver.port,
        &["task.completed"],
        "retry_for = \"2s\"\n",
    );
    let server = Server::start_in(dir.path(), &config);
    let id = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    let dead = poll_until(Duration::from_secs(30), || {
        let deliveries = cli_json(
            dir.path(),
            &[
                "webhooks",
                "list",
                "--deliveries",
                "--state",
                "dead",
                "--json",
            ],
        );
        (deliveries.len() == 1).then_some(deliveries)
    })
    .expect("the delivery is dead once its horizon has passed");
    assert_eq!(dead[0]["taskId"], id.as_str());
    assert_eq!(dead[0]["lastStatus"], 500);
    assert!(dead[0]["attempts"].as_i64().unwrap_or(0) >= 2, "{dead:?}");
    assert!(receiver.received().is_empty());
    receiver.failing(false);
    let refused = cli(dir.path(), &["webhooks", "retry"]);
    assert!(
        !refused.status.success(),
        "retry without a scope is refused"
    );
    let retried = cli(dir.path(), &["webhooks", "retry", "--webhook", "receiver"]);
    assert!(retried.status.success());
    assert!(String::from_utf8_lossy(&retried.stdout).contains("1 dead"));
    let arrived = poll_until(Duration::from_secs(20), || {
        let received = receiver.received();
        (!received.is_empty()).then_some(received)
    })
    .expect("the retried delivery arrives");
    assert_eq!(arrived[0]["taskId"], id.as_str());
    assert_eq!(arrived[0]["id"], dead[0]["id"], "the same webhook-id");
    let metrics = String::from_utf8_lossy(&server.get("/metrics").body).into_owned();
    assert!(metrics
        .contains("mcp_taskd_webhook_deliveries_total{webhook=\"receiver\",outcome=\"dead\"} 1"));
}

#[test]
fn https_to_loopback_reaches_nothing_and_plain_http_needs_allow_http() {
    // Nothing here needs the verifier: the receiver is a bare listener that must see
    // no connection at all.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("webhook.secret"), format!("{SECRET}\n")).unwrap();
    let secret = dir.path().join("webhook.secret").display().to_string();
    let plain = format!(
        "[builtin]\nsets = [\"conformance\"]\n[[webhooks]]\nurl = \"http://127.0.0.1:{port}/\"\n\
         events = [\"task.completed\"]\nsecret_file = {secret:?}\n"
    );
    std::fs::write(dir.path().join("plain.toml"), &plain).unwrap();
    let refused = crate::common::binary()
        .args(["check-config", "--config"])
        .arg(dir.path().join("plain.toml"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("allow_http"), "{said}");
    let config = format!(
        "[builtin]\nsets = [\"conformance\"]\n[[webhooks]]\nname = \"loop\"\n\
         url = \"https://localhost:{port}/\"\nevents = [\"task.completed\"]\n\
         secret_file = {secret:?}\n"
    );
    let server = Server::start_in(dir.path(), &config);
    let id = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    let failed = poll_until(Duration::from_secs(20), || {
        let deliveries = cli_json(dir.path(), &["webhooks", "list", "--deliveries", "--json"]);
        deliveries
            .into_iter()
            .find(|d| d["taskId"] == id.as_str() && d["attempts"].as_i64().unwrap_or(0) >= 1)
    })
    .expect("an attempt was made and failed");
    let why = failed["lastError"].as_str().unwrap_or_default();
    assert!(why.contains("no public address"), "{why}");
    assert!(
        listener.accept().is_err(),
        "the loopback listener was connected to"
    );
}

#[test]
fn two_postgresql_nodes_deliver_each_event_once_between_them() {
    let Some(python) = verifier_python() else {
        return;
    };
    let Some(cluster) = crate::common::postgres::required_by(
        "two_postgresql_nodes_deliver_each_event_once_between_them",
    ) else {
        return;
    };
    let url = cluster.url(&cluster.create_database());
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(&python, &dir.path().join("received.jsonl"), 0);
    let config = format!(
        "{}[store]\nbackend = \"postgres\"\nurl = \"{url}\"\npool_size = 8\n",
        config(
            dir.path(),
            receiver.port,
            &["task.created", "task.completed"],
            "concurrency = 8\n"
        )
    );
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Server::start_in(a_dir.path(), &config);
    let b = Server::start_in(b_dir.path(), &config);
    let mut created = Vec::new();
    for n in 0..200 {
        let node = if n % 2 == 0 { &a } else { &b };
        created.push(tasks::create(
            node,
            "slow_compute",
            json!({"seconds": 0}),
            &[],
        ));
    }
    let expected = 2 * created.len();
    let tasks = poll_until(Duration::from_secs(60), || {
        let tasks = by_task(&receiver.received());
        (tasks.values().map(Vec::len).sum::<usize>() >= expected).then_some(tasks)
    })
    .expect("every event arrives");
    for id in &created {
        let events: Vec<&str> = tasks[id].iter().map(|(e, _)| e.as_str()).collect();
        assert_eq!(events, ["task.created", "task.completed"], "task {id}");
    }
    // Neither node crashed: each delivery was made by one node, once.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        receiver.received().len(),
        expected,
        "a delivery was made twice"
    );
}
