//! What clients do to their tasks: find and size (authorized in the `WHERE`, so unknown,
//! expired and foreign tasks look the same from every node), `tasks/update` and
//! `tasks/cancel` (each locks the task row first: two nodes take turns).

use postgres::GenericClient;

use super::super::statements::{Db, Tx};
use serde_json::{Map, Value};

use super::flow::{waiting_at, waiting_columns, waiting_joins};
use super::{append_outbox, set_terminal, task_row, Ending, Failure};
use taskd_base::clock::now_ms;
use taskd_engine::model::InputRound;
use taskd_engine::model::{CancelEffect, TaskRow, UpdateEffect};
use taskd_protocol::Identity;
use taskd_protocol::TaskStatus;

/// The `WHERE` condition that finds a task only for its own identity and only while it
/// has not expired (by the database clock); parameters `$1`-`$5`: id and identity.
macro_rules! authorized {
    () => {
        "id = $1 AND endpoint = $2 AND tenant = $3 AND principal = $4 AND issuer = $5 \
         AND (expires_at IS NULL OR expires_at > taskd_now_ms())"
    };
}

/// The task, if it exists, has not expired, and is bound to `identity`.
pub fn find_authorized(
    conn: &mut Db<'_, impl GenericClient>,
    identity: &Identity,
    task_id: &str,
) -> Result<Option<TaskRow>, Failure> {
    let row = conn.query_opt(
        concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE ",
            authorized!()
        ),
        &[
            &task_id,
            &identity.endpoint,
            &identity.tenant,
            &identity.principal,
            &identity.issuer,
        ],
    )?;
    let Some(mut task) = row.as_ref().map(task_row).transpose()? else {
        return Ok(None);
    };
    if task.status == TaskStatus::Working {
        task.waiting = super::flow::waiting(conn, &task.id)?.map(Box::new);
    }
    Ok(Some(task))
}

/// [`find_authorized`], locking the row until the transaction ends.
fn lock_authorized(
    tx: &mut Tx<'_, '_>,
    identity: &Identity,
    task_id: &str,
) -> Result<Option<TaskRow>, Failure> {
    let row = tx.query_opt(
        concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE ",
            authorized!(),
            " FOR NO KEY UPDATE"
        ),
        &[
            &task_id,
            &identity.endpoint,
            &identity.tenant,
            &identity.principal,
            &identity.issuer,
        ],
    )?;
    row.as_ref().map(task_row).transpose()
}

/// Up to `limit` unexpired tasks bound to `identity` after the task id `after`, in id
/// order.
pub fn list_authorized(
    conn: &mut Db<'_, impl GenericClient>,
    identity: &Identity,
    after: &str,
    limit: usize,
) -> Result<Vec<TaskRow>, Failure> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = conn.query(
        concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE id > $1 AND endpoint = $2 AND tenant = $3 \
             AND principal = $4 AND issuer = $6 \
             AND (expires_at IS NULL OR expires_at > taskd_now_ms()) ORDER BY id LIMIT $5"
        ),
        &[
            &after,
            &identity.endpoint,
            &identity.tenant,
            &identity.principal,
            &limit,
            &identity.issuer,
        ],
    )?;
    rows.iter().map(task_row).collect()
}

/// The size of the task's payloads (result, error, input requests) and, when that is at
/// most `small_bytes`, the task itself: one round trip for `tasks/get` of the usual,
/// small task. A larger task comes back without its row (its payloads are not even
/// read: PostgreSQL evaluates the `CASE` before it fetches the value), for the caller
/// to make room for it before [`find_authorized`] reads it. `None`: no such task for
/// `identity`.
pub fn find_sized_authorized(
    conn: &mut Db<'_, impl GenericClient>,
    identity: &Identity,
    task_id: &str,
    small_bytes: usize,
) -> Result<Option<(usize, Option<TaskRow>)>, Failure> {
    let small = i64::try_from(small_bytes).unwrap_or(i64::MAX);
    // Why a queued job waits comes in the same round trip (see `flow::waiting`).
    let row = conn.query_opt(
        concat!(
            "SELECT sized.id, sized.tool, sized.status, sized.status_message, \
             sized.created_at, sized.updated_at, sized.ttl_ms, sized.poll_interval_ms, \
             CASE WHEN size <= $6 THEN sized.result END, \
             CASE WHEN size <= $6 THEN sized.error END, \
             CASE WHEN size <= $6 THEN sized.input_requests END, sized.version, \
             sized.trace_context, size, ",
            waiting_columns!(),
            " FROM (SELECT tasks.*, (coalesce(octet_length(result), 0) \
             + coalesce(octet_length(error), 0) \
             + coalesce(octet_length(input_requests), 0))::bigint AS size \
             FROM tasks WHERE ",
            authorized!(),
            ") AS sized LEFT JOIN jobs ON jobs.task_id = sized.id \
             AND jobs.state = 'queued' AND sized.status = 'working'",
            waiting_joins!()
        ),
        &[
            &task_id,
            &identity.endpoint,
            &identity.tenant,
            &identity.principal,
            &identity.issuer,
            &small,
        ],
    )?;
    let Some(row) = row else {
        return Ok(None);
    };
    let size: i64 = row.try_get(13)?;
    let bytes = usize::try_from(size).unwrap_or(usize::MAX);
    let task = if size <= small {
        let mut task = task_row(&row)?;
        task.waiting = waiting_at(&row, 14)?.map(Box::new);
        Some(task)
    } else {
        None
    };
    Ok(Some((bytes, task)))
}

pub fn cancel(
    tx: &mut Tx<'_, '_>,
    identity: &Identity,
    task_id: &str,
) -> Result<CancelEffect, Failure> {
    let Some(task) = lock_authorized(tx, identity, task_id)? else {
        return Ok(CancelEffect::NotFound);
    };
    cancel_found(tx, task_id, task.status)
}

/// Cancels a task already found and locked in `status`: nothing for a terminal one,
/// intent for a running attempt (and a `mcp_taskd_cancel` notification at commit, so
/// the node running it stops it within a round trip), at once otherwise.
pub(super) fn cancel_found(
    tx: &mut Tx<'_, '_>,
    task_id: &str,
    status: TaskStatus,
) -> Result<CancelEffect, Failure> {
    if status.is_terminal() {
        return Ok(CancelEffect::Done);
    }
    // Locked: a claim of this job in flight commits first, and is seen running.
    let job_state: Option<String> = tx
        .query_opt(
            "SELECT state FROM jobs WHERE task_id = $1 FOR UPDATE",
            &[&task_id],
        )?
        .map(|row| row.try_get(0))
        .transpose()?;
    if job_state.as_deref() == Some("running") {
        tx.execute(
            "UPDATE tasks SET cancel_requested = true, updated_at = $2 WHERE id = $1",
            &[&task_id, &now_ms()],
        )?;
        tx.execute("SELECT pg_notify('mcp_taskd_cancel', $1)", &[&task_id])?;
        return Ok(CancelEffect::SignalRunning);
    }
    let ending = Ending {
        task_id,
        status: TaskStatus::Cancelled,
        result: None,
        error: None,
        attempt: None,
    };
    set_terminal(tx, ending, now_ms())?;
    Ok(CancelEffect::Done)
}

/// Accepts the responses that answer outstanding requests of the right kind; ignores
/// the rest (unknown, answered, superseded or mismatched keys).
pub fn update(
    tx: &mut Tx<'_, '_>,
    identity: &Identity,
    task_id: &str,
    responses: &Map<String, Value>,
) -> Result<UpdateEffect, Failure> {
    let Some(task) = lock_authorized(tx, identity, task_id)? else {
        return Ok(UpdateEffect::NotFound);
    };
    if task.status != TaskStatus::InputRequired {
        return Ok(UpdateEffect::Accepted { requeued: false });
    }
    let Some(round) = InputRound::answer(task.input_requests.as_deref(), responses) else {
        return Ok(UpdateEffect::Accepted { requeued: false });
    };
    let stored: String = tx
        .query_one(
            "SELECT input_responses FROM tasks WHERE id = $1",
            &[&task_id],
        )?
        .try_get(0)?;
    let (status, requests) = round.next();
    let round_done = round.done();
    tx.execute(
        "UPDATE tasks SET status = $2, input_requests = $3, input_responses = $4, \
         updated_at = $5, version = version + 1 WHERE id = $1 AND status = 'input_required'",
        &[
            &task_id,
            &status.as_str(),
            &requests,
            &round.responses_after(&stored),
            &now_ms(),
        ],
    )?;
    if round_done {
        // Back in the queue, it takes its owner's next turn (tasks::model::TURN).
        tx.execute(
            "UPDATE jobs SET state = 'queued', run_after = taskd_now_ms(), \
             turn = taskd_turn(owner, priority, stride) \
             WHERE task_id = $1 AND state = 'waiting'",
            &[&task_id],
        )?;
    }
    append_outbox(tx, task_id)?;
    Ok(UpdateEffect::Accepted {
        requeued: round_done,
    })
}
