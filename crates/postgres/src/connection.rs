//! Connections to PostgreSQL: the settings from `[store]` (the password from a file or
//! the environment, never from the configuration text), and the bounded pool.
//!
//! The pool never blocks forever: a caller waits at most [`CHECKOUT_TIMEOUT`] for a
//! connection, then gets `StoreError::Unavailable` (503 with `Retry-After`). Pooled
//! connections carry the *epoch* they were opened in; the listener (see
//! [`super::listener`]) starts a new epoch whenever it loses the database, so after the
//! database comes back no caller is handed a connection that died with it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use postgres::{Client, NoTls};

use super::statements::Session;
use taskd_engine::config::StoreConfig;

/// The `application_name` of the sessions, unless the URL names one (the store adds
/// the node id and process id to it).
pub const APPLICATION: &str = "mcp-taskd";
/// The environment variable read for the password when `store.password_file` is unset.
pub const PASSWORD_ENV: &str = "MCP_TASKD_PG_PASSWORD";
/// Longest wait for a pooled connection (or a new one) before a 503.
pub const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(3);
/// Session settings unless the URL gives its own `options`: no statement runs (or waits
/// on a lock) longer than 30 s, no transaction stays open and idle longer than 60 s;
/// and the database probes the node's end of the connection after 10 s of quiet and
/// ends the session after three unanswered probes (or 20 s of unacknowledged data).
/// Without the probes, the session of a node cut off without a word (a partition, a
/// dead host) lives on in the database for the kernel's default of two hours, and
/// with it what the session holds: the upkeep leader's advisory lock, so that no node
/// reclaimed the cut node's expired leases (found by benches/soak/partitions.py,
/// scenario A'), and the row locks of a transaction it had open.
const SESSION_OPTIONS: &str = "-c statement_timeout=30000 \
     -c idle_in_transaction_session_timeout=60000 \
     -c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3 \
     -c tcp_user_timeout=20000";
/// Longest wait for the database to accept a new connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a ping on a dedicated connection (the listener's, the upkeep leader's) may
/// wait for its answer before the database is taken as lost. A database that closes
/// the connection or refuses it is noticed at once; this bounds only one that stops
/// answering. A PostgreSQL whose CPUs are full answers a ping late but answers: taking
/// it as lost after half a second turned every request into a 503 and reopened every
/// pooled connection, which made it slower still (`benches/postgres.sh` on a 2-core
/// box, 2026-12-04: end to end fell to a quarter for the round).
pub const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// What is wrong with the PostgreSQL settings of `[store]`.
#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    #[error("store.backend = \"postgres\" needs store.url (postgresql://USER@HOST:PORT/DBNAME)")]
    Missing,
    #[error("store.url: {detail}")]
    Unparsable { detail: String },
    #[error(
        "store.url must not contain a password: put it in store.password_file or the \
         MCP_TASKD_PG_PASSWORD environment variable"
    )]
    PasswordInUrl,
    #[error("store.pool_size must be at least 1")]
    PoolSize,
}

/// The PostgreSQL settings, checked: a URL that parses and names no password, and a
/// pool of at least one connection. Returns the parsed URL.
pub fn check_url(config: &StoreConfig) -> Result<postgres::Config, UrlError> {
    let url = config.url.as_deref().ok_or(UrlError::Missing)?;
    let parsed: postgres::Config = url.parse().map_err(|e: postgres::Error| {
        // The parser's message never repeats the URL (which may hold a password).
        UrlError::Unparsable {
            detail: e.to_string(),
        }
    })?;
    if parsed.get_password().is_some() {
        return Err(UrlError::PasswordInUrl);
    }
    if config.pool_size == 0 {
        return Err(UrlError::PoolSize);
    }
    Ok(parsed)
}

/// Why the PostgreSQL store could not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Config(#[from] UrlError),
    #[error("store.password_file {}: {source}", path.display())]
    PasswordFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("node id {}: {source}", path.display())]
    NodeId {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot connect to PostgreSQL: {0}")]
    Connect(String),
    #[error("migrating the PostgreSQL schema: {0}")]
    Migration(String),
    #[error("{0}")]
    Start(String),
}

/// The connection settings of `[store]`, with the password (if any) filled in.
pub fn settings(config: &StoreConfig) -> Result<postgres::Config, OpenError> {
    let mut settings = check_url(config)?;
    let password = match &config.password_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map(|text| text.trim_end_matches(['\n', '\r']).to_owned())
                .map_err(|source| OpenError::PasswordFile {
                    path: path.clone(),
                    source,
                })?,
        ),
        None => std::env::var(PASSWORD_ENV).ok(),
    };
    if let Some(password) = password {
        settings.password(password);
    }
    if settings.get_application_name().is_none() {
        settings.application_name(APPLICATION);
    }
    // Nothing waits forever: a database host that vanishes is noticed by TCP within
    // half a minute, a statement stuck on a lock ends, and a node that stops halfway
    // through a transaction (SIGSTOP, a hung VM) does not hold its row locks for long.
    settings
        .connect_timeout(CONNECT_TIMEOUT)
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(30))
        .keepalives_interval(Duration::from_secs(5))
        .tcp_user_timeout(Duration::from_secs(30));
    if settings.get_options().is_none() {
        settings.options(SESSION_OPTIONS);
    }
    Ok(settings)
}

/// Why a connection did not open.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Postgres(#[from] postgres::Error),
    /// The client library panics, rather than failing, when it cannot build the
    /// runtime a connection runs on: with no file descriptor left, say. A hostile
    /// client exhausting descriptors must cost a failed connection, not a thread.
    #[error("the PostgreSQL client could not start a connection (out of file descriptors?)")]
    ClientPanicked,
}

/// A new connection outside the pool (the listener, the upkeep leader, migrations).
/// The client library's panic is caught quietly ([`taskd_base::panics`]): printed with
/// a backtrace, each one read the binary's debug information into memory while
/// descriptors ran out (a server on PostgreSQL grew past 256 MiB in
/// tests/hardening.rs's descriptor exhaustion).
pub fn connect(settings: &postgres::Config) -> Result<Client, ConnectError> {
    taskd_base::panics::catch_quietly(|| settings.connect(NoTls))
        .map_err(|_| ConnectError::ClientPanicked)?
        .map_err(ConnectError::from)
}

/// A pooled connection and the epoch it was opened in.
pub struct Pooled {
    pub client: Client,
    /// The statements prepared on `client`, and whether it carried a large message
    /// (see [`super::statements`]).
    pub session: Session,
    epoch: u64,
}

/// Opens pooled connections, and drops those of an earlier epoch or closed ones.
pub struct Manager {
    pub settings: postgres::Config,
    pub epoch: Arc<AtomicU64>,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Pooled;
    type Error = ConnectError;

    fn connect(&self) -> Result<Pooled, ConnectError> {
        let epoch = self.epoch.load(Ordering::Acquire);
        Ok(Pooled {
            client: connect(&self.settings)?,
            session: Session::default(),
            epoch,
        })
    }

    /// Cheap: no round trip. A connection of the current epoch is taken as valid; a
    /// query on one that died since fails, is retried on a fresh one (see
    /// `Store::transaction`), and the pool drops it.
    fn is_valid(&self, conn: &mut Pooled) -> Result<(), ConnectError> {
        if conn.epoch == self.epoch.load(Ordering::Acquire) {
            return Ok(());
        }
        conn.client.simple_query("")?;
        conn.epoch = self.epoch.load(Ordering::Acquire);
        Ok(())
    }

    /// Also true of a connection that carried a large message: it is retired, and the
    /// pool opens a fresh one when it needs one (see
    /// [`super::statements::LARGE_MESSAGE_BYTES`] for why).
    fn has_broken(&self, conn: &mut Pooled) -> bool {
        conn.client.is_closed() || conn.session.carried_large()
    }
}

/// The bounded pool.
pub fn pool(settings: postgres::Config, size: u32, epoch: Arc<AtomicU64>) -> r2d2::Pool<Manager> {
    r2d2::Pool::builder()
        .max_size(size)
        .min_idle(Some(0))
        .connection_timeout(CHECKOUT_TIMEOUT)
        .error_handler(Box::new(QuietErrors))
        .build_unchecked(Manager { settings, epoch })
}

/// The pool's failures to connect, at debug level: while the database is down they
/// come several times a second, and the listener reports the outage once.
#[derive(Debug)]
struct QuietErrors;

impl r2d2::HandleError<ConnectError> for QuietErrors {
    fn handle_error(&self, error: ConnectError) {
        log::debug!("opening a pooled connection: {error}");
    }
}
