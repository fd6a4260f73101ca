//! Fair workers: a tool at its `max_concurrency` keeps its jobs queued without holding
//! worker threads, so other tools' tasks run meanwhile, and its inline calls share its
//! slots with its task attempts.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::tasks::wait_terminal;
use crate::common::{poll_until, tasks_caps, Server};
use serde_json::{json, Value};

const THREADS: u64 = 4;

/// Built-in tools plus `serial`: tests/scripts/serial.sh, one run at a time, 0.1 s each.
fn config(work: &Path) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/serial.sh");
    format!(
        "[builtin]\nsets = [\"conformance\"]\n[workers]\nthreads = {THREADS}\n\
         [tasks]\nbridge = false\n\n\
         [[tools]]\nname = \"serial\"\ndescription = \"serial.sh\"\ncommand = [{script:?}]\n\
         env = {{ WORK = {work:?}, PAUSE = \"0.1\" }}\nmax_concurrency = 1\n",
        script = script.to_string_lossy(),
        work = work.to_string_lossy(),
    )
}

fn submit(server: &Server, tool: &str, arguments: Value) -> String {
    let result = server.call_tool(tool, arguments, tasks_caps()).result();
    assert_eq!(result["resultType"], "task", "{result}");
    result["taskId"].as_str().expect("taskId").to_owned()
}

fn attempts_running(server: &Server) -> u64 {
    server
        .get("/metrics")
        .text()
        .lines()
        .find_map(|line| line.strip_prefix("mcp_taskd_attempts_running "))
        .and_then(|count| count.trim().parse().ok())
        .expect("mcp_taskd_attempts_running in /metrics")
}

#[test]
fn a_saturated_tool_neither_starves_other_tools_nor_outgrows_its_limit() {
    let work = tempfile::tempdir().expect("temp dir");
    let server = Server::start(&config(work.path()));
    let backlog: Vec<String> = (0..50)
        .map(|_| submit(&server, "serial", json!({})))
        .collect();

    // Queued behind 50 jobs of a tool that runs one at a time (5 s of work), a quick
    // task of another tool still runs at once.
    let started = Instant::now();
    let quick = submit(&server, "slow_compute", json!({"seconds": 0.1}));
    let done = wait_terminal(&server, &quick, Duration::from_secs(10));
    assert_eq!(done["status"], "completed");
    let waited = started.elapsed();
    assert!(waited < Duration::from_millis(1500), "took {waited:?}");

    // An inline call shares the tool's one slot with its tasks: it waits its turn.
    let inline = server.call_tool("serial", json!({}), json!({})).result();
    assert_eq!(inline["content"][0]["text"], "done");

    // Meanwhile no more attempts run than there are workers, and the backlog drains.
    let mut most = 0;
    let drained = poll_until(Duration::from_secs(40), || {
        most = most.max(attempts_running(&server));
        let last = backlog.last().expect("a backlog");
        let status = server
            .request("tasks/get", json!({"taskId": last}), tasks_caps())
            .result()["status"]
            .clone();
        (status != "working").then_some(())
    });
    assert!(drained.is_some(), "the saturated tool's backlog drained");
    assert!(most <= THREADS, "{most} attempts at once");
    for task in &backlog {
        let done = wait_terminal(&server, task, Duration::from_secs(10));
        assert_eq!(done["status"], "completed", "{done}");
    }

    // One run at a time, tasks and the inline call alike.
    let log = std::fs::read_to_string(work.path().join("log")).expect("the runs' log");
    let log: Vec<&str> = log.lines().collect();
    assert_eq!(log.len(), 2 * 51, "{log:?}");
    for pair in log.chunks(2) {
        let run = pair[0].strip_prefix("start ").expect("a start");
        assert_eq!(pair[1], format!("end {run}"), "runs overlapped: {log:?}");
    }
    assert!(log.contains(&"start inline"));
}
