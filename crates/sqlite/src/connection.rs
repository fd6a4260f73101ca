//! How every connection opens the database: the URI (through `unix-excl` unless
//! `store.locking = "shared"`), and the pragmas, each read back so that start-up fails
//! if SQLite did not take one.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::OpenError;
use taskd_engine::config::{Locking, StoreConfig, Synchronous};

/// Prepared statements kept per connection.
const STATEMENT_CACHE: usize = 64;
/// The SQLite VFS of every connection under `store.locking = "exclusive"` (see "One
/// server per data dir" in [`super`]); `shared` uses SQLite's default VFS.
pub(super) const EXCLUSIVE_VFS: &str = "unix-excl";

/// Turns SQLite's allocation statistics off, once, before the library initializes.
///
/// Why: with them on (SQLite's default), every allocation and free SQLite makes takes a
/// process-wide mutex to count it, and the writer allocates for every page a savepoint
/// journals. Draining a queue of no-op tasks, `pthread_mutex_lock` and `_unlock` were
/// ~8% of the writer thread's samples. Nothing here reads the statistics.
///
/// Once SQLite has initialized (a connection was opened earlier in this process, as in
/// tests that open many stores), `sqlite3_config` refuses with `SQLITE_MISUSE` and
/// changes nothing: the statistics then stay on, which costs speed only.
pub(super) fn configure_library() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: SQLITE_CONFIG_MEMSTATUS takes one int. sqlite3_config only reads and
        // writes SQLite's global configuration, and returns SQLITE_MISUSE without
        // touching it once the library is initialized.
        let code = unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS,
                0 as std::ffi::c_int,
            )
        };
        if code != rusqlite::ffi::SQLITE_OK {
            log::debug!("SQLite's allocation statistics stay on (sqlite3_config: {code})");
        }
    });
}

/// Opens a read-write connection to the database at `uri` (from [`database_uri`]).
pub(super) fn open_connection(uri: &str) -> rusqlite::Result<Connection> {
    Connection::open_with_flags(uri, OpenFlags::default() | OpenFlags::SQLITE_OPEN_URI)
}

/// The SQLite URI that opens `path`, through [`EXCLUSIVE_VFS`] under exclusive locking.
/// (A URI, because the connection pool takes a filename only.) The path is made
/// absolute, and the characters a URI gives meaning to are escaped.
pub(super) fn database_uri(path: &Path, locking: Locking) -> Result<String, OpenError> {
    let absolute = std::path::absolute(path).map_err(|e| OpenError::File {
        path: path.to_owned(),
        source: Box::new(e),
    })?;
    let text = absolute.to_str().ok_or_else(|| {
        OpenError::Setup(format!(
            "{}: the data dir path is not UTF-8",
            path.display()
        ))
    })?;
    let mut uri = String::from("file://");
    for c in text.chars() {
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            c => uri.push(c),
        }
    }
    if locking == Locking::Exclusive {
        uri.push_str("?vfs=");
        uri.push_str(EXCLUSIVE_VFS);
    }
    Ok(uri)
}

/// Sets one pragma and checks that SQLite took it (a misspelt or unsupported one is
/// silently ignored).
pub(super) fn set_verified(
    conn: &Connection,
    pragma: &str,
    value: &str,
    reads: i64,
) -> Result<(), OpenError> {
    let got: i64 = conn
        .pragma_update(None, pragma, value)
        .and_then(|()| conn.query_row(&format!("PRAGMA {pragma}"), [], |row| row.get(0)))
        .map_err(|e| OpenError::Setup(format!("setting PRAGMA {pragma}: {e}")))?;
    if got == reads {
        Ok(())
    } else {
        Err(OpenError::Setup(format!(
            "SQLite did not take PRAGMA {pragma} = {value} (it reads {got}); refusing to start"
        )))
    }
}

/// Keeps the writer's temporary storage in memory: the journal behind each write's
/// savepoint. Past 64 KiB SQLite spills it to a temporary file, and every later savepoint
/// of the transaction then writes there too: with task creations grouped (see
/// [`super::writer`]), a tenth of the writer's time went to those writes. It holds at most the
/// pages one batch changes. Only the writer: on a pool connection the same setting
/// would hold a query's sorter in memory too (a `GROUP BY` over every task for
/// `/metrics` took 130 MB).
pub(super) fn keep_temp_in_memory(conn: &Connection) -> Result<(), OpenError> {
    set_verified(conn, "temp_store", "MEMORY", 2)
}

/// Makes a pool connection refuse every write.
pub(super) fn make_query_only(conn: &Connection) -> Result<(), OpenError> {
    set_verified(conn, "query_only", "ON", 1)
}

/// Applies the pragmas every connection needs and checks SQLite took them.
pub(super) fn configure(conn: &Connection, config: &StoreConfig) -> Result<(), OpenError> {
    let sync = match config.synchronous {
        Synchronous::Full => "FULL",
        Synchronous::Normal => "NORMAL",
    };
    // cache_size is in KiB when negative.
    let cache_kib = config.cache_bytes / 1024;
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = {sync}; PRAGMA foreign_keys = ON; \
         PRAGMA busy_timeout = {}; PRAGMA journal_size_limit = 67108864; \
         PRAGMA cache_size = -{cache_kib};",
        config.busy_timeout_ms
    ))
    .map_err(|e| OpenError::Setup(format!("setting pragmas: {e}")))?;
    // Room for every statement of crates/sqlite/src/sql/ plus the writer's transaction
    // control, so the hot ones are never evicted and parsed again (rusqlite keeps 16).
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    let read = |pragma: &str| -> Result<String, OpenError> {
        conn.query_row(&format!("PRAGMA {pragma}"), [], |row| {
            row.get::<_, rusqlite::types::Value>(0)
        })
        .map(|value| match value {
            rusqlite::types::Value::Integer(i) => i.to_string(),
            rusqlite::types::Value::Text(t) => t.to_lowercase(),
            other => format!("{other:?}"),
        })
        .map_err(|e| OpenError::Setup(format!("reading PRAGMA {pragma}: {e}")))
    };
    let expected = [
        ("journal_mode", "wal".to_owned()),
        ("synchronous", config.synchronous.pragma_value().to_string()),
        ("foreign_keys", "1".to_owned()),
        ("busy_timeout", config.busy_timeout_ms.to_string()),
        ("cache_size", format!("-{cache_kib}")),
    ];
    for (pragma, want) in expected {
        let got = read(pragma)?;
        if got != want {
            return Err(OpenError::Setup(format!(
                "SQLite did not take PRAGMA {pragma} = {want} (it reads {got}); refusing to start"
            )));
        }
    }
    Ok(())
}
