//! The single writer: one thread takes every write, groups what is queued into one
//! transaction (group commit) and answers each caller only after `COMMIT`. Here: its
//! queue, the [`Store`] write API and its loop; failed writes: see [`recovery`].

mod batch;
mod completion;
mod recovery;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use rusqlite::Connection;

use super::health::{Health, Problem};
use super::reply::{reply_slot, Replier};
use super::sql::create::create_task;
use super::{classify, OpenError, Store};
use batch::{run_cached, run_in_savepoint, Batch};
use completion::{deliver, run_continuations, Continuations, COMPLETION_THREADS};
use recovery::{refuse, refuse_into, Failing};
use taskd_base::later::{later, Fulfil, Later};
use taskd_engine::backend::{ClaimRequest, Finished, StoreError};
use taskd_engine::model::{Created, Finish, Lease, NewTask};
use taskd_engine::output::OutputBatch;

/// Most writes committed together in one transaction.
const MAX_BATCH: usize = 256;

/// Opens a fresh, configured writer connection.
pub(super) type Reopen = Box<dyn Fn() -> Result<Connection, OpenError> + Send>;

/// How the writer is told to close the store, and what it does then.
pub(super) struct Closing {
    /// Signalled by [`TaskStore::close`](taskd_engine::TaskStore::close).
    pub(super) signal: Receiver<()>,
    /// Checkpoint the whole log into the database at close (not under Litestream).
    pub(super) empty_the_log: bool,
    /// Run once every write is committed (the store's open mark goes).
    pub(super) closed_cleanly: Box<dyn FnOnce() + Send>,
}

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
    long_snapshots: Arc<AtomicUsize>,
    closing: Closing,
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
                long_snapshots,
            };
            writer.run(
                &queue,
                &closing.signal,
                &ping,
                &continuations,
                &restart,
                closing.empty_the_log,
            );
            // Dropping the writer's end lets the completion threads finish what is
            // queued and stop (joining them with it still open would wait forever).
            drop(continuations);
            for completer in completers {
                let _ = completer.join();
            }
            // Every write is committed: the store closed cleanly.
            (closing.closed_cleanly)();
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
    /// A worker's outcome with the claim of its next job (the drain's only write). The
    /// ones in a batch share one savepoint, see [`Batch`].
    Finish(Box<Outcome>),
}

pub(super) struct Creation {
    task: NewTask,
    fulfil: Fulfil<Result<Created, StoreError>>,
    owed: Owed,
}

/// What [`TaskStore::finish`](taskd_engine::backend::TaskStore::finish) asks, with the
/// worker waiting for the answer.
pub(super) struct Outcome {
    lease: Lease,
    finish: Finish,
    /// The attempt's last output, written with its outcome.
    output: Option<OutputBatch>,
    then_claim: Option<ClaimRequest>,
    reply: Replier<Result<Finished, StoreError>>,
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
    /// like [`Store::write_later`]. Creations without an idempotency key, a schedule
    /// slot or a later start that meet in a batch go in with one multi-row `INSERT` per
    /// table
    /// ([`create_tasks`](super::sql::create::create_tasks)).
    pub(super) fn create_later(&self, task: NewTask) -> Later<Result<Created, StoreError>> {
        if task.creates_alone() {
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

    /// Records a worker's outcome and claims its next jobs, in the writer's next
    /// transaction, and returns once committed (see [`Batch`] for how it shares the
    /// transaction with the other workers' outcomes).
    pub(super) fn finish_attempt(
        &self,
        lease: Lease,
        finish: Finish,
        output: Option<OutputBatch>,
        then_claim: Option<ClaimRequest>,
    ) -> Result<Finished, StoreError> {
        let (reply, answer) = reply_slot();
        let outcome = Outcome {
            lease,
            finish,
            output,
            then_claim,
            reply,
        };
        self.writes
            .send(Write::Finish(Box::new(outcome)))
            .map_err(|_| StoreError::NotCommitted("the writer has stopped".into()))?;
        answer
            .wait()
            .ok_or_else(|| StoreError::NotCommitted("the writer dropped the write".into()))?
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

/// The writer thread's state.
struct Writer {
    conn: Connection,
    reopen: Reopen,
    health: Arc<Health>,
    failing: Option<Failing>,
    /// Why writes that admit new work are refused, while they are.
    closed_to_admissions: Option<Problem>,
    /// Read transactions held open for long (backups): the WAL restart would wait for
    /// them, and every write behind it, for the whole `busy_timeout`, so it waits.
    long_snapshots: Arc<AtomicUsize>,
}

impl Writer {
    /// The writer loop: batch, commit, answer; between batches, restart the WAL when the
    /// checkpointer asks (the RESTART waits, within `busy_timeout`, only for readers still
    /// on an older snapshot — every read here is a short statement). Ends when every
    /// [`Store`] handle is gone.
    /// Commits what comes until every sender is gone or the store is closed (what is
    /// queued then is committed first); then, with `empty_the_log`, checkpoints the
    /// whole log into the database and truncates it, as far as no reader holds it back
    /// (the last connection to close does the rest).
    fn run(
        mut self,
        queue: &Receiver<Write>,
        close: &Receiver<()>,
        ping: &Sender<()>,
        continuations: &Sender<Continuations>,
        restart: &AtomicBool,
        empty_the_log: bool,
    ) {
        let heartbeat = taskd_base::liveness::LIVENESS.register("writer");
        let mut closing = false;
        loop {
            let next = if closing {
                queue.try_recv().ok()
            } else {
                crossbeam_channel::select! {
                    recv(queue) -> write => write.ok(),
                    recv(close) -> _ => {
                        closing = true;
                        queue.try_recv().ok()
                    }
                }
            };
            let Some(first) = next else {
                break;
            };
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
            } else if outcome.is_ok()
                && self.long_snapshots.load(Ordering::Acquire) == 0
                && restart.swap(false, Ordering::AcqRel)
            {
                let restarted = self
                    .conn
                    .query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()));
                if let Err(error) = restarted {
                    log::warn!("WAL restart: {error}");
                }
            }
        }
        if empty_the_log {
            if let Err(error) = self
                .conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            {
                log::warn!("the last checkpoint at close: {error}");
            }
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
        let mut batch = Batch::new(closed_to_admissions);
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
}
