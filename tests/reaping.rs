//! Descendants that leave a command tool's process group (`setsid`, double fork) are
//! killed and reaped when their run ends, however it ends; the orphans of a run still
//! running are left alone.
//!
//! That is Linux's supervision (a child subreaper, `/proc`). The portable one (macOS,
//! and Linux built with `--features portable`, which `.ci/run` tests) cannot find a
//! descendant that left the group: it re-parents to init and outlives its run, as
//! docs/macos.md says. Built that way, these tests check that difference instead (see
//! [`FINDS_ESCAPEES`]); everything else (each run's outcome, the program's group dying,
//! no zombies) they check the same.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{poll_until, tasks_caps, Server};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(20);
/// How soon an escapee must be gone once its run has ended.
const GONE_WITHIN: Duration = Duration::from_secs(5);
/// Whether this build's supervision finds descendants that left their run's process
/// group (Linux's does; the portable one cannot: docs/macos.md).
const FINDS_ESCAPEES: bool = cfg!(not(feature = "portable"));

/// A `[[tools]]` entry running tests/scripts/escape.sh with `escape` and `end`.
///
/// A program that exits gets one attempt: built portable, a retry could start before
/// its escapee left the group, which then dies with it and lets the retry pass.
fn escape_tool(name: &str, work: &Path, escape: &str, end: &str, extra: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/escape.sh");
    let attempts = if end == "exit" {
        "max_attempts = 1\n"
    } else {
        ""
    };
    format!(
        "[[tools]]\nname = \"{name}\"\ndescription = \"escape.sh\"\n\
         command = [\"{script}\", \"{escape}\", \"{end}\"]\n\
         env = {{ WORK = \"{work}\" }}\nbackoff_ms = 50\n{attempts}{extra}\n",
        script = script.display(),
        work = work.display(),
    )
}

/// Checks the answer of a run whose program exited, leaving an escapee that holds its
/// stdout unless `hidden`. Linux kills the escapee first and the output counts; built
/// portable, nothing can find it, the pipe stays open, and the attempt fails after
/// its grace (docs/macos.md).
fn assert_exit_answer(text: &Value, hidden: bool, answer: &Value) {
    if FINDS_ESCAPEES || hidden {
        assert_eq!(text, "left one behind", "{answer}");
    } else {
        let text = text.as_str().unwrap_or_default();
        assert!(text.contains("its stdout stayed open"), "{answer}");
    }
}

fn config(tools: &[String]) -> String {
    format!("[builtin]\nsets = []\n\n{}", tools.concat())
}

fn temp() -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().expect("temp dir");
    let path = temp.path().to_path_buf();
    (temp, path)
}

/// One process, named by its pid and its start time (so a reused pid is not it).
#[derive(Debug)]
struct Process {
    pid: u32,
    start: String,
}

/// Fields of /proc/<pid>/stat after the command name: state is 0, ppid 1, session 3,
/// start time 19.
fn stat(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

impl Process {
    /// Whether it still exists, running or as a zombie nobody has reaped.
    fn exists(&self) -> bool {
        stat(self.pid).is_some_and(|fields| fields.get(19) == Some(&self.start))
    }

    fn parent(&self) -> Option<u32> {
        stat(self.pid)?.get(1)?.parse().ok()
    }
}

/// The escapee the program recorded in `work`, once it has left its group: it leads a
/// session of its own.
fn escapee(work: &Path) -> Process {
    let process = poll_until(LIMIT, || {
        let text = std::fs::read_to_string(work.join("escapees")).ok()?;
        let pid: u32 = text.lines().next()?.trim().parse().ok()?;
        let fields = stat(pid)?;
        Some(Process {
            pid,
            start: fields.get(19)?.clone(),
        })
        .filter(|_| fields.get(3) == Some(&pid.to_string()))
    })
    .expect("the program recorded an escapee in a session of its own");
    assert!(process.exists(), "{process:?}");
    process
}

/// The escapee is gone within [`GONE_WITHIN`]: killed, and reaped (no zombie left).
///
/// Built portable, where nothing can find it, it must instead still run, an orphan of
/// init's and not the server's, once its run has ended (the caller has seen the end);
/// then the test kills it itself.
fn assert_gone(process: &Process) {
    if !FINDS_ESCAPEES {
        assert_outlived_its_run(process);
        return;
    }
    assert!(
        poll_until(GONE_WITHIN, || (!process.exists()).then_some(())).is_some(),
        "escapee {process:?} still exists: {:?}",
        stat(process.pid)
    );
}

/// The portable supervision's documented gap: the escapee survived its run's end.
/// Kills it, so that the test leaves nothing behind.
fn assert_outlived_its_run(process: &Process) {
    let survived = process.exists();
    let _ = std::process::Command::new("kill")
        .arg("-KILL")
        .arg(process.pid.to_string())
        .status();
    assert!(
        survived,
        "escapee {process:?} was found: the portable build cannot"
    );
}

/// The server's children (of every one of its threads), by pid.
fn children_of(server: &Server) -> Vec<u32> {
    let pid = server.pid();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|child| child.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// The server's children that are zombies.
fn zombies_of(server: &Server) -> Vec<u32> {
    children_of(server)
        .into_iter()
        .filter(|&child| stat(child).is_some_and(|fields| fields[0] == "Z"))
        .collect()
}

/// Once runs have ended, the server has reaped everything that died under it.
fn assert_no_zombies(server: &Server) {
    let clean = poll_until(GONE_WITHIN, || zombies_of(server).is_empty().then_some(()));
    assert!(clean.is_some(), "zombies: {:?}", zombies_of(server));
}

/// Calls the escape tool `tool` inline, lets it go, and checks its answer
/// ([`assert_exit_answer`]): the process it left behind in `work`.
fn call_leaving_one_behind(server: &Server, tool: &str, work: &Path, hidden: bool) -> Process {
    let (result, escapee) = std::thread::scope(|scope| {
        let call = scope.spawn(|| server.call_tool(tool, json!({}), json!({})).result());
        let escapee = escapee(work);
        go(work);
        (call.join().expect("the call"), escapee)
    });
    assert_exit_answer(&result["content"][0]["text"], hidden, &result);
    escapee
}

/// Lets an "exit" program finish.
fn go(work: &Path) {
    std::fs::write(work.join("go"), b"").expect("write go");
}

fn start_task(server: &Server, tool: &str) -> String {
    let result = server.call_tool(tool, json!({}), tasks_caps()).result();
    assert_eq!(result["resultType"], "task", "{result}");
    result["taskId"].as_str().expect("taskId").to_owned()
}

/// Polls tasks/get until the task is terminal.
fn wait_terminal(server: &Server, task_id: &str) -> Value {
    poll_until(LIMIT, || {
        let task = server
            .request("tasks/get", json!({"taskId": task_id}), tasks_caps())
            .result();
        let status = task["status"].as_str().unwrap_or_default();
        matches!(status, "completed" | "failed" | "cancelled").then_some(task)
    })
    .expect("task reached a terminal status")
}

#[test]
fn a_setsid_grandchild_dies_when_the_program_exits_and_its_output_counts() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&[escape_tool("t", &work, "setsid", "exit", "")]));
    let task = start_task(&server, "t");
    let escapee = escapee(&work);
    go(&work);
    let done = wait_terminal(&server, &task);
    // The escapee held stdout open: on Linux it no longer turns a good run into a
    // failed one.
    if FINDS_ESCAPEES {
        assert_eq!(done["status"], "completed", "{done}");
        assert_exit_answer(&done["result"]["content"][0]["text"], false, &done);
    } else {
        assert_eq!(done["status"], "failed", "{done}");
        assert_exit_answer(&done["error"]["message"], false, &done);
    }
    assert_gone(&escapee);
    assert_no_zombies(&server);
}

#[test]
fn a_setsid_grandchild_dies_when_the_task_is_cancelled() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&[escape_tool("t", &work, "setsid", "wait", "")]));
    let task = start_task(&server, "t");
    let escapee = escapee(&work);
    let cancel = server.request("tasks/cancel", json!({"taskId": task}), tasks_caps());
    assert_eq!(cancel.result()["resultType"], "complete");
    assert_eq!(wait_terminal(&server, &task)["status"], "cancelled");
    assert_gone(&escapee);
    assert_no_zombies(&server);
}

#[test]
fn a_setsid_grandchild_dies_when_the_attempt_times_out() {
    let (_temp, work) = temp();
    let extra = "timeout_ms = 1500\nmax_attempts = 1";
    let server = Server::start(&config(&[escape_tool("t", &work, "setsid", "wait", extra)]));
    let task = start_task(&server, "t");
    let escapee = escapee(&work);
    let failed = wait_terminal(&server, &task);
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_gone(&escapee);
    assert_no_zombies(&server);
}

#[test]
fn a_setsid_grandchild_dies_when_the_program_writes_too_much() {
    let (_temp, work) = temp();
    let extra = "max_output_bytes = 1000\nmax_attempts = 1";
    let server = Server::start(&config(&[escape_tool(
        "t", &work, "setsid", "flood", extra,
    )]));
    let task = start_task(&server, "t");
    let escapee = escapee(&work);
    // The flood starts only now: once it has, the escapee may be gone before it is seen.
    std::fs::write(work.join("go"), b"").expect("write go");
    let failed = wait_terminal(&server, &task);
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("more than 1000 bytes"), "{failed}");
    assert_gone(&escapee);
    assert_no_zombies(&server);
}

#[test]
fn a_double_forked_orphan_dies_when_the_inline_call_ends() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&[escape_tool("t", &work, "double", "exit", "")]));
    let escapee = call_leaving_one_behind(&server, "t", &work, false);
    assert_gone(&escapee);
}

#[test]
fn orphans_of_a_run_still_running_survive_another_runs_end() {
    let (_temp, running) = temp();
    let (_temp2, ending) = temp();
    let server = Server::start(&config(&[
        escape_tool("running", &running, "double", "wait", ""),
        escape_tool("ending", &ending, "double", "exit", ""),
    ]));
    let task = start_task(&server, "running");
    let survivor = escapee(&running);
    if FINDS_ESCAPEES {
        // Its parent died at once: the server adopted it (it is a child subreaper).
        let adopted = poll_until(LIMIT, || {
            (survivor.parent() == Some(server.pid())).then_some(())
        });
        assert!(adopted.is_some(), "parent {:?}", survivor.parent());
    }

    let ended = call_leaving_one_behind(&server, "ending", &ending, false);
    assert_gone(&ended);
    assert!(survivor.exists(), "the running task's orphan was killed");

    let cancel = server.request("tasks/cancel", json!({"taskId": task}), tasks_caps());
    assert_eq!(cancel.result()["resultType"], "complete");
    assert_gone(&survivor);
}

#[test]
fn a_setsid_grandchild_dies_on_a_graceful_shutdown() {
    let (_temp, work) = temp();
    let mut server = Server::start(&config(&[escape_tool("t", &work, "setsid", "wait", "")]));
    start_task(&server, "t");
    let escapee = escapee(&work);
    assert!(server.terminate(LIMIT), "the server exits on SIGTERM");
    assert_gone(&escapee);
}

#[test]
fn a_grandchild_with_nothing_of_its_run_dies_when_the_task_is_cancelled() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&[escape_tool(
        "t",
        &work,
        "setsid-hidden",
        "wait",
        "",
    )]));
    let task = start_task(&server, "t");
    let escapee = escapee(&work);
    let cancel = server.request("tasks/cancel", json!({"taskId": task}), tasks_caps());
    assert_eq!(cancel.result()["resultType"], "complete");
    assert_gone(&escapee);
}

#[test]
fn an_orphan_with_a_replaced_environment_that_holds_stdout_dies_when_the_call_ends() {
    let (_temp, work) = temp();
    let server = Server::start(&config(&[escape_tool(
        "t",
        &work,
        "double-bare",
        "exit",
        "",
    )]));
    let escapee = call_leaving_one_behind(&server, "t", &work, false);
    assert_gone(&escapee);
}

#[test]
fn an_orphan_with_nothing_of_its_run_dies_at_the_latest_on_a_graceful_shutdown() {
    let (_temp, work) = temp();
    let mut server = Server::start(&config(&[escape_tool(
        "t",
        &work,
        "double-hidden",
        "exit",
        "",
    )]));
    let escapee = call_leaving_one_behind(&server, "t", &work, true);
    assert!(server.terminate(LIMIT), "the server exits on SIGTERM");
    assert_gone(&escapee);
}

/// A `[[tools]]` entry running tests/scripts/stubborn.sh, which ignores SIGTERM and
/// leaves a grandchild in its group and an escapee in a session of its own.
fn stubborn_tool(work: &Path) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/stubborn.sh");
    format!(
        "[[tools]]\nname = \"stubborn\"\ndescription = \"stubborn.sh\"\n\
         command = [\"{script}\"]\nenv = {{ WORK = \"{work}\" }}\n",
        script = script.display(),
        work = work.display(),
    )
}

/// The process whose pid the program wrote to `work/file`.
fn recorded(work: &Path, file: &str) -> Process {
    poll_until(LIMIT, || {
        let text = std::fs::read_to_string(work.join(file)).ok()?;
        let pid: u32 = text.lines().next()?.trim().parse().ok()?;
        let start = stat(pid)?.get(19)?.clone();
        Some(Process { pid, start })
    })
    .unwrap_or_else(|| panic!("the program recorded a live process in {file}"))
}

/// stubborn.sh's program, grandchild and escapee, once all three run.
fn stubborn_processes(work: &Path) -> Vec<Process> {
    poll_until(LIMIT, || work.join("ready").exists().then_some(()))
        .expect("the program started its grandchild and its escapee");
    let processes: Vec<Process> = ["program", "grandchildren", "escapees"]
        .iter()
        .map(|file| recorded(work, file))
        .collect();
    for process in &processes {
        assert!(process.exists(), "{process:?} is not running");
    }
    processes
}

/// Each process is dead within [`GONE_WITHIN`]. Once the server is gone nobody of
/// ours reaps them: a zombie waiting for init counts as dead.
fn assert_dead(processes: &[Process]) {
    for process in processes {
        let dead = || {
            stat(process.pid)
                .filter(|fields| fields.get(19) == Some(&process.start))
                .is_none_or(|fields| fields[0] == "Z" || fields[0] == "X")
        };
        assert!(
            poll_until(GONE_WITHIN, || dead().then_some(())).is_some(),
            "{process:?} still runs after the server was killed: {:?}",
            stat(process.pid)
        );
    }
}

/// What the run guard must kill once the server is killed: stubborn.sh's program,
/// grandchild and escapee. Built portable, the guard kills the programs' groups from
/// the server's record of them and the escapee survives (docs/macos.md).
fn assert_guard_killed(processes: &[Process]) {
    match processes.split_last() {
        Some((escapee, group)) if !FINDS_ESCAPEES => {
            assert_dead(group);
            assert_outlived_its_run(escapee);
        }
        _ => assert_dead(processes),
    }
}

/// The server's live run guard: its child running this binary in guard mode.
fn guard_of(server: &Server) -> Option<u32> {
    children_of(server).into_iter().find(|child| {
        std::fs::read(format!("/proc/{child}/cmdline"))
            .is_ok_and(|cmdline| cmdline.split(|&b| b == 0).any(|arg| arg == b"__run-guard"))
    })
}

#[test]
fn a_server_killed_with_kill_9_takes_its_program_and_all_it_started_along() {
    let (_temp, work) = temp();
    let mut server = Server::start(&config(&[stubborn_tool(&work)]));
    start_task(&server, "stubborn");
    let processes = stubborn_processes(&work);
    server.kill9();
    // The run guard saw the server die: the program (deaf to SIGTERM), its grandchild
    // and the escapee in another session all carried the server's run marker.
    assert_guard_killed(&processes);
}

#[test]
fn a_run_guard_that_dies_is_restarted_and_still_covers_running_programs() {
    let (_temp, work) = temp();
    let mut server = Server::start(&config(&[stubborn_tool(&work)]));
    start_task(&server, "stubborn");
    let processes = stubborn_processes(&work);
    let first = poll_until(LIMIT, || guard_of(&server)).expect("the server has a run guard");
    let killed = std::process::Command::new("kill")
        .arg("-KILL")
        .arg(first.to_string())
        .status()
        .expect("run kill");
    assert!(killed.success());
    let second = poll_until(LIMIT, || guard_of(&server).filter(|&pid| pid != first));
    assert!(second.is_some(), "the run guard was not restarted");
    // The new guard covers the program started before it.
    server.kill9();
    assert_guard_killed(&processes);
}
