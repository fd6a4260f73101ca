// Over 600 lines: one `TaskStore` impl of short transactions; the SQL is in sql/, failures in failure.rs.
//! The PostgreSQL [`TaskStore`] (`store.backend = "postgres"`): several nodes running
//! the same binary share one database, and every node serves every task. Only the
//! server's assembly and its offline operator commands name it (to open it); the
//! engine sees the trait.
//!
//! # Durability guarantees (and what keeps them)
//!
//! - **An acknowledged write is committed.** Every operation is one transaction on a
//!   pooled connection (concurrent creations share one, and so do workers' finishes
//!   with their next claims: [`groups`]); its answer (a task handle included) is given
//!   after `COMMIT` returned, with PostgreSQL's own durability (`synchronous_commit`,
//!   `fsync`: the server's settings; the defaults flush the WAL before a commit
//!   returns). Statements are prepared once per connection ([`statements`]): each
//!   later run is one round trip.
//! - **Every task change appends its outbox row in the same transaction**
//!   (`taskd_append_outbox`, schema-postgres.sql); once it has committed, the node's
//!   [`notifier`] sends `NOTIFY mcp_taskd_outbox` (one for all the changes committed
//!   meanwhile), which wakes every node's relay ([`listener`]). A row's
//!   position is its transaction's id, and relays read only past the oldest running
//!   transaction (`sql/upkeep.rs`, `outbox_after`): a row committing late is read late,
//!   never skipped, and no lock serializes the commits of the nodes.
//! - **Worker writes are fenced** by the claim's token, as in SQLite, and every writer
//!   locks the task row, then the job row (`sql/`): two nodes acting on one task take
//!   turns and never deadlock on each other. Claims take a batch in one statement with
//!   `FOR UPDATE SKIP LOCKED` (`sql/attempts.rs`).
//! - **Lease and expiry times use the database clock** (`taskd_now_ms()`): a node whose
//!   clock is ahead cannot find another node's live lease expired.
//! - **Idle workers on every node are woken** when a change may have queued jobs
//!   (`NOTIFY mcp_taskd_jobs`, [`listener`]), not only those of the node that made it.
//! - **Store-wide upkeep runs on one node at a time** and moves to another when that one
//!   dies ([`leader`]).
//! - **Losing the database never blocks a caller forever**: a connection is awaited at
//!   most [`connection::CHECKOUT_TIMEOUT`], errors are `StoreError::Unavailable` (503
//!   with `Retry-After`), `/healthz` answers 503 while the listener cannot reach the
//!   database, and the node recovers by itself when it returns ([`connection`],
//!   [`listener`]). A write whose transaction failed before `COMMIT` was sent is
//!   retried on a fresh connection; one whose `COMMIT` got no answer is reported as not
//!   committed (it may have been: the client retries, with its idempotency key).
//!
//! What is SQLite's only: there is no WAL file to bound (`log_bytes` is `None`,
//! `maintain` does nothing), no backup (`backup_to` refuses: use `pg_dump` or the
//! server's own backups), and free space is the database server's concern.
//!
//! May depend on: `taskd-engine` (the trait it implements, its records and settings),
//! `taskd-protocol`, `taskd-base`. Must never know: the other store, HTTP, the
//! configuration file (it reads `taskd_engine::config::StoreConfig`).

mod connection;
mod failure;
mod finishes;
mod groups;
mod leader;
mod listener;
mod migrations;
mod notifier;
mod schedules;
mod sql;
mod statements;
mod webhooks;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use serde_json::{Map, Value};

pub use self::connection::{check_url, OpenError, UrlError, PASSWORD_ENV};
use self::connection::{Manager, Pooled};
pub(crate) use self::failure::{Failure, Health};
use self::finishes::{Finishing, FINISHES_GROUP};
use self::groups::{failed_together, Groups};
use self::leader::Leader;
use self::listener::Listener;
use self::notifier::Notifier;
use self::sql::{admin, attempts, client, create, flow, history, output, sessions, upkeep};
use self::statements::{Db, Tx};
use taskd_base::clock::now_ms;
use taskd_base::later::Later;
use taskd_engine::backend::{ClaimRequest, Finished, Reclaim, StoreError, TaskStore};
use taskd_engine::config::StoreConfig;
use taskd_engine::flow::{Gate, Pause, RateLimit};
use taskd_engine::history::{HistoryConfig, HistoryRecord};
use taskd_engine::model::{
    CancelEffect, Claim, Created, Finish, Lease, NewTask, RerunSource, SessionRecord, Stats,
    StatsDetail, TaskDetail, TaskFilter, TaskPage, TaskRow, UpdateEffect,
};
use taskd_engine::output::{OutputBatch, OutputPage, OutputRead};
use taskd_engine::payload_gate::{Admitted, PayloadGate, UNGATED_BYTES};
use taskd_protocol::Identity;

/// A connection of its own to the configured database, migrated to the newest schema,
/// for one-off operator work outside any pool (`mcp-taskd copy-store`).
pub fn connect_migrated(config: &StoreConfig) -> Result<postgres::Client, OpenError> {
    let settings = connection::settings(config)?;
    let mut client =
        connection::connect(&settings).map_err(|e| OpenError::Connect(e.to_string()))?;
    migrations::migrate(&mut client)?;
    Ok(client)
}

/// How one run of a transaction failed.
enum Attempt {
    /// At `COMMIT`: it may have committed; not to be run again.
    Committing(StoreError),
    /// Before: nothing committed; `ran` says whether `op` ran.
    Failed { failure: Failure, ran: bool },
}

/// Longest wait for a connection while the database is known to be unreachable.
const OUTAGE_CHECKOUT: Duration = Duration::from_millis(200);

/// Longest wait for a connection before the pool is asked again (see
/// `Store::connection`).
const CHECKOUT_SLICE: Duration = Duration::from_millis(100);

/// How many times a transaction runs at most when its failures are retryable.
const TRIES: usize = 3;

pub struct Store {
    /// This node's id (see [`node_id`]): relay cursors are kept under it.
    node: String,
    /// This run of the node, `<node>/<random>`: its claims carry it, so that start-up
    /// recovery (which runs while this run's workers claim) reclaims the leases of the
    /// node's earlier runs only.
    run: String,
    settings: postgres::Config,
    pool: r2d2::Pool<Manager>,
    health: Arc<Health>,
    commits: Receiver<()>,
    cancellations: Receiver<String>,
    jobs: Receiver<()>,
    leader: Leader,
    creations: Groups<NewTask, Created>,
    finishes: Groups<Finishing, Finished>,
    notifier: Notifier,
    /// Set when the store is dropped: the listener stops.
    stopping: Arc<AtomicBool>,
}

/// A freshly opened store with the handles its owner needs.
pub struct Opened {
    pub store: Arc<Store>,
    /// The listener thread: ends once the store is closed (or dropped).
    pub listener: JoinHandle<()>,
}

impl Store {
    /// Connects, migrates the schema (once across nodes), and starts the listener.
    /// Fails when the database cannot be reached now (at start-up, a clear error beats
    /// a node that serves nothing but 503s).
    pub fn open(config: &StoreConfig, data_dir: &Path) -> Result<Opened, OpenError> {
        let node = node_id(data_dir)?;
        let mut settings = connection::settings(config)?;
        // Names this run's sessions, so that the next run of this node can tell when
        // this one's are gone (see `await_predecessor`).
        let named = settings.get_application_name() == Some(connection::APPLICATION);
        if named {
            settings.application_name(&session_name(&node, std::process::id()));
        }
        let mut first =
            connection::connect(&settings).map_err(|e| OpenError::Connect(e.to_string()))?;
        let version = migrations::migrate(&mut first)?;
        if named {
            await_predecessor(&mut first, &node);
        }
        drop(first);
        log::info!("PostgreSQL task store at schema version {version}");
        let epoch = Arc::new(AtomicU64::new(0));
        let pool = connection::pool(settings.clone(), config.pool_size, Arc::clone(&epoch));
        let health = Arc::new(Health::default());
        let stopping = Arc::new(AtomicBool::new(false));
        let (commit_sender, commits) = crossbeam_channel::bounded(1);
        let (cancel_sender, cancellations) = crossbeam_channel::bounded(4096);
        let (jobs_sender, jobs) = crossbeam_channel::bounded(1);
        let listener = Listener {
            settings: settings.clone(),
            commits: commit_sender,
            cancellations: cancel_sender,
            jobs: jobs_sender,
            health: Arc::clone(&health),
            epoch,
            stopping: Arc::clone(&stopping),
        };
        let listener = std::thread::Builder::new()
            .name("pg-listener".into())
            .spawn(move || listener.run())
            .map_err(|e| OpenError::Start(format!("starting the listener: {e}")))?;
        let notifier = Notifier::start(settings.clone())
            .map_err(|e| OpenError::Start(format!("starting the notifier: {e}")))?;
        Ok(Opened {
            store: Arc::new(Store {
                run: format!("{node}/{}", uuid::Uuid::new_v4().simple()),
                node,
                settings,
                pool,
                health,
                commits,
                cancellations,
                jobs,
                leader: Leader::default(),
                creations: Groups::new(CREATIONS_GROUP),
                finishes: Groups::new(FINISHES_GROUP),
                notifier,
                stopping,
            }),
            listener,
        })
    }

    fn connection(&self) -> Result<r2d2::PooledConnection<Manager>, StoreError> {
        // No health mark here: under load the pool may simply be busy; the listener
        // tells whether the database is reachable. While it is not, callers are told
        // at once instead of each waiting out the checkout timeout.
        let checkout = if self.health.problem().is_some() {
            OUTAGE_CHECKOUT
        } else {
            connection::CHECKOUT_TIMEOUT
        };
        // In slices: r2d2 wakes a waiting caller only when a connection is returned to
        // it or opened, and opens one only when a checkout starts. A connection retired
        // on its return (a closed one, or one that carried a large message: see
        // `Manager::has_broken`) wakes nobody, so with every connection out, waiters
        // would sleep until their timeout while the pool had room. Each new slice is a
        // new checkout, which opens a connection in the retired one's place.
        let deadline = Instant::now() + checkout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.pool.get_timeout(left.min(CHECKOUT_SLICE)) {
                Ok(conn) => return Ok(conn),
                Err(error) if left <= CHECKOUT_SLICE => {
                    return Err(StoreError::Unavailable(Box::new(error)))
                }
                Err(_) => {}
            }
        }
    }

    /// Notes what a failure says about the database, and sorts it.
    fn failed(&self, failure: Failure) -> StoreError {
        if failure.is_unreachable() {
            self.health
                .set(Some("the database connection failed".to_owned()));
        }
        failure.classify()
    }

    /// Runs `op` in one transaction and commits it. A failure that surely left nothing
    /// committed is retried on a fresh connection (up to [`TRIES`] runs in all); a
    /// failed `COMMIT` is not (it may have committed): `NotCommitted`.
    fn transaction<T>(
        &self,
        mut op: impl FnMut(&mut Tx<'_, '_>) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        self.run(true, Wake::Nobody, &mut op)
    }

    /// [`Store::transaction`] for a task change: once it has committed, every node's
    /// relay is woken ([`notifier`]).
    fn change<T>(
        &self,
        mut op: impl FnMut(&mut Tx<'_, '_>) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        self.run(true, Wake::Relays, &mut op)
    }

    /// [`Store::change`] for a change that may queue jobs ready to run (a creation, an
    /// answer to a task's input requests): every node's idle workers are woken too.
    fn queueing<T>(
        &self,
        mut op: impl FnMut(&mut Tx<'_, '_>) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        self.run(true, Wake::RelaysAndWorkers, &mut op)
    }

    /// [`Store::transaction`] (or [`Store::change`], with `wake`) for an `op` that
    /// hands claims to a claimant, which must not see a job twice: retried only when it
    /// failed before `op` ran.
    fn once<T>(
        &self,
        wake: Wake,
        op: impl FnOnce(&mut Tx<'_, '_>) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let mut op = Some(op);
        self.run(false, wake, &mut |tx| match op.take() {
            Some(op) => op(tx),
            None => Err(Failure::Data("a claim would run twice".into())),
        })
    }

    fn run<T>(
        &self,
        repeatable: bool,
        wake: Wake,
        op: &mut dyn FnMut(&mut Tx<'_, '_>) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut conn = self.connection()?;
            let (failure, ran) = match self.attempt(&mut conn, op) {
                Ok(value) => {
                    match wake {
                        Wake::Nobody => {}
                        Wake::Relays => self.notifier.wake(false),
                        Wake::RelaysAndWorkers => self.notifier.wake(true),
                    }
                    return Ok(value);
                }
                Err(Attempt::Committing(error)) => return Err(error),
                Err(Attempt::Failed { failure, ran }) => (failure, ran),
            };
            if failure.retryable() && tries < TRIES && (repeatable || !ran) {
                continue;
            }
            return Err(self.failed(failure));
        }
    }

    /// One run of `op` in a transaction on `client`, committed.
    fn attempt<T>(
        &self,
        conn: &mut Pooled,
        op: &mut dyn FnMut(&mut Tx<'_, '_>) -> Result<T, Failure>,
    ) -> Result<T, Attempt> {
        let Pooled {
            client, session, ..
        } = conn;
        let mut tx = client.transaction().map_err(|error| Attempt::Failed {
            failure: Failure::Db(error),
            ran: false,
        })?;
        match op(&mut Db::new(&mut tx, session)) {
            Ok(value) => self.commit(tx, value).map_err(Attempt::Committing),
            Err(failure) => Err(Attempt::Failed { failure, ran: true }),
        }
    }

    /// Commits; a `COMMIT` that fails for want of the database may have committed or
    /// not: `NotCommitted` says the client should try again (idempotency keys make
    /// that safe for creations).
    fn commit<T>(&self, tx: postgres::Transaction<'_>, value: T) -> Result<T, StoreError> {
        match tx.commit() {
            Ok(()) => Ok(value),
            Err(error) => {
                let failure = Failure::Db(error);
                if failure.is_unreachable() {
                    let error = self.failed(failure);
                    return Err(StoreError::NotCommitted(error.to_string()));
                }
                Err(self.failed(failure))
            }
        }
    }

    /// Runs a read on a pooled connection (a retryable failure: once more).
    fn read<T>(
        &self,
        op: impl Fn(&mut Db<'_, postgres::Client>) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut conn = self.connection()?;
            let Pooled {
                client, session, ..
            } = &mut *conn;
            match op(&mut Db::new(client, session)) {
                Ok(value) => return Ok(value),
                Err(failure) if failure.retryable() && tries < TRIES => continue,
                Err(failure) => return Err(self.failed(failure)),
            }
        }
    }
}

/// Most task creations in one transaction ([`groups`]).
const CREATIONS_GROUP: usize = 256;

impl Store {
    /// Writes a group of creations without keys in one transaction; the answer of
    /// each, in order.
    fn create_group(&self, tasks: &[NewTask]) -> Vec<Result<Created, StoreError>> {
        let group: Vec<&NewTask> = tasks.iter().collect();
        let created = |task: &NewTask| Created::Task(task.created());
        match self.queueing(|tx| create::create_tasks(tx, &group)) {
            Ok(()) => tasks.iter().map(|task| Ok(created(task))).collect(),
            // A failure that may be one task's own (a value the database refuses):
            // each alone, so that it fails only its own creation.
            Err(error) if tasks.len() > 1 && !error.is_temporary() => tasks
                .iter()
                .map(|task| {
                    self.queueing(|tx| create::create_tasks(tx, &[task]))
                        .map(|()| created(task))
                })
                .collect(),
            Err(error) => failed_together(error, tasks.len()),
        }
    }
}

/// Whom a committed transaction wakes on every node, through the [`Notifier`]
/// (`NOTIFY` after the commit, in a transaction of its own, which writes nothing and
/// flushes nothing: see `taskd_append_outbox` in schema-postgres.sql for why not in the
/// change's own).
#[derive(Clone, Copy)]
enum Wake {
    Nobody,
    /// The relays (`mcp_taskd_outbox`): a task changed.
    Relays,
    /// The relays, and the dispatchers of idle workers (`mcp_taskd_jobs`): a task
    /// changed, and jobs may be ready to run.
    RelaysAndWorkers,
}

impl Drop for Store {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
    }
}

/// Runs a [`ClaimRequest`] inside a transaction, for `node`.
fn claim(tx: &mut Tx<'_, '_>, node: &str, request: ClaimRequest) -> Result<Vec<Claim>, Failure> {
    let ClaimRequest {
        limit,
        lease_ms,
        mut claimant,
    } = request;
    attempts::claim(tx, node, limit, lease_ms, claimant.as_mut())
}

/// The `application_name` of a node's sessions: its id and process.
fn session_name(node: &str, pid: u32) -> String {
    format!("{} {node} {pid}", connection::APPLICATION)
}

/// How long a start waits for the sessions of this node's previous run to end.
const PREDECESSOR_WAIT: Duration = Duration::from_secs(5);

/// Waits (up to [`PREDECESSOR_WAIT`]) until no session of an earlier run of this node
/// is left. A run killed in the middle of a claim leaves its session to finish that
/// transaction: if it commits after start-up recovery has looked for this node's
/// leases, those attempts would wait for their lease to expire instead of running
/// again at once.
fn await_predecessor(client: &mut postgres::Client, node: &str) {
    let mine = session_name(node, std::process::id());
    let pattern = format!("{} {node} %", connection::APPLICATION);
    let started = std::time::Instant::now();
    while started.elapsed() < PREDECESSOR_WAIT {
        let left = client.query_one(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE application_name LIKE $1 AND application_name <> $2",
            &[&pattern, &mine],
        );
        match left.and_then(|row| row.try_get::<_, i64>(0)) {
            Ok(0) | Err(_) => return,
            Ok(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    log::warn!("sessions of this node's previous run are still open: its attempts run again once their lease expires");
}

/// This node's id: 128 random bits kept in `data_dir/node-id`, created on first start.
/// One server per data dir (its lock), so the leases claimed under this id that are
/// still held at start-up are the previous run's orphans.
fn node_id(data_dir: &Path) -> Result<String, OpenError> {
    let path = data_dir.join("node-id");
    let failed = |source| OpenError::NodeId {
        path: path.clone(),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => Ok(id.trim().to_owned()),
        Ok(_) => Err(failed(std::io::Error::other("empty file"))),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let id = uuid::Uuid::new_v4().simple().to_string();
            let staged = data_dir.join("node-id.new");
            std::fs::write(&staged, format!("{id}\n")).map_err(failed)?;
            std::fs::File::open(&staged)
                .and_then(|file| file.sync_all())
                .map_err(failed)?;
            std::fs::rename(&staged, &path).map_err(failed)?;
            Ok(id)
        }
        Err(error) => Err(failed(error)),
    }
}

impl TaskStore for Store {
    fn create(&self, task: NewTask) -> Later<Result<Created, StoreError>> {
        // Answered on the caller's thread, after commit. Creations without a key share
        // transactions (see [`creations`]); one with a key, a slot, a later start, a
        // rerun's link or a gate (whose lock it holds to its commit) runs alone.
        if task.creates_alone() || task.gate.is_some() {
            return Later::ready(self.queueing(|tx| create::create_task(tx, &task)));
        }
        Later::ready(
            self.creations
                .submit(task, |tasks| self.create_group(&tasks)),
        )
    }

    fn find_authorized(
        &self,
        identity: &Identity,
        task_id: &str,
    ) -> Result<Option<TaskRow>, StoreError> {
        self.read(|conn| client::find_authorized(conn, identity, task_id))
    }

    fn list_authorized(
        &self,
        identity: &Identity,
        after: &str,
        limit: usize,
    ) -> Result<Vec<TaskRow>, StoreError> {
        self.read(|conn| client::list_authorized(conn, identity, after, limit))
    }

    fn find_authorized_admitted<'g>(
        &self,
        identity: &Identity,
        task_id: &str,
        gate: &'g PayloadGate,
    ) -> Result<Admitted<'g>, StoreError> {
        self.read(|conn| {
            let sized = client::find_sized_authorized(conn, identity, task_id, UNGATED_BYTES)?;
            match sized {
                None => Ok(Admitted::Unknown),
                // The usual task: read with its size, in one round trip.
                Some((bytes, Some(task))) => {
                    Admitted::after_sizing(gate, Some(bytes), || Ok(Some(task)))
                }
                // A large one is read only once the gate has made room for it.
                Some((bytes, None)) => Admitted::after_sizing(gate, Some(bytes), || {
                    client::find_authorized(conn, identity, task_id)
                }),
            }
        })
    }

    fn update(
        &self,
        identity: &Identity,
        task_id: &str,
        responses: Map<String, Value>,
    ) -> Result<UpdateEffect, StoreError> {
        self.queueing(|tx| client::update(tx, identity, task_id, &responses))
    }

    fn cancel(&self, identity: &Identity, task_id: &str) -> Result<CancelEffect, StoreError> {
        self.change(|tx| client::cancel(tx, identity, task_id))
    }

    fn claim(&self, request: ClaimRequest) -> Result<Vec<Claim>, StoreError> {
        self.once(Wake::Nobody, move |tx| claim(tx, &self.run, request))
    }

    fn finish(
        &self,
        lease: Lease,
        outcome: Finish,
        output: Option<OutputBatch>,
        then_claim: Option<ClaimRequest>,
    ) -> Result<Finished, StoreError> {
        // Concurrent finishes share a transaction, their next claims too (see
        // [`groups`]).
        let finishing = Finishing {
            end: (lease, outcome),
            output,
            then_claim,
        };
        self.finishes
            .submit(finishing, |group| self.finish_group(group))
    }

    fn renew_leases(&self, leases: Vec<Lease>, lease_ms: i64) -> Result<Vec<bool>, StoreError> {
        let leases: Vec<(String, String)> = leases
            .into_iter()
            .map(|lease| (lease.task_id, lease.token))
            .collect();
        self.transaction(|tx| attempts::renew_leases(tx, &leases, lease_ms))
    }

    fn set_status_message(&self, lease: Lease, message: String) -> Result<bool, StoreError> {
        self.change(|tx| attempts::set_status_message(tx, &lease.task_id, &lease.token, &message))
    }

    fn set_tool_state(&self, lease: Lease, state: String) -> Result<bool, StoreError> {
        self.transaction(|tx| attempts::set_tool_state(tx, &lease.task_id, &lease.token, &state))
    }

    fn append_output(&self, lease: Lease, batch: OutputBatch) -> Result<bool, StoreError> {
        self.transaction(|tx| output::append_fenced(tx, &lease.task_id, &lease.token, &batch))
    }

    fn read_output(&self, task_id: &str, read: OutputRead) -> Result<OutputPage, StoreError> {
        self.read(|conn| output::read(conn, task_id, read))
    }

    /// Ends the listener now rather than when the last handle of the store goes: the
    /// server's shutdown waits for it, and handles held elsewhere (the webhooks', say)
    /// go only as the process exits, so it waited out its 3 s.
    fn close(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    fn pause_tool(&self, tool: &str, reason: &str) -> Result<bool, StoreError> {
        self.transaction(|tx| flow::pause(tx, tool, reason))
    }

    fn resume_tool(&self, tool: &str) -> Result<bool, StoreError> {
        // Other nodes' idle workers may take its queued jobs now.
        self.queueing(|tx| flow::resume(tx, tool))
    }

    fn paused_tools(&self) -> Result<Vec<Pause>, StoreError> {
        self.read(flow::paused)
    }

    fn hold_gate(&self, gate: &Gate, holder: &str, hold_ms: i64) -> Result<bool, StoreError> {
        self.transaction(|tx| flow::hold(tx, gate, holder, hold_ms))
    }

    fn release_gate(&self, gate: &str, holder: &str) -> Result<(), StoreError> {
        // The job it admits may run on any node.
        self.queueing(|tx| flow::release(tx, gate, holder))
    }

    fn take_token(&self, limit: &RateLimit) -> Result<Result<(), i64>, StoreError> {
        self.transaction(|tx| flow::take_token(tx, limit))
    }

    /// [`Reclaim::Orphaned`]: the leases claimed by this node's earlier runs, and the
    /// expired ones; never another node's live lease, nor this run's.
    fn reclaim_leases(
        &self,
        leases: Reclaim,
        limit: usize,
        reason: String,
    ) -> Result<usize, StoreError> {
        let earlier_runs = match leases {
            Reclaim::Orphaned => Some((self.node.as_str(), self.run.as_str())),
            Reclaim::Expired => None,
        };
        self.change(|tx| upkeep::reclaim_expired(tx, earlier_runs, limit, &reason))
    }

    fn delete_expired(
        &self,
        limit: usize,
        retention: &HistoryConfig,
    ) -> Result<Vec<String>, StoreError> {
        // The same pass lets lapsed inline holds of gates go, and admits held jobs a
        // gate has places for.
        self.transaction(|tx| {
            let expired = history::expire(tx, limit, retention)?;
            flow::upkeep(tx, limit)?;
            Ok(expired)
        })
    }

    fn prune_history(&self, limit: usize) -> Result<usize, StoreError> {
        self.transaction(|tx| history::prune(tx, limit))
    }

    fn outbox_after(&self, after: i64, limit: usize) -> Result<Vec<(i64, String)>, StoreError> {
        self.read(|conn| upkeep::outbox_after(conn, after, limit))
    }

    fn outbox_newest(&self) -> Result<i64, StoreError> {
        self.read(upkeep::newest_position)
    }

    fn note_delivered(&self, delivered: i64) -> Result<(), StoreError> {
        self.transaction(|tx| upkeep::note_delivered(tx, &self.node, delivered))
    }

    fn prune_outbox(&self, upto: i64, limit: usize) -> Result<usize, StoreError> {
        self.transaction(|tx| upkeep::prune_outbox(tx, upto, limit))
    }

    fn stats(&self) -> Result<Stats, StoreError> {
        self.read(upkeep::stats)
    }

    fn queued_jobs(&self) -> Result<u64, StoreError> {
        self.read(upkeep::queued_jobs)
    }

    fn live_tasks(&self, owner: &str, at_most: u64) -> Result<u64, StoreError> {
        self.read(|conn| upkeep::live_tasks(conn, owner, at_most))
    }

    fn log_bytes(&self) -> Option<u64> {
        None
    }

    fn maintain(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn health(&self) -> Result<(), StoreError> {
        match self.health.problem() {
            Some(problem) => Err(StoreError::Unavailable(problem.into())),
            None => Ok(()),
        }
    }

    fn subscribe(&self) -> Receiver<()> {
        self.commits.clone()
    }

    fn remote_cancellations(&self) -> Option<Receiver<String>> {
        Some(self.cancellations.clone())
    }

    fn jobs_queued(&self) -> Option<Receiver<()>> {
        Some(self.jobs.clone())
    }

    fn upkeep_leader(&self) -> bool {
        self.leader.lead(&self.settings)
    }

    fn fold_counts(&self) -> Result<(), StoreError> {
        self.transaction(upkeep::fold_counts)
    }

    fn shared_key(&self, name: &str) -> Result<Option<[u8; 32]>, StoreError> {
        let mut fresh = [0u8; 32];
        getrandom::fill(&mut fresh).map_err(|e| StoreError::Other(Box::new(e)))?;
        let stored: Vec<u8> = self.transaction(|tx| {
            tx.execute(
                "INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                &[&name, &fresh.as_slice()],
            )?;
            Ok(tx
                .query_one("SELECT value FROM secrets WHERE name = $1", &[&name])?
                .try_get(0)?)
        })?;
        let key: [u8; 32] = stored.try_into().map_err(|_| {
            StoreError::Corrupt(format!("the shared key {name:?} is not 32 bytes").into())
        })?;
        Ok(Some(key))
    }

    fn list_tasks(
        &self,
        filter: &TaskFilter,
        before: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        // Whole pages: PostgreSQL's planner picks its own path, so no page is cut short.
        let tasks = self.read(|conn| admin::list_tasks(conn, filter, before, limit))?;
        Ok(TaskPage {
            tasks,
            resume: None,
        })
    }

    fn task_detail(&self, task_id: &str) -> Result<Option<TaskDetail>, StoreError> {
        // One snapshot for the task, its job and its attempts.
        self.transaction(|tx| {
            tx.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")?;
            admin::task_detail(tx, task_id)
        })
    }

    fn admin_cancel(&self, task_id: &str) -> Result<CancelEffect, StoreError> {
        self.change(|tx| admin::cancel(tx, task_id))
    }

    fn rerun_source(&self, task_id: &str) -> Result<Option<RerunSource>, StoreError> {
        self.read(|conn| admin::rerun_source(conn, task_id))
    }

    fn list_history(
        &self,
        filter: &TaskFilter,
        before: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        // Whole pages, as `list_tasks`.
        let tasks = self.read(|conn| history::list(conn, filter, before, limit))?;
        Ok(TaskPage {
            tasks,
            resume: None,
        })
    }

    fn history_record(&self, task_id: &str) -> Result<Option<HistoryRecord>, StoreError> {
        self.read(|conn| history::record(conn, task_id))
    }

    fn stats_detail(&self) -> Result<StatsDetail, StoreError> {
        self.read(|conn| admin::stats_detail(conn, now_ms()))
    }

    fn backup_to(
        &self,
        _destination: &Path,
        _progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), StoreError> {
        Err(StoreError::Other(
            "backups of a PostgreSQL store are the database's: use pg_dump or the \
             server's own backups"
                .into(),
        ))
    }

    fn wait_for_continuations(&self, _limit: Duration) -> bool {
        // Creations are answered on the caller's thread: none is ever owed.
        true
    }

    fn save_session(&self, session: SessionRecord, sweep: Option<i64>) -> Result<(), StoreError> {
        self.change(|tx| {
            sessions::save(tx, &session)?;
            if let Some(used_since) = sweep {
                sessions::sweep(tx, used_since)?;
            }
            Ok(())
        })
    }

    fn load_session(&self, id: &str, used_since: i64) -> Result<Option<SessionRecord>, StoreError> {
        self.read(|conn| sessions::load(conn, id, used_since))
    }

    fn delete_session(&self, id: &str) -> Result<(), StoreError> {
        self.change(|tx| sessions::delete(tx, id))
    }

    fn schedules(&self) -> &dyn taskd_engine::schedules::ScheduleStore {
        self
    }
}
