//! One batch transaction: its writes in arrival order, each under its own savepoint,
//! with task creations grouped into multi-row `INSERT`s and the workers' outcomes
//! grouped under one savepoint.

use rusqlite::Connection;

use super::super::finish_and_claim;
use super::super::health::Problem;
use super::super::sql::create::{create_task, create_tasks};
use super::recovery::refuse_into;
use super::{failure_of, settle, Completion, Creation, Outcome, Ran, Write};
use taskd_engine::backend::Finished;
use taskd_engine::model::{Created, NewTask};

/// The writes of one transaction, run in arrival order. Two kinds wait for the next
/// other write (or the commit), and then go in together:
/// - Task creations, one multi-row `INSERT` per table ([`create_tasks`]): under load
///   that saves the writer ~3.5 µs per creation.
/// - The workers' outcomes, under one savepoint. A savepoint copies each page the
///   first time a write under it changes the page, to be able to undo it; the outcomes
///   of a batch change mostly the same pages (the job queue's index, the counts, the
///   outbox), so one savepoint copies each of them once instead of once per outcome.
///
/// Neither kind depends on the other (a creation and an outcome never touch the same
/// task), so they do not wait for each other; any other write runs after both. If a
/// group fails, its writes go in again one by one, each under its own savepoint, so
/// that only the failing one fails, as with any write.
#[derive(Default)]
pub(super) struct Batch {
    completions: Vec<Completion>,
    creations: Vec<Creation>,
    outcomes: Vec<Outcome>,
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
        self.completions.len() + self.creations.len() + self.outcomes.len()
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
                self.finish_waiting(conn);
                let (completion, failure) = match &self.broken {
                    None => op(Ok(conn)),
                    Some(broken) => op(Err(broken)),
                };
                self.completions.push(completion);
                self.note_failure(conn, failure);
            }
            Write::Create(creation) => self.creations.push(*creation),
            Write::Finish(outcome) => self.outcomes.push(*outcome),
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
        let (mut tasks, replies): (Vec<NewTask>, Vec<_>) = std::mem::take(&mut self.creations)
            .into_iter()
            .map(|creation| (creation.task, (creation.fulfil, creation.owed)))
            .unzip();
        let outcomes = self.together_or_alone(
            conn,
            "task creations",
            &mut tasks,
            |conn, tasks| {
                let rows = create_tasks(conn, tasks)?;
                Ok(rows.into_iter().map(Created::Task).collect())
            },
            |conn, task| create_task(conn, task),
            |_| {},
        );
        for ((fulfil, owed), outcome) in replies.into_iter().zip(outcomes) {
            self.completions
                .push(Completion::Continue(Box::new(move |batch| {
                    fulfil.fulfil(settle(batch, outcome));
                    drop(owed);
                })));
        }
    }

    fn finish_waiting(&mut self, conn: &Connection) {
        if self.outcomes.is_empty() {
            return;
        }
        let mut outcomes = std::mem::take(&mut self.outcomes);
        let results = self.together_or_alone(
            conn,
            "attempt outcomes",
            &mut outcomes,
            |conn, outcomes| {
                outcomes
                    .iter_mut()
                    .map(|outcome| outcome.apply(conn))
                    .collect()
            },
            |conn, outcome| outcome.apply(conn),
            // The savepoint took back the claims made under it; the claimants give
            // back what they took outside the database.
            Outcome::give_back,
        );
        for (outcome, ran) in outcomes.into_iter().zip(results) {
            let reply = outcome.reply;
            self.completions
                .push(Completion::Wake(Box::new(move |batch| {
                    reply.send(settle(batch, ran));
                })));
        }
    }

    /// Runs `items` together under one savepoint; if that fails and the transaction
    /// survives, undoes what each did outside the database (`give_back`) and runs them
    /// again one by one, each under its own savepoint, so that only the failing ones
    /// fail. One result per item, in order.
    fn together_or_alone<T, R>(
        &mut self,
        conn: &Connection,
        what: &str,
        items: &mut [T],
        together: impl FnOnce(&Connection, &mut [T]) -> rusqlite::Result<Vec<R>>,
        mut alone: impl FnMut(&Connection, &mut T) -> rusqlite::Result<R>,
        give_back: impl FnMut(&mut T),
    ) -> Vec<Ran<R>> {
        if let Some(broken) = &self.broken {
            return items.iter().map(|_| Err(broken.clone())).collect();
        }
        let error = match run_in_savepoint(conn, |conn| together(conn, items)) {
            Ok(done) => return done.into_iter().map(|one| Ok(Ok(one))).collect(),
            Err(error) => error,
        };
        if conn.is_autocommit() {
            let broken = Problem::of(&error);
            self.broken = Some(broken.clone());
            return items.iter().map(|_| Err(broken.clone())).collect();
        }
        log::warn!("{} {what} together: {error}; one by one", items.len());
        items.iter_mut().for_each(give_back);
        let mut results = Vec::with_capacity(items.len());
        for item in items.iter_mut() {
            let ran = match &self.broken {
                None => Ok(run_in_savepoint(conn, |conn| alone(conn, item))),
                Some(broken) => Err(broken.clone()),
            };
            let failure = failure_of(&ran);
            results.push(ran);
            self.note_failure(conn, failure);
        }
        results
    }

    /// Runs the creations and outcomes still waiting; returns how to report every
    /// write's outcome, and the failure that ended the transaction, if one did.
    pub(super) fn finish(mut self, conn: &Connection) -> (Vec<Completion>, Option<Problem>) {
        self.create_waiting(conn);
        self.finish_waiting(conn);
        (self.completions, self.broken)
    }
}

impl Outcome {
    /// Runs this outcome's write; again, whole, after [`Outcome::give_back`].
    fn apply(&mut self, conn: &Connection) -> rusqlite::Result<Finished> {
        finish_and_claim(
            conn,
            &self.lease,
            &self.finish,
            self.output.as_ref(),
            self.then_claim.as_mut(),
        )
    }

    /// Undoes the claim's side effects outside the database (the rolled-back savepoint
    /// undid the rest).
    fn give_back(&mut self) {
        if let Some(request) = &mut self.then_claim {
            request.claimant.give_back();
        }
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
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use crate::sql::create::create_tasks;
    use crate::tests::{fresh_store, rows_in, task_at};
    use taskd_engine::backend::{ClaimRequest, Claimant, TaskStore};
    use taskd_engine::model::{Claim, Created, Finish, Lease};

    /// Takes every job, and keeps the ids of those it holds (taken, not given back).
    struct Holds(Arc<Mutex<Vec<String>>>);

    impl Claimant for Holds {
        fn saturated(&self) -> Vec<String> {
            Vec::new()
        }

        fn take(&mut self, claim: &Claim) -> bool {
            self.0.lock().unwrap().push(claim.task_id.clone());
            true
        }

        fn give_back(&mut self) {
            self.0.lock().unwrap().clear();
        }

        fn rate_limit(&self, _: &Claim) -> Option<taskd_engine::flow::RateLimit> {
            None
        }

        fn rate_exhausted(&mut self, _: &str, _: i64) {}
    }

    #[test]
    fn an_outcome_that_fails_among_outcomes_grouped_together_fails_alone() {
        let (_dir, store) = fresh_store();
        store
            .write(|conn| {
                let mut tasks: Vec<_> = ["a", "b", "c"].map(|id| task_at(id, 1)).into();
                tasks.extend(["next1", "next2", "next3"].map(|id| task_at(id, 2)));
                create_tasks(conn, &tasks)?;
                // Only the writer's connection sees a temporary trigger: b's outcome
                // fails, wherever it runs.
                conn.execute_batch(
                    "CREATE TEMP TRIGGER fail_b BEFORE UPDATE OF status ON tasks \
                     WHEN OLD.id = 'b' BEGIN SELECT RAISE(FAIL, 'injected'); END",
                )
            })
            .unwrap();
        let held = Arc::new(Mutex::new(Vec::new()));
        let claims = store
            .claim(ClaimRequest {
                limit: 3,
                lease_ms: 60_000,
                claimant: Box::new(Holds(Arc::clone(&held))),
            })
            .unwrap();
        assert_eq!(claims.len(), 3);
        // Hold the writer inside a write until the outcomes are queued, so that they
        // meet in one batch.
        let (release, hold) = crossbeam_channel::bounded::<()>(0);
        let holder = store.write_later(move |_| Ok(hold.recv().ok()));
        let finishing: Vec<_> = claims
            .into_iter()
            .map(|claim| {
                let store = Arc::clone(&store);
                let held = Arc::new(Mutex::new(Vec::new()));
                let claimant = Holds(Arc::clone(&held));
                let lease = Lease {
                    task_id: claim.task_id.clone(),
                    token: claim.token,
                };
                let b_lease = (claim.task_id == "b").then(|| lease.clone());
                let thread = std::thread::spawn(move || {
                    let finish = Finish::Completed {
                        result: "{}".into(),
                    };
                    let next = ClaimRequest {
                        limit: 1,
                        lease_ms: 60_000,
                        claimant: Box::new(claimant),
                    };
                    store.finish(lease, finish, None, Some(next))
                });
                (claim.task_id, held, thread, b_lease)
            })
            .collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while store.writes.len() < 3 {
            assert!(std::time::Instant::now() < deadline, "outcomes not queued");
            std::thread::yield_now();
        }
        release.send(()).unwrap();
        holder.then(|_| {});
        let mut next_claims = Vec::new();
        let mut running_still = Vec::new();
        for (task_id, held, thread, b_lease) in finishing {
            running_still.extend(b_lease.map(|lease| (lease.task_id, lease.token)));
            let finished = thread.join().unwrap();
            let held = held.lock().unwrap().clone();
            if task_id == "b" {
                assert!(finished.is_err(), "b's outcome fails");
                assert_eq!(held, Vec::<String>::new(), "b's claim was given back");
            } else {
                let finished = finished.unwrap();
                assert!(finished.applied);
                assert_eq!(finished.next.len(), 1);
                assert_eq!(held, vec![finished.next[0].task_id.clone()]);
                next_claims.extend(finished.next);
            }
        }
        let conn = store.read().unwrap();
        let status = |id: &str| -> String {
            conn.query_row("SELECT status FROM tasks WHERE id = ?1", [id], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(
            ["a", "b", "c"].map(status),
            ["completed", "working", "completed"]
        );
        // The jobs claimed are those the answers name, with their tokens: nothing of the
        // rolled-back first try remains.
        let mut running: Vec<(String, String)> = conn
            .prepare("SELECT task_id, lease_token FROM jobs WHERE state = 'running'")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        running.sort();
        let mut expected: Vec<(String, String)> = next_claims
            .into_iter()
            .map(|claim| (claim.task_id, claim.token))
            .collect();
        expected.extend(running_still);
        expected.sort();
        assert_eq!(running, expected);
        let notified = |id: &str| -> i64 {
            conn.query_row(
                "SELECT count(*) FROM outbox WHERE task_id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap()
        };
        // One notification for each creation, one for each completion.
        assert_eq!(["a", "b", "c"].map(notified), [2, 1, 2]);
    }

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
                    Created::SlotTaken => panic!("no slot"),
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
