//! One batch transaction: its writes in arrival order, each under its own savepoint,
//! with task creations grouped into multi-row `INSERT`s.

use rusqlite::Connection;

use super::super::health::Problem;
use super::super::sql::create::{create_task, create_tasks};
use super::recovery::refuse_into;
use super::{failure_of, settle, Completion, Creation, Ran, Write};
use crate::tasks::model::{Created, NewTask};

/// The writes of one transaction, run in arrival order. Task creations wait for the next
/// other write (or the commit) and go in together, one multi-row `INSERT` per table
/// ([`create_tasks`]): under load that saves the writer ~3.5 µs per creation. If
/// that fails, they go in one by one, each under its own savepoint, so that only the
/// failing one fails, as with any write.
#[derive(Default)]
pub(super) struct Batch {
    completions: Vec<Completion>,
    creations: Vec<Creation>,
    /// Set when a write's failure ended the whole transaction (SQLite rolls back by
    /// itself on some errors, `SQLITE_FULL` among them): the rest of the batch is
    /// refused, and nothing commits.
    broken: Option<Problem>,
    /// Why writes that admit new work are refused in this batch (space runs low).
    closed_to_admissions: Option<Problem>,
}

impl Batch {
    /// An empty batch; `closed_to_admissions` as in [`Batch::closed_to_admissions`].
    pub(super) fn new(closed_to_admissions: Option<Problem>) -> Self {
        Batch {
            closed_to_admissions,
            ..Batch::default()
        }
    }

    pub(super) fn len(&self) -> usize {
        self.completions.len() + self.creations.len()
    }

    pub(super) fn push(&mut self, conn: &Connection, write: Write) {
        if let Some(closed) = &self.closed_to_admissions {
            if matches!(write, Write::Admit(_) | Write::Create(_)) {
                refuse_into(write, closed, &mut self.completions);
                return;
            }
        }
        match write {
            Write::Op(op) | Write::Admit(op) => {
                self.create_waiting(conn);
                let (completion, failure) = match &self.broken {
                    None => op(Ok(conn)),
                    Some(broken) => op(Err(broken)),
                };
                self.completions.push(completion);
                self.note_failure(conn, failure);
            }
            Write::Create(creation) => self.creations.push(*creation),
        }
    }

    /// After a write failed: whether the batch transaction survived it.
    fn note_failure(&mut self, conn: &Connection, failure: Option<Problem>) {
        if let Some(failure) = failure {
            if self.broken.is_none() && conn.is_autocommit() {
                self.broken = Some(failure);
            }
        }
    }

    fn create_waiting(&mut self, conn: &Connection) {
        if self.creations.is_empty() {
            return;
        }
        let (tasks, replies): (Vec<NewTask>, Vec<_>) = std::mem::take(&mut self.creations)
            .into_iter()
            .map(|creation| (creation.task, (creation.fulfil, creation.owed)))
            .unzip();
        let outcomes: Vec<Ran<Created>> = if let Some(broken) = &self.broken {
            tasks.iter().map(|_| Err(broken.clone())).collect()
        } else {
            match run_in_savepoint(conn, |conn| create_tasks(conn, &tasks)) {
                Ok(rows) => rows
                    .into_iter()
                    .map(|row| Ok(Ok(Created::Task(row))))
                    .collect(),
                Err(error) if conn.is_autocommit() => {
                    let broken = Problem::of(&error);
                    self.broken = Some(broken.clone());
                    tasks.iter().map(|_| Err(broken.clone())).collect()
                }
                Err(error) => {
                    log::warn!(
                        "creating {} tasks together: {error}; one by one",
                        tasks.len()
                    );
                    let mut outcomes = Vec::with_capacity(tasks.len());
                    for task in &tasks {
                        let outcome = match &self.broken {
                            None => Ok(run_in_savepoint(conn, |conn| create_task(conn, task))),
                            Some(broken) => Err(broken.clone()),
                        };
                        let failure = failure_of(&outcome);
                        outcomes.push(outcome);
                        self.note_failure(conn, failure);
                    }
                    outcomes
                }
            }
        };
        for ((fulfil, owed), outcome) in replies.into_iter().zip(outcomes) {
            self.completions
                .push(Completion::Continue(Box::new(move |batch| {
                    fulfil.fulfil(settle(batch, outcome));
                    drop(owed);
                })));
        }
    }

    /// Runs the creations still waiting; returns how to report every write's outcome,
    /// and the failure that ended the transaction, if one did.
    pub(super) fn finish(mut self, conn: &Connection) -> (Vec<Completion>, Option<Problem>) {
        self.create_waiting(conn);
        (self.completions, self.broken)
    }
}

pub(super) fn run_in_savepoint<R>(
    conn: &Connection,
    op: impl FnOnce(&Connection) -> rusqlite::Result<R>,
) -> rusqlite::Result<R> {
    conn.prepare_cached("SAVEPOINT op")?.execute([])?;
    match op(conn) {
        Ok(value) => {
            conn.prepare_cached("RELEASE op")?.execute([])?;
            Ok(value)
        }
        Err(error) => {
            if !conn.is_autocommit() {
                // Not when SQLite already rolled the whole transaction back: the
                // savepoint is gone, and the caller must see the original error.
                conn.execute_batch("ROLLBACK TO op; RELEASE op")?;
            }
            Err(error)
        }
    }
}

/// Runs one statement through the connection's statement cache (the writer runs the
/// same few transaction-control statements thousands of times a second).
pub(super) fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::tasks::model::Created;
    use crate::tasks::sqlite::tests::{fresh_store, rows_in, task_at};

    #[test]
    fn a_failing_write_rolls_back_alone() {
        let (_dir, store) = fresh_store();
        let ok = store.write(|conn| {
            conn.execute(
                "INSERT INTO outbox (task_id, created_at) VALUES ('a', 1)",
                [],
            )?;
            Ok(())
        });
        assert!(ok.is_ok());
        let failed: Result<(), _> = store.write(|conn| {
            conn.execute(
                "INSERT INTO outbox (task_id, created_at) VALUES ('b', 1)",
                [],
            )?;
            conn.execute("INSERT INTO nonexistent VALUES (1)", [])?;
            Ok(())
        });
        assert!(failed.is_err());
        let rows: i64 = rows_in(&store, "outbox");
        assert_eq!(rows, 1);
    }

    #[test]
    fn a_bad_task_among_creations_batched_together_fails_alone() {
        let (_dir, store) = fresh_store();
        // Hold the writer inside a write until the creations are queued, so that they
        // meet in one batch.
        let (release, held) = crossbeam_channel::bounded::<()>(0);
        let holder = store.write_later(move |_| Ok(held.recv().ok()));
        let (done, outcomes) = crossbeam_channel::unbounded();
        for (index, id) in ["first", "twin", "first", "last"].into_iter().enumerate() {
            let done = done.clone();
            store.create_later(task_at(id, 1)).then(move |outcome| {
                let id = outcome.map(|created| match created {
                    Created::Task(row) => row.id,
                    Created::KeyInUse(conflict) => panic!("no key: {conflict:?}"),
                });
                done.send((index, id)).unwrap()
            });
        }
        release.send(()).unwrap();
        holder.then(|_| {});
        let mut outcomes: Vec<_> = (0..4)
            .map(|_| outcomes.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        outcomes.sort_by_key(|(index, _)| *index);
        let ids: Vec<Option<String>> = outcomes.into_iter().map(|(_, o)| o.ok()).collect();
        assert_eq!(
            ids,
            [
                Some("first".into()),
                Some("twin".into()),
                None,
                Some("last".into())
            ]
        );
        let stored: i64 = rows_in(&store, "jobs");
        assert_eq!(stored, 3);
    }
}
