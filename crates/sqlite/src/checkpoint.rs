//! Checkpoints that keep the WAL bounded off the commit path: the checkpointer thread's
//! passive ones (asking the writer for a restart), and the janitor's TRUNCATE.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use rusqlite::Connection;

use super::connection::open_connection;
use super::health::{Health, Problem};
use super::Store;
use taskd_engine::config::Checkpoints;

/// How often the checkpointer copies committed WAL frames into the database file.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(100);
/// WAL frames (pages) beyond which the writer restarts the WAL: 16 MiB of 4 KiB pages,
/// four times SQLite's automatic-checkpoint default.
const RESTART_FRAMES: i64 = 4096;
/// Checkpointer rounds between two checks that the database file is still there (1 s).
const WATCH_EVERY: u32 = 10;

/// The checkpointer: a passive checkpoint every [`CHECKPOINT_INTERVAL`] until the
/// store is dropped.
///
/// A passive checkpoint copies committed frames into the database file without waiting
/// for (or blocking) the writer or readers. It cannot restart the WAL under constant
/// load, though: by the time it has copied everything, newer commits have been appended
/// behind it, and the file would grow until the janitor's TRUNCATE. So once the WAL
/// holds more than [`RESTART_FRAMES`], it asks the writer (through `restart`) to run a
/// RESTART checkpoint between two batches: that copies only the frames committed since
/// this passive checkpoint, and the next commit writes from the start of the file again.
/// (Run from here, a RESTART would wait for a gap between batches that a busy writer
/// never leaves.)
///
/// With `store.checkpoints = "external"` it checkpoints nothing (Litestream does) and
/// only watches the file.
///
/// Every [`WATCH_EVERY`] rounds it also checks that `tasks.db` is still there
/// ([`Health::watch_file`]). A failing checkpoint is logged once until it succeeds (on
/// a full disk it fails ten times a second); [`Health`] holds writes back meanwhile.
pub(super) fn run_checkpointer(
    conn: &Connection,
    checkpoints: Checkpoints,
    stop: &Receiver<()>,
    restart: &AtomicBool,
    health: &Health,
) {
    let mut round: u32 = 0;
    let mut failing = false;
    while let Err(RecvTimeoutError::Timeout) = stop.recv_timeout(CHECKPOINT_INTERVAL) {
        round = round.wrapping_add(1);
        if round.is_multiple_of(WATCH_EVERY) {
            health.watch_file();
        }
        if checkpoints == Checkpoints::External {
            continue;
        }
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            row.get::<_, i64>(1)
        }) {
            Ok(frames) => {
                if failing {
                    health.record_checkpoint(Ok(()));
                }
                failing = false;
                if frames > RESTART_FRAMES {
                    restart.store(true, Ordering::Release);
                }
            }
            Err(error) => {
                if !failing {
                    log::warn!("WAL checkpoint: {error}");
                }
                health.record_checkpoint(Err(Problem::of(&error)));
                failing = true;
            }
        }
    }
}

impl Store {
    /// Checkpoints the WAL into the database and truncates it. Runs on its own short-lived
    /// connection (a checkpoint cannot run inside the writer's transactions); gives up
    /// after a second if readers hold old snapshots, to try again next time.
    pub(super) fn checkpoint(&self) -> rusqlite::Result<()> {
        if self.long_snapshots.load(Ordering::Acquire) > 0 {
            // It could not truncate past the snapshot, and would hold the write lock
            // while it waited.
            return Ok(());
        }
        let conn = open_connection(&self.uri)?;
        conn.busy_timeout(Duration::from_secs(1))?;
        let (busy, _, _): (i64, i64, i64) =
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })?;
        if busy != 0 {
            log::debug!("WAL checkpoint deferred: readers busy");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::OpenFlags;

    use crate::tests::fresh_store;

    use super::*;

    /// Rows of `outbox` in the database file alone (`immutable=1` ignores the WAL): they
    /// show there only once checkpointed.
    fn outbox_rows_in_file(dir: &std::path::Path) -> i64 {
        let uri = format!("file:{}?immutable=1", dir.join("tasks.db").display());
        let conn = Connection::open_with_flags(
            &uri,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
        )
        .unwrap();
        // Before the first checkpoint even the table is only in the WAL.
        conn.query_row("SELECT COUNT(*) FROM outbox", [], |r| r.get(0))
            .unwrap_or(0)
    }

    #[test]
    fn with_external_checkpoints_the_server_never_checkpoints() {
        let dir = tempfile::tempdir().unwrap();
        let config = taskd_engine::config::StoreConfig {
            locking: taskd_engine::config::Locking::Shared,
            checkpoints: Checkpoints::External,
            ..Default::default()
        };
        let store = Store::open(dir.path(), &config).unwrap().store;
        store
            .write(|conn| {
                conn.execute(
                    "INSERT INTO outbox (task_id, created_at) VALUES ('t', 1)",
                    [],
                )?;
                Ok(())
            })
            .unwrap();
        // Shared locking: another connection (Litestream's, here ours) opens the file
        // beside the server and reads the commit from the WAL.
        let other = Connection::open(dir.path().join("tasks.db")).unwrap();
        let seen: i64 = other
            .query_row("SELECT COUNT(*) FROM outbox", [], |r| r.get(0))
            .unwrap();
        assert_eq!(seen, 1);
        // Five checkpointer rounds and a janitor pass: none copies the commit.
        std::thread::sleep(CHECKPOINT_INTERVAL * 5);
        taskd_engine::TaskStore::maintain(store.as_ref()).unwrap();
        assert_eq!(outbox_rows_in_file(dir.path()), 0, "nothing checkpointed");
        // What Litestream does: checkpoint from its own connection.
        other
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            .unwrap();
        assert_eq!(outbox_rows_in_file(dir.path()), 1);
    }

    #[test]
    fn the_checkpointer_copies_commits_into_the_database_file() {
        let (dir, store) = fresh_store();
        for _ in 0..20 {
            store
                .write(|conn| {
                    for _ in 0..50 {
                        conn.execute(
                            "INSERT INTO outbox (task_id, created_at) VALUES ('t', 1)",
                            [],
                        )?;
                    }
                    Ok(())
                })
                .unwrap();
        }
        // The writer's automatic checkpoints are off: only the checkpointer copies them.
        let in_file = || outbox_rows_in_file(dir.path());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while in_file() < 1000 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(in_file(), 1000);
    }

    #[test]
    fn the_wal_is_reused_under_constant_writes() {
        const COMMITS: usize = 1500;
        const ROWS: usize = 50;
        let (_dir, store) = fresh_store();
        let filler = "x".repeat(2000);
        // Commits of ~100 KB back to back, ~150 MB in all. Without restarts the WAL would
        // hold all of it. Restarted by the checkpointer, new commits overwrite it from the
        // beginning, so it stays a fraction of what was written: how large a fraction
        // depends on how much the writer commits between two checkpoints (~25 MB here).
        let mut largest = 0;
        for _ in 0..COMMITS {
            let filler = filler.clone();
            store
                .write(move |conn| {
                    for _ in 0..ROWS {
                        conn.execute(
                            "INSERT INTO outbox (task_id, created_at) VALUES (?1, 1)",
                            [&filler],
                        )?;
                    }
                    Ok(())
                })
                .unwrap();
            largest = largest.max(store.wal_bytes().unwrap_or(0));
        }
        let written = (COMMITS * ROWS * filler.len()) as u64;
        assert!(
            largest < written / 3,
            "the WAL grew to {largest} bytes for {written} written: it was not reused"
        );
    }
}
