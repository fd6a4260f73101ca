//! The operator's history on PostgreSQL (issue 48, `taskd_engine::history`), as
//! `sqlite::sql::history`: the summary a finished task leaves when the janitor deletes
//! it past its TTL (in the delete's statement), pruned past its time, read by operators.

use postgres::{GenericClient, Row};

use super::super::statements::{Db, Param, Tx};

use super::{status_column, Failure};
use taskd_engine::history::{HistoryConfig, HistoryRecord};
use taskd_engine::model::{ScheduleSlot, TaskFilter, TaskSummary};
use taskd_protocol::TaskStatus;

/// Deletes up to `limit` tasks past their TTL (by the database clock), and in the same
/// statement keeps a summary of each finished one whose outcome `history` keeps for
/// longer than it has been over; returns the ids deleted. The statement's sub-queries
/// share one snapshot: the attempts counted are the task's, before the delete takes
/// them (and its output) away.
pub fn expire(
    tx: &mut Tx<'_, '_>,
    limit: usize,
    history: &HistoryConfig,
) -> Result<Vec<String>, Failure> {
    let rows = tx.query(
        "WITH gone AS ( \
           DELETE FROM tasks WHERE id IN (SELECT id FROM tasks \
             WHERE expires_at <= taskd_now_ms() LIMIT $1 FOR UPDATE SKIP LOCKED) \
           RETURNING id, tool, endpoint, issuer, tenant, principal, status, status_message, \
             created_at, updated_at, error, rerun_of, schedule, schedule_slot, origin, \
             CASE status WHEN 'completed' THEN $2::bigint WHEN 'failed' THEN $3::bigint \
               WHEN 'cancelled' THEN $4::bigint ELSE 0 END AS keep), \
         kept AS ( \
           INSERT INTO task_history (id, tool, endpoint, issuer, tenant, principal, status, \
             status_message, created_at, updated_at, removed_at, keep_until, error, attempts, \
             rerun_of, schedule, schedule_slot, origin) \
           SELECT id, tool, endpoint, issuer, tenant, principal, status, status_message, \
             created_at, updated_at, taskd_now_ms(), updated_at + keep, error, \
             (SELECT count(*) FROM attempts WHERE attempts.task_id = gone.id), rerun_of, \
             schedule, schedule_slot, CASE WHEN $5 THEN origin END \
           FROM gone WHERE keep > 0 AND updated_at + keep > taskd_now_ms() \
           ON CONFLICT (id) DO NOTHING) \
         SELECT id FROM gone",
        &[
            &i64::try_from(limit).unwrap_or(i64::MAX),
            &history.keep_ms(TaskStatus::Completed),
            &history.keep_ms(TaskStatus::Failed),
            &history.keep_ms(TaskStatus::Cancelled),
            &history.keep_arguments,
        ],
    )?;
    rows.iter()
        .map(|row| row.try_get(0).map_err(Failure::from))
        .collect()
}

/// Deletes up to `limit` summaries whose time has passed; returns how many.
pub fn prune(tx: &mut Tx<'_, '_>, limit: usize) -> Result<usize, Failure> {
    let pruned = tx.execute(
        "DELETE FROM task_history WHERE id IN (SELECT id FROM task_history \
         WHERE keep_until <= taskd_now_ms() LIMIT $1 FOR UPDATE SKIP LOCKED)",
        &[&i64::try_from(limit).unwrap_or(i64::MAX)],
    )?;
    Ok(usize::try_from(pruned).unwrap_or(usize::MAX))
}

/// The columns [`summary`] reads.
const SUMMARY_COLUMNS: &str = "id, tool, status, endpoint, tenant, principal, created_at, \
    updated_at, status_message, rerun_of, removed_at, schedule, schedule_slot";
/// Where the columns of a [`HistoryRecord`] start, after the summary's.
const RECORD: usize = 13;

fn summary(row: &Row) -> Result<TaskSummary, Failure> {
    Ok(TaskSummary {
        id: row.try_get(0)?,
        tool: row.try_get(1)?,
        status: status_column(row, 2)?,
        endpoint: row.try_get(3)?,
        tenant: row.try_get(4)?,
        principal: row.try_get(5)?,
        created_at: row.try_get(6)?,
        updated_at: row.try_get(7)?,
        status_message: row.try_get(8)?,
        rerun_of: row.try_get(9)?,
        removed_at: row.try_get(10)?,
        schedule: match (row.try_get::<_, Option<String>>(11)?, row.try_get(12)?) {
            (Some(schedule), Some(slot)) => Some(ScheduleSlot { schedule, slot }),
            _ => None,
        },
    })
}

/// Up to `limit` summaries matching `filter`, newest first, with ids below `before`: a
/// keyset page down the primary key, as `admin::list_tasks`.
pub fn list(
    conn: &mut Db<'_, impl GenericClient>,
    filter: &TaskFilter,
    before: Option<&str>,
    limit: usize,
) -> Result<Vec<TaskSummary>, Failure> {
    if filter.live_only() {
        return Ok(Vec::new());
    }
    let floor = filter.created_since.map(taskd_engine::ids::time_floor);
    let conditions: [(&str, Option<&str>); 6] = [
        ("id <", before),
        ("id >=", floor.as_deref()),
        ("id <=", filter.through.as_deref()),
        ("status =", filter.status.map(TaskStatus::as_str)),
        ("tool =", filter.tool.as_deref()),
        ("principal =", filter.principal.as_deref()),
    ];
    let (sql, values) =
        super::keyset_page(SUMMARY_COLUMNS, "task_history", None, &conditions, limit);
    let params: Vec<&dyn Param> = values.iter().map(|value| value as &dyn Param).collect();
    let rows = conn.query_built(&sql, &params)?;
    rows.iter().map(summary).collect()
}

/// The summary of task `task_id`, if one is kept.
pub fn record(
    conn: &mut Db<'_, impl GenericClient>,
    task_id: &str,
) -> Result<Option<HistoryRecord>, Failure> {
    let Some(row) = conn.query_opt(
        "SELECT id, tool, status, endpoint, tenant, principal, created_at, updated_at, \
         status_message, rerun_of, removed_at, schedule, schedule_slot, error, attempts, \
         keep_until, origin FROM task_history WHERE id = $1",
        &[&task_id],
    )?
    else {
        return Ok(None);
    };
    Ok(Some(HistoryRecord {
        summary: summary(&row)?,
        error: row.try_get(RECORD)?,
        attempts: row.try_get(RECORD + 1)?,
        keep_until: row.try_get(RECORD + 2)?,
        origin: row.try_get(RECORD + 3)?,
    }))
}
