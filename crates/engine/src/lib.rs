//! The task engine: durable tasks from `tools/call` to their outcome — the service the
//! handlers call, the store behind a narrow interface, the workers that run attempts,
//! and the upkeep beside them.
//!
//! ```text
//! service    TaskService: create / get / update / cancel, authorized, rendered as JSON
//!   │            (and tells a running attempt it was cancelled, through workers::Inflight)
//!   │            (payload_gate: room for large payloads before `tasks/get` reads them)
//!   │            (shares: each identity's quotas and creation pace, as applied)
//!   └─ backend   TaskStore: the narrow interface (model: its records; StoreError),
//!                implemented by the `taskd-sqlite` and `taskd-postgres` crates
//! workers    claim jobs (lease + fencing token), run tools, commit outcomes (via TaskStore)
//! upkeep     outbox relay → notifications; janitor (leases, TTL, outbox, log, history);
//!            recovery
//! history    retention by outcome: the operator's summaries of tasks past their TTL
//! settings   what it reads of the configuration in force, and where it reports
//! config     the settings it owns: `[store]`, `[workers]`, `[tasks]` (and `[history]`)
//! schedules  `[[schedules]]`: slots computed from cron or every, each made a task once
//! webhooks   WebhookStore: webhook deliveries as the stores keep them (sent by `taskd-webhooks`)
//! ```
//!
//! Dependencies point one way: `model` ← `backend` ← the stores; `service`, `workers`
//! and `upkeep` use the trait only (the server's assembly alone opens a store, and the
//! offline operator commands).
//!
//! May depend on: `taskd-protocol`, `taskd-base`, `taskd-telemetry`,
//! `taskd-notifications` (the relay's hints), `taskd-tools` (what a worker runs). Must
//! never know: SQL or a store's crate, HTTP, tokens, the configuration file. What it
//! needs from above comes through traits it owns: [`SettingsSource`] (the tools, the
//! `[tasks]` defaults and the shares in force), [`QuotaCounter`],
//! [`workers::AttemptObserver`] and [`upkeep::UpkeepCounters`].
//!
//! # Durability guarantees, and where each is kept
//!
//! - An acknowledged write is on disk; writes commit in groups; no client ever sees
//!   "database is locked"; pragmas are verified; one server per data dir: the
//!   `taskd-sqlite` crate (its docs), its `writer` and `connection`.
//! - The WAL stays bounded and checkpoints stay off the commit path: `taskd-sqlite`'s
//!   `checkpoint`, and the janitor ([`upkeep`]).
//! - Every task mutation appends to the outbox in its transaction, and worker writes are
//!   fenced by the claim's token: [`TaskStore`], kept in each store's `sql/`.
//! - On PostgreSQL, several nodes share one database: outbox `seq` in commit order and
//!   `LISTEN/NOTIFY` to every node, leases on the database clock, one upkeep leader at a
//!   time, bounded waits when the database is gone: the `taskd-postgres` crate (its
//!   docs).
//! - At-least-once execution, prompt cancellation, and a shutdown that never fails or
//!   cancels a task: [`workers`]. Nothing stays `working` forever: [`upkeep`].

pub mod backend;
pub mod config;
pub mod flow;
pub mod history;
pub mod ids;
pub mod model;
pub mod output;
pub mod payload_gate;
pub mod schedules;
mod service;
pub mod settings;
pub mod shares;
mod store_error;
pub mod upkeep;
pub mod webhooks;
pub mod workers;

pub use backend::{StoreError, TaskStore};
pub use model::{Origin, Stats};
pub use service::{
    InlinePlace, NoPlace, RerunError, Start, StartError, Started, Submission, TaskService,
};
pub use settings::{EngineSettings, QuotaCounter, SettingsSource};
