//! The single writer: one thread takes every write, groups what is queued into one
//! transaction (group commit) and answers each caller only after `COMMIT`.
//!
//! # When writes fail (a full disk, a read-only medium, an I/O error)
//!
//! Every caller of a failed batch is told why ([`Problem`]), and [`Health`] records it
//! for `/healthz`. The writer then refuses writes at once, with the same cause, for a
//! backoff (100 ms doubling to 1 s), and tries again — first making room: it rolls back
//! whatever SQLite left open, reopens its connection now and then, and runs a TRUNCATE
//! checkpoint. That last step is what brings a full disk back. A WAL can be reused only
//! once every frame is copied into `tasks.db`, and that copy grows `tasks.db`; while
//! writes kept appending to the WAL, they took every byte freed for it, and the store
//! stayed full until a restart. Checkpointing first lets freed space go to the copy,
//! and truncating the WAL then frees all of its file at once. For the same reason,
//! writes are refused while the checkpointer's checkpoints fail for lack of space: the
//! copy they owe `tasks.db` stays as small as 100 ms of commits, which the first bytes
//! freed can hold.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rusqlite::Connection;

use super::health::{Health, Problem, Space};
use super::reply::reply_slot;
use super::sql::create::{create_task, create_tasks};
use super::{classify, OpenError, Store};
use crate::later::{later, Fulfil, Later};
use crate::tasks::backend::StoreError;
use crate::tasks::model::{Created, NewTask};

/// Most writes committed together in one transaction.
const MAX_BATCH: usize = 256;
/// Threads that run [`Store::write_later`] continuations.
const COMPLETION_THREADS: usize = 4;
/// How long writes are refused after the first failed transaction; doubles with each
/// further failure up to [`RETRY_MOST`].
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MOST: Duration = Duration::from_secs(1);
/// Failed tries after which the writer reopens its connection, in case SQLite kept
/// some state of the failure.
const REOPEN_EVERY: u32 = 5;

/// Opens a fresh, configured writer connection.
pub(super) type Reopen = Box<dyn Fn() -> Result<Connection, OpenError> + Send>;

/// A running writer.
pub(super) struct Started {
    /// The writer's queue.
    pub(super) writes: Sender<Write>,
    /// Pinged after each commit.
    pub(super) commits: Receiver<()>,
    /// Ends once every sender of `writes` is gone and what it carried is committed.
    pub(super) thread: JoinHandle<()>,
}

/// Starts the writer thread on `conn`, with its completion threads.
pub(super) fn start(
    conn: Connection,
    reopen: Reopen,
    health: Arc<Health>,
    restart: Arc<AtomicBool>,
) -> Result<Started, OpenError> {
    let (writes, queue) = crossbeam_channel::unbounded::<Write>();
    let (ping, pings) = crossbeam_channel::bounded(1);
    let (continuations, continued) = crossbeam_channel::unbounded();
    let completers = (0..COMPLETION_THREADS)
        .map(|index| {
            let batches = continued.clone();
            std::thread::Builder::new()
                .name(format!("store-answer-{index}"))
                .spawn(move || run_continuations(batches))
                .map_err(|e| OpenError::Start(format!("starting the completion threads: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let thread = std::thread::Builder::new()
        .name("store-writer".into())
        .spawn(move || {
            let writer = Writer {
                conn,
                reopen,
                health,
                failing: None,
                closed_to_admissions: None,
            };
            writer.run(&queue, &ping, &continuations, &restart);
            // The writer dropped its end: the completion threads finish what is
            // queued and stop.
            for completer in completers {
                let _ = completer.join();
            }
        })
        .map_err(|e| OpenError::Start(format!("starting the writer thread: {e}")))?;
    Ok(Started {
        writes,
        commits: pings,
        thread,
    })
}

/// How a batch ended: committed, or failed for a [`Problem`] every caller is told.
type BatchOutcome<'a> = Result<(), &'a Problem>;

/// What to do once a write's batch has committed or failed.
type Finisher = Box<dyn FnOnce(BatchOutcome<'_>) + Send>;

/// How a write's caller learns the outcome.
pub(super) enum Completion {
    /// A thread is waiting in [`Store::write`]: the writer wakes it directly.
    Wake(Finisher),
    /// A continuation from [`Store::write_later`]: it runs on a completion thread, so
    /// that whatever it does (answering an HTTP request) never holds up the next batch.
    Continue(Finisher),
}

/// A write: runs inside the batch transaction (or, refused, does not run: given the
/// reason) and says how to report its outcome, with its own failure if it failed.
type WriteOp =
    Box<dyn FnOnce(Result<&Connection, &Problem>) -> (Completion, Option<Problem>) + Send>;

/// A write's own result: `Ok` with what it returned when it ran, the reason when it
/// was refused.
type Ran<R> = Result<rusqlite::Result<R>, Problem>;

/// What the writer's queue carries.
pub(super) enum Write {
    /// Any write; runs alone under its own savepoint.
    Op(WriteOp),
    /// A write that admits new work (a task creation with an idempotency key). Like
    /// creations, refused first when space runs low, so that the work already admitted
    /// can still record its outcome.
    Admit(WriteOp),
    /// A task creation without an idempotency key (the writer's most frequent write).
    /// Consecutive ones in a batch are inserted together, see [`Batch`].
    Create(Box<Creation>),
}

pub(super) struct Creation {
    task: NewTask,
    fulfil: Fulfil<Result<Created, StoreError>>,
    owed: Owed,
}

/// Counts continuations handed to [`Store::write_later`] until they have run, so that
/// shutdown can wait for every acknowledgement it owes.
#[derive(Default)]
pub(super) struct Unanswered {
    count: Mutex<usize>,
    none_left: Condvar,
}

/// One unanswered continuation; dropping it (after the continuation ran, or with it)
/// counts it answered.
struct Owed(Arc<Unanswered>);

impl Unanswered {
    fn owe(self: &Arc<Self>) -> Owed {
        *self.count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        Owed(Arc::clone(self))
    }
}

impl Drop for Owed {
    fn drop(&mut self) {
        let mut count = self.0.count.lock().unwrap_or_else(|p| p.into_inner());
        *count -= 1;
        if *count == 0 {
            self.0.none_left.notify_all();
        }
    }
}

impl Store {
    /// Runs `op` in the writer's next transaction and returns its result once committed.
    /// An `Err` from `op` rolls back `op`'s changes only.
    pub(super) fn write<R, F>(&self, op: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<R> + Send + 'static,
    {
        let (reply, answer) = reply_slot();
        let job: WriteOp = Box::new(move |conn| {
            let outcome = conn
                .map(|conn| run_in_savepoint(conn, op))
                .map_err(Problem::clone);
            let failure = failure_of(&outcome);
            let completion = Completion::Wake(Box::new(move |batch| {
                reply.send(settle(batch, outcome));
            }));
            (completion, failure)
        });
        self.writes
            .send(Write::Op(job))
            .map_err(|_| StoreError::NotCommitted("the writer has stopped".into()))?;
        answer
            .wait()
            .ok_or_else(|| StoreError::NotCommitted("the writer dropped the write".into()))?
    }

    /// Runs `op` in the writer's next transaction without blocking the caller. The
    /// result — once the batch has committed, or failed — arrives as a [`Later`] whose
    /// callback runs on a completion thread (so a slow callback never delays a commit).
    pub(super) fn write_later<R, F>(&self, op: F) -> Later<Result<R, StoreError>>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<R> + Send + 'static,
    {
        // Dropped unanswered (the writer stopped): the caller gets "not committed".
        let (fulfil, result) = later(|| {
            Err(StoreError::NotCommitted(
                "the writer dropped the write".into(),
            ))
        });
        let owed = self.unanswered.owe();
        let job: WriteOp = Box::new(move |conn| {
            let outcome = conn
                .map(|conn| run_in_savepoint(conn, op))
                .map_err(Problem::clone);
            let failure = failure_of(&outcome);
            let completion = Completion::Continue(Box::new(move |batch| {
                fulfil.fulfil(settle(batch, outcome));
                drop(owed);
            }));
            (completion, failure)
        });
        // A failed send drops the job, and with it `fulfil` and `owed`.
        let _ = self.writes.send(Write::Admit(job));
        result
    }

    /// Creates a task in the writer's next transaction without blocking the caller,
    /// like [`Store::write_later`]. Creations without an idempotency key that meet in a
    /// batch go in with one multi-row `INSERT` per table ([`create_tasks`]).
    pub(super) fn create_later(&self, task: NewTask) -> Later<Result<Created, StoreError>> {
        if task.idempotency_key.is_some() {
            return self.write_later(move |conn| create_task(conn, &task));
        }
        let (fulfil, result) = later(|| {
            Err(StoreError::NotCommitted(
                "the writer dropped the write".into(),
            ))
        });
        let owed = self.unanswered.owe();
        // A failed send drops the creation, and with it `fulfil` and `owed`.
        let _ = self
            .writes
            .send(Write::Create(Box::new(Creation { task, fulfil, owed })));
        result
    }

    /// Waits up to `limit` until every [`Store::write_later`] continuation has run;
    /// `false` if some are still outstanding.
    pub(super) fn wait_for_answers(&self, limit: Duration) -> bool {
        let count = self
            .unanswered
            .count
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (count, _) = self
            .unanswered
            .none_left
            .wait_timeout_while(count, limit, |count| *count > 0)
            .unwrap_or_else(|p| p.into_inner());
        *count == 0
    }
}

/// A write's result as its caller sees it: only a committed batch makes it true.
fn settle<R>(batch: BatchOutcome<'_>, ran: Ran<R>) -> Result<R, StoreError> {
    match (batch, ran) {
        (Ok(()), Ok(outcome)) => outcome.map_err(classify),
        (Ok(()), Err(refused)) => Err(refused.to_store_error()),
        (Err(problem), _) => Err(problem.to_store_error()),
    }
}

/// The failure of a write that ran and failed.
fn failure_of<R>(ran: &Ran<R>) -> Option<Problem> {
    match ran {
        Ok(Err(error)) => Some(Problem::of(error)),
        _ => None,
    }
}

/// The writes of one transaction, run in arrival order. Task creations wait for the next
/// other write (or the commit) and go in together, one multi-row `INSERT` per table
/// ([`create_tasks`]): under load that saves the writer ~3.5 µs per creation. If
/// that fails, they go in one by one, each under its own savepoint, so that only the
/// failing one fails, as with any write.
#[derive(Default)]
struct Batch {
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
    fn len(&self) -> usize {
        self.completions.len() + self.creations.len()
    }

    fn push(&mut self, conn: &Connection, write: Write) {
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
    fn finish(mut self, conn: &Connection) -> (Vec<Completion>, Option<Problem>) {
        self.create_waiting(conn);
        (self.completions, self.broken)
    }
}

/// Answers writes that did not run: each caller gets `problem`.
fn refuse(
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

/// Tells every write of a batch how it ended.
fn deliver(
    completions: Vec<Completion>,
    outcome: BatchOutcome<'_>,
    continuations: &Sender<Continuations>,
) {
    let mut later = Vec::new();
    for completion in completions {
        match completion {
            Completion::Wake(finish) => finish(outcome),
            Completion::Continue(finish) => later.push(finish),
        }
    }
    if !later.is_empty() {
        // One message (one wake-up) per batch, however many it answers.
        let _ = continuations.send((later, outcome.map_err(Problem::clone)));
    }
}

fn run_in_savepoint<R>(
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
fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// A committed (or failed) batch's continuations, for a completion thread.
type Continuations = (Vec<Finisher>, Result<(), Problem>);

/// A completion thread: runs continuations batch by batch until the writer is gone.
/// Several share the queue, so one continuation stuck on a slow client (at worst until
/// the socket's write timeout) holds up only the rest of its own batch.
fn run_continuations(batches: Receiver<Continuations>) {
    for (batch, outcome) in batches {
        for finish in batch {
            if catch_unwind(AssertUnwindSafe(|| finish(outcome.as_ref().map(|_| ())))).is_err() {
                log::error!("a write's continuation panicked");
            }
        }
    }
}

/// Writes refused since a transaction failed, until the next try.
struct Failing {
    problem: Problem,
    retry_at: Instant,
    backoff: Duration,
    tries: u32,
}

/// The writer thread's state.
struct Writer {
    conn: Connection,
    reopen: Reopen,
    health: Arc<Health>,
    failing: Option<Failing>,
    /// Why writes that admit new work are refused, while they are.
    closed_to_admissions: Option<Problem>,
}

impl Writer {
    /// The writer loop: batch, commit, answer; between batches, restart the WAL when the
    /// checkpointer asks (the RESTART waits, within `busy_timeout`, only for readers still
    /// on an older snapshot — every read here is a short statement). Ends when every
    /// [`Store`] handle is gone.
    fn run(
        mut self,
        queue: &Receiver<Write>,
        ping: &Sender<()>,
        continuations: &Sender<Continuations>,
        restart: &AtomicBool,
    ) {
        let heartbeat = crate::liveness::LIVENESS.register("writer");
        while let Ok(first) = queue.recv() {
            let _working = heartbeat.working();
            let closed_to_admissions = match self.refusing() {
                Ok(closed) => closed,
                Err(problem) => {
                    // Everything queued gets the answer now, not after a wait per write.
                    let queued = std::iter::once(first).chain(queue.try_iter().take(MAX_BATCH));
                    refuse(queued, &problem, continuations);
                    continue;
                }
            };
            self.close_to_admissions(closed_to_admissions.clone());
            let (completions, outcome) = self.run_batch(first, queue, closed_to_admissions);
            match &outcome {
                Ok(()) => self.succeeded(),
                Err(problem) => self.failed(problem.clone()),
            }
            deliver(completions, outcome.as_ref().map(|_| ()), continuations);
            if outcome.is_ok() {
                let _ = ping.try_send(());
            }
            if outcome.is_ok() && self.closed_to_admissions.is_some() {
                // Space runs low: each commit's frames go into `tasks.db` at once and
                // the WAL gives its file back, so the room left holds outcomes, not a
                // growing log.
                self.truncate_wal();
            } else if outcome.is_ok() && restart.swap(false, Ordering::AcqRel) {
                let restarted = self
                    .conn
                    .query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()));
                if let Err(error) = restarted {
                    log::warn!("WAL restart: {error}");
                }
            }
        }
    }

    /// Why every write is refused right now (`Err`), or only those that admit new work
    /// (`Ok(Some)`: space runs low); when a refusal's backoff is over, makes room for
    /// the next try and lets it run.
    fn refusing(&mut self) -> Result<Option<Problem>, Problem> {
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
    fn close_to_admissions(&mut self, closed: Option<Problem>) {
        match (&closed, &self.closed_to_admissions) {
            (Some(problem), None) => self.health.record(Err(problem)),
            (None, Some(_)) if self.failing.is_none() => self.health.record(Ok(())),
            _ => {}
        }
        self.closed_to_admissions = closed;
    }

    /// Before trying again after a failure: no transaction left open, now and then a
    /// fresh connection, and a TRUNCATE checkpoint (see the module docs).
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
    fn truncate_wal(&self) {
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

    /// One transaction: `first` and whatever else is queued, up to [`MAX_BATCH`].
    fn run_batch(
        &mut self,
        first: Write,
        queue: &Receiver<Write>,
        closed_to_admissions: Option<Problem>,
    ) -> (Vec<Completion>, Result<(), Problem>) {
        let conn = &self.conn;
        if let Err(error) = run_cached(conn, "BEGIN IMMEDIATE") {
            let problem = self.refined(&error);
            let mut completions = Vec::new();
            refuse_into(first, &problem, &mut completions);
            return (completions, Err(problem));
        }
        // Writes that arrive while this transaction runs join it: the batch grows to
        // what the clients have in flight and they all share the one commit below.
        let mut batch = Batch {
            closed_to_admissions,
            ..Batch::default()
        };
        batch.push(conn, first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(write) => batch.push(conn, write),
                Err(_) => break,
            }
        }
        let (completions, broken) = batch.finish(conn);
        if let Some(problem) = broken {
            let _ = conn.execute_batch("ROLLBACK");
            return (completions, Err(problem.refine(self.health.database())));
        }
        match run_cached(conn, "COMMIT") {
            Ok(()) => (completions, Ok(())),
            Err(error) => {
                let problem = self.refined(&error);
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                (completions, Err(problem))
            }
        }
    }

    fn refined(&self, error: &rusqlite::Error) -> Problem {
        Problem::of(error).refine(self.health.database())
    }

    fn succeeded(&mut self) {
        if self.failing.take().is_some() && self.closed_to_admissions.is_none() {
            self.health.record(Ok(()));
        }
    }

    fn failed(&mut self, problem: Problem) {
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

/// A write answered without running, for `problem`.
fn refuse_into(write: Write, problem: &Problem, completions: &mut Vec<Completion>) {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::backend::TaskStore;
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
