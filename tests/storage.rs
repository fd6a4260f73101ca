//! Storage faults (issue 13, findings 4 and 5): a disk filled to the brim, a damaged
//! database, a read-only or vanished data dir. Each is clear to clients (503 with
//! `Retry-After` naming the cause, never a bare internal error), visible on `/healthz`,
//! and recovers without a restart once the fault ends.
//!
//! Full and read-only disks are tmpfs mounts, so these tests need `mount` (root, as
//! here and in CI); without it they say so and skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::tasks::{self, wait_terminal};
use crate::common::{poll_until, postgres, tasks_caps, HttpResponse, Server, CONFORMANCE};

/// Short leases and a brisk janitor: an attempt whose outcome could not be committed
/// runs again within seconds.
const CONFIG: &str = "[builtin]\nsets = [\"conformance\"]\n\
                      [workers]\nlease_ms = 2000\njanitor_interval_ms = 200\n";

/// A tmpfs mounted at a directory, unmounted (lazily, in case a process still holds a
/// file there) when dropped.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount` takes it: "24m") at `dir`; `None` (with a
    /// message) where mounting is not permitted.
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).expect("mount point");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !mounted {
            eprintln!(
                "SKIPPED: cannot mount a tmpfs at {} (needs root)",
                dir.display()
            );
            return None;
        }
        Some(Tmpfs {
            dir: dir.to_owned(),
        })
    }

    fn remount(&self, options: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.dir)
            .status()
            .expect("run mount");
        assert!(status.success(), "remount {options}");
    }

    /// Fills the file system to the last byte; returns the filler's path.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.dir.join("filler");
        let mut file = std::fs::File::create(&path).expect("filler");
        let chunk = vec![0u8; 64 * 1024];
        while file.write_all(&chunk).is_ok() {}
        // The last partial chunk, byte by byte in larger steps.
        for size in [4096, 512, 1] {
            while file.write_all(&chunk[..size]).is_ok() {}
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

fn create_raw(server: &Server, seconds: f64) -> HttpResponse {
    server.request(
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": seconds, "label": "x".repeat(1000)}}),
        tasks_caps(),
    )
}

/// The id of a created task, or `None` for an error answer.
fn created(response: &HttpResponse) -> Option<String> {
    (response.status == 200)
        .then(|| {
            response.json()["result"]["taskId"]
                .as_str()
                .map(str::to_owned)
        })
        .flatten()
}

fn health(server: &Server) -> HttpResponse {
    server.get("/healthz")
}

/// A refusal for lack of storage: 503, `Retry-After`, and a message naming `cause`.
fn assert_unavailable(response: &HttpResponse, cause: &str) {
    assert_eq!(response.status, 503, "{}", response.text());
    let seconds: u32 = response
        .header("Retry-After")
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After: {}", response.text()));
    assert!(seconds > 0);
    let message = response.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains(cause),
        "message {message:?} should say {cause:?}"
    );
}

#[test]
fn a_full_disk_answers_503_and_writes_resume_within_seconds_once_space_returns() {
    if postgres::sqlite_only("a full disk under the data dir is a full tasks.db") {
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(&temp.path().join("data"), "24m") else {
        return;
    };
    let server = Server::start_in(temp.path(), CONFIG);
    // Attempts running while the disk fills: their outcomes meet a full disk.
    let mut acknowledged: Vec<String> = (0..8)
        .map(|_| created(&create_raw(&server, 1.0)).expect("created before the fill"))
        .collect();

    let filler = disk.fill();
    let refusal = poll_until(Duration::from_secs(10), || {
        let response = create_raw(&server, 0.5);
        match created(&response) {
            Some(id) => {
                acknowledged.push(id);
                None
            }
            None => Some(response),
        }
    })
    .expect("creations fail once the disk is full");
    assert_unavailable(&refusal, "out of disk space");
    let unhealthy = poll_until(Duration::from_secs(5), || {
        let response = health(&server);
        (response.status == 503).then_some(response)
    })
    .expect("/healthz reports the full store");
    assert!(
        unhealthy.text().contains("disk space"),
        "{}",
        unhealthy.text()
    );
    assert_unavailable(&create_raw(&server, 0.5), "out of disk space");

    // Long enough for the running attempts to end and fail to commit.
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::remove_file(filler).unwrap();
    let freed = Instant::now();
    let resumed = poll_until(Duration::from_secs(5), || {
        created(&create_raw(&server, 0.1))
    })
    .expect("a creation succeeds within 5 s of space returning");
    acknowledged.push(resumed);
    let writing = freed.elapsed();
    poll_until(
        Duration::from_secs(5) - freed.elapsed().min(Duration::from_secs(5)),
        || (health(&server).status == 200).then_some(()),
    )
    .expect("/healthz is 200 within 5 s of space returning");
    eprintln!(
        "writes resumed {} ms after space returned; healthy after {} ms",
        writing.as_millis(),
        freed.elapsed().as_millis()
    );
    // Every acknowledged task ends, none stays `working`: outcomes that could not be
    // committed were committed later, or their attempts ran again.
    for id in &acknowledged {
        let task = wait_terminal(&server, id, Duration::from_secs(30));
        assert_eq!(task["status"], "completed", "{task}");
    }
}

#[test]
fn tasks_admitted_before_space_ran_low_complete_without_freeing_any() {
    if postgres::sqlite_only("free space is measured on the data dir, where tasks.db is") {
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(&temp.path().join("data"), "24m") else {
        return;
    };
    let server = Server::start_in(temp.path(), CONFIG);
    // 3 MiB left, which the server's own creations use up.
    let filler = disk.fill();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .unwrap();
    let size = file.metadata().unwrap().len();
    file.set_len(size.saturating_sub(3 << 20)).unwrap();
    // While the disk was full, a checkpoint may have failed, which refuses writes until
    // one succeeds again: start once the server says it can write.
    poll_until(Duration::from_secs(10), || {
        (health(&server).status == 200).then_some(())
    })
    .expect("/healthz is 200 with 3 MiB free");
    let mut acknowledged = Vec::new();
    let refusal = poll_until(Duration::from_secs(60), || {
        let response = server.request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0.2, "label": "y".repeat(4000)}}),
            tasks_caps(),
        );
        match created(&response) {
            Some(id) => {
                acknowledged.push(id);
                None
            }
            None => Some(response),
        }
    })
    .expect("creations are refused once space runs low");
    assert_unavailable(&refusal, "out of disk space");
    assert!(!acknowledged.is_empty());
    // The room kept below the floor is for them: every one ends, none is failed.
    for id in &acknowledged {
        let task = wait_terminal(&server, id, Duration::from_secs(60));
        assert_eq!(task["status"], "completed", "{task}");
    }
    eprintln!(
        "{} tasks admitted before the floor, all completed",
        acknowledged.len()
    );
}

/// A server with tasks in `dir/data`, stopped, its WAL checkpointed into `tasks.db`.
/// Returns the database path.
fn stopped_database(dir: &Path, tasks: usize) -> PathBuf {
    let mut server = Server::start_in(dir, CONFORMANCE);
    for _ in 0..tasks {
        created(&create_raw(&server, 0.0)).expect("created");
    }
    assert!(server.terminate(Duration::from_secs(20)), "server stopped");
    let database = dir.join("data").join("tasks.db");
    let conn = rusqlite::Connection::open(&database).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    database
}

/// Starts the binary on `dir/data`, expecting a refusal: returns its stderr.
fn refused_start(dir: &Path) -> String {
    let output = crate::common::binary()
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(dir.join("config.toml"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run mcp-taskd");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        !output.status.success() && !stdout.contains("listening"),
        "the server started: {stdout}"
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The one line that says why the server did not start.
fn refusal_line(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("mcp-taskd:"))
        .collect();
    assert_eq!(lines.len(), 1, "one refusal line: {stderr}");
    lines[0].to_owned()
}

#[test]
fn a_damaged_database_is_refused_at_start_up_with_one_clear_line() {
    if postgres::sqlite_only("the damage is done to the tasks.db file") {
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let database = stopped_database(temp.path(), 300);
    let pristine = std::fs::read(&database).unwrap();
    let half = pristine.len() / 2 / 4096 * 4096;

    // Pages in the middle overwritten: the damage the server used to start on.
    let mut scribbled = pristine.clone();
    scribbled[half..half + 4 * 4096].fill(0xab);
    std::fs::write(&database, &scribbled).unwrap();
    let line = refusal_line(&refused_start(temp.path()));
    assert!(
        line.contains("is damaged") && line.contains("backup"),
        "{line}"
    );

    // Truncated to half its size.
    std::fs::write(&database, &pristine[..half]).unwrap();
    let line = refusal_line(&refused_start(temp.path()));
    assert!(
        line.contains("is damaged") && line.contains("backup"),
        "{line}"
    );

    // Restored from the copy, it starts and serves again.
    std::fs::write(&database, &pristine).unwrap();
    let server = Server::start_in(temp.path(), CONFORMANCE);
    assert_eq!(health(&server).status, 200);
}

#[test]
fn a_read_only_data_dir_is_refused_clearly_and_served_again_once_writable() {
    if postgres::sqlite_only("a read-only data dir is a read-only tasks.db") {
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(&temp.path().join("data"), "16m") else {
        return;
    };
    let database = stopped_database(temp.path(), 5);
    assert!(database.exists());
    disk.remount("ro");
    let line = refusal_line(&refused_start(temp.path()));
    assert!(line.contains("Read-only file system"), "{line}");
    disk.remount("rw");
    let server = Server::start_in(temp.path(), CONFORMANCE);
    let id = created(&create_raw(&server, 0.0)).expect("writable again");
    assert_eq!(
        wait_terminal(&server, &id, Duration::from_secs(10))["status"],
        "completed"
    );
}

#[test]
fn a_vanished_data_dir_turns_writes_into_503_and_healthz_unhealthy() {
    if postgres::sqlite_only("a vanished data dir is a vanished tasks.db") {
        return;
    }
    let server = Server::start(CONFORMANCE);
    let before = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    wait_terminal(&server, &before, Duration::from_secs(10));
    std::fs::remove_dir_all(server.dir.join("data")).unwrap();
    let unhealthy = poll_until(Duration::from_secs(5), || {
        let response = health(&server);
        (response.status == 503).then_some(response)
    })
    .expect("/healthz notices the database file is gone");
    assert!(
        unhealthy.text().contains("unavailable"),
        "{}",
        unhealthy.text()
    );
    // Writes would land in a file no restart will see: refused, clearly.
    assert_unavailable(&create_raw(&server, 0.0), "temporarily unavailable");
}

#[test]
fn a_store_whose_log_went_after_a_kill_9_is_refused_rather_than_opened_half_restored() {
    if postgres::sqlite_only("the write-ahead log is tasks.db-wal") {
        return;
    }
    // The server never checkpoints (as under Litestream): every acknowledged task since
    // the start lives only in the log until the next open replays it.
    let config =
        format!("{CONFORMANCE}\n[store]\nlocking = \"shared\"\ncheckpoints = \"external\"\n");
    let lose_the_log = |dir: &Path| -> usize {
        let mut server = Server::start_in(dir, &config);
        for _ in 0..200 {
            created(&create_raw(&server, 0.0)).expect("acknowledged");
        }
        server.kill9();
        let data = dir.join("data");
        for side in ["tasks.db-wal", "tasks.db-shm"] {
            let _ = std::fs::remove_file(data.join(side));
        }
        200
    };

    // What happened before: the server starts on the database alone, and the tasks the
    // log held are gone without a word. (--accept-data-loss is that start, asked for.)
    let temp = tempfile::tempdir().unwrap();
    let acknowledged = lose_the_log(temp.path());
    let server = Server::start_in_with_args(temp.path(), &config, &["--accept-data-loss"]);
    let listed = crate::common::binary()
        .args(["tasks", "list", "--json", "--limit", "1000", "--config"])
        .arg(temp.path().join("config.toml"))
        .arg("--data-dir")
        .arg(temp.path().join("data"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("tasks list");
    let kept = String::from_utf8_lossy(&listed.stdout).lines().count();
    assert!(
        kept < acknowledged,
        "the log held acknowledged tasks: {kept} of {acknowledged} kept"
    );
    drop(server);

    // Now: refused, naming the cause and the remedies.
    let temp = tempfile::tempdir().unwrap();
    lose_the_log(temp.path());
    let line = refusal_line(&refused_start(temp.path()));
    for said in [
        "was not closed cleanly",
        "write-ahead log has gone",
        "mcp-taskd restore FILE",
        "Litestream replica",
        "--accept-data-loss",
    ] {
        assert!(line.contains(said), "{said:?} missing from: {line}");
    }
    // A clean stop leaves nothing to check: the next start is quiet.
    let mut server = Server::start_in_with_args(temp.path(), &config, &["--accept-data-loss"]);
    assert!(server.terminate(Duration::from_secs(20)), "server stopped");
    let server = Server::start_in(temp.path(), &config);
    assert_eq!(health(&server).status, 200);
}
