//! Group commit: concurrent writes of one kind share one transaction.
//!
//! On this backend every transaction costs round trips to the database, a WAL flush,
//! and PostgreSQL's own work per statement. Alone, each write paid for its own. Here a
//! writing thread queues its write; while fewer than [`COMMITTERS`] transactions of its
//! kind are open, it takes every write queued (up to the group's size, its own among
//! them), runs them in one transaction (a few statements for the whole group), then
//! hands each waiting thread its answer. Under load, writes queue while a transaction
//! runs and the next one takes them all at once, as SQLite's writer groups its queue;
//! alone, a write goes straight through. Every answer still comes after the commit of
//! the transaction that made it.
//!
//! Two kinds are grouped (`Store`): task creations without an idempotency key, and
//! workers' finishes with their next claims. Creations with a key run alone: each takes
//! an advisory lock of its key, and two transactions taking several such locks in
//! different orders could deadlock.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};

use taskd_engine::backend::StoreError;

/// Most transactions of one kind open at once (per node): enough that one commit's
/// flush overlaps the next transaction's statements, few enough that writes queue
/// while they run and go in large groups.
const COMMITTERS: usize = 2;

/// The writes of one kind (`T`, each answered with an `R`) waiting for a transaction,
/// and the answers not yet collected.
pub(super) struct Groups<T, R> {
    /// Most writes in one transaction.
    size: usize,
    queue: Mutex<Queue<T, R>>,
    /// Signalled when a transaction of this kind ends.
    answered: Condvar,
}

struct Queue<T, R> {
    next_ticket: u64,
    waiting: Vec<(u64, T)>,
    answers: HashMap<u64, Result<R, StoreError>>,
    committers: usize,
}

impl<T, R> Groups<T, R> {
    /// Groups of at most `size` writes.
    pub fn new(size: usize) -> Self {
        Groups {
            size: size.max(1),
            queue: Mutex::new(Queue {
                next_ticket: 0,
                waiting: Vec::new(),
                answers: HashMap::new(),
                committers: 0,
            }),
            answered: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue<T, R>> {
        // Every change of the queue is whole under the lock: a poisoned one is consistent.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `write` in a transaction shared with the writes queued meanwhile, run by
    /// `commit` (which answers for each write of its group, in order). Returns once
    /// that transaction has ended.
    pub fn submit(
        &self,
        write: T,
        commit: impl Fn(Vec<T>) -> Vec<Result<R, StoreError>>,
    ) -> Result<R, StoreError> {
        let mut queue = self.lock();
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        queue.waiting.push((ticket, write));
        loop {
            if let Some(answer) = queue.answers.remove(&ticket) {
                return answer;
            }
            let mine_waiting = queue.waiting.iter().any(|(queued, _)| *queued == ticket);
            if mine_waiting && queue.committers < COMMITTERS {
                let take = queue.waiting.len().min(self.size);
                let group: Vec<(u64, T)> = queue.waiting.drain(..take).collect();
                queue.committers += 1;
                drop(queue);
                let (tickets, writes): (Vec<u64>, Vec<T>) = group.into_iter().unzip();
                let mut turn = Turn {
                    groups: self,
                    tickets,
                    answers: Vec::new(),
                };
                turn.answers = commit(writes);
                drop(turn);
                queue = self.lock();
                continue;
            }
            queue = self.answered.wait(queue).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// One transaction of a group, from its start to its answers: handed out when it is
/// dropped, so that a `commit` that panics still ends the turn (its writes are told
/// they were not committed) and no thread waits for it forever.
struct Turn<'g, T, R> {
    groups: &'g Groups<T, R>,
    tickets: Vec<u64>,
    answers: Vec<Result<R, StoreError>>,
}

impl<T, R> Drop for Turn<'_, T, R> {
    fn drop(&mut self) {
        let mut answers = std::mem::take(&mut self.answers).into_iter();
        let mut queue = self.groups.lock();
        queue.committers -= 1;
        for ticket in self.tickets.drain(..) {
            let answer = answers.next().unwrap_or_else(|| {
                Err(StoreError::NotCommitted(
                    "the write's transaction ended without an answer".into(),
                ))
            });
            queue.answers.insert(ticket, answer);
        }
        self.groups.answered.notify_all();
    }
}

/// The answers of a group of `writes` whose transaction failed with `error`: the first
/// gets it, each other one the same failure.
pub(super) fn failed_together<R>(error: StoreError, writes: usize) -> Vec<Result<R, StoreError>> {
    let others: Vec<_> = (1..writes).map(|_| Err(shared_failure(&error))).collect();
    std::iter::once(Err(error)).chain(others).collect()
}

/// The same failure for another write of a failed group (a [`StoreError`] is not
/// `Clone`: the variant is kept, the cause becomes its message).
fn shared_failure(error: &StoreError) -> StoreError {
    match error {
        StoreError::Full(cause) => StoreError::Full(cause.to_string().into()),
        StoreError::ReadOnly(cause) => StoreError::ReadOnly(cause.to_string().into()),
        StoreError::Corrupt(cause) => StoreError::Corrupt(cause.to_string().into()),
        StoreError::Unavailable(cause) => StoreError::Unavailable(cause.to_string().into()),
        StoreError::NotCommitted(cause) => StoreError::NotCommitted(cause.clone()),
        StoreError::Other(cause) => StoreError::Other(cause.to_string().into()),
    }
}
