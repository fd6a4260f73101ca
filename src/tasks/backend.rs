//! The narrow interface between the engine and its storage: [`TaskStore`], the records
//! of [`super::model`] and a typed [`StoreError`]. Nothing database-specific crosses it,
//! so a store may be another database, in another process.

use std::error::Error;
use std::time::Duration;

use crossbeam_channel::Receiver;
use serde_json::{Map, Value};

use super::model::{CancelEffect, Claim, Finish, Lease, NewTask, Stats, TaskRow, UpdateEffect};
use crate::auth::Identity;
use crate::later::Later;

/// Why a store operation failed. Details go to the log; clients see a generic internal
/// error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No space left for the database or its log.
    #[error("the task store is full: {0}")]
    Full(Box<dyn Error + Send + Sync>),
    /// The database cannot be written (file permissions, read-only medium).
    #[error("the task store is read-only: {0}")]
    ReadOnly(Box<dyn Error + Send + Sync>),
    /// The database is damaged or not a task store.
    #[error("the task store is corrupt: {0}")]
    Corrupt(Box<dyn Error + Send + Sync>),
    /// The store cannot serve right now (no connection within its timeout, busy).
    #[error("the task store is unavailable: {0}")]
    Unavailable(Box<dyn Error + Send + Sync>),
    /// The write was not committed: the writer has stopped, or the commit failed.
    #[error("not committed: {0}")]
    NotCommitted(String),
    #[error("task store: {0}")]
    Other(Box<dyn Error + Send + Sync>),
}

/// Runs inside the claiming transaction, once per claim, before it commits.
pub type OnClaim = Box<dyn FnMut(&Claim) + Send>;

/// Which ready jobs to claim, and what to do with each before the claim commits.
pub struct ClaimRequest {
    pub limit: usize,
    pub lease_ms: i64,
    /// Registers the attempt where cancellations look for it: a `tasks/cancel` that sees
    /// the job running (it serializes with the claim) always finds the attempt.
    pub on_claim: OnClaim,
}

/// What a fenced [`TaskStore::finish`] did.
pub struct Finished {
    /// `false` when the lease was no longer the caller's: nothing was written.
    pub applied: bool,
    /// The jobs claimed in the same write (see [`TaskStore::finish`]).
    pub next: Vec<Claim>,
}

/// Durable task storage: every operation the engine performs, each one atomic.
///
/// Mutations are acknowledged only after they are durable. Every mutation of a task
/// also appends to the outbox in the same transaction. Worker writes (`finish`,
/// `renew_leases`, `set_status_message`) are fenced by the claim's token: once a lease
/// is taken over, the old holder's writes change nothing. Terminal tasks never change.
pub trait TaskStore: Send + Sync {
    /// Creates a task with its first job, or returns the live task that already holds
    /// its idempotency key. The answer arrives after commit, without blocking the caller.
    fn create(&self, task: NewTask) -> Later<Result<TaskRow, StoreError>>;
    /// The task, if it exists, has not expired, and is bound to `identity`. Unknown,
    /// expired and foreign tasks are indistinguishable.
    fn find_authorized(
        &self,
        identity: &Identity,
        task_id: &str,
    ) -> Result<Option<TaskRow>, StoreError>;
    /// Up to `limit` unexpired tasks bound to `identity` whose id sorts after `after`,
    /// in id order (legacy `tasks/list`; ids sort by creation time).
    fn list_authorized(
        &self,
        identity: &Identity,
        after: &str,
        limit: usize,
    ) -> Result<Vec<TaskRow>, StoreError>;
    /// `tasks/update`: accepts the responses that answer outstanding requests.
    fn update(
        &self,
        identity: &Identity,
        task_id: &str,
        responses: Map<String, Value>,
    ) -> Result<UpdateEffect, StoreError>;
    /// `tasks/cancel`: records durable intent.
    fn cancel(&self, identity: &Identity, task_id: &str) -> Result<CancelEffect, StoreError>;
    /// Claims ready jobs, each with a fresh fencing token and lease.
    fn claim(&self, request: ClaimRequest) -> Result<Vec<Claim>, StoreError>;
    /// Records an attempt's outcome (fenced), and in the same write claims the jobs of
    /// `then_claim`: a busy worker goes from job to job with one commit each.
    fn finish(
        &self,
        lease: Lease,
        outcome: Finish,
        then_claim: Option<ClaimRequest>,
    ) -> Result<Finished, StoreError>;
    /// Extends leases to `expires`; `false` for each one no longer held.
    fn renew_leases(&self, leases: Vec<Lease>, expires: i64) -> Result<Vec<bool>, StoreError>;
    /// A fenced status-message update from a running attempt.
    fn set_status_message(&self, lease: Lease, message: String) -> Result<bool, StoreError>;
    /// Ends (as a retry, for `reason`) up to `limit` attempts whose lease expired before
    /// `before` — every leased one with `None`. Returns how many.
    fn reclaim_leases(
        &self,
        before: Option<i64>,
        limit: usize,
        reason: String,
    ) -> Result<usize, StoreError>;
    /// Deletes up to `limit` tasks past their TTL; returns their ids.
    fn delete_expired(&self, limit: usize) -> Result<Vec<String>, StoreError>;
    /// Outbox rows (sequence, task id) after `after`, oldest first.
    fn outbox_after(&self, after: i64, limit: usize) -> Result<Vec<(i64, String)>, StoreError>;
    /// The newest outbox sequence (0 when empty).
    fn outbox_newest(&self) -> Result<i64, StoreError>;
    /// Deletes up to `limit` delivered rows (`seq <= upto`), always keeping the newest.
    fn prune_outbox(&self, upto: i64, limit: usize) -> Result<usize, StoreError>;
    /// Counts for the metrics page.
    fn stats(&self) -> Result<Stats, StoreError>;
    /// Jobs waiting for a worker (backoff included), without reading the tasks.
    fn queued_jobs(&self) -> Result<u64, StoreError>;
    /// Bytes of the store's log, if it has one (SQLite's WAL).
    fn log_bytes(&self) -> Option<u64>;
    /// Periodic maintenance that keeps the store's files bounded.
    fn maintain(&self) -> Result<(), StoreError>;
    /// Pinged after commits (one ping may stand for many).
    fn subscribe(&self) -> Receiver<()>;
    /// Waits up to `limit` until every answer of [`TaskStore::create`] has been
    /// delivered; `false` if some are still owed.
    fn wait_for_continuations(&self, limit: Duration) -> bool;
}
