//! Online backup through SQLite's backup API, and the check every copy passes before
//! it counts as a backup (or is restored).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use super::migrations::{migrations, SCHEMA};
use super::{classify, Store};
use taskd_engine::backend::StoreError;

/// Pages copied per step: between steps the progress callback runs.
const PAGES_PER_STEP: i32 = 1024;

impl Store {
    /// Copies the database into `destination` (a new file) and verifies the copy.
    ///
    /// The copy is one snapshot: a read transaction stays open on the source for the
    /// whole copy, so the writer keeps committing (WAL readers never block it) and no
    /// step sees a change (which would restart the backup). `progress` gets (pages
    /// copied, pages in all) after each step.
    pub(super) fn backup_into(
        &self,
        destination: &Path,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), StoreError> {
        let source = self.read()?;
        let _held = LongSnapshot::hold(&self.long_snapshots);
        source.execute_batch("BEGIN").map_err(classify)?;
        let copied = source
            .query_row("SELECT COUNT(*) FROM sqlite_schema", [], |_| Ok(()))
            .and_then(|()| copy_snapshot(&source, destination, progress));
        // Ends the read transaction either way; the connection goes back to the pool.
        let ended = source.execute_batch("COMMIT");
        copied.and(ended).map_err(classify)?;
        verify_database_file(destination)
            .map_err(|why| StoreError::Corrupt(format!("the backup copy: {why}").into()))
    }
}

/// Counts a long read transaction for as long as it lives (see `Store::long_snapshots`).
struct LongSnapshot<'a>(&'a AtomicUsize);

impl<'a> LongSnapshot<'a> {
    fn hold(count: &'a AtomicUsize) -> LongSnapshot<'a> {
        count.fetch_add(1, Ordering::AcqRel);
        LongSnapshot(count)
    }
}

impl Drop for LongSnapshot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn copy_snapshot(
    source: &Connection,
    destination: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> rusqlite::Result<()> {
    let mut copy = Connection::open_with_flags(
        destination,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
    )?;
    {
        let backup = Backup::new(source, &mut copy)?;
        loop {
            let step = backup.step(PAGES_PER_STEP)?;
            let state = backup.progress();
            let total = state.pagecount.max(0) as u64;
            progress(total.saturating_sub(state.remaining.max(0) as u64), total);
            match step {
                StepResult::Done => break,
                StepResult::More => {}
                // Only the destination can be busy (nobody else knows its name yet).
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
    // One self-contained file: the source's WAL mode came along with its header.
    copy.query_row("PRAGMA journal_mode = DELETE", [], |_| Ok(()))?;
    Ok(())
}

/// Why a file is not an intact task store this binary can open.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("{} is not a file", .0.display())]
    NotAFile(PathBuf),
    #[error("{}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("{} fails the integrity check: {}", path.display(), problems.join("; "))]
    Damaged {
        path: PathBuf,
        problems: Vec<String>,
    },
    /// The schema this binary embeds cannot be read (a build defect).
    #[error("{0}")]
    Schema(String),
    #[error(
        "{} is not a task store this version can open (schema version {version}, \
         this binary knows 1 to {known})",
        path.display()
    )]
    UnknownVersion {
        path: PathBuf,
        version: u32,
        known: u32,
    },
    #[error("{}: table {table}: {source}", path.display())]
    MissingTable {
        path: PathBuf,
        table: &'static str,
        source: rusqlite::Error,
    },
}

/// Opens `path` read-only and checks that it is an intact task store this binary can
/// open: `PRAGMA integrity_check` passes, its schema version is one this binary knows,
/// and it has the task tables.
pub fn verify_database_file(path: &Path) -> Result<(), VerifyError> {
    if !path.is_file() {
        return Err(VerifyError::NotAFile(path.to_path_buf()));
    }
    let unreadable = |source| VerifyError::Unreadable {
        path: path.to_path_buf(),
        source,
    };
    let conn =
        Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(unreadable)?;
    let mut statement = conn.prepare("PRAGMA integrity_check").map_err(unreadable)?;
    let problems = statement
        .query_map([], |row| row.get::<_, String>(0))
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(unreadable)?;
    if problems != ["ok"] {
        return Err(VerifyError::Damaged {
            path: path.to_path_buf(),
            problems,
        });
    }
    let version: u32 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(unreadable)?;
    let known = migrations(SCHEMA).map_err(VerifyError::Schema)?.len() as u32;
    if version == 0 || version > known {
        return Err(VerifyError::UnknownVersion {
            path: path.to_path_buf(),
            version,
            known,
        });
    }
    for table in ["tasks", "jobs", "attempts", "outbox"] {
        // Preparing is enough: it fails when the table is missing.
        conn.prepare(&format!("SELECT 1 FROM {table} LIMIT 1"))
            .map_err(|source| VerifyError::MissingTable {
                path: path.to_path_buf(),
                table,
                source,
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::tests::fresh_store;
    use taskd_engine::TaskStore;

    #[test]
    fn a_backup_taken_while_the_writer_commits_is_one_snapshot_that_never_restarts() {
        let (dir, store) = fresh_store();
        // About 3 000 pages: the copy takes several steps.
        store
            .write(|conn| {
                conn.execute_batch(
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) \
                     INSERT INTO tasks (id, endpoint, tenant, principal, tool, origin, status, \
                     created_at, updated_at, poll_interval_ms) \
                     SELECT printf('%044d', i), '/mcp', 't', 'p', 'tool', randomblob(500), \
                     'completed', 0, 0, 500 FROM n",
                )
            })
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let writing = {
            let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut commits = 0;
                while !stop.load(Ordering::Acquire) {
                    store
                        .write(|conn| {
                            conn.execute(
                                "INSERT INTO outbox (task_id, created_at) VALUES ('x', 1)",
                                [],
                            )
                        })
                        .unwrap();
                    commits += 1;
                }
                commits
            })
        };
        let copy = dir.path().join("copy.db");
        let mut seen = Vec::new();
        store
            .backup_to(&copy, &mut |done, total| seen.push((done, total)))
            .unwrap();
        stop.store(true, Ordering::Release);
        let commits = writing.join().unwrap();
        assert!(commits > 0, "the writer committed during the backup");
        assert!(seen.len() > 1, "the copy took several steps: {seen:?}");
        assert!(
            seen.windows(2).all(|pair| pair[0].0 < pair[1].0),
            "progress only grows (no restart): {seen:?}"
        );
        let copied = Connection::open(&copy).unwrap();
        let tasks: i64 = copied
            .query_row("SELECT COUNT(*) FROM tasks", [], |row| row.get(0))
            .unwrap();
        assert_eq!(tasks, 20_000);
        let mode: String = copied
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .unwrap();
        assert_eq!(mode, "delete", "the copy is one self-contained file");
    }

    #[test]
    fn writes_are_not_held_up_while_a_backup_holds_its_snapshot() {
        let (dir, store) = fresh_store();
        let stop = Arc::new(AtomicBool::new(false));
        let filler = "x".repeat(4000);
        let writing = {
            let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
            std::thread::spawn(move || {
                let (mut written, mut slowest) = (0usize, Duration::ZERO);
                while !stop.load(Ordering::Acquire) {
                    let row = filler.clone();
                    let started = std::time::Instant::now();
                    store
                        .write(move |conn| {
                            for _ in 0..25 {
                                conn.execute(
                                    "INSERT INTO outbox (task_id, created_at) VALUES (?1, 1)",
                                    [&row],
                                )?;
                            }
                            Ok(())
                        })
                        .unwrap();
                    slowest = slowest.max(started.elapsed());
                    written += 25 * filler.len();
                }
                (written, slowest)
            })
        };
        // The snapshot stays open for as long as the copy runs: here until well past
        // the WAL size at which the checkpointer asks the writer for a RESTART (which
        // would wait for this snapshot), and the janitor's TRUNCATE.
        let wal = dir.path().join("tasks.db-wal");
        let mut held = false;
        store
            .backup_to(&dir.path().join("copy.db"), &mut |_, _| {
                if !held {
                    held = true;
                    let deadline = std::time::Instant::now() + Duration::from_secs(20);
                    while std::fs::metadata(&wal).map_or(0, |m| m.len()) < 40 << 20
                        && std::time::Instant::now() < deadline
                    {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    store.maintain().unwrap();
                }
            })
            .unwrap();
        stop.store(true, Ordering::Release);
        let (written, slowest) = writing.join().unwrap();
        assert!(
            written > 20 << 20,
            "the writer went on during the backup, past the WAL restart size ({written} bytes)"
        );
        assert!(
            slowest < Duration::from_secs(2),
            "a write waited {slowest:?} behind the backup's snapshot"
        );
    }

    #[test]
    fn a_file_that_is_not_a_task_store_fails_verification() {
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage");
        std::fs::write(&garbage, b"not a database").unwrap();
        assert!(verify_database_file(&garbage).is_err());
        let empty = dir.path().join("empty.db");
        Connection::open(&empty)
            .unwrap()
            .execute_batch("CREATE TABLE other (x)")
            .unwrap();
        let why = verify_database_file(&empty).unwrap_err().to_string();
        assert!(why.contains("schema version 0"), "{why}");
    }
}
