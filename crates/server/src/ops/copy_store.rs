//! `mcp-taskd copy-store`: moves a SQLite task store into PostgreSQL (issue 18), so that
//! a one-box installation can scale out without losing its tasks.
//!
//! The SQLite store is copied while stopped (the command holds its data dir's lock for
//! the whole copy, so no server starts on it meanwhile); the PostgreSQL database must
//! hold no task yet. Everything is copied in one PostgreSQL transaction: a failed copy
//! leaves the database as empty as it found it. The two schemas name the same columns
//! (schema.sql, schema-postgres.sql); the copy matches them by name and converts the
//! few types SQLite lacks (booleans stored as integers), and refuses a SQLite column
//! the PostgreSQL table does not have rather than drop its data.
//!
//! Not copied: the outbox (it only feeds the listen streams open at the time) and the
//! counts behind `/metrics` (PostgreSQL's own triggers count the copied rows).

use std::collections::HashSet;
use std::fs::File;
use std::path::Path;

use postgres::types::ToSql;
use rusqlite::types::ValueRef;

use super::cli::Location;
use crate::config::Config;
use taskd_engine::config::Backend;
use taskd_postgres as pg;

/// The tables that hold tasks, parents before children (foreign keys), each schedule's
/// mark (where its scheduler goes on), and the history summaries of tasks past their TTL.
const TABLES: [&str; 7] = [
    "tasks",
    "input_keys",
    "jobs",
    "attempts",
    "task_output",
    "schedule_marks",
    "task_history",
];

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Source(String),
    #[error("{0}")]
    Target(#[from] pg::OpenError),
    #[error(
        "the PostgreSQL database already holds {0} task(s); copy-store fills an empty one \
         (a fresh database, or one whose tasks you mean to drop first)"
    )]
    TargetNotEmpty(i64),
    #[error("{table}: column {column} is in the SQLite store but not in PostgreSQL")]
    MissingColumn { table: &'static str, column: String },
    #[error("{table}.{column}: {detail}")]
    Value {
        table: &'static str,
        column: String,
        detail: String,
    },
    #[error("SQLite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("PostgreSQL: {0}")]
    Postgres(#[from] postgres::Error),
}

/// `mcp-taskd copy-store`: the SQLite store of `from` (its configuration and data dir,
/// as `serve` takes them) into the PostgreSQL database of `to_config`. Returns what was
/// copied, for the operator.
pub fn run(from: &Location, to_config: &Path) -> Result<String, CopyError> {
    let mut source_config =
        Config::load(from.config.as_deref()).map_err(|e| CopyError::Config(e.to_string()))?;
    if let Some(data_dir) = &from.data_dir {
        source_config.server.data_dir = data_dir.clone();
    }
    if source_config.store.backend != Backend::Sqlite {
        return Err(CopyError::Config(
            "--config names a PostgreSQL store: copy-store copies from SQLite".into(),
        ));
    }
    let target_config = Config::load(Some(to_config))
        .map_err(|e| CopyError::Config(format!("--to-config: {e}")))?;
    if target_config.store.backend != Backend::Postgres {
        return Err(CopyError::Config(format!(
            "{} does not set store.backend = \"postgres\"",
            to_config.display()
        )));
    }
    let data_dir = &source_config.server.data_dir;
    let (_lock, source) = open_source(data_dir, &source_config)?;
    let mut target = pg::connect_migrated(&target_config.store)?;
    let copied = copy_tables(&source, &mut target, &mut |_, _| {})?;
    let tasks = copied.first().map_or(0, |table| table.rows);
    let tables: Vec<String> = copied
        .iter()
        .map(|table| format!("{} {}", table.rows, table.table))
        .collect();
    Ok(format!(
        "copied {tasks} tasks from {} into PostgreSQL ({})",
        data_dir.join("tasks.db").display(),
        tables.join(", ")
    ))
}

/// The SQLite store of `data_dir`, migrated to this build's schema, and its data dir's
/// lock held (so that no server starts on it during the copy).
fn open_source(
    data_dir: &Path,
    config: &Config,
) -> Result<(File, rusqlite::Connection), CopyError> {
    let database = data_dir.join("tasks.db");
    if !database.is_file() {
        return Err(CopyError::Source(format!(
            "no task store in {}",
            data_dir.display()
        )));
    }
    // Opening it the way a server does migrates it (a store of an older build) and
    // refuses one a server holds; then it is closed again, for a plain connection.
    let taskd_sqlite::Opened { store, writer } = taskd_sqlite::Store::open(data_dir, &config.store)
        .map_err(|e| match e {
            taskd_sqlite::OpenError::InUse { .. } => CopyError::Source(format!(
                "a server is running on {}: stop it first (the copy is of a stopped store)",
                data_dir.display()
            )),
            other => CopyError::Source(other.to_string()),
        })?;
    drop(store);
    let _ = writer.join();
    let lock_path = data_dir.join("lock");
    let lock = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(|e| CopyError::Source(format!("{}: {e}", lock_path.display())))?;
    lock.try_lock().map_err(|_| {
        CopyError::Source(format!(
            "a server started on {} meanwhile: stop it, then copy again",
            data_dir.display()
        ))
    })?;
    let connection = rusqlite::Connection::open(&database)?;
    Ok((lock, connection))
}

/// Rows copied into one table.
#[derive(Debug, PartialEq, Eq)]
pub struct Copied {
    pub table: &'static str,
    pub rows: u64,
}

/// Copies every task of `source` (a migrated SQLite store nobody writes) into `target`
/// (a migrated PostgreSQL store without tasks), in one transaction. `progress` hears
/// each table's name and its rows copied so far, every 1,000 rows and at its end.
pub fn copy_tables(
    source: &rusqlite::Connection,
    target: &mut postgres::Client,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<Vec<Copied>, CopyError> {
    let mut tx = target.transaction()?;
    let existing: i64 = tx.query_one("SELECT count(*) FROM tasks", &[])?.get(0);
    if existing > 0 {
        return Err(CopyError::TargetNotEmpty(existing));
    }
    let mut copied = Vec::new();
    for table in TABLES {
        let columns = shared_columns(source, &mut tx, table)?;
        let names: Vec<&str> = columns.iter().map(|(name, _)| name.as_str()).collect();
        let placeholders: Vec<String> = (1..=names.len()).map(|n| format!("${n}")).collect();
        let insert = tx.prepare(&format!(
            "INSERT INTO {table} ({}) VALUES ({})",
            names.join(", "),
            placeholders.join(", ")
        ))?;
        let mut select = source.prepare(&format!("SELECT {} FROM {table}", names.join(", ")))?;
        let mut rows = select.query([])?;
        let mut count = 0u64;
        while let Some(row) = rows.next()? {
            let mut values: Vec<Box<dyn ToSql + Sync>> = Vec::with_capacity(columns.len());
            for (index, (column, pg_type)) in columns.iter().enumerate() {
                let value =
                    convert(row.get_ref(index)?, pg_type).map_err(|detail| CopyError::Value {
                        table,
                        column: column.clone(),
                        detail,
                    })?;
                values.push(value);
            }
            let params: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v.as_ref()).collect();
            tx.execute(&insert, &params)?;
            count += 1;
            if count.is_multiple_of(1000) {
                progress(table, count);
            }
        }
        progress(table, count);
        copied.push(Copied { table, rows: count });
    }
    tx.commit()?;
    Ok(copied)
}

/// The columns of `table` with their PostgreSQL types, in PostgreSQL's order: every
/// column of the SQLite table must be among them. PostgreSQL columns SQLite lacks take
/// their defaults.
fn shared_columns(
    source: &rusqlite::Connection,
    target: &mut postgres::Transaction<'_>,
    table: &'static str,
) -> Result<Vec<(String, String)>, CopyError> {
    let sqlite: HashSet<String> = source
        .prepare("SELECT name FROM pragma_table_info(?1)")?
        .query_map([table], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    if sqlite.is_empty() {
        return Err(CopyError::Source(format!(
            "the SQLite store has no {table} table: not a task store"
        )));
    }
    let postgres: Vec<(String, String)> = target
        .query(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 \
             ORDER BY ordinal_position",
            &[&table],
        )?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let known: HashSet<&str> = postgres.iter().map(|(name, _)| name.as_str()).collect();
    if let Some(column) = sqlite.iter().find(|name| !known.contains(name.as_str())) {
        return Err(CopyError::MissingColumn {
            table,
            column: column.clone(),
        });
    }
    Ok(postgres
        .into_iter()
        .filter(|(name, _)| sqlite.contains(name))
        .collect())
}

/// One SQLite value as the PostgreSQL type of its column. Task contents are never part
/// of an error (they may be sensitive): only the types are named.
fn convert(value: ValueRef<'_>, pg_type: &str) -> Result<Box<dyn ToSql + Sync>, String> {
    let text = |bytes: &[u8]| {
        String::from_utf8(bytes.to_vec()).map_err(|_| "text that is not UTF-8".to_string())
    };
    Ok(match (pg_type, value) {
        ("bigint", ValueRef::Integer(n)) => Box::new(n),
        ("bigint", ValueRef::Null) => Box::new(None::<i64>),
        ("integer", ValueRef::Integer(n)) => Box::new(
            i32::try_from(n).map_err(|_| "an integer beyond PostgreSQL's integer".to_string())?,
        ),
        ("integer", ValueRef::Null) => Box::new(None::<i32>),
        ("boolean", ValueRef::Integer(n)) => Box::new(n != 0),
        ("boolean", ValueRef::Null) => Box::new(None::<bool>),
        ("bytea", ValueRef::Blob(bytes) | ValueRef::Text(bytes)) => Box::new(bytes.to_vec()),
        ("bytea", ValueRef::Null) => Box::new(None::<Vec<u8>>),
        ("text", ValueRef::Text(bytes)) => Box::new(text(bytes)?),
        ("text", ValueRef::Null) => Box::new(None::<String>),
        ("double precision", ValueRef::Real(x)) => Box::new(x),
        ("double precision", ValueRef::Integer(n)) => Box::new(n as f64),
        ("double precision", ValueRef::Null) => Box::new(None::<f64>),
        (pg_type, value) => {
            return Err(format!(
                "a SQLite {:?} cannot go into a PostgreSQL {pg_type}",
                value.data_type()
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The conversions the two schemas need, and a refusal that names types only.
    #[test]
    fn values_convert_by_the_postgres_type_and_refusals_name_no_content() {
        let converts = [
            (ValueRef::Integer(5), "bigint"),
            (ValueRef::Null, "bigint"),
            (ValueRef::Integer(1), "boolean"),
            (ValueRef::Blob(b"\x00origin"), "bytea"),
            (ValueRef::Text(b"{}"), "text"),
            (ValueRef::Null, "text"),
        ];
        for (value, pg_type) in converts {
            assert!(convert(value, pg_type).is_ok(), "{pg_type}");
        }
        let refused =
            convert(ValueRef::Text(b"secret argument"), "bigint").expect_err("text is no bigint");
        assert!(!refused.contains("secret"), "{refused}");
        assert!(convert(ValueRef::Integer(1 << 40), "integer").is_err());
        assert!(convert(ValueRef::Text(b"\xff"), "text").is_err());
    }
}
