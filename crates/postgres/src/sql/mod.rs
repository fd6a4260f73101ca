//! Every SQL statement of the PostgreSQL store, as small typed functions, one file per
//! caller (as `sqlite::sql`). Each change runs in one transaction that ends with the
//! task's outbox row (`taskd_append_outbox`, schema-postgres.sql); worker writes are
//! fenced by the job's `lease_token`; every mutation locks the rows it reads first, the
//! task row before the job row, so two nodes changing one task take turns without
//! deadlocking. Task rows are locked `FOR NO KEY UPDATE`: the `FOR KEY SHARE` lock that
//! a claim's `attempts` insert takes on its task (the foreign key) does not wait for
//! it, so a claim holding its job never waits on a `tasks/cancel` that waits on the job.
//! Times that are compared come from the database clock (`taskd_now_ms()`).

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
pub mod upkeep;

use postgres::{GenericClient, Row};

use super::statements::Db;

use super::Failure;
use taskd_engine::model::TaskRow;
use taskd_protocol::{TaskStatus, TraceContext};

/// A `status` column as a [`TaskStatus`] (the schema's CHECK admits no other value).
fn status_column(row: &Row, index: usize) -> Result<TaskStatus, Failure> {
    let name: String = row.try_get(index)?;
    TaskStatus::parse(&name).ok_or_else(|| Failure::Data(format!("unknown task status {name:?}")))
}

/// A `trace_context` column: what is not a stored context reads as none (the column is
/// only ever written from a checked one).
fn trace_column(row: &Row, index: usize) -> Result<Option<TraceContext>, Failure> {
    let stored: Option<String> = row.try_get(index)?;
    Ok(stored.as_deref().and_then(TraceContext::from_stored))
}

fn task_row(row: &Row) -> Result<TaskRow, Failure> {
    task_row_at(row, 0)
}

/// A [`TaskRow`] from the [`task_columns`] that start at column `first`.
fn task_row_at(row: &Row, first: usize) -> Result<TaskRow, Failure> {
    Ok(TaskRow {
        id: row.try_get(first)?,
        tool: row.try_get(first + 1)?,
        status: status_column(row, first + 2)?,
        status_message: row.try_get(first + 3)?,
        created_at: row.try_get(first + 4)?,
        updated_at: row.try_get(first + 5)?,
        ttl_ms: row.try_get(first + 6)?,
        poll_interval_ms: row.try_get(first + 7)?,
        result: row.try_get(first + 8)?,
        error: row.try_get(first + 9)?,
        input_requests: row.try_get(first + 10)?,
        version: row.try_get(first + 11)?,
        trace: trace_column(row, first + 12)?,
        waiting: None,
    })
}

/// Appends the task's outbox row, in the change's transaction; once it commits, the
/// store wakes every node's relay (`NOTIFY`, schema-postgres.sql says why after).
fn append_outbox(tx: &mut Db<'_, impl GenericClient>, task_id: &str) -> Result<(), Failure> {
    tx.execute("SELECT taskd_append_outbox($1)", &[&task_id])?;
    Ok(())
}

/// A live task's move to a terminal status, for [`set_terminals`].
pub(crate) struct Ending<'a> {
    pub task_id: &'a str,
    pub status: TaskStatus,
    pub result: Option<&'a str>,
    pub error: Option<&'a str>,
    /// The attempt that ends with it, if one is running (its worker ends it so).
    pub attempt: Option<i64>,
}

/// Moves live tasks to their terminal statuses, drops their jobs, ends their running
/// attempts with the status as outcome, and appends an outbox row for each task that
/// changed: one statement, one round trip, however many tasks. A completed task keeps
/// its last status message; a failed or cancelled one drops it. Every caller has locked
/// the task rows, then the job rows, already: the statement takes no lock out of that
/// order. Returns how many tasks changed.
fn set_terminals(
    tx: &mut Db<'_, impl GenericClient>,
    endings: &[Ending<'_>],
    now: i64,
) -> Result<i64, Failure> {
    let ids: Vec<&str> = endings.iter().map(|e| e.task_id).collect();
    let statuses: Vec<&str> = endings.iter().map(|e| e.status.as_str()).collect();
    let results: Vec<Option<&str>> = endings.iter().map(|e| e.result).collect();
    let errors: Vec<Option<&str>> = endings.iter().map(|e| e.error).collect();
    let attempts: Vec<Option<i64>> = endings.iter().map(|e| e.attempt).collect();
    let changed: i64 = tx
        .query_one(
            concat!(
                "WITH ending AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], \
                 $4::text[], $5::bigint[]) AS e(task_id, new_status, new_result, new_error, \
                 attempt)), \
                 attempt_ended AS (UPDATE attempts SET ended_at = taskd_clock_ms(), \
                 outcome = ending.new_status FROM ending \
                 WHERE attempts.task_id = ending.task_id AND attempts.attempt = ending.attempt), \
                 ended AS (UPDATE tasks SET status = ending.new_status, \
                 result = ending.new_result, error = ending.new_error, input_requests = NULL, \
                 status_message = CASE WHEN ending.new_status = 'completed' \
                 THEN tasks.status_message END, \
                 updated_at = $6, version = version + 1 FROM ending \
                 WHERE tasks.id = ending.task_id AND ",
                live!(),
                " RETURNING tasks.id), \
                 dropped AS (DELETE FROM jobs USING ending WHERE jobs.task_id = ending.task_id), \
                 appended AS (INSERT INTO outbox (task_id, created_at) \
                   SELECT id, taskd_now_ms() FROM ended) \
                 SELECT COUNT(*) FROM ended"
            ),
            &[&ids, &statuses, &results, &errors, &attempts, &now],
        )?
        .try_get(0)?;
    Ok(changed)
}

/// [`set_terminals`] for one task: whether it changed.
fn set_terminal(
    tx: &mut Db<'_, impl GenericClient>,
    ending: Ending<'_>,
    now: i64,
) -> Result<bool, Failure> {
    Ok(set_terminals(tx, &[ending], now)? > 0)
}

/// A keyset page of task summaries, newest id first: `SELECT columns FROM table`, at
/// most `limit` rows, where `fixed` (if any) and each condition whose value is given
/// (`("status =", Some("failed"))` becomes `status = $n`) hold. Returns the statement
/// and its parameters, in order.
pub(crate) fn keyset_page<'v>(
    columns: &str,
    table: &str,
    fixed: Option<&str>,
    conditions: &[(&str, Option<&'v str>)],
    limit: usize,
) -> (String, Vec<&'v str>) {
    let mut clauses: Vec<String> = fixed.map(str::to_owned).into_iter().collect();
    let mut values: Vec<&'v str> = Vec::new();
    for (clause, value) in conditions {
        if let Some(value) = value {
            values.push(value);
            clauses.push(format!("{clause} ${}", values.len()));
        }
    }
    let mut sql = format!("SELECT {columns} FROM {table}");
    if !clauses.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&clauses.join(" AND "));
    }
    sql.push_str(&format!(
        " ORDER BY id DESC LIMIT {}",
        limit.min(i64::MAX as usize)
    ));
    (sql, values)
}
