//! What clients do to their tasks: find and size (authorized in the `WHERE`),
//! `tasks/update` and `tasks/cancel`.

use rusqlite::{params, Connection, OptionalExtension, ToSql};
use serde_json::{Map, Value};

use super::turns::Turns;
use super::{append_outbox, set_terminal, task_row};
use taskd_engine::flow::{Bucket, Waiting};
use taskd_engine::ids;
use taskd_engine::model::InputRound;
use taskd_engine::model::{CancelEffect, TaskRow, UpdateEffect};
use taskd_protocol::Identity;
use taskd_protocol::TaskStatus;

/// The `WHERE` condition that finds a task only for its own identity and only while it
/// has not expired; its parameters are [`authorized_params`].
///
/// The row is found by `rowid`: the one a row-keyed id names (`?7`), else the one the
/// `id` index gives (the subquery runs only when `?7` is NULL). Either way the whole id
/// must match, so a row key with a wrong random part is as unknown as any other id. One
/// b-tree walk instead of two for every id this store issues (`taskd_engine::ids`).
macro_rules! authorized {
    () => {
        "rowid = coalesce(?7, (SELECT rowid FROM tasks WHERE id = ?1)) AND id = ?1 \
         AND endpoint = ?2 AND tenant = ?3 AND principal = ?4 AND issuer = ?6 \
         AND (expires_at IS NULL OR expires_at > ?5)"
    };
}

/// The parameters of [`authorized!`]; `row_key` is `ids::row_key(task_id)`.
fn authorized_params<'a>(
    identity: &'a Identity,
    task_id: &'a &'a str,
    row_key: &'a Option<i64>,
    now: &'a i64,
) -> [&'a dyn ToSql; 7] {
    [
        task_id,
        &identity.endpoint,
        &identity.tenant,
        &identity.principal,
        now,
        &identity.issuer,
        row_key,
    ]
}

/// The task, if it exists, has not expired, and is bound to `identity`. Unknown,
/// expired and foreign tasks are indistinguishable here by construction.
pub fn find_authorized(
    conn: &Connection,
    identity: &Identity,
    task_id: &str,
    now: i64,
) -> rusqlite::Result<Option<TaskRow>> {
    conn.prepare_cached(concat!(
        "SELECT ",
        task_columns!(),
        " FROM tasks WHERE ",
        authorized!()
    ))?
    .query_row(
        authorized_params(identity, &task_id, &ids::row_key(task_id), &now),
        task_row,
    )
    .optional()?
    .map(|mut task| {
        if task.status == TaskStatus::Working {
            task.waiting = waiting(conn, &task.id, now)?.map(Box::new);
        }
        Ok(task)
    })
    .transpose()
}

/// Why a working task's job waits in the queue, if it does (see
/// `taskd_engine::flow::Waiting`): one read of its job, its tool's pause and its
/// buckets.
fn waiting(conn: &Connection, task_id: &str, now: i64) -> rusqlite::Result<Option<Waiting>> {
    let bucket = |row: &rusqlite::Row<'_>, first: usize| -> rusqlite::Result<Option<Bucket>> {
        let tokens: Option<f64> = row.get(first)?;
        Ok(match tokens {
            None => None,
            Some(tokens) => Some(Bucket {
                tokens,
                updated_at: row.get(first + 1)?,
                per_ms: row.get(first + 2)?,
                burst: row.get(first + 3)?,
            }),
        })
    };
    conn.prepare_cached(
        "SELECT tool_pauses.reason, jobs.held, jobs.gate_label, jobs.gate_limit, \
           tb.tokens, tb.updated_at, tb.per_ms, tb.burst, \
           kb.tokens, kb.updated_at, kb.per_ms, kb.burst \
         FROM jobs LEFT JOIN tool_pauses ON tool_pauses.tool = jobs.tool \
         LEFT JOIN rate_buckets AS tb ON tb.bucket = jobs.tool \
         LEFT JOIN rate_buckets AS kb ON kb.bucket = jobs.gate \
         WHERE jobs.task_id = ?1 AND jobs.state = 'queued'",
    )?
    .query_row([task_id], |row| {
        let held: bool = row.get(1)?;
        let gate = if held {
            Some((
                row.get::<_, Option<String>>(2)?.unwrap_or_default(),
                row.get::<_, Option<i64>>(3)?.unwrap_or(1),
            ))
        } else {
            None
        };
        let bucket = bucket(row, 8)?.or(bucket(row, 4)?);
        Ok(Waiting::of(row.get(0)?, gate, bucket, now))
    })
    .optional()
    .map(Option::flatten)
}

/// Up to `limit` unexpired tasks bound to `identity` after the task id `after`, in id
/// order: a walk of the primary key.
pub fn list_authorized(
    conn: &Connection,
    identity: &Identity,
    after: &str,
    limit: usize,
    now: i64,
) -> rusqlite::Result<Vec<TaskRow>> {
    let mut statement = conn.prepare_cached(concat!(
        "SELECT ",
        task_columns!(),
        " FROM tasks WHERE id > ?1 AND endpoint = ?2 AND tenant = ?3 \
             AND principal = ?4 AND issuer = ?7 AND (expires_at IS NULL OR expires_at > ?5) \
             ORDER BY id LIMIT ?6"
    ))?;
    let rows = statement.query_map(
        params![
            after,
            identity.endpoint,
            identity.tenant,
            identity.principal,
            now,
            i64::try_from(limit).unwrap_or(i64::MAX),
            identity.issuer,
        ],
        task_row,
    )?;
    rows.collect()
}

/// Bytes of an authorized task's stored payloads (result, error, input requests),
/// read from the record headers only (`octet_length` does not load the values).
pub fn payload_bytes_authorized(
    conn: &Connection,
    identity: &Identity,
    task_id: &str,
    now: i64,
) -> rusqlite::Result<Option<usize>> {
    Ok(conn
        .prepare_cached(concat!(
            "SELECT coalesce(octet_length(result), 0) + coalesce(octet_length(error), 0) \
             + coalesce(octet_length(input_requests), 0) FROM tasks WHERE ",
            authorized!()
        ))?
        .query_row(
            authorized_params(identity, &task_id, &ids::row_key(task_id), &now),
            |row| row.get::<_, i64>(0),
        )
        .optional()?
        .map(|bytes| usize::try_from(bytes).unwrap_or(usize::MAX)))
}

pub fn cancel(
    conn: &Connection,
    identity: &Identity,
    task_id: &str,
    now: i64,
) -> rusqlite::Result<CancelEffect> {
    let Some(task) = find_authorized(conn, identity, task_id, now)? else {
        return Ok(CancelEffect::NotFound);
    };
    cancel_found(conn, task_id, task.status, now)
}

/// Cancels a task already found (and authorized, where that applies) in `status`:
/// nothing for a terminal one, intent for a running attempt, at once otherwise.
pub(super) fn cancel_found(
    conn: &Connection,
    task_id: &str,
    status: TaskStatus,
    now: i64,
) -> rusqlite::Result<CancelEffect> {
    if status.is_terminal() {
        return Ok(CancelEffect::Done);
    }
    let job_state: Option<String> = conn
        .prepare_cached("SELECT state FROM jobs WHERE task_id = ?1")?
        .query_row([task_id], |row| row.get(0))
        .optional()?;
    if job_state.as_deref() == Some("running") {
        conn.prepare_cached(
            "UPDATE tasks SET cancel_requested = 1, updated_at = ?2 WHERE id = ?1",
        )?
        .execute(params![task_id, now])?;
        return Ok(CancelEffect::SignalRunning);
    }
    set_terminal(conn, task_id, TaskStatus::Cancelled, None, None, now)?;
    Ok(CancelEffect::Done)
}

/// Puts a waiting job back in the queue, where it takes its owner's next turn
/// (`tasks::model::TURN`).
fn requeue(conn: &Connection, task_id: &str, now: i64) -> rusqlite::Result<()> {
    let waiting: Option<(String, i64, i64)> = conn
        .prepare_cached(
            "SELECT owner, priority, stride FROM jobs WHERE task_id = ?1 AND state = 'waiting'",
        )?
        .query_row([task_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?;
    let Some((owner, priority, stride)) = waiting else {
        return Ok(());
    };
    let turn = Turns::default().take(conn, &owner, priority, stride)?;
    conn.prepare_cached(
        "UPDATE jobs SET state = 'queued', run_after = ?2, turn = ?3 WHERE task_id = ?1",
    )?
    .execute(params![task_id, now, turn])?;
    Ok(())
}

/// Accepts the responses that answer outstanding requests of the right kind; ignores
/// the rest (unknown, answered, superseded or mismatched keys).
pub fn update(
    conn: &Connection,
    identity: &Identity,
    task_id: &str,
    responses: &Map<String, Value>,
    now: i64,
) -> rusqlite::Result<UpdateEffect> {
    let Some(task) = find_authorized(conn, identity, task_id, now)? else {
        return Ok(UpdateEffect::NotFound);
    };
    if task.status != TaskStatus::InputRequired {
        return Ok(UpdateEffect::Accepted { requeued: false });
    }
    let Some(round) = InputRound::answer(task.input_requests.as_deref(), responses) else {
        return Ok(UpdateEffect::Accepted { requeued: false });
    };
    let stored: String = conn
        .prepare_cached("SELECT input_responses FROM tasks WHERE id = ?1")?
        .query_row([task_id], |row| row.get(0))?;
    let (status, requests) = round.next();
    let round_done = round.done();
    conn.prepare_cached(
        "UPDATE tasks SET status = ?2, input_requests = ?3, input_responses = ?4, \
         updated_at = ?5, version = version + 1 WHERE id = ?1 AND status = 'input_required'",
    )?
    .execute(params![
        task_id,
        status.as_str(),
        requests,
        round.responses_after(&stored),
        now
    ])?;
    if round_done {
        requeue(conn, task_id, now)?;
    }
    append_outbox(conn, task_id, now)?;
    Ok(UpdateEffect::Accepted {
        requeued: round_done,
    })
}

#[cfg(test)]
mod tests {
    use crate::tests::fresh_store;

    /// What the row key is for: SQLite finds the row by `rowid`, and reads the `id`
    /// index only in the subquery (which runs only for ids that name no row).
    #[test]
    fn an_authorized_lookup_walks_the_table_by_rowid() {
        let (_dir, store) = fresh_store();
        let conn = store.read().unwrap();
        let plan: Vec<String> = conn
            .prepare(concat!(
                "EXPLAIN QUERY PLAN SELECT status FROM tasks WHERE ",
                authorized!()
            ))
            .unwrap()
            .query_map([None::<i64>; 7], |row| row.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            plan,
            [
                "SEARCH tasks USING INTEGER PRIMARY KEY (rowid=?)",
                "SCALAR SUBQUERY 1",
                "SEARCH tasks USING COVERING INDEX sqlite_autoindex_tasks_1 (id=?)",
            ],
        );
    }
}
