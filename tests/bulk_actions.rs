//! `mcp-taskd tasks cancel|rerun` with the filters of `tasks list` (issue 48): what
//! they count, that they act only when told to (`--yes`), in batches, on exactly the
//! tasks counted, through a running server and offline; and the link a rerun keeps to
//! the task it repeats.

use std::collections::HashSet;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::tasks::{self, wait_terminal};
use crate::common::{poll_until, Server};

/// Two workers: of six long tasks, two run and four wait.
const CONFIG: &str = "[builtin]\nsets = [\"conformance\", \"testing\"]\n\
                      [workers]\nthreads = 2\nshutdown_grace_ms = 5000\n";

const LIMIT: Duration = Duration::from_secs(30);

/// `mcp-taskd ARGS` on the data of the server whose harness dir is `dir`.
pub fn cli(dir: &Path, args: &[&str]) -> Output {
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

/// A command that must succeed: its stdout.
pub fn ok(dir: &Path, args: &[&str]) -> String {
    let output = cli(dir, args);
    assert!(
        output.status.success(),
        "mcp-taskd {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 output")
}

/// The JSON report of a bulk action (its last line: the count comes first on stderr).
fn report(dir: &Path, args: &[&str]) -> Value {
    let out = ok(dir, args);
    serde_json::from_str(out.lines().last().expect("a report")).expect("a JSON report")
}

/// `tasks list --json` with `args`: every row.
pub fn listed(dir: &Path, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["tasks", "list", "--json", "--limit", "100000"];
    all.extend_from_slice(args);
    ok(dir, &all)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

fn ids(rows: &[Value]) -> HashSet<String> {
    rows.iter()
        .map(|row| row["id"].as_str().expect("id").to_owned())
        .collect()
}

pub fn show(dir: &Path, id: &str) -> Value {
    serde_json::from_str(&ok(dir, &["tasks", "show", id, "--json"])).expect("a JSON task")
}

#[test]
fn a_filtered_cancel_counts_first_and_acts_only_with_yes() {
    let server = Server::start(CONFIG);
    let dir = server.dir.clone();
    let done = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    wait_terminal(&server, &done, LIMIT);
    let failed = tasks::create(&server, "protocol_error_job", json!({}), &[]);
    wait_terminal(&server, &failed, LIMIT);
    let long: Vec<String> = (0..6)
        .map(|_| tasks::create(&server, "slow_compute", json!({"seconds": 60}), &[]))
        .collect();
    poll_until(LIMIT, || {
        let running = long
            .iter()
            .filter(|id| tasks::get(&server, id)["statusMessage"] == "computing")
            .count();
        (running == 2).then_some(())
    })
    .expect("two of the long tasks run");

    // Without --yes (stdin is no terminal here): the count, and nothing done.
    let asked = cli(&dir, &["tasks", "cancel", "--tool", "slow_compute"]);
    assert!(!asked.status.success(), "no --yes, no action");
    let said = String::from_utf8_lossy(&asked.stdout);
    assert!(said.contains("6 unfinished task(s) match"), "{said}");
    assert!(
        String::from_utf8_lossy(&asked.stderr).contains("nothing was done"),
        "{}",
        String::from_utf8_lossy(&asked.stderr)
    );
    for id in &long {
        assert_eq!(tasks::get(&server, id)["status"], "working");
    }
    // Nonsense is refused before anything is counted.
    assert!(!cli(&dir, &["tasks", "cancel"]).status.success());
    assert!(
        !cli(&dir, &["tasks", "cancel", "--status", "failed", "--yes"])
            .status
            .success()
    );
    assert!(!cli(&dir, &["tasks", "cancel", &done, "--tool", "x"])
        .status
        .success());

    let cancelled = report(
        &dir,
        &[
            "tasks",
            "cancel",
            "--tool",
            "slow_compute",
            "--yes",
            "--json",
        ],
    );
    assert_eq!(cancelled["matched"], 6, "{cancelled}");
    assert_eq!(cancelled["counts"]["cancel_requested"], 2, "{cancelled}");
    assert_eq!(cancelled["counts"]["cancelled"], 4, "{cancelled}");
    assert_eq!(ids(cancelled["tasks"].as_array().unwrap()), ids_of(&long));
    for id in &long {
        assert_eq!(wait_terminal(&server, id, LIMIT)["status"], "cancelled");
    }
    assert_eq!(tasks::get(&server, &done)["status"], "completed");
    assert_eq!(tasks::get(&server, &failed)["status"], "failed");
    // Nothing unfinished is left to match.
    let again = ok(
        &dir,
        &["tasks", "cancel", "--tool", "slow_compute", "--yes"],
    );
    assert!(again.contains("0 unfinished task(s) match"), "{again}");
}

fn ids_of(list: &[String]) -> HashSet<String> {
    list.iter().cloned().collect()
}

/// 120 failed tasks among 125: a rerun of `--status failed` re-runs those 120 (two
/// batches: 100 a request), each new task linked to the one it repeats, and not the
/// new tasks, which fail too and would match.
#[test]
fn a_filtered_rerun_repeats_the_tasks_counted_in_batches_each_linked() {
    let server = Server::start(CONFIG);
    let dir = server.dir.clone();
    let failed: Vec<String> = (0..120)
        .map(|_| tasks::create(&server, "protocol_error_job", json!({}), &[]))
        .collect();
    let others: Vec<String> = (0..5)
        .map(|_| tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]))
        .collect();
    for id in failed.iter().chain(&others) {
        wait_terminal(&server, id, LIMIT);
    }
    let rerun = report(
        &dir,
        &[
            "tasks", "rerun", "--status", "failed", "--since", "1h", "--yes", "--json",
        ],
    );
    assert_eq!(rerun["matched"], 120, "{rerun}");
    assert_eq!(rerun["counts"], json!({"rerun": 120}));
    let done = rerun["tasks"].as_array().expect("tasks");
    assert_eq!(ids(done), ids_of(&failed), "each failed task once");
    let mut new_ids = Vec::new();
    for task in done {
        let new = task["newId"].as_str().expect("a new task").to_owned();
        assert!(!failed.contains(&new));
        new_ids.push(new);
    }
    let sample = done[7]["newId"].as_str().unwrap();
    assert_eq!(show(&dir, sample)["rerunOf"], done[7]["id"]);
    for id in &new_ids {
        wait_terminal(&server, id, LIMIT);
    }
    // The reruns failed as well, and are not rerun themselves.
    let now_failed = listed(&dir, &["--status", "failed"]);
    assert_eq!(now_failed.len(), 240);
    let linked: Vec<&Value> = now_failed
        .iter()
        .filter(|row| !row["rerunOf"].is_null())
        .collect();
    assert_eq!(linked.len(), 120, "tasks list --json shows the link");
    assert!(ok(&dir, &["tasks", "show", sample]).contains("rerun of"));

    // The single form still works, and links too.
    let one = ok(&dir, &["tasks", "rerun", &others[0]]).trim().to_owned();
    assert_eq!(show(&dir, &one)["rerunOf"], others[0]);
    wait_terminal(&server, &one, LIMIT);
}

/// With no server running, the same commands act on the database.
#[test]
fn bulk_actions_work_offline_too() {
    let mut server = Server::start(CONFIG);
    let dir = server.dir.clone();
    let failed = tasks::create(&server, "protocol_error_job", json!({}), &[]);
    wait_terminal(&server, &failed, LIMIT);
    let queued: Vec<String> = (0..3)
        .map(|_| tasks::create(&server, "slow_compute", json!({"seconds": 60}), &[]))
        .collect();
    assert!(server.terminate(LIMIT), "the server stops");
    let cancelled = report(
        &dir,
        &["tasks", "cancel", "--status", "working", "--yes", "--json"],
    );
    assert_eq!(cancelled["counts"], json!({"cancelled": 3}), "{cancelled}");
    let rerun = report(
        &dir,
        &[
            "tasks",
            "rerun",
            "--tool",
            "protocol_error_job",
            "--yes",
            "--json",
        ],
    );
    assert_eq!(rerun["counts"], json!({"rerun": 1}), "{rerun}");
    let new = rerun["tasks"][0]["newId"].as_str().expect("new").to_owned();
    for id in &queued {
        assert_eq!(show(&dir, id)["status"], "cancelled");
    }
    // The next server runs the rerun.
    let server = Server::start_in(&dir, CONFIG);
    assert_eq!(wait_terminal(&server, &new, LIMIT)["status"], "failed");
    assert_eq!(show(&dir, &new)["rerunOf"], failed);
}
