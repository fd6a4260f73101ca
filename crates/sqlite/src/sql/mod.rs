//! Every SQL statement of the task lifecycle, as small typed functions, one file per
//! caller. Changes run inside the writer; each task mutation appends an outbox row in
//! the same transaction; worker writes are fenced by the job's `lease_token`.

/// The `WHERE` condition of a task that is not terminal yet.
macro_rules! live {
    () => {
        "status IN ('working', 'input_required')"
    };
}

/// The columns [`task_row`] reads, in its order.
macro_rules! task_columns {
    () => {
        "id, tool, status, status_message, created_at, updated_at, ttl_ms, \
         poll_interval_ms, result, error, input_requests, version, trace_context"
    };
}

pub mod admin;
pub mod attempts;
pub mod client;
pub mod create;
pub mod flow;
pub mod history;
pub mod output;
pub mod schedules;
pub mod sessions;
pub mod turns;
pub mod upkeep;

use rusqlite::{params, Connection};

use taskd_engine::model::TaskRow;
use taskd_protocol::{TaskStatus, TraceContext};

/// A `status` column as a [`TaskStatus`] (the schema's CHECK admits no other value).
fn status_column(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<TaskStatus> {
    let name: String = row.get(index)?;
    TaskStatus::parse(&name).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            index,
            rusqlite::types::Type::Text,
            format!("unknown task status {name:?}").into(),
        )
    })
}

/// A `trace_context` column: what is not a stored context reads as none (the column is
/// only ever written from a checked one).
fn trace_column(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<Option<TraceContext>> {
    let stored: Option<String> = row.get(index)?;
    Ok(stored.as_deref().and_then(TraceContext::from_stored))
}

fn task_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<TaskRow> {
    task_row_at(row, 0)
}

/// A [`TaskRow`] from the [`task_columns`] that start at column `first`.
fn task_row_at(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<TaskRow> {
    Ok(TaskRow {
        id: row.get(first)?,
        tool: row.get(first + 1)?,
        status: status_column(row, first + 2)?,
        status_message: row.get(first + 3)?,
        created_at: row.get(first + 4)?,
        updated_at: row.get(first + 5)?,
        ttl_ms: row.get(first + 6)?,
        poll_interval_ms: row.get(first + 7)?,
        result: row.get(first + 8)?,
        error: row.get(first + 9)?,
        input_requests: row.get(first + 10)?,
        version: row.get(first + 11)?,
        trace: trace_column(row, first + 12)?,
        waiting: None,
    })
}

fn append_outbox(conn: &Connection, task_id: &str, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT INTO outbox (task_id, created_at) VALUES (?1, ?2)")?
        .execute(params![task_id, now])?;
    Ok(())
}

/// Moves a live task to a terminal status and drops its job. A completed task keeps
/// its last status message; a failed or cancelled one drops it (a stale "retrying"
/// would contradict the outcome). `OR FAIL`: see [`attempts`].
fn set_terminal(
    conn: &Connection,
    task_id: &str,
    status: TaskStatus,
    result: Option<&str>,
    error: Option<&str>,
    now: i64,
) -> rusqlite::Result<bool> {
    let changed = conn
        .prepare_cached(concat!(
            "UPDATE OR FAIL tasks SET status = ?2, result = ?3, error = ?4, \
             input_requests = NULL, \
             status_message = CASE WHEN ?2 = 'completed' THEN status_message END, \
             updated_at = ?5, version = version + 1 WHERE id = ?1 AND ",
            live!()
        ))?
        .execute(params![task_id, status.as_str(), result, error, now])?;
    conn.prepare_cached("DELETE FROM jobs WHERE task_id = ?1")?
        .execute([task_id])?;
    if changed > 0 {
        append_outbox(conn, task_id, now)?;
    }
    Ok(changed > 0)
}
