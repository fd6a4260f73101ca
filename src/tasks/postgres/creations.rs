//! Group commit of task creations: concurrent creations share one transaction.
//!
//! A creation is acknowledged only after its transaction has committed, and on this
//! backend every transaction costs round trips to the database and a WAL flush. Alone,
//! each creation paid for its own. Here a creating thread queues its task; while fewer
//! than [`COMMITTERS`] transactions of creations are open, it takes every task queued
//! (up to [`BATCH`], its own among them) and writes them in one statement and one
//! commit, then hands each waiting thread its answer. Under load, creations queue while
//! a transaction runs and the next one takes them all at once, as SQLite's writer
//! groups its queue; alone, a creation goes straight through. Every answer still comes
//! after the commit of the transaction that wrote its task.
//!
//! Creations with an idempotency key run alone, as before: each takes an advisory lock
//! of its key, and two transactions taking several such locks in different orders
//! could deadlock.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::tasks::backend::StoreError;
use crate::tasks::model::{Created, NewTask};

/// Most transactions of creations open at once (per node): enough that one commit's
/// flush overlaps the next transaction's statements, few enough that tasks queue
/// while they run and go in large groups.
const COMMITTERS: usize = 2;
/// Most tasks in one transaction.
const BATCH: usize = 256;

/// The creations waiting for a transaction, and the answers not yet collected.
#[derive(Default)]
pub(super) struct Creations {
    queue: Mutex<Queue>,
    /// Signalled when a transaction of creations ends.
    answered: Condvar,
}

#[derive(Default)]
struct Queue {
    next_ticket: u64,
    waiting: Vec<(u64, NewTask)>,
    answers: HashMap<u64, Result<Created, StoreError>>,
    committers: usize,
}

impl Creations {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Every change of the queue is whole under the lock: a poisoned one is consistent.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates `task` in a transaction shared with the creations queued meanwhile, run
    /// by `commit` (which answers for each task of its group, in order). Returns once
    /// that transaction has ended.
    pub fn create(
        &self,
        task: NewTask,
        commit: impl Fn(Vec<NewTask>) -> Vec<Result<Created, StoreError>>,
    ) -> Result<Created, StoreError> {
        let mut queue = self.lock();
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        queue.waiting.push((ticket, task));
        loop {
            if let Some(answer) = queue.answers.remove(&ticket) {
                return answer;
            }
            let mine_waiting = queue.waiting.iter().any(|(queued, _)| *queued == ticket);
            if mine_waiting && queue.committers < COMMITTERS {
                let take = queue.waiting.len().min(BATCH);
                let group: Vec<(u64, NewTask)> = queue.waiting.drain(..take).collect();
                queue.committers += 1;
                drop(queue);
                let (tickets, tasks): (Vec<u64>, Vec<NewTask>) = group.into_iter().unzip();
                let mut turn = Turn {
                    creations: self,
                    tickets,
                    answers: Vec::new(),
                };
                turn.answers = commit(tasks);
                drop(turn);
                queue = self.lock();
                continue;
            }
            queue = self.answered.wait(queue).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// One transaction of creations, from its start to its answers: handed out when it is
/// dropped, so that a `commit` that panics still ends the turn (its tasks are told
/// they were not committed) and no thread waits for it forever.
struct Turn<'c> {
    creations: &'c Creations,
    tickets: Vec<u64>,
    answers: Vec<Result<Created, StoreError>>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut answers = std::mem::take(&mut self.answers).into_iter();
        let mut queue = self.creations.lock();
        queue.committers -= 1;
        for ticket in self.tickets.drain(..) {
            let answer = answers.next().unwrap_or_else(|| {
                Err(StoreError::NotCommitted(
                    "the creation's transaction ended without an answer".into(),
                ))
            });
            queue.answers.insert(ticket, answer);
        }
        self.creations.answered.notify_all();
    }
}

/// The same failure for another task of a failed group (a [`StoreError`] is not
/// `Clone`: the variant is kept, the cause becomes its message).
pub(super) fn shared_failure(error: &StoreError) -> StoreError {
    match error {
        StoreError::Full(cause) => StoreError::Full(cause.to_string().into()),
        StoreError::ReadOnly(cause) => StoreError::ReadOnly(cause.to_string().into()),
        StoreError::Corrupt(cause) => StoreError::Corrupt(cause.to_string().into()),
        StoreError::Unavailable(cause) => StoreError::Unavailable(cause.to_string().into()),
        StoreError::NotCommitted(cause) => StoreError::NotCommitted(cause.clone()),
        StoreError::Other(cause) => StoreError::Other(cause.to_string().into()),
    }
}
