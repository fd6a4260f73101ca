//! The settings the engine and its stores read, as the configuration file writes them:
//! `[store]`, `[workers]` and `[tasks]` (the file format in `taskd-server` composes them;
//! a reload swaps `[tasks]` through [`crate::SettingsSource`]).

use std::path::PathBuf;

use serde::Deserialize;

/// The task store: which backend, and its knobs (the SQLite ones apply to SQLite only).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `sqlite` (default: `tasks.db` in the data dir) or `postgres` (several nodes may
    /// share one database; see `taskd-postgres`).
    pub backend: Backend,
    /// PostgreSQL: `postgresql://USER@HOST:PORT/DBNAME` (or `key=value` form). A password
    /// in it is refused (`taskd_postgres::check_url`): use `password_file` or the
    /// `MCP_TASKD_PG_PASSWORD` environment variable.
    pub url: Option<String>,
    /// PostgreSQL: a file holding the password (trailing newline ignored); relative to
    /// the configuration file's directory.
    pub password_file: Option<PathBuf>,
    /// PostgreSQL: connections in the bounded pool.
    pub pool_size: u32,
    /// `full` (default: every acknowledged write survives power loss) or `normal`.
    pub synchronous: Synchronous,
    /// How long a connection waits on a lock before giving up.
    pub busy_timeout_ms: u64,
    /// Read connections in the pool.
    pub read_connections: u32,
    /// Page cache of each store connection (the writer, the checkpointer and every
    /// reader), in bytes; SQLite's default, 2,048,000.
    pub cache_bytes: u64,
    /// Longest the start-up integrity check (`PRAGMA quick_check`, every page) may run;
    /// past it the rest of the database goes unchecked. `0` skips the check. The
    /// default keeps start-up under a second at any size (a full check of 1M tasks
    /// took 3.4 s); stores up to ~150k tasks are still checked whole.
    pub integrity_check_ms: u64,
    /// Free bytes on the data dir's file system below which new tasks are refused (503),
    /// and below half of which every write: room for running tasks' outcomes and for
    /// the checkpoint that lets the WAL be reused. `0`: no floor.
    pub min_free_bytes: u64,
    /// `exclusive` (default: only this process can open `tasks.db`) or `shared` (the
    /// ordinary locking, so that Litestream, `sqlite3` and other readers can open it).
    pub locking: Locking,
    /// `internal` (default: the server checkpoints the WAL) or `external` (it never does:
    /// Litestream or another tool checkpoints).
    pub checkpoints: Checkpoints,
    /// `serve --accept-data-loss`: open a SQLite store even though the last process
    /// stopped uncleanly and its write-ahead log has gone (`taskd_sqlite::stop_mark`).
    /// Never from the file: only the operator, once, on the command line.
    #[serde(skip)]
    pub accept_data_loss: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            backend: Backend::Sqlite,
            url: None,
            password_file: None,
            pool_size: 16,
            synchronous: Synchronous::Full,
            busy_timeout_ms: 5000,
            read_connections: 8,
            cache_bytes: DEFAULT_CACHE_BYTES,
            integrity_check_ms: 500,
            min_free_bytes: 1 << 20,
            locking: Locking::Exclusive,
            checkpoints: Checkpoints::Internal,
            accept_data_loss: false,
        }
    }
}

/// `store.cache_bytes` by default: SQLite's own default page cache (2,000 KiB).
pub const DEFAULT_CACHE_BYTES: u64 = 2000 * 1024;

/// The smallest `store.cache_bytes` accepted: 16 pages of 4 KiB.
pub const MIN_CACHE_BYTES: u64 = 64 * 1024;

/// Where tasks are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// One SQLite file in the data dir: one node.
    Sqlite,
    /// A PostgreSQL database, which several nodes may share.
    Postgres,
}

/// How the server locks `tasks.db` (see "One server per data dir" in the store).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Locking {
    /// SQLite's `unix-excl` VFS: one exclusive lock for the process lifetime.
    Exclusive,
    /// SQLite's default VFS: shared and exclusive locks per transaction, as every
    /// other SQLite program expects.
    Shared,
}

/// Who checkpoints the write-ahead log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Checkpoints {
    /// The server's checkpointer and janitor.
    Internal,
    /// Another process (Litestream): the server never checkpoints.
    External,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    Full,
    Normal,
}

impl Synchronous {
    /// The value `PRAGMA synchronous` reads back as.
    pub fn pragma_value(self) -> i64 {
        match self {
            Synchronous::Full => 2,
            Synchronous::Normal => 1,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// Worker threads running task attempts.
    pub threads: usize,
    /// Lease length; a running attempt renews it at a third of this.
    pub lease_ms: u64,
    /// How long a graceful shutdown waits for running attempts.
    pub shutdown_grace_ms: u64,
    /// Period of the janitor (lease reclaim, TTL expiry, outbox pruning).
    pub janitor_interval_ms: u64,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            threads: 8,
            lease_ms: 30_000,
            shutdown_grace_ms: 10_000,
            janitor_interval_ms: 1000,
        }
    }
}

/// Defaults for task tools that do not set their own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskDefaults {
    /// How long a task is kept after creation; it is deleted once this passes.
    pub ttl_ms: u64,
    /// `pollIntervalMs` suggested to clients.
    pub poll_interval_ms: u64,
    /// Bytes of large task payloads (over 1 MiB each) read into `tasks/get` answers at
    /// once, server-wide; beyond it `tasks/get` answers 503 to retry.
    pub max_payload_bytes_in_flight: usize,
    /// Whether clients that do not declare the Tasks extension still get durable task
    /// tools, through ordinary `CallToolResult`s and the `task_*` tools (see
    /// `handlers::bridge`). Off: the extension's strict refusal (-32021).
    pub bridge: bool,
    /// How long such a client's `tools/call` waits for its task before it gets a handle
    /// instead of the result (tools may set their own).
    pub inline_wait_ms: u64,
    /// Tasks not yet terminal one identity may have (a token's `max_live_tasks`
    /// overrides it); a creation beyond it gets 429. Counted in the store.
    pub max_live_tasks_per_identity: u64,
    /// Task creations per second one identity may make, on average (a token's
    /// `creations_per_sec` overrides it); 0: no limit.
    pub creations_per_sec_per_identity: f64,
    /// Creations an identity may make at once before `creations_per_sec` paces it.
    pub creation_burst_per_identity: u32,
    /// Bridged calls one identity may have waiting for their task at once (a token's
    /// `max_inline_waits` overrides it); beyond, a call gets its task handle at once.
    pub max_inline_waits_per_identity: usize,
}

impl Default for TaskDefaults {
    fn default() -> Self {
        TaskDefaults {
            ttl_ms: 3_600_000,
            poll_interval_ms: 1000,
            max_payload_bytes_in_flight: 32 * 1024 * 1024,
            bridge: true,
            // A third of the TypeScript SDK's 60 s default request timeout.
            inline_wait_ms: 20_000,
            max_live_tasks_per_identity: 100_000,
            creations_per_sec_per_identity: 0.0,
            creation_burst_per_identity: 100,
            max_inline_waits_per_identity: 32,
        }
    }
}

/// `[output]`: what is kept of the output of a task's attempts (a command tool's stderr
/// and stdout beyond its protocol lines, an upstream's status and log messages), shown
/// to whoever may read the task (docs/tasks.md, "A task's output").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    /// Bytes of one task's output kept: the newest lines, the older ones dropped (and
    /// counted). A tool's `output_max_bytes` overrides it; `0` keeps none.
    pub max_bytes_per_task: u64,
    /// Regular expressions (Rust `regex` syntax) whose matches are replaced with
    /// `[redacted]` in every line before it is kept or shown.
    pub redact: Vec<String>,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            max_bytes_per_task: 256 * 1024,
            redact: Vec::new(),
        }
    }
}
