//! The narrow interface between the engine and its storage: [`TaskStore`], the records
//! of [`super::model`] and a typed [`StoreError`]. Nothing database-specific crosses it,
//! so a store may be another database, in another process.

use std::path::Path;
use std::time::Duration;

use crossbeam_channel::Receiver;
use serde_json::{Map, Value};

use super::flow::{Gate, Pause, RateLimit};
use super::history::{HistoryConfig, HistoryRecord};
use super::model::{
    CancelEffect, Claim, Created, Finish, Lease, NewTask, RerunSource, SessionRecord, Stats,
    StatsDetail, TaskDetail, TaskFilter, TaskPage, TaskRow, UpdateEffect,
};
use super::output::{OutputBatch, OutputPage, OutputRead};
use super::payload_gate::{Admitted, PayloadGate};
use super::schedules::ScheduleStore;
pub use super::store_error::StoreError;
use taskd_base::later::Later;
use taskd_protocol::Identity;

/// The claiming side of a claim, consulted inside the claiming transaction.
pub trait Claimant: Send {
    /// Tools whose jobs must stay queued for now (at their concurrency limit); asked
    /// before each job. Their queued jobs are passed over without being read.
    fn saturated(&self) -> Vec<String>;
    /// Takes a claimed job before the claim commits: its tool's concurrency slot, and
    /// the attempt's registration where cancellations look for it (a `tasks/cancel`
    /// that sees the job running — it serializes with the claim — always finds the
    /// attempt). `false` when the tool has no free slot after all (an inline call took
    /// it meanwhile): the job stays queued as if never claimed, and its tool is passed
    /// over for the rest of this claim.
    fn take(&mut self, claim: &Claim) -> bool;
    /// Undoes every [`Claimant::take`] so far: the write that claimed those jobs was
    /// rolled back, and runs again (a write that failed among others sharing its
    /// savepoint runs again alone). Their slots and registrations are free again.
    fn give_back(&mut self);
    /// The rate limit a start of this claimed job draws a token from, if its tool has
    /// one (asked before [`Claimant::take`]; see [`crate::flow`]). No default: a
    /// claimant that wraps others must pass it on, or its claims would skip rates.
    fn rate_limit(&self, claim: &Claim) -> Option<RateLimit>;
    /// The bucket of `tool` (a tool-wide rate) is empty until `until` (Unix ms, the
    /// store's clock): the claimant passes the tool over until then
    /// ([`Claimant::saturated`]).
    fn rate_exhausted(&mut self, tool: &str, until: i64);
}

/// Which ready jobs to claim, and who takes each before the claim commits.
pub struct ClaimRequest {
    pub limit: usize,
    pub lease_ms: i64,
    pub claimant: Box<dyn Claimant>,
}

/// Which leased jobs [`TaskStore::reclaim_leases`] ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reclaim {
    /// Those whose lease has expired by the store's clock.
    Expired,
    /// At start-up, the jobs the previous run of this process left leased (and the
    /// expired ones): on a store this process has alone, every job leased before the
    /// store was opened; on a store several nodes share, those leased by this node's
    /// previous run, never another's live lease. Attempts this run starts are never
    /// among them, so recovery can run while workers claim.
    Orphaned,
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
/// `renew_leases`, `set_status_message`, `set_tool_state`) are fenced by the claim's token: once a lease
/// is taken over, the old holder's writes change nothing. Terminal tasks never change.
pub trait TaskStore: Send + Sync {
    /// The id of a task about to be created at `now_ms`, before [`TaskStore::create`]
    /// stores it: a time-ordered one unless the store reads something else back from its
    /// ids (see [`super::ids`]). Every id issued is new, whether its creation commits or
    /// not.
    fn new_task_id(&self, now_ms: i64) -> Result<String, getrandom::Error> {
        super::ids::time_ordered(now_ms)
    }
    /// Creates a task with its first job. With an idempotency key (per identity, across
    /// tools), the live task that already holds the key answers instead when it has the
    /// same tool and arguments digest, and a conflict when not (nothing is stored). The
    /// answer arrives after commit, without blocking the caller.
    fn create(&self, task: NewTask) -> Later<Result<Created, StoreError>>;
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
    /// [`TaskStore::find_authorized`] through `gate`: the bytes of the task's stored
    /// payloads (result, error, input requests) are measured without reading them, and
    /// the row is read only once the gate has room for them. Both reads use one pooled
    /// connection. On SQLite they also share one snapshot, so the size admitted is the
    /// size read; on PostgreSQL (read committed) a payload written between the two
    /// statements is read without having been sized.
    fn find_authorized_admitted<'g>(
        &self,
        identity: &Identity,
        task_id: &str,
        gate: &'g PayloadGate,
    ) -> Result<Admitted<'g>, StoreError>;
    /// `tasks/update`: accepts the responses that answer outstanding requests.
    fn update(
        &self,
        identity: &Identity,
        task_id: &str,
        responses: Map<String, Value>,
    ) -> Result<UpdateEffect, StoreError>;
    /// `tasks/cancel`: records durable intent.
    fn cancel(&self, identity: &Identity, task_id: &str) -> Result<CancelEffect, StoreError>;
    /// Claims up to `limit` ready jobs, oldest first, each with a fresh fencing token
    /// and lease, passing over the jobs of saturated tools (see [`Claimant`]).
    fn claim(&self, request: ClaimRequest) -> Result<Vec<Claim>, StoreError>;
    /// Records an attempt's outcome (fenced) with the last of its output (`output`, as
    /// [`TaskStore::append_output`] keeps it), and in the same write claims the jobs of
    /// `then_claim`: a busy worker goes from job to job with one commit each.
    fn finish(
        &self,
        lease: Lease,
        outcome: Finish,
        output: Option<OutputBatch>,
        then_claim: Option<ClaimRequest>,
    ) -> Result<Finished, StoreError>;
    /// Extends leases to `lease_ms` from now by the store's clock (so that nodes with
    /// skewed clocks agree on when a lease ends); `false` for each one no longer held.
    fn renew_leases(&self, leases: Vec<Lease>, lease_ms: i64) -> Result<Vec<bool>, StoreError>;
    /// A fenced status-message update from a running attempt.
    fn set_status_message(&self, lease: Lease, message: String) -> Result<bool, StoreError>;
    /// Appends a running attempt's output (fenced: `false`, and nothing kept, once its
    /// lease is gone), keeping at most the batch's `cap` bytes of the task's output: the
    /// oldest lines go, and are counted with those the attempt dropped before.
    fn append_output(&self, lease: Lease, batch: OutputBatch) -> Result<bool, StoreError>;
    /// Lines of a task's output. Not authorized: the caller found the task first.
    fn read_output(&self, task_id: &str, read: OutputRead) -> Result<OutputPage, StoreError>;
    /// The end of a clean shutdown: what is queued is committed and the store closes
    /// (later writes are refused). Stores that hold nothing open do nothing.
    fn close(&self) {}
    /// Pauses `tool` (see [`crate::flow`]): claims pass its queued jobs over until it is
    /// resumed, on every node. `false` when it was paused already (the reason is
    /// replaced).
    fn pause_tool(&self, tool: &str, reason: &str) -> Result<bool, StoreError>;
    /// Resumes `tool`; `false` when it was not paused.
    fn resume_tool(&self, tool: &str) -> Result<bool, StoreError>;
    /// The paused tools, by name.
    fn paused_tools(&self) -> Result<Vec<Pause>, StoreError>;
    /// An inline call of a keyed tool takes a place of `gate` for at most `hold_ms`
    /// (then it lapses, should the call's process die) when the gate admits it: fewer
    /// than its limit taken, and no task of the gate held. `false`: try again later.
    fn hold_gate(&self, gate: &Gate, holder: &str, hold_ms: i64) -> Result<bool, StoreError>;
    /// The inline call gives its place back; the gate's oldest held task may go.
    fn release_gate(&self, gate: &str, holder: &str) -> Result<(), StoreError>;
    /// An inline start of a rate-limited tool takes a token: `Err(until)` (Unix ms, the
    /// store's clock) when the bucket is empty.
    fn take_token(&self, limit: &RateLimit) -> Result<Result<(), i64>, StoreError>;
    /// A fenced write of the tool's own state by a running attempt, kept for the
    /// attempts that follow (what an upstream call became, so that a restart follows it
    /// instead of calling again). Clients never see it.
    fn set_tool_state(&self, lease: Lease, state: String) -> Result<bool, StoreError>;
    /// Ends (as a retry, for `reason`) up to `limit` attempts of `leases`. Returns how
    /// many.
    fn reclaim_leases(
        &self,
        leases: Reclaim,
        limit: usize,
        reason: String,
    ) -> Result<usize, StoreError>;
    /// Deletes up to `limit` tasks past their TTL; returns their ids. In the same
    /// transaction, each finished one leaves a summary in the history for as long as
    /// `history` keeps its outcome (see [`crate::history`]).
    fn delete_expired(
        &self,
        limit: usize,
        history: &HistoryConfig,
    ) -> Result<Vec<String>, StoreError>;
    /// Deletes up to `limit` history summaries past their time; returns how many.
    fn prune_history(&self, limit: usize) -> Result<usize, StoreError>;
    /// Outbox rows (sequence, task id) after `after`, oldest first.
    fn outbox_after(&self, after: i64, limit: usize) -> Result<Vec<(i64, String)>, StoreError>;
    /// The newest outbox sequence (0 when empty).
    fn outbox_newest(&self) -> Result<i64, StoreError>;
    /// Records that this process's relay has delivered every row up to `delivered`
    /// (every janitor round): a store several nodes share prunes only what every live
    /// node has delivered.
    fn note_delivered(&self, _delivered: i64) -> Result<(), StoreError> {
        Ok(())
    }
    /// Deletes up to `limit` delivered rows (`seq <= upto`), always keeping the newest.
    fn prune_outbox(&self, upto: i64, limit: usize) -> Result<usize, StoreError>;
    /// Counts for the metrics page.
    fn stats(&self) -> Result<Stats, StoreError>;
    /// Jobs waiting for a worker (backoff included), without reading the tasks.
    fn queued_jobs(&self) -> Result<u64, StoreError>;
    /// How many tasks of the identity keyed `owner` (`Identity::key`) are not yet
    /// terminal, counting no further than `at_most`.
    fn live_tasks(&self, owner: &str, at_most: u64) -> Result<u64, StoreError>;
    /// Bytes of the store's log, if it has one (SQLite's WAL).
    fn log_bytes(&self) -> Option<u64>;
    /// Periodic maintenance that keeps the store's files bounded.
    fn maintain(&self) -> Result<(), StoreError>;
    /// Whether the store can write, as its last write found (cheap: no I/O). `/healthz`
    /// reports the error.
    fn health(&self) -> Result<(), StoreError>;
    /// Pinged after commits (one ping may stand for many), the commits of every node
    /// sharing the store included.
    fn subscribe(&self) -> Receiver<()>;
    /// Task ids whose cancellation another node recorded while an attempt of theirs was
    /// running (it may be running here); `None` for a store only this process uses.
    fn remote_cancellations(&self) -> Option<Receiver<String>> {
        None
    }
    /// Pinged when jobs may have become ready to run on a store several nodes share
    /// (another node's creations included), so that idle workers claim at once rather
    /// than at their next poll; `None` for a store only this process uses (its own
    /// creations wake its workers directly).
    fn jobs_queued(&self) -> Option<Receiver<()>> {
        None
    }
    /// Whether this process runs the store-wide upkeep now (lease reclaim, TTL expiry,
    /// outbox pruning): one node at a time when several share the store. Asked before
    /// every janitor round.
    fn upkeep_leader(&self) -> bool {
        true
    }
    /// Folds bookkeeping that keeps [`TaskStore::stats`] cheap (every janitor round of
    /// the upkeep leader).
    fn fold_counts(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// The 32-byte key `name` that every node sharing the store uses (created on first
    /// use); `None` when the store is this process's alone and the data dir keeps keys.
    fn shared_key(&self, _name: &str) -> Result<Option<[u8; 32]>, StoreError> {
        Ok(None)
    }
    /// Operators: up to `limit` tasks matching `filter`, newest first, below the id
    /// `before` (a keyset page: the next page starts below the last id seen). A page
    /// examines a bounded number of tasks: a sparse filter may get a short page with
    /// [`TaskPage::resume`] set, to continue from.
    fn list_tasks(
        &self,
        filter: &TaskFilter,
        before: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError>;
    /// Operators: everything stored about a task (expired or not), with its attempts.
    fn task_detail(&self, task_id: &str) -> Result<Option<TaskDetail>, StoreError>;
    /// Operators: [`TaskStore::cancel`] on any task, whatever its binding.
    fn admin_cancel(&self, task_id: &str) -> Result<CancelEffect, StoreError>;
    /// Operators: what a rerun of the task copies (binding, tool, origin): from the task,
    /// or from its history summary when that kept the origin.
    fn rerun_source(&self, task_id: &str) -> Result<Option<RerunSource>, StoreError>;
    /// Operators: up to `limit` history summaries matching `filter`, newest first,
    /// below the id `before`, as [`TaskStore::list_tasks`] pages tasks (its
    /// [`TaskPage::resume`] too). Each has [`crate::model::TaskSummary::removed_at`].
    fn list_history(
        &self,
        filter: &TaskFilter,
        before: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError>;
    /// Operators: the history summary of a task no longer stored.
    fn history_record(&self, task_id: &str) -> Result<Option<HistoryRecord>, StoreError>;
    /// Operators: on-demand counts (may scan; never on a timer).
    fn stats_detail(&self) -> Result<StatsDetail, StoreError>;
    /// Writes a consistent copy of the whole store into the new file `destination`
    /// while the store keeps serving, and verifies the copy. `progress` gets
    /// (units done, units in all) as the copy proceeds.
    fn backup_to(
        &self,
        destination: &Path,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), StoreError>;
    /// Waits up to `limit` until every answer of [`TaskStore::create`] has been
    /// delivered; `false` if some are still owed.
    fn wait_for_continuations(&self, limit: Duration) -> bool;
    /// Legacy sessions (issue 28): writes `session` whole; with `sweep`, also deletes
    /// up to 100 sessions last used before `sweep` (Unix ms).
    fn save_session(&self, session: SessionRecord, sweep: Option<i64>) -> Result<(), StoreError>;
    /// The stored session `id`, if it was used at or after `used_since` (Unix ms).
    fn load_session(&self, id: &str, used_since: i64) -> Result<Option<SessionRecord>, StoreError>;
    /// Deletes the stored session `id`.
    fn delete_session(&self, id: &str) -> Result<(), StoreError>;
    /// What the store keeps of schedules besides their tasks (see [`crate::schedules`]).
    fn schedules(&self) -> &dyn ScheduleStore;
}
