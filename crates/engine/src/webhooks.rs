//! Webhook deliveries as the stores keep them (issue 49): the records and the
//! [`WebhookStore`] interface through which `taskd-webhooks` delivers them. The engine
//! sends nothing itself (it never knows HTTP); it owns the vocabulary so that both
//! stores implement one interface.
//!
//! # How an event becomes a delivery
//!
//! Each configured webhook's wishes (its events, tools and identities) are written to
//! the store as [`Route`]s. Triggers on the tasks table then insert, in the same
//! transaction as the task's change, one pending delivery row per webhook whose routes
//! match the change: `task.created` when a task is inserted, `task.<status>` when its
//! status becomes `completed`, `failed`, `cancelled` or `input_required`. A change is
//! never recorded without its deliveries, nor the other way round, whatever crashes.
//! The general outbox (task ids only, pruned once the in-process relay has read them)
//! would not do: by the time a slow receiver is reached, the task's status may have
//! moved on, and the transitions in between would be lost.
//!
//! A delivery stays pending until it is delivered, or until it has been retried for
//! its webhook's horizon (then it is dead, kept for `mcp-taskd webhooks retry`). The
//! deliveries of one webhook and one task go out one at a time, oldest first: a
//! delivery is due only once every earlier pending delivery of its task to its webhook
//! is done.

use crate::store_error::StoreError;

/// The events a webhook may ask for.
pub const EVENTS: [&str; 5] = [
    "task.created",
    "task.completed",
    "task.failed",
    "task.cancelled",
    "task.input_required",
];

/// What a route matches in a field: anything, or exactly this value.
pub const ANY: &str = "*";

/// One wish of a webhook: deliver `event` of tasks of `tool` bound to `tenant` and
/// `principal` (each [`ANY`] for any).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Route {
    pub event: String,
    pub webhook: String,
    pub tool: String,
    pub tenant: String,
    pub principal: String,
}

/// A delivery to make: the event as recorded, and what the task holds now.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Its position: deliveries of one task are made in this order.
    pub seq: i64,
    pub webhook: String,
    /// The `webhook-id`: the same on every attempt.
    pub id: String,
    pub task_id: String,
    pub event: String,
    pub tool: String,
    /// The task's status as the change left it.
    pub status: String,
    /// When the change happened (Unix ms).
    pub at_ms: i64,
    /// Since when it has been retried (the change, or the operator's `retry`).
    pub since_ms: i64,
    /// Attempts made so far.
    pub attempts: i64,
    /// The task as stored now (`None` once it has expired).
    pub task: Option<TaskNow>,
}

/// What a delivery's body may carry of its task, read when the delivery is claimed.
#[derive(Debug, Clone, Default)]
pub struct TaskNow {
    pub created_at: i64,
    pub updated_at: i64,
    /// The JSON-RPC error of a failed task.
    pub error: Option<String>,
    /// The `CallToolResult` of a completed task, only when asked for.
    pub result: Option<String>,
    /// The outstanding input requests, only when asked for.
    pub input_requests: Option<String>,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The receiver answered 2xx. `retried`: earlier attempts of it had failed, so that
    /// its task's later deliveries were held back behind it (and are due now).
    Delivered { status: u16, retried: bool },
    /// It failed; try again in `delay_ms`.
    Retry {
        delay_ms: i64,
        status: Option<u16>,
        error: String,
    },
    /// It failed, and the horizon has passed: undelivered for good.
    Dead { status: Option<u16>, error: String },
}

/// The deliveries made among a batch of outcomes, as a store records them: their seqs
/// by status code (one statement a code), and those of them that had failed before
/// (their tasks' later deliveries are released; only for them is that statement run).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DeliveredBatch {
    pub by_status: std::collections::BTreeMap<u16, Vec<i64>>,
    pub retried: Vec<i64>,
}

impl DeliveredBatch {
    pub fn of(outcomes: &[(i64, Outcome)]) -> DeliveredBatch {
        let mut batch = DeliveredBatch::default();
        for (seq, outcome) in outcomes {
            if let Outcome::Delivered { status, retried } = outcome {
                batch.by_status.entry(*status).or_default().push(*seq);
                if *retried {
                    batch.retried.push(*seq);
                }
            }
        }
        batch
    }
}

/// A delivery's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    Pending,
    Delivered,
    Dead,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Dead => "dead",
        }
    }

    pub fn parse(text: &str) -> Option<DeliveryState> {
        match text {
            "pending" => Some(DeliveryState::Pending),
            "delivered" => Some(DeliveryState::Delivered),
            "dead" => Some(DeliveryState::Dead),
            _ => None,
        }
    }
}

/// A delivery as operators see it (no task contents).
#[derive(Debug, Clone)]
pub struct DeliveryRecord {
    pub seq: i64,
    pub webhook: String,
    pub id: String,
    pub task_id: String,
    pub event: String,
    pub tool: String,
    pub state: DeliveryState,
    pub attempts: i64,
    pub at_ms: i64,
    /// When it was delivered or given up (Unix ms).
    pub done_at: Option<i64>,
    /// When a pending one is tried next (Unix ms, the store's clock).
    pub next_at: i64,
    pub last_status: Option<u16>,
    pub last_error: Option<String>,
}

/// One webhook's deliveries, counted.
#[derive(Debug, Clone, Default)]
pub struct WebhookCounts {
    pub webhook: String,
    pub pending: u64,
    pub dead: u64,
    /// Delivered and still kept (the recent ones).
    pub delivered: u64,
    /// When the oldest pending delivery's change happened (Unix ms).
    pub oldest_pending_at: Option<i64>,
    /// When the last delivery was made (Unix ms).
    pub last_delivered_at: Option<i64>,
}

/// Which deliveries [`WebhookStore::list_deliveries`] lists.
#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    pub webhook: Option<String>,
    pub state: Option<DeliveryState>,
    /// Only those whose `seq` is below this (a page further back).
    pub before: Option<i64>,
}

/// Which dead deliveries [`WebhookStore::retry_deliveries`] makes pending again.
#[derive(Debug, Clone, Default)]
pub struct RetryFilter {
    pub webhook: Option<String>,
    /// One delivery, by its `webhook-id`.
    pub id: Option<String>,
}

/// Delivery state in the store. Times the store compares (due, leases, pruning) are
/// the store's own clock; `delay_ms` and ages are relative to it.
pub trait WebhookStore: Send + Sync {
    /// Makes `routes` the wishes in force (replacing all others), unless they already
    /// are. Deliveries already recorded stay.
    fn set_webhook_routes(&self, routes: &[Route]) -> Result<(), StoreError>;
    /// At start-up: deliveries this process's earlier runs had claimed and not
    /// recorded (it was killed mid-delivery) are due again at once.
    fn release_webhook_claims(&self) -> Result<usize, StoreError>;
    /// Up to `limit` deliveries of `webhook` that are due, oldest first, none of whose
    /// task's earlier deliveries to the webhook is pending, leaving out `in_flight`
    /// (this process's, by `seq`). A store several nodes share leases them to this
    /// process for `lease_ms` (another node takes them only once that passes); a store
    /// this process has alone needs no lease. `payload`: read the task's result and
    /// input requests too.
    fn claim_deliveries(
        &self,
        webhook: &str,
        limit: usize,
        lease_ms: i64,
        in_flight: &[i64],
        payload: bool,
    ) -> Result<Vec<Delivery>, StoreError>;
    /// Records attempts' outcomes, by `seq`. A retry also holds back the later
    /// pending deliveries of its task to its webhook until it is due again.
    fn record_deliveries(&self, outcomes: &[(i64, Outcome)]) -> Result<(), StoreError>;
    /// The receiver answers again: every pending delivery of `webhook` waiting for a
    /// retry is due now. Returns how many.
    fn hasten_deliveries(&self, webhook: &str) -> Result<usize, StoreError>;
    /// Deletes up to `limit` deliveries delivered more than `delivered_age_ms` ago and
    /// dead ones older than `dead_age_ms`; marks dead the pending deliveries of
    /// webhooks not in `configured` whose change is older than `orphan_age_ms`.
    fn prune_deliveries(
        &self,
        configured: &[String],
        delivered_age_ms: i64,
        dead_age_ms: i64,
        orphan_age_ms: i64,
        limit: usize,
    ) -> Result<usize, StoreError>;
    /// Every webhook with deliveries, counted.
    fn delivery_counts(&self) -> Result<Vec<WebhookCounts>, StoreError>;
    /// Deliveries matching `filter`, newest first.
    fn list_deliveries(
        &self,
        filter: &DeliveryFilter,
        limit: usize,
    ) -> Result<Vec<DeliveryRecord>, StoreError>;
    /// Makes dead deliveries matching `filter` pending again, due now, with a fresh
    /// horizon. Returns how many.
    fn retry_deliveries(&self, filter: &RetryFilter) -> Result<usize, StoreError>;
}
