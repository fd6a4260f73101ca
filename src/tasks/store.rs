//! The SQLite store: connections, pragmas, migrations, and the single writer thread.
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
//!   [`MAX_BATCH`]) into one `BEGIN IMMEDIATE` transaction, each under its own savepoint,
//!   so many task creations share one fsync while each still waits for its own commit,
//!   and one failing write rolls back alone. (Task creations that meet in a batch are
//!   inserted together; if that fails they go in one by one, see [`Batch`].)
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
//!   [`CHECKPOINT_INTERVAL`], concurrently with the writer; once the WAL passes
//!   [`RESTART_FRAMES`] the writer runs a brief `RESTART` between two batches, so the
//!   file is reused from its beginning (see [`run_checkpointer`]). `journal_size_limit`
//!   caps the file after a restart, and the janitor runs `wal_checkpoint(TRUNCATE)`
//!   periodically.
//! - **One server per data dir.** An exclusive lock on `data_dir/lock` is held for the
//!   process lifetime, so recovery may treat every leased job it finds as orphaned.
//!   Every connection also opens the database through SQLite's `unix-excl` VFS: the
//!   process takes one exclusive POSIX lock on `tasks.db` and settles the locks between
//!   its own connections in memory. (With the default VFS each read transaction took and
//!   dropped a shared lock with two `fcntl` calls.) No other process can open the
//!   database while the server runs; `GET /metrics` shows its state.

use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use r2d2::{Pool, PooledConnection};
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};

use super::sql::{self, NewTask, TaskRow};
use crate::config::{StoreConfig, Synchronous};
use crate::later::{later, Fulfil, Later};

/// The schema, applied by [`migrate`].
pub const SCHEMA: &str = include_str!("../../schema.sql");
/// Most writes committed together in one transaction.
pub const MAX_BATCH: usize = 256;
/// How often the checkpointer copies committed WAL frames into the database file.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(100);
/// WAL frames (pages) beyond which the writer restarts the WAL: 16 MiB of 4 KiB pages,
/// four times SQLite's automatic-checkpoint default.
const RESTART_FRAMES: i64 = 4096;
/// Threads that run [`Store::write_later`] continuations.
const COMPLETION_THREADS: usize = 4;
/// Prepared statements kept per connection.
const STATEMENT_CACHE: usize = 64;
/// The SQLite VFS of every connection (see "One server per data dir" above).
const VFS: &str = "unix-excl";

/// A store failure. Details go to the log; clients see a generic internal error.
#[derive(Debug)]
pub enum StoreError {
    Sqlite(rusqlite::Error),
    Pool(r2d2::Error),
    /// The writer thread is gone (shutdown) or the commit failed.
    NotCommitted(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Sqlite(e) => write!(f, "sqlite: {e}"),
            StoreError::Pool(e) => write!(f, "connection pool: {e}"),
            StoreError::NotCommitted(why) => write!(f, "not committed: {why}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(e)
    }
}

impl From<r2d2::Error> for StoreError {
    fn from(e: r2d2::Error) -> Self {
        StoreError::Pool(e)
    }
}

/// What to do once a write's batch has committed (`true`) or failed (`false`).
type Finisher = Box<dyn FnOnce(bool) + Send>;

/// How a write's caller learns the outcome.
enum Completion {
    /// A thread is waiting in [`Store::write`]: the writer wakes it directly.
    Wake(Finisher),
    /// A continuation from [`Store::write_later`]: it runs on a completion thread, so
    /// that whatever it does (answering an HTTP request) never holds up the next batch.
    Continue(Finisher),
}

/// A write: runs inside the batch transaction and says how to report its outcome.
type WriteOp = Box<dyn FnOnce(&Connection) -> Completion + Send>;

/// What the writer's queue carries.
enum Write {
    /// Any write; runs alone under its own savepoint.
    Op(WriteOp),
    /// A task creation without an idempotency key (the writer's most frequent write).
    /// Consecutive ones in a batch are inserted together, see [`Batch`].
    Create(Box<Creation>),
}

struct Creation {
    task: NewTask,
    fulfil: Fulfil<Result<TaskRow, StoreError>>,
    owed: Owed,
}

pub struct Store {
    path: std::path::PathBuf,
    /// How every connection opens `path` (see [`database_uri`]).
    uri: String,
    writes: Sender<Write>,
    reads: Pool<SqliteConnectionManager>,
    /// Continuations of [`Store::write_later`] and [`Store::create_later`] not run yet.
    unanswered: Arc<Unanswered>,
    /// Dropped with the store: the checkpointer stops.
    _checkpointer: Sender<()>,
    _lock: File,
}

/// Counts continuations handed to [`Store::write_later`] until they have run, so that
/// shutdown can wait for every acknowledgement it owes.
#[derive(Default)]
struct Unanswered {
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

/// Opens a read-write connection to the database at `uri` (from [`database_uri`]).
fn open_connection(uri: &str) -> rusqlite::Result<Connection> {
    Connection::open_with_flags(uri, OpenFlags::default() | OpenFlags::SQLITE_OPEN_URI)
}

/// The SQLite URI that opens `path` through [`VFS`]. (A URI, because the connection
/// pool takes a filename only.) The path is made absolute, and the characters a URI
/// gives meaning to are escaped.
fn database_uri(path: &Path) -> Result<String, String> {
    let absolute = std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let text = absolute
        .to_str()
        .ok_or_else(|| format!("{}: the data dir path is not UTF-8", path.display()))?;
    let mut uri = String::from("file://");
    for c in text.chars() {
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            c => uri.push(c),
        }
    }
    uri.push_str("?vfs=");
    uri.push_str(VFS);
    Ok(uri)
}

/// Sets one pragma and checks that SQLite took it (a misspelt or unsupported one is
/// silently ignored).
fn set_verified(conn: &Connection, pragma: &str, value: &str, reads: i64) -> Result<(), String> {
    let got: i64 = conn
        .pragma_update(None, pragma, value)
        .and_then(|()| conn.query_row(&format!("PRAGMA {pragma}"), [], |row| row.get(0)))
        .map_err(|e| format!("setting PRAGMA {pragma}: {e}"))?;
    if got == reads {
        Ok(())
    } else {
        Err(format!(
            "SQLite did not take PRAGMA {pragma} = {value} (it reads {got}); refusing to start"
        ))
    }
}

/// Keeps the writer's temporary storage in memory: the journal behind each write's
/// savepoint. Past 64 KiB SQLite spills it to a temporary file, and every later savepoint
/// of the transaction then writes there too: with task creations grouped (see
/// [`Batch`]), a tenth of the writer's time went to those writes. It holds at most the
/// pages one batch changes. Only the writer: on a pool connection the same setting
/// would hold a query's sorter in memory too (a `GROUP BY` over every task for
/// `/metrics` took 130 MB).
fn keep_temp_in_memory(conn: &Connection) -> Result<(), String> {
    set_verified(conn, "temp_store", "MEMORY", 2)
}

/// Makes a pool connection refuse every write.
fn make_query_only(conn: &Connection) -> Result<(), String> {
    set_verified(conn, "query_only", "ON", 1)
}

/// Applies the pragmas every connection needs and checks SQLite took them.
fn configure(conn: &Connection, config: &StoreConfig) -> Result<(), String> {
    let sync = match config.synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    };
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = {sync}; PRAGMA foreign_keys = ON; \
         PRAGMA busy_timeout = {}; PRAGMA journal_size_limit = 67108864;",
        config.busy_timeout_ms
    ))
    .map_err(|e| format!("setting pragmas: {e}"))?;
    // Room for every statement of src/tasks/sql.rs plus the writer's transaction
    // control, so the hot ones are never evicted and parsed again (rusqlite keeps 16).
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    let read = |pragma: &str| -> Result<String, String> {
        conn.query_row(&format!("PRAGMA {pragma}"), [], |row| {
            row.get::<_, rusqlite::types::Value>(0)
        })
        .map(|value| match value {
            rusqlite::types::Value::Integer(i) => i.to_string(),
            rusqlite::types::Value::Text(t) => t.to_lowercase(),
            other => format!("{other:?}"),
        })
        .map_err(|e| format!("reading PRAGMA {pragma}: {e}"))
    };
    let expected = [
        ("journal_mode", "wal".to_owned()),
        ("synchronous", config.synchronous.pragma_value().to_string()),
        ("foreign_keys", "1".to_owned()),
        ("busy_timeout", config.busy_timeout_ms.to_string()),
    ];
    for (pragma, want) in expected {
        let got = read(pragma)?;
        if got != want {
            return Err(format!(
                "SQLite did not take PRAGMA {pragma} = {want} (it reads {got}); refusing to start"
            ));
        }
    }
    Ok(())
}

/// Applies every `-- migration N` block of [`SCHEMA`] newer than `user_version`.
///
/// Each block runs in its own transaction with foreign keys off, so that it can rebuild
/// a table other tables reference (SQLite's documented procedure for schema changes:
/// with them on, dropping the old table would cascade to its children). Before the
/// block commits, `PRAGMA foreign_key_check` must find nothing; afterwards foreign keys
/// are on again, whatever happened.
pub fn migrate(conn: &mut Connection) -> Result<u32, String> {
    let current: u32 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(|e| format!("reading schema version: {e}"))?;
    let pending: Vec<(u32, String)> = migrations(SCHEMA)?
        .into_iter()
        .filter(|(version, _)| *version > current)
        .collect();
    if pending.is_empty() {
        return Ok(current);
    }
    // Takes effect only outside a transaction.
    conn.execute_batch("PRAGMA foreign_keys = OFF")
        .map_err(|e| format!("migrations: {e}"))?;
    let applied = apply_migrations(conn, current, pending);
    let restored = set_verified(conn, "foreign_keys", "ON", 1);
    let applied = applied?;
    restored?;
    Ok(applied)
}

fn apply_migrations(
    conn: &mut Connection,
    current: u32,
    pending: Vec<(u32, String)>,
) -> Result<u32, String> {
    let mut applied = current;
    for (version, sql) in pending {
        let failed = |e: rusqlite::Error| format!("migration {version}: {e}");
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(failed)?;
        tx.execute_batch(&format!("{sql}\nPRAGMA user_version = {version};"))
            .map_err(failed)?;
        let violations: i64 = tx
            .query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |row| {
                row.get(0)
            })
            .map_err(failed)?;
        if violations > 0 {
            return Err(format!(
                "migration {version}: would leave {violations} row(s) with a dangling reference"
            ));
        }
        tx.commit().map_err(failed)?;
        applied = version;
    }
    Ok(applied)
}

/// Splits the schema into numbered blocks, checking they count up from 1.
fn migrations(schema: &str) -> Result<Vec<(u32, String)>, String> {
    let mut blocks: Vec<(u32, String)> = Vec::new();
    for line in schema.lines() {
        if let Some(number) = line.trim().strip_prefix("-- migration ") {
            let version: u32 = number
                .trim()
                .parse()
                .map_err(|_| format!("schema.sql: bad migration header {line:?}"))?;
            if version as usize != blocks.len() + 1 {
                return Err(format!("schema.sql: migration {version} out of order"));
            }
            blocks.push((version, String::new()));
        } else if let Some((_, sql)) = blocks.last_mut() {
            sql.push_str(line);
            sql.push('\n');
        }
    }
    Ok(blocks)
}

/// A freshly opened store with the handles its owner needs.
pub struct Opened {
    pub store: Arc<Store>,
    /// Ends once every [`Store`] handle is dropped and the queue is committed.
    pub writer: JoinHandle<()>,
    /// Pinged after commits (the outbox relay listens).
    pub commits: Receiver<()>,
}

impl Store {
    /// Opens (creating if needed) `data_dir/tasks.db`, migrates it and starts the writer.
    pub fn open(data_dir: &Path, config: &StoreConfig) -> Result<Opened, String> {
        let lock_path = data_dir.join("lock");
        let lock = File::create(&lock_path).map_err(|e| format!("{}: {e}", lock_path.display()))?;
        lock.try_lock().map_err(|_| {
            format!(
                "{} is in use by another mcp-taskd (one server per data dir)",
                data_dir.display()
            )
        })?;
        let path = data_dir.join("tasks.db");
        let uri = database_uri(&path)?;
        let opening = |e| format!("{}: {e}", path.display());
        let mut writer = open_connection(&uri).map_err(opening)?;
        configure(&writer, config)?;
        keep_temp_in_memory(&writer)?;
        let version = migrate(&mut writer)?;
        log::info!("task store at schema version {version}");
        writer
            .pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(|e| format!("turning off automatic checkpoints: {e}"))?;
        let (checkpointer, stop_checkpointer) = crossbeam_channel::bounded(0);
        let restart = Arc::new(AtomicBool::new(false));
        let wanted = Arc::clone(&restart);
        let checkpoint_conn = open_connection(&uri).map_err(opening)?;
        configure(&checkpoint_conn, config)?;
        std::thread::Builder::new()
            .name("store-checkpoint".into())
            .spawn(move || run_checkpointer(&checkpoint_conn, &stop_checkpointer, &wanted))
            .map_err(|e| format!("starting the checkpointer: {e}"))?;

        let read_config = config.clone();
        // Read-write at the file level: `unix-excl` settles locks in memory only for
        // connections that may write. `query_only` makes them readers all the same.
        let manager = SqliteConnectionManager::file(&uri)
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
                            Some(why),
                        )
                    })
            });
        let reads = Pool::builder()
            .max_size(config.read_connections.max(1))
            // A local file connection does not go stale; r2d2's check on every checkout
            // would run a statement per read for nothing.
            .test_on_check_out(false)
            .connection_timeout(Duration::from_secs(5))
            .build(manager)
            .map_err(|e| format!("opening read connections: {e}"))?;

        let (writes, queue) = crossbeam_channel::unbounded::<Write>();
        let (ping, pings) = crossbeam_channel::bounded(1);
        let (continuations, continued) = crossbeam_channel::unbounded();
        let completers = (0..COMPLETION_THREADS)
            .map(|index| {
                let batches = continued.clone();
                std::thread::Builder::new()
                    .name(format!("store-answer-{index}"))
                    .spawn(move || run_continuations(batches))
                    .map_err(|e| format!("starting the completion threads: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || {
                run_writer(writer, queue, ping, continuations, &restart);
                // The writer dropped its end: the completion threads finish what is
                // queued and stop.
                for completer in completers {
                    let _ = completer.join();
                }
            })
            .map_err(|e| format!("starting the writer thread: {e}"))?;
        Ok(Opened {
            store: Arc::new(Store {
                path,
                uri,
                writes,
                reads,
                unanswered: Arc::default(),
                _checkpointer: checkpointer,
                _lock: lock,
            }),
            writer: thread,
            commits: pings,
        })
    }

    /// Runs `op` in the writer's next transaction and returns its result once committed.
    /// An `Err` from `op` rolls back `op`'s changes only.
    pub fn write<R, F>(&self, op: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let (reply, answer) = reply_slot();
        let job: WriteOp = Box::new(move |conn| {
            let outcome = run_in_savepoint(conn, op);
            Completion::Wake(Box::new(move |committed| {
                reply.send(settle(committed, outcome));
            }))
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
    pub fn write_later<R, F>(&self, op: F) -> Later<Result<R, StoreError>>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        // Dropped unanswered (the writer stopped): the caller gets "not committed".
        let (fulfil, result) = later(|| {
            Err(StoreError::NotCommitted(
                "the writer dropped the write".into(),
            ))
        });
        let owed = self.unanswered.owe();
        let job: WriteOp = Box::new(move |conn| {
            let outcome = run_in_savepoint(conn, op);
            Completion::Continue(Box::new(move |committed| {
                fulfil.fulfil(settle(committed, outcome));
                drop(owed);
            }))
        });
        // A failed send drops the job, and with it `fulfil` and `owed`.
        let _ = self.writes.send(Write::Op(job));
        result
    }

    /// Creates a task in the writer's next transaction without blocking the caller,
    /// like [`Store::write_later`]. Creations without an idempotency key that meet in a
    /// batch go in with one multi-row `INSERT` per table ([`sql::create_tasks`]).
    pub fn create_later(&self, task: NewTask) -> Later<Result<TaskRow, StoreError>> {
        if task.idempotency_key.is_some() {
            return self.write_later(move |conn| sql::create_task(conn, &task));
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
    pub fn wait_for_continuations(&self, limit: Duration) -> bool {
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

    /// A query-only connection from the pool (a WAL snapshot per statement/transaction).
    pub fn read(&self) -> Result<PooledConnection<SqliteConnectionManager>, StoreError> {
        Ok(self.reads.get()?)
    }

    /// Size of the write-ahead log file.
    pub fn wal_bytes(&self) -> Option<u64> {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        std::fs::metadata(wal).ok().map(|meta| meta.len())
    }

    /// Checkpoints the WAL into the database and truncates it. Runs on its own short-lived
    /// connection (a checkpoint cannot run inside the writer's transactions); gives up
    /// after a second if readers hold old snapshots, to try again next time.
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        let conn = open_connection(&self.uri)?;
        conn.busy_timeout(Duration::from_secs(1))?;
        let (busy, _, _): (i64, i64, i64) =
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })?;
        if busy != 0 {
            log::debug!("WAL checkpoint deferred: readers busy");
        }
        Ok(())
    }
}

/// Where the writer leaves one write's answer for the thread waiting on it.
///
/// The waiting thread sleeps on a condition variable straight away. (A channel receive
/// spins and calls `sched_yield` several times before it sleeps; with dozens of request
/// threads waiting on one writer, on two cores, those yields took about a fifth of the
/// server's CPU during a burst of task creations and slowed the writer they waited for.)
struct Slot<T> {
    /// `Some(None)`: the writer dropped the write without answering.
    value: Mutex<Option<Option<T>>>,
    ready: Condvar,
}

/// The writer's end of a [`Slot`]; answers `None` if dropped unanswered.
struct Replier<T> {
    slot: Arc<Slot<T>>,
    answered: bool,
}

/// The waiting end of a [`Slot`].
struct Answer<T> {
    slot: Arc<Slot<T>>,
}

fn reply_slot<T>() -> (Replier<T>, Answer<T>) {
    let slot = Arc::new(Slot {
        value: Mutex::new(None),
        ready: Condvar::new(),
    });
    (
        Replier {
            slot: Arc::clone(&slot),
            answered: false,
        },
        Answer { slot },
    )
}

impl<T> Slot<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Option<T>>> {
        // The slot holds plain data, written whole: a poisoned lock is still consistent.
        self.value.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<T> Replier<T> {
    fn send(mut self, value: T) {
        self.put(Some(value));
    }

    fn put(&mut self, value: Option<T>) {
        *self.slot.lock() = Some(value);
        self.answered = true;
        self.slot.ready.notify_one();
    }
}

impl<T> Drop for Replier<T> {
    fn drop(&mut self) {
        if !self.answered {
            self.put(None);
        }
    }
}

impl<T> Answer<T> {
    /// Blocks until the writer answers; `None` when it dropped the write.
    fn wait(self) -> Option<T> {
        let mut value = self.slot.lock();
        loop {
            if let Some(answer) = value.take() {
                return answer;
            }
            value = self
                .slot
                .ready
                .wait(value)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A write's result as its caller sees it: only a committed batch makes it true.
fn settle<R>(committed: bool, outcome: Result<R, StoreError>) -> Result<R, StoreError> {
    if committed {
        outcome
    } else {
        Err(StoreError::NotCommitted("the batch did not commit".into()))
    }
}

/// The writes of one transaction, run in arrival order. Task creations wait for the next
/// other write (or the commit) and go in together, one multi-row `INSERT` per table
/// ([`sql::create_tasks`]): under load that saves the writer ~3.5 µs per creation. If
/// that fails, they go in one by one, each under its own savepoint, so that only the
/// failing one fails, as with any write.
#[derive(Default)]
struct Batch {
    completions: Vec<Completion>,
    creations: Vec<Creation>,
}

impl Batch {
    fn len(&self) -> usize {
        self.completions.len() + self.creations.len()
    }

    fn push(&mut self, conn: &Connection, write: Write) {
        match write {
            Write::Op(op) => {
                self.create_waiting(conn);
                self.completions.push(op(conn));
            }
            Write::Create(creation) => self.creations.push(*creation),
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
        let together = run_in_savepoint(conn, |conn| sql::create_tasks(conn, &tasks));
        let outcomes: Vec<Result<TaskRow, StoreError>> = match together {
            Ok(rows) => rows.into_iter().map(Ok).collect(),
            Err(error) => {
                log::warn!(
                    "creating {} tasks together: {error}; one by one",
                    tasks.len()
                );
                tasks
                    .iter()
                    .map(|task| run_in_savepoint(conn, |conn| sql::create_task(conn, task)))
                    .collect()
            }
        };
        for ((fulfil, owed), outcome) in replies.into_iter().zip(outcomes) {
            self.completions
                .push(Completion::Continue(Box::new(move |committed| {
                    fulfil.fulfil(settle(committed, outcome));
                    drop(owed);
                })));
        }
    }

    /// Runs the creations still waiting; returns how to report every write's outcome.
    fn finish(mut self, conn: &Connection) -> Vec<Completion> {
        self.create_waiting(conn);
        self.completions
    }
}

fn run_in_savepoint<R>(
    conn: &Connection,
    op: impl FnOnce(&Connection) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    conn.prepare_cached("SAVEPOINT op")?.execute([])?;
    match op(conn) {
        Ok(value) => {
            conn.prepare_cached("RELEASE op")?.execute([])?;
            Ok(value)
        }
        Err(error) => {
            conn.execute_batch("ROLLBACK TO op; RELEASE op")?;
            Err(error)
        }
    }
}

/// Runs one statement through the connection's statement cache (the writer runs the
/// same few transaction-control statements thousands of times a second).
fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// The checkpointer: a passive checkpoint every [`CHECKPOINT_INTERVAL`] until the
/// store is dropped.
///
/// A passive checkpoint copies committed frames into the database file without waiting
/// for (or blocking) the writer or readers. It cannot restart the WAL under constant
/// load, though: by the time it has copied everything, newer commits have been appended
/// behind it, and the file would grow until the janitor's TRUNCATE. So once the WAL
/// holds more than [`RESTART_FRAMES`], it asks the writer (through `restart`) to run a
/// RESTART checkpoint between two batches: that copies only the frames committed since
/// this passive checkpoint, and the next commit writes from the start of the file again.
/// (Run from here, a RESTART would wait for a gap between batches that a busy writer
/// never leaves.)
fn run_checkpointer(conn: &Connection, stop: &Receiver<()>, restart: &AtomicBool) {
    while let Err(RecvTimeoutError::Timeout) = stop.recv_timeout(CHECKPOINT_INTERVAL) {
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            row.get::<_, i64>(1)
        }) {
            Ok(frames) if frames > RESTART_FRAMES => restart.store(true, Ordering::Release),
            Ok(_) => {}
            Err(error) => log::warn!("WAL checkpoint: {error}"),
        }
    }
}

/// A committed (or failed) batch's continuations, for a completion thread.
type Continuations = (Vec<Finisher>, bool);

/// A completion thread: runs continuations batch by batch until the writer is gone.
/// Several share the queue, so one continuation stuck on a slow client (at worst until
/// the socket's write timeout) holds up only the rest of its own batch.
fn run_continuations(batches: Receiver<Continuations>) {
    for (batch, committed) in batches {
        for finish in batch {
            if catch_unwind(AssertUnwindSafe(|| finish(committed))).is_err() {
                log::error!("a write's continuation panicked");
            }
        }
    }
}

/// The writer loop: batch, commit, answer; between batches, restart the WAL when the
/// checkpointer asks (the RESTART waits, within `busy_timeout`, only for readers still on
/// an older snapshot — every read here is a short statement). Ends when every [`Store`]
/// handle is gone.
fn run_writer(
    conn: Connection,
    queue: Receiver<Write>,
    ping: Sender<()>,
    continuations: Sender<Continuations>,
    restart: &AtomicBool,
) {
    let heartbeat = crate::ops::liveness::LIVENESS.register("writer");
    while let Ok(first) = queue.recv() {
        let _working = heartbeat.working();
        if let Err(error) = run_cached(&conn, "BEGIN IMMEDIATE") {
            // Dropping the write answers its caller "not committed".
            log::error!("could not begin a write transaction: {error}");
            drop(first);
            continue;
        }
        // Writes that arrive while this transaction runs join it: the batch grows to
        // what the clients have in flight and they all share the one commit below.
        let mut batch = Batch::default();
        batch.push(&conn, first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(write) => batch.push(&conn, write),
                Err(_) => break,
            }
        }
        let finishers = batch.finish(&conn);
        let committed = match run_cached(&conn, "COMMIT") {
            Ok(()) => true,
            Err(error) => {
                log::error!("commit failed: {error}");
                let _ = conn.execute_batch("ROLLBACK");
                false
            }
        };
        let mut later = Vec::new();
        for completion in finishers {
            match completion {
                Completion::Wake(finish) => finish(committed),
                Completion::Continue(finish) => later.push(finish),
            }
        }
        if !later.is_empty() {
            // One message (one wake-up) per batch, however many it answers.
            let _ = continuations.send((later, committed));
        }
        if committed {
            let _ = ping.try_send(());
        }
        if restart.swap(false, Ordering::AcqRel) {
            let restarted = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()));
            if let Err(error) = restarted {
                log::warn!("WAL restart: {error}");
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::protocol::TaskStatus;

    /// Rows in `table`, read through the pool.
    fn rows_in(store: &Store, table: &str) -> i64 {
        store
            .read()
            .unwrap()
            .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    }

    /// A store on a fresh temporary data dir (kept alive by the returned guard).
    pub(crate) fn fresh_store() -> (tempfile::TempDir, Arc<Store>) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreConfig::default())
            .unwrap()
            .store;
        (dir, store)
    }

    #[test]
    fn schema_blocks_are_numbered_in_order() {
        let blocks = migrations(SCHEMA).unwrap();
        assert!(!blocks.is_empty());
        assert!(migrations("-- migration 2\nSELECT 1;").is_err());
    }

    #[test]
    fn migrate_is_idempotent_and_pragmas_are_verified() {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig::default();
        let store = Store::open(dir.path(), &config).unwrap().store;
        let version: u32 = store
            .read()
            .unwrap()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version as usize, migrations(SCHEMA).unwrap().len());
        let temp_store = |conn: &Connection| -> i64 {
            conn.query_row("PRAGMA temp_store", [], |r| r.get(0))
                .unwrap()
        };
        let writers = store.write(move |conn| Ok(temp_store(conn))).unwrap();
        assert_eq!(writers, 2, "the writer's savepoint journals stay in memory");
        assert_eq!(
            temp_store(&store.read().unwrap()),
            0,
            "readers keep the default"
        );
        let second = Store::open(dir.path(), &config);
        assert!(second.is_err(), "the data dir is locked");
        drop(store);
    }

    #[test]
    fn the_checkpointer_copies_commits_into_the_database_file() {
        let (dir, store) = fresh_store();
        for _ in 0..20 {
            store
                .write(|conn| {
                    for _ in 0..50 {
                        conn.execute(
                            "INSERT INTO outbox (task_id, created_at) VALUES ('t', 1)",
                            [],
                        )?;
                    }
                    Ok(())
                })
                .unwrap();
        }
        // `immutable=1` reads the database file alone, ignoring the WAL: the rows show
        // there only once checkpointed — and the writer's automatic checkpoints are off.
        let uri = format!("file:{}?immutable=1", dir.path().join("tasks.db").display());
        let in_file = || -> i64 {
            let conn = Connection::open_with_flags(
                &uri,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
            )
            .unwrap();
            // Before the first checkpoint even the table is only in the WAL.
            conn.query_row("SELECT COUNT(*) FROM outbox", [], |r| r.get(0))
                .unwrap_or(0)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while in_file() < 1000 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(in_file(), 1000);
    }

    #[test]
    fn the_wal_is_reused_under_constant_writes() {
        const COMMITS: usize = 1500;
        const ROWS: usize = 50;
        let (_dir, store) = fresh_store();
        let filler = "x".repeat(2000);
        // Commits of ~100 KB back to back, ~150 MB in all. Without restarts the WAL would
        // hold all of it. Restarted by the checkpointer, new commits overwrite it from the
        // beginning, so it stays a fraction of what was written: how large a fraction
        // depends on how much the writer commits between two checkpoints (~25 MB here).
        let mut largest = 0;
        for _ in 0..COMMITS {
            let filler = filler.clone();
            store
                .write(move |conn| {
                    for _ in 0..ROWS {
                        conn.execute(
                            "INSERT INTO outbox (task_id, created_at) VALUES (?1, 1)",
                            [&filler],
                        )?;
                    }
                    Ok(())
                })
                .unwrap();
            largest = largest.max(store.wal_bytes().unwrap_or(0));
        }
        let written = (COMMITS * ROWS * filler.len()) as u64;
        assert!(
            largest < written / 3,
            "the WAL grew to {largest} bytes for {written} written: it was not reused"
        );
    }

    #[test]
    fn a_reply_slot_answers_once_or_reports_a_dropped_write() {
        let (reply, answer) = reply_slot();
        let waiter = std::thread::spawn(move || answer.wait());
        reply.send(7);
        assert_eq!(waiter.join().unwrap(), Some(7));
        let (reply, answer) = reply_slot::<i32>();
        drop(reply);
        assert_eq!(answer.wait(), None);
    }

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
        let task = |id: &str| NewTask {
            id: id.to_owned(),
            identity: crate::auth::Identity {
                endpoint: "/mcp".into(),
                tenant: String::new(),
                principal: "p".into(),
            },
            tool: "tool".into(),
            origin: b"{}".to_vec(),
            input_responses: "{}".into(),
            now: 1,
            ttl_ms: None,
            poll_interval_ms: 1000,
            max_attempts: 1,
            backoff_ms: 0,
            timeout_ms: 1000,
            idempotency_key: None,
        };
        // Hold the writer inside a write until the creations are queued, so that they
        // meet in one batch.
        let (release, held) = crossbeam_channel::bounded::<()>(0);
        let holder = store.write_later(move |_| Ok(held.recv().ok()));
        let (done, outcomes) = crossbeam_channel::unbounded();
        for (index, id) in ["first", "twin", "first", "last"].into_iter().enumerate() {
            let done = done.clone();
            store
                .create_later(task(id))
                .then(move |outcome| done.send((index, outcome.map(|row| row.id))).unwrap());
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

    #[test]
    fn the_store_opens_any_data_dir_path_and_its_readers_cannot_write() {
        // A data dir whose name needs escaping in a SQLite URI.
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("odd?name#with%");
        std::fs::create_dir(&dir).unwrap();
        let store = Store::open(&dir, &StoreConfig::default()).unwrap().store;
        store
            .write(|conn| {
                conn.execute(
                    "INSERT INTO outbox (task_id, created_at) VALUES ('t', 1)",
                    [],
                )?;
                Ok(())
            })
            .unwrap();
        let reader = store.read().unwrap();
        let rows: i64 = reader
            .query_row("SELECT COUNT(*) FROM outbox", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            rows, 1,
            "the store opened the database in the odd directory"
        );
        let written = reader.execute(
            "INSERT INTO outbox (task_id, created_at) VALUES ('u', 1)",
            [],
        );
        assert!(written.is_err(), "pool connections are query-only");
    }

    /// A database at schema version 1 with a task in every state a row can be in.
    fn version_1_database(path: &Path) -> Connection {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON;")
            .unwrap();
        let blocks = migrations(SCHEMA).unwrap();
        conn.execute_batch(&format!("{}\nPRAGMA user_version = 1;", blocks[0].1))
            .unwrap();
        for (id, status, job) in [
            ("queued", TaskStatus::Working, Some("queued")),
            ("running", TaskStatus::Working, Some("running")),
            ("waiting", TaskStatus::InputRequired, Some("waiting")),
            ("done", TaskStatus::Completed, None),
        ] {
            conn.execute(
                "INSERT INTO tasks (id, endpoint, tenant, principal, tool, origin, status, \
                 created_at, updated_at, ttl_ms, expires_at, poll_interval_ms, result) \
                 VALUES (?1, '/mcp', 't', 'p', 'noop', x'7b7d', ?2, 1, 2, 10, 11, 5, \
                 CASE WHEN ?2 = 'completed' THEN '{}' END)",
                rusqlite::params![id, status.as_str()],
            )
            .unwrap();
            if let Some(state) = job {
                conn.execute(
                    "INSERT INTO jobs (task_id, state, attempt, max_attempts, backoff_ms, \
                     timeout_ms, run_after, lease_token) VALUES (?1, ?2, 1, 3, 100, 1000, 7, 'tok')",
                    rusqlite::params![id, state],
                )
                .unwrap();
            }
            conn.execute(
                "INSERT INTO attempts (task_id, attempt, started_at) VALUES (?1, 1, 3)",
                [id],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO outbox (task_id, created_at) VALUES (?1, 4)",
                [id],
            )
            .unwrap();
        }
        conn.execute(
            "INSERT INTO input_keys (task_id, key) VALUES ('waiting', 'k')",
            [],
        )
        .unwrap();
        conn
    }

    /// Every row, as text, in a fixed order (the migration must keep them all).
    fn dump(conn: &Connection) -> Vec<String> {
        let mut rows = Vec::new();
        for table in ["tasks", "jobs", "attempts", "outbox", "input_keys"] {
            let mut statement = conn
                .prepare(&format!("SELECT * FROM {table} ORDER BY 1, 2"))
                .unwrap();
            let columns = statement.column_count();
            let mut query = statement.query([]).unwrap();
            while let Some(row) = query.next().unwrap() {
                let values: Vec<String> = (0..columns)
                    .map(|i| format!("{:?}", row.get_ref(i).unwrap()))
                    .collect();
                rows.push(format!("{table}: {}", values.join(", ")));
            }
        }
        rows
    }

    #[test]
    fn migration_2_rebuilds_the_tables_and_keeps_every_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db");
        let mut conn = version_1_database(&path);
        let before = dump(&conn);
        assert_eq!(before.len(), 4 + 3 + 4 + 4 + 1);

        assert_eq!(migrate(&mut conn).unwrap(), 2);
        assert_eq!(dump(&conn), before, "every row survives, unchanged");
        let foreign_keys: i64 = conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert_eq!(foreign_keys, 1, "foreign keys are on again");
        let schema = |name: &str| -> String {
            conn.query_row(
                "SELECT sql FROM sqlite_schema WHERE name = ?1",
                [name],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert!(schema("jobs").contains("WITHOUT ROWID"));
        assert!(!schema("outbox").contains("AUTOINCREMENT"));
        for index in [
            "tasks_by_idempotency_key",
            "tasks_by_expiry",
            "jobs_ready",
            "jobs_leased",
        ] {
            assert!(!schema(index).is_empty(), "{index} is back");
        }

        // The constraints hold as before: status values, and children follow their task.
        let bad = conn.execute("UPDATE tasks SET status = 'bogus' WHERE id = 'done'", []);
        assert!(bad.is_err(), "the status CHECK still holds");
        let bad = conn.execute(
            "UPDATE jobs SET state = 'bogus' WHERE task_id = 'queued'",
            [],
        );
        assert!(bad.is_err(), "the state CHECK still holds");
        let orphan = conn.execute(
            "INSERT INTO jobs (task_id, state, max_attempts, backoff_ms, timeout_ms, run_after) \
             VALUES ('nobody', 'queued', 1, 1, 1, 1)",
            [],
        );
        assert!(orphan.is_err(), "jobs still reference tasks");
        conn.execute("DELETE FROM tasks WHERE id = 'waiting'", [])
            .unwrap();
        let left: i64 = conn
            .query_row(
                "SELECT (SELECT COUNT(*) FROM jobs WHERE task_id = 'waiting') \
                 + (SELECT COUNT(*) FROM attempts WHERE task_id = 'waiting') \
                 + (SELECT COUNT(*) FROM input_keys WHERE task_id = 'waiting')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 0, "deleting a task still cascades");

        // seq goes on growing after the newest row, also once the others are pruned.
        assert_eq!(sql::prune_outbox(&conn, 100, 100).unwrap(), 3);
        conn.execute(
            "INSERT INTO outbox (task_id, created_at) VALUES ('done', 5)",
            [],
        )
        .unwrap();
        let seqs: Vec<i64> = conn
            .prepare("SELECT seq FROM outbox ORDER BY seq")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(seqs, vec![4, 5]);
    }

    #[test]
    fn a_migration_that_would_orphan_rows_does_not_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db");
        let mut conn = version_1_database(&path);
        // A task deleted with foreign keys off leaves its job dangling: migration 2
        // copies it as it is, and the check before COMMIT refuses the result.
        conn.execute_batch("PRAGMA foreign_keys = OFF; DELETE FROM tasks WHERE id = 'queued';")
            .unwrap();
        let before = dump(&conn);
        let error = migrate(&mut conn).unwrap_err();
        assert!(
            error.contains("migration 2") && error.contains("dangling"),
            "{error}"
        );
        let version: u32 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 1);
        assert_eq!(dump(&conn), before, "nothing changed");
        let foreign_keys: i64 = conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            foreign_keys, 1,
            "foreign keys are on again after a failure too"
        );
    }
}
