// Over 600 lines: one `TaskStore` impl of short methods; the SQL is in sql/.
//! The SQLite [`TaskStore`]: one database file in WAL mode, a writer thread that owns
//! every write, a pool of query-only readers. Only the server's assembly and its
//! offline operator commands name it (to open it); the engine sees the trait.
//!
//! # Durability guarantees (and what keeps them)
//!
//! - **An acknowledged write is on disk.** Every write goes through one writer thread
//!   that commits in WAL mode with `synchronous = FULL` (the default; `normal` is an
//!   explicit opt-out that may lose the last commits on power loss, never corrupt). A
//!   caller of [`Store::write`] gets its answer only after `COMMIT` returned; the
//!   continuation of a [`Store::write_later`] (which answers a task creation) runs only
//!   after it, too, and never with a result from a batch that did not commit.
//! - **Group commit.** The writer takes every write waiting in its queue (up to
//!   a bound, see [`writer`]) into one `BEGIN IMMEDIATE` transaction, each under its own savepoint,
//!   so many task creations share one fsync while each still waits for its own commit,
//!   and one failing write rolls back alone. (Task creations that meet in a batch are
//!   inserted together; if that fails they go in one by one.)
//! - **No "database is locked" for clients.** Only the writer thread writes, so writers
//!   never contend; readers use WAL snapshots and never block the writer. `busy_timeout`
//!   covers checkpoints.
//! - **Pragmas are verified.** `journal_mode`, `synchronous`, `foreign_keys` and
//!   `busy_timeout` are set on every connection (and `temp_store` on the writer,
//!   `query_only` on the readers) and read back; start-up fails if SQLite did not take
//!   them (a misspelt pragma is silently ignored).
//! - **The WAL stays bounded, and checkpoints stay off the commit path.** The writer's
//!   automatic checkpoints are off (they would copy pages into the database file and
//!   fsync it inside a `COMMIT`, stalling every write queued behind it); a checkpointer
//!   thread runs `wal_checkpoint(PASSIVE)` on its own connection every
//!   100 ms, concurrently with the writer; once the WAL passes
//!   16 MiB the writer runs a brief `RESTART` between two batches, so the
//!   file is reused from its beginning (see [`checkpoint`]). `journal_size_limit`
//!   caps the file after a restart, and the janitor runs `wal_checkpoint(TRUNCATE)`
//!   periodically. While a backup holds its snapshot (see [`backup`]) both are
//!   skipped, since they would wait for it with the write lock held: the WAL grows for
//!   the length of the backup instead.
//! - **Litestream mode** (`store.checkpoints = "external"`): the checkpointer and the
//!   janitor never checkpoint, so that Litestream, which copies the WAL to its replica
//!   before it checkpoints, drives every checkpoint; the writer's automatic checkpoints
//!   stay off. The WAL then grows until Litestream checkpoints it (by default past
//!   1,000 pages, and once a minute). The one checkpoint left is the writer's TRUNCATE when a
//!   full disk stopped writes (see [`writer`]): without it, a full disk would stay full.
//!
//!   How Litestream (0.5.17, the version CI pins) works, and the one way it loses data
//!   here. Every `monitor-interval` (1 s) it reads the WAL *file* from where it stopped
//!   and copies every frame up to the last complete commit (right salts, checksums
//!   chained) into a local LTX file; every `sync-interval` (1 s) it uploads those. A read
//!   transaction it keeps open stops anyone else from restarting the WAL. Its own
//!   checkpoints (passive, under a write-lock barrier) are followed by a write to
//!   `_litestream_seq` that restarts the WAL, after which it copies from the new WAL's
//!   start. `litestream sync -wait` (its control socket) copies to the WAL's end and
//!   uploads, and answers both positions: the replica is caught up when its TXID reaches
//!   the local one. The hazard is a commit the server wrote but never published. SQLite
//!   writes a commit's frames, fsyncs them, and only then publishes the new end of the
//!   WAL in the wal-index (`tasks.db-shm`). A server killed in between (SIGKILL, the OOM
//!   killer) leaves a complete commit in the file that the wal-index, kept alive by
//!   Litestream's connection, never lists. Nobody acknowledged it. Litestream reads the
//!   file, so it ships that commit. Its next checkpoint copies only what the wal-index
//!   lists and restarts the WAL. Litestream then carries on from the new WAL without a
//!   snapshot, because the last frame it shipped is still in the file. So the replica
//!   holds the unpublished commit under pages written without it, and it restores to
//!   "database disk image is malformed". That matches the CI failure ("954 of 5,634
//!   acknowledged tasks missing at 30 s"). The old test counted each restore that
//!   refused to open as missing tasks, so its count stopped falling. Reproduced, with
//!   the same stuck count, in 2 of 8 runs under CPU load. A kill under load
//!   mostly lands in a commit's fsync, and the unpublished commit was there in 2 of 6
//!   kills. A table `WITHOUT ROWID` (random-key inserts touch more pages per commit)
//!   makes commits longer and brings the 1,000-page checkpoints sooner: it lost tasks
//!   more often for this reason, not for a cause of its own. The server cannot close
//!   that window, and its own checkpoint settings play no part (it makes none). What
//!   makes the commit harmless is SQLite's recovery. When the first connection opens the
//!   database after every process has closed it, SQLite rebuilds the wal-index from the
//!   WAL file, and the complete commit then counts as committed, as it did for
//!   Litestream. So Litestream must not outlive a crashed server. The README's unit is
//!   bound to the server's and stopped with SIGKILL: a graceful stop syncs, and it may
//!   checkpoint on its way out. Litestream resumes from its local LTX files at its next
//!   start. tests/litestream.rs kills both, restarts Litestream, and waits on
//!   `sync -wait`. The risk left is a Litestream checkpoint in the milliseconds between
//!   the server's death and Litestream's.
//! - **A damaged database is refused at start-up; a store that cannot write says so
//!   and recovers.** A bounded `PRAGMA quick_check` runs before anything else
//!   ([`integrity`]). A write that fails (no space, a read-only medium, an I/O error)
//!   tells its caller the cause, [`health`] records it for `/healthz`, and the writer
//!   makes room and tries again without a restart (see [`writer`]).
//! - **One server per data dir.** An exclusive lock on `data_dir/lock` is held for the
//!   process lifetime, so recovery may treat every leased job it finds as orphaned.
//!   Every connection also opens the database through SQLite's `unix-excl` VFS: the
//!   process takes one exclusive POSIX lock on `tasks.db` and settles the locks between
//!   its own connections in memory. (With the default VFS each read transaction took and
//!   dropped a shared lock with two `fcntl` calls.) No other process can open the
//!   database while the server runs; `GET /metrics` shows its state. With
//!   `store.locking = "shared"` the connections use SQLite's default VFS instead, so
//!   that Litestream (and `sqlite3`) can open the database beside the server; the
//!   `data_dir/lock` file still keeps a second mcp-taskd out.
//!
//! May depend on: `taskd-engine` (the trait it implements, its records and settings),
//! `taskd-protocol`, `taskd-base`. Must never know: the other store, HTTP, the
//! configuration file (it reads `taskd_engine::config::StoreConfig`).

mod backup;
mod checkpoint;
mod connection;
mod health;
mod integrity;
mod migrations;
mod reply;
mod schedules;
mod sql;
pub mod stop_mark;
mod webhooks;
mod writer;

use std::error::Error;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use r2d2::{Pool, PooledConnection};
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};
use serde_json::{Map, Value};

pub use self::backup::{verify_database_file, VerifyError};
use self::connection::{
    configure, database_uri, keep_temp_in_memory, make_query_only, open_connection,
};
use self::health::{Health, Problem};
use self::sql::{admin, attempts, client, flow, history, output, sessions, upkeep};
use taskd_base::clock::now_ms;
use taskd_base::later::Later;
use taskd_engine::backend::{ClaimRequest, Finished, Reclaim, StoreError, TaskStore};
use taskd_engine::config::{Checkpoints, StoreConfig};
use taskd_engine::flow::{Gate, Pause, RateLimit};
use taskd_engine::history::{HistoryConfig, HistoryRecord};
use taskd_engine::ids;
use taskd_engine::model::{
    CancelEffect, Claim, Created, Finish, Lease, NewTask, RerunSource, SessionRecord, Stats,
    StatsDetail, TaskDetail, TaskFilter, TaskPage, TaskRow, UpdateEffect,
};
use taskd_engine::output::{OutputBatch, OutputPage, OutputRead};
use taskd_engine::payload_gate::{Admitted, PayloadGate};
use taskd_protocol::Identity;

/// Why the store did not open. The messages are the ones operators know from the log.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{} is in use by another mcp-taskd (one server per data dir)", .data_dir.display())]
    InUse { data_dir: PathBuf },
    /// A file of the data dir could not be created or opened.
    #[error("{}: {source}", .path.display())]
    File {
        path: PathBuf,
        source: Box<dyn Error + Send + Sync>,
    },
    /// A connection setting (or pragma) that SQLite did not take.
    #[error("{0}")]
    Setup(String),
    #[error("{0}")]
    Migration(String),
    /// The integrity check found the database malformed.
    #[error(
        "{} is damaged ({detail}); refusing to start on it. Restore it from a backup \
         (docs/durability.md, \"Restore from a backup\")",
        .path.display()
    )]
    Damaged { path: PathBuf, detail: String },
    /// A thread of the store could not start.
    #[error("{0}")]
    Start(String),
    /// The last process stopped without closing the store, and its write-ahead log has
    /// gone or been replaced (see [`stop_mark`]).
    #[error(transparent)]
    HalfRestored(#[from] stop_mark::HalfRestored),
}

/// Sorts a SQLite error into what the engine can act on (see [`Problem::of`]).
fn classify(error: rusqlite::Error) -> StoreError {
    Problem::of(&error).to_store_error()
}

pub struct Store {
    path: PathBuf,
    /// How every connection opens `path` (see [`database_uri`]).
    uri: String,
    writes: Sender<writer::Write>,
    reads: Pool<SqliteConnectionManager>,
    /// Pinged by the writer after each commit.
    commits: Receiver<()>,
    /// Continuations of [`Store::write_later`] and [`Store::create_later`] not run yet.
    unanswered: Arc<writer::Unanswered>,
    /// Whether writes succeed, as the writer last found.
    health: Arc<Health>,
    /// Read transactions held open for long (backups): while there are any, the
    /// checkpoints that wait for readers are skipped (the WAL grows meanwhile).
    long_snapshots: Arc<AtomicUsize>,
    /// Whether the janitor's TRUNCATE checkpoints run (`internal`) or not (`external`).
    checkpoints: Checkpoints,
    /// When this run opened the store (Unix ms): attempts started before it belong to
    /// the previous run ([`Reclaim::Orphaned`]).
    opened_at: i64,
    /// The row the next task id names (see [`TaskStore::new_task_id`]). Handed out here,
    /// before the writer inserts, because the id is in the creation's span and answer;
    /// it starts past every row at start-up, and only ids from it insert with a rowid
    /// while this process holds the store (its lock), so no two tasks are given one row.
    next_rowid: AtomicI64,
    /// Where the janitor's walk of webhook deliveries goes on (`webhooks::prune`).
    webhook_prune_from: Arc<AtomicI64>,
    /// Dropped with the store: the checkpointer stops.
    _checkpointer: Sender<()>,
    /// Tells the writer to commit what is queued and close the store
    /// ([`TaskStore::close`]).
    close: Sender<()>,
    _lock: File,
}

/// A freshly opened store with the handles its owner needs.
pub struct Opened {
    pub store: Arc<Store>,
    /// Ends once every [`Store`] handle is dropped and the queue is committed.
    pub writer: JoinHandle<()>,
}

impl Store {
    /// Opens (creating if needed) `data_dir/tasks.db`, migrates it and starts the writer.
    pub fn open(data_dir: &Path, config: &StoreConfig) -> Result<Opened, OpenError> {
        let lock_path = data_dir.join("lock");
        let lock = File::create(&lock_path).map_err(|e| OpenError::File {
            path: lock_path.clone(),
            source: Box::new(e),
        })?;
        lock.try_lock().map_err(|_| OpenError::InUse {
            data_dir: data_dir.to_owned(),
        })?;
        // Taken with the lock: no attempt of this run can have started before it.
        let opened_at = now_ms();
        connection::configure_library();
        let path = data_dir.join("tasks.db");
        stop_mark::check(data_dir, &path, config.accept_data_loss)?;
        let uri = database_uri(&path, config.locking)?;
        let opening = |e: rusqlite::Error| OpenError::File {
            path: path.clone(),
            source: Box::new(e),
        };
        integrity::check(
            &open_connection(&uri).map_err(opening)?,
            &path,
            Duration::from_millis(config.integrity_check_ms),
        )?;
        let mut writer = open_writer(&uri, config).map_err(|e| match e {
            OpenError::File { source, .. } => OpenError::File {
                path: path.clone(),
                source,
            },
            other => other,
        })?;
        let version = migrations::migrate(&mut writer)?;
        log::info!("task store at schema version {version}");
        // From here to a clean close, the store counts as open (see `stop_mark`).
        stop_mark::set(data_dir, &path).map_err(|e| OpenError::File {
            path: data_dir.join(stop_mark::MARK),
            source: Box::new(e),
        })?;
        let next_rowid = writer
            .query_row("SELECT coalesce(max(rowid), 0) + 1 FROM tasks", [], |row| {
                row.get(0)
            })
            .map_err(opening)?;
        let health = Arc::new(Health::new(&path, config.min_free_bytes));
        let (checkpointer, stop_checkpointer) = crossbeam_channel::bounded(0);
        let restart = Arc::new(AtomicBool::new(false));
        let long_snapshots = Arc::new(AtomicUsize::new(0));
        let wanted = Arc::clone(&restart);
        let checkpoint_conn = open_connection(&uri).map_err(opening)?;
        configure(&checkpoint_conn, config)?;
        let watched = Arc::clone(&health);
        let checkpoints = config.checkpoints;
        std::thread::Builder::new()
            .name("store-checkpoint".into())
            .spawn(move || {
                checkpoint::run_checkpointer(
                    &checkpoint_conn,
                    checkpoints,
                    &stop_checkpointer,
                    &wanted,
                    &watched,
                )
            })
            .map_err(|e| OpenError::Start(format!("starting the checkpointer: {e}")))?;
        let reads = read_pool(&uri, config)?;
        let (close, closing) = crossbeam_channel::bounded(1);
        let writer::Started {
            writes,
            commits,
            thread,
        } = writer::start(
            writer,
            {
                let (uri, config) = (uri.clone(), config.clone());
                Box::new(move || open_writer(&uri, &config))
            },
            Arc::clone(&health),
            restart,
            Arc::clone(&long_snapshots),
            writer::Closing {
                signal: closing,
                // Under Litestream (external checkpoints) the server never checkpoints.
                empty_the_log: config.checkpoints == Checkpoints::Internal,
                closed_cleanly: {
                    let data_dir = data_dir.to_owned();
                    Box::new(move || {
                        if let Err(error) = stop_mark::clear(&data_dir) {
                            log::warn!("the store closed, but its open mark stays: {error}");
                        }
                    })
                },
            },
        )?;
        Ok(Opened {
            store: Arc::new(Store {
                path,
                uri,
                writes,
                reads,
                commits,
                unanswered: Arc::default(),
                health,
                long_snapshots,
                checkpoints: config.checkpoints,
                opened_at,
                next_rowid: AtomicI64::new(next_rowid),
                webhook_prune_from: Arc::new(AtomicI64::new(0)),
                _checkpointer: checkpointer,
                close,
                _lock: lock,
            }),
            writer: thread,
        })
    }

    /// A query-only connection from the pool (a WAL snapshot per statement/transaction).
    fn read(&self) -> Result<PooledConnection<SqliteConnectionManager>, StoreError> {
        self.reads
            .get()
            .map_err(|e| StoreError::Unavailable(Box::new(e)))
    }

    /// Size of the write-ahead log file.
    fn wal_bytes(&self) -> Option<u64> {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        std::fs::metadata(wal).ok().map(|meta| meta.len())
    }
}

/// The writer's connection: configured, its temporary storage in memory, automatic
/// checkpoints off (see [`checkpoint`]).
fn open_writer(uri: &str, config: &StoreConfig) -> Result<Connection, OpenError> {
    let conn = open_connection(uri).map_err(|e| OpenError::File {
        path: PathBuf::from(uri),
        source: Box::new(e),
    })?;
    configure(&conn, config)?;
    keep_temp_in_memory(&conn)?;
    conn.pragma_update(None, "wal_autocheckpoint", 0)
        .map_err(|e| OpenError::Setup(format!("turning off automatic checkpoints: {e}")))?;
    Ok(conn)
}

/// The readers: query-only connections, configured and verified like the writer's.
fn read_pool(uri: &str, config: &StoreConfig) -> Result<Pool<SqliteConnectionManager>, OpenError> {
    let read_config = config.clone();
    // Read-write at the file level: `unix-excl` settles locks in memory only for
    // connections that may write. `query_only` makes them readers all the same.
    let manager = SqliteConnectionManager::file(uri)
        .with_flags(
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .with_init(move |conn| {
            configure(conn, &read_config)
                .and_then(|()| make_query_only(conn))
                .map_err(|why| {
                    rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_MISUSE),
                        Some(why.to_string()),
                    )
                })
        });
    Pool::builder()
        .max_size(config.read_connections.max(1))
        // A local file connection does not go stale; r2d2's check on every checkout
        // would run a statement per read for nothing.
        .test_on_check_out(false)
        .connection_timeout(Duration::from_secs(5))
        .build(manager)
        .map_err(|e| OpenError::Setup(format!("opening read connections: {e}")))
}

/// A fresh fencing token: 128 random bits.
fn fresh_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Runs a [`ClaimRequest`] inside a write.
fn claim(conn: &Connection, request: &mut ClaimRequest) -> rusqlite::Result<Vec<Claim>> {
    attempts::claim(
        conn,
        request.limit,
        now_ms(),
        request.lease_ms,
        fresh_token,
        request.claimant.as_mut(),
    )
}

/// A worker's outcome, fenced, and the claim of its next jobs: one write. It may run
/// twice (see the writer's batch), so it takes what it writes by reference.
fn finish_and_claim(
    conn: &Connection,
    lease: &Lease,
    finish: &Finish,
    output: Option<&OutputBatch>,
    then_claim: Option<&mut ClaimRequest>,
) -> rusqlite::Result<Finished> {
    let applied = attempts::finish(conn, &lease.task_id, &lease.token, finish, now_ms())?;
    // The attempt's last output, fenced by the same lease the outcome was.
    if let (true, Some(output)) = (applied, output) {
        output::append(conn, &lease.task_id, output)?;
    }
    let next = match then_claim {
        Some(next) => claim(conn, next)?,
        None => Vec::new(),
    };
    Ok(Finished { applied, next })
}

impl TaskStore for Store {
    /// A row-keyed id (see [`taskd_engine::ids`]): `tasks/get` and the other client
    /// lookups then walk one b-tree instead of two.
    fn new_task_id(&self, now_ms: i64) -> Result<String, getrandom::Error> {
        let rowid = self.next_rowid.fetch_add(1, Ordering::Relaxed);
        match ids::row_keyed(rowid)? {
            Some(id) => Ok(id),
            None => ids::time_ordered(now_ms),
        }
    }

    fn create(&self, task: NewTask) -> Later<Result<Created, StoreError>> {
        self.create_later(task)
    }

    fn find_authorized(
        &self,
        identity: &Identity,
        task_id: &str,
    ) -> Result<Option<TaskRow>, StoreError> {
        let conn = self.read()?;
        client::find_authorized(&conn, identity, task_id, now_ms()).map_err(classify)
    }

    fn list_authorized(
        &self,
        identity: &Identity,
        after: &str,
        limit: usize,
    ) -> Result<Vec<TaskRow>, StoreError> {
        let conn = self.read()?;
        client::list_authorized(&conn, identity, after, limit, now_ms()).map_err(classify)
    }

    fn find_authorized_admitted<'g>(
        &self,
        identity: &Identity,
        task_id: &str,
        gate: &'g PayloadGate,
    ) -> Result<Admitted<'g>, StoreError> {
        let conn = self.read()?;
        // One snapshot for both reads, so the size the gate let through is the size
        // of what is read. A deferred read transaction takes no lock.
        let snapshot = conn.unchecked_transaction().map_err(classify)?;
        let now = now_ms();
        let bytes = client::payload_bytes_authorized(&snapshot, identity, task_id, now)
            .map_err(classify)?;
        Admitted::after_sizing(gate, bytes, || {
            client::find_authorized(&snapshot, identity, task_id, now).map_err(classify)
        })
    }

    fn update(
        &self,
        identity: &Identity,
        task_id: &str,
        responses: Map<String, Value>,
    ) -> Result<UpdateEffect, StoreError> {
        let (identity, id) = (identity.clone(), task_id.to_owned());
        self.write(move |conn| client::update(conn, &identity, &id, &responses, now_ms()))
    }

    fn cancel(&self, identity: &Identity, task_id: &str) -> Result<CancelEffect, StoreError> {
        let (identity, id) = (identity.clone(), task_id.to_owned());
        self.write(move |conn| client::cancel(conn, &identity, &id, now_ms()))
    }

    fn claim(&self, mut request: ClaimRequest) -> Result<Vec<Claim>, StoreError> {
        self.write(move |conn| claim(conn, &mut request))
    }

    fn finish(
        &self,
        lease: Lease,
        outcome: Finish,
        output: Option<OutputBatch>,
        then_claim: Option<ClaimRequest>,
    ) -> Result<Finished, StoreError> {
        self.finish_attempt(lease, outcome, output, then_claim)
    }

    fn renew_leases(&self, leases: Vec<Lease>, lease_ms: i64) -> Result<Vec<bool>, StoreError> {
        let expires = now_ms().saturating_add(lease_ms);
        self.write(move |conn| {
            leases
                .iter()
                .map(|lease| attempts::renew_lease(conn, &lease.task_id, &lease.token, expires))
                .collect()
        })
    }

    fn set_status_message(&self, lease: Lease, message: String) -> Result<bool, StoreError> {
        self.write(move |conn| {
            attempts::set_status_message(conn, &lease.task_id, &lease.token, &message, now_ms())
        })
    }

    fn set_tool_state(&self, lease: Lease, state: String) -> Result<bool, StoreError> {
        self.write(move |conn| attempts::set_tool_state(conn, &lease.task_id, &lease.token, &state))
    }

    fn append_output(&self, lease: Lease, batch: OutputBatch) -> Result<bool, StoreError> {
        self.write(move |conn| output::append_fenced(conn, &lease.task_id, &lease.token, &batch))
    }

    fn read_output(&self, task_id: &str, read: OutputRead) -> Result<OutputPage, StoreError> {
        let conn = self.read()?;
        output::read(&conn, task_id, read).map_err(classify)
    }

    /// The writer commits what is queued, checkpoints the whole log into the database
    /// and closes: the store closed cleanly ([`stop_mark`]).
    fn close(&self) {
        let _ = self.close.try_send(());
    }

    fn pause_tool(&self, tool: &str, reason: &str) -> Result<bool, StoreError> {
        let (tool, reason) = (tool.to_owned(), reason.to_owned());
        self.write(move |conn| flow::pause(conn, &tool, &reason, now_ms()))
    }

    fn resume_tool(&self, tool: &str) -> Result<bool, StoreError> {
        let tool = tool.to_owned();
        self.write(move |conn| flow::resume(conn, &tool))
    }

    fn paused_tools(&self) -> Result<Vec<Pause>, StoreError> {
        let conn = self.read()?;
        flow::paused(&conn).map_err(classify)
    }

    fn hold_gate(&self, gate: &Gate, holder: &str, hold_ms: i64) -> Result<bool, StoreError> {
        let (gate, holder) = (gate.clone(), holder.to_owned());
        self.write(move |conn| flow::hold(conn, &gate, &holder, now_ms() + hold_ms))
    }

    fn release_gate(&self, gate: &str, holder: &str) -> Result<(), StoreError> {
        let (gate, holder) = (gate.to_owned(), holder.to_owned());
        self.write(move |conn| flow::release(conn, &gate, &holder))
    }

    fn take_token(&self, limit: &RateLimit) -> Result<Result<(), i64>, StoreError> {
        let limit = limit.clone();
        self.write(move |conn| flow::take_token(conn, &limit, now_ms()))
    }

    fn reclaim_leases(
        &self,
        leases: Reclaim,
        limit: usize,
        reason: String,
    ) -> Result<usize, StoreError> {
        // The data dir's lock: every lease is this process's, so those taken before the
        // store opened are orphans of its previous run.
        let which = match leases {
            Reclaim::Expired => upkeep::Orphans::ExpiredBefore(now_ms()),
            Reclaim::Orphaned => upkeep::Orphans::StartedBefore(self.opened_at),
        };
        let leases = {
            let conn = self.read()?;
            upkeep::orphaned_leases(&conn, which, limit).map_err(classify)?
        };
        let count = leases.len();
        if count == 0 {
            return Ok(0);
        }
        self.write(move |conn| {
            let retry = Finish::Retry { reason };
            for (task_id, token) in &leases {
                attempts::finish(conn, task_id, token, &retry, now_ms())?;
            }
            Ok(())
        })?;
        Ok(count)
    }

    fn delete_expired(
        &self,
        limit: usize,
        retention: &HistoryConfig,
    ) -> Result<Vec<String>, StoreError> {
        // The same pass forgets the queue places of identities without jobs (they only
        // cost a row each, so once per upkeep pass is plenty), lets lapsed inline holds
        // of gates go, and admits held jobs a gate has places for.
        let retention = retention.clone();
        self.write(move |conn| {
            let now = now_ms();
            let expired = history::expire(conn, now, limit, &retention)?;
            upkeep::prune_identity_queue(conn)?;
            flow::upkeep(conn, now, limit)?;
            Ok(expired)
        })
    }

    fn prune_history(&self, limit: usize) -> Result<usize, StoreError> {
        self.write(move |conn| history::prune(conn, now_ms(), limit))
    }

    fn outbox_after(&self, after: i64, limit: usize) -> Result<Vec<(i64, String)>, StoreError> {
        let conn = self.read()?;
        upkeep::outbox_after(&conn, after, limit).map_err(classify)
    }

    fn outbox_newest(&self) -> Result<i64, StoreError> {
        let conn = self.read()?;
        upkeep::max_outbox_seq(&conn).map_err(classify)
    }

    fn prune_outbox(&self, upto: i64, limit: usize) -> Result<usize, StoreError> {
        self.write(move |conn| upkeep::prune_outbox(conn, upto, limit))
    }

    fn stats(&self) -> Result<Stats, StoreError> {
        let conn = self.read()?;
        upkeep::stats(&conn, now_ms()).map_err(classify)
    }

    fn queued_jobs(&self) -> Result<u64, StoreError> {
        let conn = self.read()?;
        upkeep::queued_jobs(&conn).map_err(classify)
    }

    fn live_tasks(&self, owner: &str, at_most: u64) -> Result<u64, StoreError> {
        let conn = self.read()?;
        upkeep::live_tasks(&conn, owner, at_most).map_err(classify)
    }

    fn log_bytes(&self) -> Option<u64> {
        self.wal_bytes()
    }

    fn maintain(&self) -> Result<(), StoreError> {
        if self.checkpoints == Checkpoints::External {
            return Ok(());
        }
        self.checkpoint().map_err(classify)
    }

    fn health(&self) -> Result<(), StoreError> {
        match self.health.problem() {
            Some(problem) => Err(problem.to_store_error()),
            None => Ok(()),
        }
    }

    fn subscribe(&self) -> Receiver<()> {
        self.commits.clone()
    }

    fn list_tasks(
        &self,
        filter: &TaskFilter,
        before: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        let conn = self.read()?;
        admin::list_tasks(&conn, filter, before, limit, admin::PAGE_EXAMINES).map_err(classify)
    }

    fn task_detail(&self, task_id: &str) -> Result<Option<TaskDetail>, StoreError> {
        let conn = self.read()?;
        // One snapshot for the task, its job and its attempts.
        conn.execute_batch("BEGIN").map_err(classify)?;
        let detail = admin::task_detail(&conn, task_id);
        let ended = conn.execute_batch("COMMIT");
        let detail = detail.map_err(classify)?;
        ended.map_err(classify)?;
        Ok(detail)
    }

    fn admin_cancel(&self, task_id: &str) -> Result<CancelEffect, StoreError> {
        let id = task_id.to_owned();
        self.write(move |conn| admin::cancel(conn, &id, now_ms()))
    }

    fn rerun_source(&self, task_id: &str) -> Result<Option<RerunSource>, StoreError> {
        let conn = self.read()?;
        admin::rerun_source(&conn, task_id).map_err(classify)
    }

    fn list_history(
        &self,
        filter: &TaskFilter,
        before: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        let conn = self.read()?;
        history::list(&conn, filter, before, limit, admin::PAGE_EXAMINES).map_err(classify)
    }

    fn history_record(&self, task_id: &str) -> Result<Option<HistoryRecord>, StoreError> {
        let conn = self.read()?;
        history::record(&conn, task_id).map_err(classify)
    }

    fn stats_detail(&self) -> Result<StatsDetail, StoreError> {
        let conn = self.read()?;
        admin::stats_detail(&conn, now_ms()).map_err(classify)
    }

    fn backup_to(
        &self,
        destination: &Path,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<(), StoreError> {
        self.backup_into(destination, progress)
    }

    fn wait_for_continuations(&self, limit: Duration) -> bool {
        self.wait_for_answers(limit)
    }

    fn save_session(&self, session: SessionRecord, sweep: Option<i64>) -> Result<(), StoreError> {
        self.write(move |conn| {
            sessions::save(conn, &session)?;
            if let Some(used_since) = sweep {
                sessions::sweep(conn, used_since)?;
            }
            Ok(())
        })
    }

    fn load_session(&self, id: &str, used_since: i64) -> Result<Option<SessionRecord>, StoreError> {
        let conn = self.read()?;
        sessions::load(&conn, id, used_since).map_err(classify)
    }

    fn delete_session(&self, id: &str) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.write(move |conn| sessions::delete(conn, &id))
    }

    fn schedules(&self) -> &dyn taskd_engine::schedules::ScheduleStore {
        self
    }
}

#[cfg(test)]
pub(crate) mod tests;
