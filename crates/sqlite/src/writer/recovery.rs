//! When writes fail (a full disk, a read-only medium, an I/O error): refusing writes
//! with the cause for a backoff, and making room before trying again.

use std::time::{Duration, Instant};

use super::super::health::{Problem, Space};
use super::completion::{deliver, Continuations};
use super::{settle, Completion, Creation, Outcome, Write, Writer};
use crossbeam_channel::Sender;
use taskd_engine::backend::Finished;
use taskd_engine::model::Created;

/// How long writes are refused after the first failed transaction; doubles with each
/// further failure up to [`RETRY_MOST`].
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MOST: Duration = Duration::from_secs(1);
/// Failed tries after which the writer reopens its connection, in case SQLite kept
/// some state of the failure.
const REOPEN_EVERY: u32 = 5;

/// Writes refused since a transaction failed, until the next try.
pub(super) struct Failing {
    problem: Problem,
    retry_at: Instant,
    backoff: Duration,
    tries: u32,
}

/// When writes fail (a full disk, a read-only medium, an I/O error), every caller of a
/// failed batch is told why ([`Problem`]), and [`Health`](super::super::health::Health)
/// records it for `/healthz`. The writer then refuses writes at once, with the same
/// cause, for a backoff (100 ms doubling to 1 s), and tries again — first making room:
/// it rolls back whatever SQLite left open, reopens its connection now and then, and
/// runs a TRUNCATE checkpoint. That last step is what brings a full disk back. A WAL
/// can be reused only once every frame is copied into `tasks.db`, and that copy grows
/// `tasks.db`; while writes kept appending to the WAL, they took every byte freed for
/// it, and the store stayed full until a restart. Checkpointing first lets freed space
/// go to the copy, and truncating the WAL then frees all of its file at once. For the
/// same reason, writes are refused while the checkpointer's checkpoints fail for lack
/// of space: the copy they owe `tasks.db` stays as small as 100 ms of commits, which
/// the first bytes freed can hold.
impl Writer {
    /// Why every write is refused right now (`Err`), or only those that admit new work
    /// (`Ok(Some)`: space runs low); when a refusal's backoff is over, makes room for
    /// the next try and lets it run.
    pub(super) fn refusing(&mut self) -> Result<Option<Problem>, Problem> {
        if let Some(failing) = &self.failing {
            if Instant::now() < failing.retry_at {
                return Err(failing.problem.clone());
            }
        }
        let (exhausted, low) = match self.health.space() {
            Space::Plenty => (None, None),
            Space::Low(problem) => (None, Some(problem)),
            Space::Exhausted(problem) => (Some(problem), None),
        };
        let blocking = self.health.blocking_problem();
        if let Some(problem) = blocking.or(exhausted) {
            self.failed(problem.clone());
            return Err(problem);
        }
        if let Some(failing) = &self.failing {
            let tries = failing.tries;
            self.make_room(tries);
        }
        Ok(low)
    }

    /// Records whether writes that admit new work are refused (`/healthz` reports it).
    pub(super) fn close_to_admissions(&mut self, closed: Option<Problem>) {
        match (&closed, &self.closed_to_admissions) {
            (Some(problem), None) => self.health.record(Err(problem)),
            (None, Some(_)) if self.failing.is_none() => self.health.record(Ok(())),
            _ => {}
        }
        self.closed_to_admissions = closed;
    }

    /// Before trying again after a failure: no transaction left open, now and then a
    /// fresh connection, and a TRUNCATE checkpoint (see the notes on this `impl`).
    fn make_room(&mut self, tries: u32) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        if !self.conn.is_autocommit() || tries.is_multiple_of(REOPEN_EVERY) {
            match (self.reopen)() {
                Ok(conn) => self.conn = conn,
                Err(error) => log::warn!("reopening the writer's connection: {error}"),
            }
        }
        self.truncate_wal();
    }

    /// Copies the WAL into `tasks.db` and truncates it, giving its file back.
    pub(super) fn truncate_wal(&self) {
        let checkpoint = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                row.get::<_, i64>(0)
            });
        match checkpoint {
            Ok(0) => log::debug!("checkpointed and truncated the WAL to make room"),
            Ok(_) => log::debug!("WAL truncation deferred: readers busy"),
            Err(error) => log::debug!("WAL truncation: {error}"),
        }
    }

    pub(super) fn refined(&self, error: &rusqlite::Error) -> Problem {
        Problem::of(error).refine(self.health.database())
    }

    pub(super) fn succeeded(&mut self) {
        if self.failing.take().is_some() && self.closed_to_admissions.is_none() {
            self.health.record(Ok(()));
        }
    }

    pub(super) fn failed(&mut self, problem: Problem) {
        self.health.record(Err(&problem));
        let (backoff, tries) = match &self.failing {
            Some(failing) => ((failing.backoff * 2).min(RETRY_MOST), failing.tries + 1),
            None => (RETRY_FIRST, 1),
        };
        self.failing = Some(Failing {
            problem,
            retry_at: Instant::now() + backoff,
            backoff,
            tries,
        });
    }
}

/// Answers writes that did not run: each caller gets `problem`.
pub(super) fn refuse(
    writes: impl IntoIterator<Item = Write>,
    problem: &Problem,
    continuations: &Sender<Continuations>,
) {
    let mut completions = Vec::new();
    for write in writes {
        refuse_into(write, problem, &mut completions);
    }
    deliver(completions, Err(problem), continuations);
}

/// A write answered without running, for `problem`.
pub(super) fn refuse_into(write: Write, problem: &Problem, completions: &mut Vec<Completion>) {
    match write {
        Write::Op(op) | Write::Admit(op) => completions.push(op(Err(problem)).0),
        Write::Create(creation) => {
            let Creation { fulfil, owed, .. } = *creation;
            let refused = problem.clone();
            completions.push(Completion::Continue(Box::new(move |batch| {
                fulfil.fulfil(settle::<Created>(batch, Err(refused)));
                drop(owed);
            })));
        }
        Write::Finish(outcome) => {
            let Outcome { reply, .. } = *outcome;
            let refused = problem.clone();
            completions.push(Completion::Wake(Box::new(move |batch| {
                reply.send(settle::<Finished>(batch, Err(refused)));
            })));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use rusqlite::Connection;

    use crate::tests::{fresh_store, rows_in};
    use taskd_engine::backend::{StoreError, TaskStore};

    /// Inserts a row of 64 KiB into the outbox (growing the database by ~16 pages).
    fn insert_large(conn: &Connection) -> rusqlite::Result<()> {
        conn.execute(
            "INSERT INTO outbox (task_id, created_at) VALUES (?1, 1)",
            ["x".repeat(64 * 1024)],
        )
        .map(|_| ())
    }

    #[test]
    fn a_full_store_tells_its_callers_and_writes_again_without_a_restart() {
        let (_dir, store) = fresh_store();
        // `max_page_count` makes SQLite answer SQLITE_FULL as a full disk would.
        store
            .write(|conn| {
                let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
                conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))
            })
            .unwrap();
        let failed = store.write(insert_large);
        assert!(matches!(failed, Err(StoreError::Full(_))), "{failed:?}");
        assert!(matches!(store.health(), Err(StoreError::Full(_))));
        // Refused at once while the writer backs off, with the same cause.
        let refused = store.write(|_| Ok(()));
        assert!(matches!(refused, Err(StoreError::Full(_))), "{refused:?}");
        // Room again (the next try may also run on a reopened connection, which has
        // no page limit): writes resume within the backoff.
        let resumed = Instant::now();
        let written = loop {
            let attempt = store.write(|conn| {
                conn.query_row("PRAGMA max_page_count = 1000000", [], |_| Ok(()))?;
                insert_large(conn)
            });
            if attempt.is_ok() || resumed.elapsed() > Duration::from_secs(5) {
                break attempt;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(written.is_ok(), "{written:?}");
        assert!(store.health().is_ok());
        assert_eq!(
            rows_in(&store, "outbox"),
            1,
            "only the write after recovery"
        );
    }
}
