//! The operator commands through the real binary: `tasks list|show|cancel|rerun`,
//! `stats`, `backup` and `restore`, each against a running server (its admin socket)
//! and on the database with no server running.

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::tasks::{self, wait_terminal};
use crate::common::{poll_until, postgres, Server};

/// The grace is long for a loaded box: a stop must release the running attempts (they
/// end at once) before the commands below find them queued, not still leased.
const CONFIG: &str = "[builtin]\nsets = [\"conformance\", \"testing\"]\n\
                      [workers]\nthreads = 2\nshutdown_grace_ms = 5000\n";

/// Runs `mcp-taskd ARGS --config … --data-dir …` on the data of `dir` (a harness dir).
fn run(dir: &Path, args: &[&str]) -> Output {
    run_on(dir, &dir.join("data"), args)
}

fn run_on(dir: &Path, data_dir: &Path, args: &[&str]) -> Output {
    crate::common::binary()
        .args(args)
        .arg("--config")
        .arg(dir.join("config.toml"))
        .arg("--data-dir")
        .arg(data_dir)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run mcp-taskd")
}

/// Runs a command that must succeed; returns its stdout.
fn ok(dir: &Path, args: &[&str]) -> String {
    let output = run(dir, args);
    assert!(
        output.status.success(),
        "mcp-taskd {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 output")
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

fn listed_ids(dir: &Path, args: &[&str]) -> Vec<String> {
    let mut all = vec!["tasks", "list", "--json"];
    all.extend_from_slice(args);
    json_lines(&ok(dir, &all))
        .iter()
        .map(|task| task["id"].as_str().expect("id").to_owned())
        .collect()
}

/// Every task id in `data_dir` (listed with the configuration of `dir`).
fn every_id(dir: &Path, data_dir: &Path) -> Vec<String> {
    let listed = run_on(
        dir,
        data_dir,
        &["tasks", "list", "--json", "--limit", "1000000"],
    );
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    json_lines(&String::from_utf8(listed.stdout).expect("utf-8 output"))
        .iter()
        .map(|task| task["id"].as_str().expect("id").to_owned())
        .collect()
}

fn show(dir: &Path, id: &str, payload: bool) -> Value {
    let mut args = vec!["tasks", "show", id, "--json"];
    if payload {
        args.push("--payload");
    }
    serde_json::from_str(&ok(dir, &args)).expect("a JSON task")
}

/// Waits until the server runs the `slow_compute` task (it then says "computing").
fn wait_until_running(server: &Server, id: &str) {
    poll_until(Duration::from_secs(10), || {
        (tasks::get(server, id)["statusMessage"] == "computing").then_some(())
    })
    .expect("a worker claims the task");
}

#[test]
fn list_show_cancel_rerun_and_stats_through_a_running_server() {
    let server = Server::start(CONFIG);
    let dir = server.dir.clone();
    let done = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    wait_terminal(&server, &done, Duration::from_secs(10));
    let running = tasks::create(&server, "slow_compute", json!({"seconds": 60}), &[]);
    wait_until_running(&server, &running);

    // list: newest first, filters, a readable table, keyset pages.
    assert_eq!(listed_ids(&dir, &[]), vec![running.clone(), done.clone()]);
    assert_eq!(
        listed_ids(&dir, &["--status", "completed"]),
        vec![done.clone()]
    );
    assert_eq!(
        listed_ids(&dir, &["--tool", "no_such_tool"]),
        Vec::<String>::new()
    );
    assert_eq!(
        listed_ids(&dir, &["--since", "1h", "--limit", "1"]),
        vec![running.clone()]
    );
    assert_eq!(
        listed_ids(&dir, &["--before", &running]),
        vec![done.clone()]
    );
    let table = ok(&dir, &["tasks", "list"]);
    assert!(table.starts_with("ID"), "a table with a header: {table}");
    assert!(table.contains(&done) && table.contains("completed"));
    assert!(!run(&dir, &["tasks", "list", "--status", "sleeping"])
        .status
        .success());

    // show: attempts and origin always; arguments and result only with --payload.
    let task = show(&dir, &done, false);
    assert_eq!(task["status"], "completed");
    assert_eq!(task["attempts"][0]["outcome"], "completed");
    assert_eq!(task["origin"]["protocolVersion"], crate::common::VERSION);
    assert!(task.get("arguments").is_none() && task.get("result").is_none());
    let task = show(&dir, &done, true);
    assert_eq!(task["arguments"], json!({"seconds": 0}));
    assert!(task["result"]["content"].is_array(), "{task}");
    let readable = ok(&dir, &["tasks", "show", &done]);
    assert!(readable.contains("attempts") && !readable.contains("\"seconds\""));
    assert!(!run(&dir, &["tasks", "show", "no-such-task"])
        .status
        .success());

    // stats, while one attempt runs.
    let stats: Value = serde_json::from_str(&ok(&dir, &["stats", "--json"])).unwrap();
    assert_eq!(stats["tasksByStatus"]["completed"], 1);
    assert_eq!(
        stats["tasksByStatus"]["failed"], 0,
        "every status is counted"
    );
    assert_eq!(stats["tasksByTool"]["slow_compute"]["working"], 1);
    assert_eq!(stats["jobs"]["running"], 1);
    assert_eq!(stats["workers"]["busy"], 1);
    assert_eq!(stats["created"]["lastMinute"], 2);
    assert_eq!(stats["attemptsEnded"]["lastHour"]["completed"], 1);
    assert!(ok(&dir, &["stats"]).contains("busy of 2"));

    // cancel: the running attempt is told; a finished task does not change.
    let said = ok(&dir, &["tasks", "cancel", &running, &done]);
    assert!(said.contains("cancellation requested") && said.contains("already completed"));
    let cancelled = wait_terminal(&server, &running, Duration::from_secs(5));
    assert_eq!(cancelled["status"], "cancelled");
    let missing = run(&dir, &["tasks", "cancel", "no-such-task"]);
    assert!(!missing.status.success(), "an unknown id is an error");

    // rerun: a new task, same tool, arguments and binding; the old one unchanged.
    let rerun = ok(&dir, &["tasks", "rerun", &running]).trim().to_owned();
    assert_ne!(rerun, running);
    let copy = show(&dir, &rerun, true);
    assert_eq!(copy["arguments"], json!({"seconds": 60}));
    assert_eq!(copy["tool"], "slow_compute");
    wait_until_running(&server, &rerun); // visible to the original identity
    assert_eq!(tasks::get(&server, &running)["status"], "cancelled");
}

/// One answer holds at most 10,000 tasks; `--limit` beyond that is asked for page by
/// page, with no task twice or left out, newest first throughout. The store is filled
/// with copies of one real task (new ids, every other column the same) while no
/// server runs: 10,000 creations through the server would load the whole suite.
#[test]
fn a_list_longer_than_one_answer_comes_page_by_page() {
    if postgres::sqlite_only("the store is filled through SQLite") {
        return;
    }
    const COPIES: usize = 10_050;
    let mut server = Server::start(CONFIG);
    let dir = server.dir.clone();
    let done = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    wait_terminal(&server, &done, Duration::from_secs(10));
    assert!(
        server.terminate(Duration::from_secs(10)),
        "the server stops"
    );
    let mut conn = rusqlite::Connection::open(dir.join("data/tasks.db")).unwrap();
    let fill = conn.transaction().unwrap();
    fill.execute_batch("CREATE TEMP TABLE copy AS SELECT * FROM tasks")
        .unwrap();
    for n in 0..COPIES {
        // Ids sort after the real one's, as a later row key's would.
        let id = format!("1{:011x}{n:032x}", 0x10_0000 + n);
        fill.execute("UPDATE temp.copy SET id = ?1", [&id]).unwrap();
        fill.execute("INSERT INTO tasks SELECT * FROM temp.copy", [])
            .unwrap();
    }
    fill.commit().unwrap();
    drop(conn);

    let all = listed_ids(&dir, &["--limit", "1000000"]);
    assert_eq!(all.len(), COPIES + 1, "every task, once");
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), all.len());
    assert_eq!(all.last(), Some(&done), "the oldest last");
    let mut newest_first = all.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(all, newest_first, "newest first across the pages");
    assert_eq!(listed_ids(&dir, &["--limit", "10003"]), all[..10_003]);
    assert_eq!(
        listed_ids(&dir, &["--limit", "10001", "--before", &all[10]]),
        all[11..10_012]
    );
}

#[test]
fn the_same_commands_work_on_the_database_when_no_server_runs() {
    let mut server = Server::start(CONFIG);
    let dir = server.dir.clone();
    let done = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    wait_terminal(&server, &done, Duration::from_secs(10));
    let pending = tasks::create(&server, "slow_compute", json!({"seconds": 60}), &[]);
    let queued = tasks::create(&server, "slow_compute", json!({"seconds": 60}), &[]);
    assert!(
        server.terminate(Duration::from_secs(10)),
        "the server stops"
    );
    assert!(
        !dir.join("data/admin.sock").exists(),
        "the socket goes with the server"
    );

    // Newest first (the two created within one millisecond may come in either order).
    let listed = listed_ids(&dir, &[]);
    assert_eq!(listed.len(), 3);
    assert_eq!(
        listed[..2].iter().collect::<HashSet<_>>(),
        HashSet::from([&queued, &pending])
    );
    assert_eq!(listed[2], done);
    let task = show(&dir, &done, true);
    assert_eq!(task["arguments"], json!({"seconds": 0}));
    let stats: Value = serde_json::from_str(&ok(&dir, &["stats", "--json"])).unwrap();
    assert_eq!(stats["tasksByStatus"]["working"], 2);
    assert!(stats["workers"].is_null(), "no workers without a server");

    let said = ok(&dir, &["tasks", "cancel", &pending]);
    assert!(said.contains("cancelled"), "{said}");
    assert_eq!(show(&dir, &pending, false)["status"], "cancelled");
    let rerun = ok(&dir, &["tasks", "rerun", &done]).trim().to_owned();
    assert_eq!(show(&dir, &rerun, false)["status"], "working");

    // The next server runs what was queued meanwhile.
    let server = Server::start_in(&dir, CONFIG);
    assert_eq!(
        wait_terminal(&server, &rerun, Duration::from_secs(10))["status"],
        "completed"
    );
    wait_until_running(&server, &queued);
    assert_eq!(tasks::get(&server, &pending)["status"], "cancelled");
}

#[test]
fn a_server_whose_admin_socket_was_removed_still_stops_on_sigterm() {
    // A test harness that removes the data dir right after its SIGTERM, or an operator
    // cleaning up: nothing can wake the socket's accept any more.
    let mut server = Server::start(CONFIG);
    std::fs::remove_file(server.dir.join("data/admin.sock")).expect("the socket exists");
    assert!(
        server.terminate(Duration::from_secs(10)),
        "the server hung in its shutdown"
    );
}

#[test]
fn the_admin_socket_is_private_to_the_servers_user() {
    let server = Server::start(CONFIG);
    let socket = server.dir.join("data/admin.sock");
    let mode = std::fs::metadata(&socket)
        .expect("the socket exists")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // A request beyond the size cap is refused with an error line.
    use std::io::{BufRead, BufReader, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    let _ = stream.write_all(&vec![b'x'; 70 * 1024]);
    let mut answer = String::new();
    BufReader::new(&stream).read_line(&mut answer).unwrap();
    assert!(answer.contains("longer than"), "{answer}");
    // So is one that is not a request.
    let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    stream.write_all(b"{\"op\":\"drop_tables\"}\n").unwrap();
    let mut answer = String::new();
    BufReader::new(&stream).read_line(&mut answer).unwrap();
    assert!(answer.contains("not a valid request"), "{answer}");
}

#[test]
fn a_backup_under_load_restores_every_acknowledged_task() {
    if postgres::sqlite_only("backup and restore copy the tasks.db file") {
        return;
    }
    // The data outlives the server (the harness's own temp dir would not).
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = temp.path().to_path_buf();
    let server = Server::start_in(&dir, CONFIG);
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let server = Arc::new(server);
    let creators: Vec<_> = (0..3)
        .map(|_| {
            let (server, acknowledged, stop) = (
                Arc::clone(&server),
                Arc::clone(&acknowledged),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let id = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
                    acknowledged.lock().unwrap().push(id);
                }
            })
        })
        .collect();
    poll_until(Duration::from_secs(10), || {
        (acknowledged.lock().unwrap().len() >= 50).then_some(())
    })
    .expect("tasks are being created");
    let before_backup: Vec<String> = acknowledged.lock().unwrap().clone();
    let backup = dir.join("tasks.backup");
    let said = ok(&dir, &["backup", backup.to_str().unwrap()]);
    let during = acknowledged.lock().unwrap().len();
    stop.store(true, Ordering::Release);
    for creator in creators {
        creator.join().unwrap();
    }
    assert!(
        during > before_backup.len(),
        "tasks were created during the backup"
    );
    assert!(said.contains("integrity check ok"), "{said}");
    assert_eq!(
        std::fs::metadata(&backup).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(
        !run(&dir, &["backup", backup.to_str().unwrap()])
            .status
            .success(),
        "a backup never overwrites a file"
    );

    // Restore into a fresh data dir: every task acknowledged before the backup is there.
    let fresh = dir.join("restored");
    let restored = run_on(&dir, &fresh, &["restore", backup.to_str().unwrap()]);
    assert!(
        restored.status.success(),
        "{}",
        String::from_utf8_lossy(&restored.stderr)
    );
    let found: HashSet<String> = every_id(&dir, &fresh).into_iter().collect();
    let lost: Vec<&String> = before_backup
        .iter()
        .filter(|id| !found.contains(*id))
        .collect();
    assert!(lost.is_empty(), "{} acknowledged tasks lost", lost.len());

    // Offline, the CLI takes the backup itself; here onto another file system when
    // there is one (the copy is then copied, not linked, into place).
    drop(server);
    let other_fs = Path::new("/dev/shm");
    let elsewhere = if other_fs.is_dir() {
        tempfile::tempdir_in(other_fs).expect("temp dir")
    } else {
        tempfile::tempdir().expect("temp dir")
    };
    let offline = elsewhere.path().join("offline.backup");
    ok(&dir, &["backup", offline.to_str().unwrap()]);
    assert_eq!(
        std::fs::metadata(&offline).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let staged = std::fs::read_dir(dir.join("data"))
        .unwrap()
        .filter(|entry| {
            let name = entry.as_ref().unwrap().file_name();
            name.to_string_lossy().ends_with(".partial")
        })
        .count();
    assert_eq!(staged, 0, "no staging file is left behind");
    let again = dir.join("again");
    let restored = run_on(&dir, &again, &["restore", offline.to_str().unwrap()]);
    assert!(
        restored.status.success(),
        "{}",
        String::from_utf8_lossy(&restored.stderr)
    );
    let found = every_id(&dir, &again).len();
    let total = acknowledged.lock().unwrap().len();
    assert_eq!(
        found, total,
        "every acknowledged task is in the offline backup"
    );
}

#[test]
fn restore_refuses_a_running_server_an_existing_store_without_force_and_a_bad_file() {
    if postgres::sqlite_only("backup and restore copy the tasks.db file") {
        return;
    }
    let mut server = Server::start(CONFIG);
    let dir = server.dir.clone();
    let id = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    wait_terminal(&server, &id, Duration::from_secs(10));
    let backup = dir.join("tasks.backup");
    ok(&dir, &["backup", backup.to_str().unwrap()]);
    let file = backup.to_str().unwrap();

    let refused = run(&dir, &["restore", file, "--force"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("server is running"));

    assert!(server.terminate(Duration::from_secs(10)));
    let refused = run(&dir, &["restore", file]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--force"));

    let garbage = dir.join("garbage");
    std::fs::write(&garbage, b"not a database at all").unwrap();
    let refused = run(&dir, &["restore", garbage.to_str().unwrap(), "--force"]);
    assert!(!refused.status.success(), "an unverifiable file is refused");

    // A task created after the backup is gone once it is restored with --force.
    let server = Server::start_in(&dir, CONFIG);
    let later = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    drop(server);
    ok(&dir, &["restore", file, "--force"]);
    assert_eq!(listed_ids(&dir, &[]), vec![id]);
    assert!(!listed_ids(&dir, &[]).contains(&later));
}

#[test]
fn a_restore_by_root_leaves_the_store_to_the_data_dirs_owner() {
    if postgres::sqlite_only("restore writes the tasks.db file") {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: only root can give files away");
        return;
    }
    let mut server = Server::start(CONFIG);
    let dir = server.dir.clone();
    tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    let backup = dir.join("tasks.backup");
    ok(&dir, &["backup", backup.to_str().unwrap()]);
    assert!(server.terminate(Duration::from_secs(10)));
    // A data dir owned by the service's user (here `nobody`), as StateDirectory= makes it.
    let data_dir = dir.join("service-data");
    std::fs::create_dir(&data_dir).unwrap();
    std::os::unix::fs::chown(&data_dir, Some(65534), Some(65534)).unwrap();
    let restored = run_on(&dir, &data_dir, &["restore", backup.to_str().unwrap()]);
    assert!(
        restored.status.success(),
        "{}",
        String::from_utf8_lossy(&restored.stderr)
    );
    let owned_by_nobody = || {
        for entry in std::fs::read_dir(&data_dir).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            assert_eq!((meta.uid(), meta.gid()), (65534, 65534), "{entry:?}");
        }
    };
    owned_by_nobody();
    // A command that writes, with no server running, leaves no file to root either.
    let ids = run_on(&dir, &data_dir, &["tasks", "list", "--json"]);
    let id = json_lines(&String::from_utf8(ids.stdout).unwrap())[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let rerun = run_on(&dir, &data_dir, &["tasks", "rerun", &id]);
    assert!(
        rerun.status.success(),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    owned_by_nobody();
}
