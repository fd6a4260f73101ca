//! What operators do on PostgreSQL (`mcp-taskd tasks …`, `stats`): list and inspect any
//! task, cancel one without an identity, copy one for a rerun, the on-demand counts.
//! No authorization here: the operator interface is trusted (see `crates/server/src/ops/`).

use postgres::{GenericClient, Row};

use super::super::statements::{Db, Param, Tx};

use super::{status_column, Failure};
use taskd_engine::model::{
    AttemptRecord, CancelEffect, IdentityJobs, JobRecord, RerunSource, ScheduleSlot, StatsDetail,
    TaskDetail, TaskFilter, TaskSummary, STATS_IDENTITIES,
};
use taskd_protocol::Identity;
use taskd_protocol::TaskStatus;

const SUMMARY_COLUMNS: &str = "id, tool, status, endpoint, tenant, principal, created_at, \
     updated_at, status_message, schedule, schedule_slot, rerun_of";
/// Where the columns of a task's detail start, after the summary's.
const DETAIL: usize = 12;

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
        schedule: match (row.try_get::<_, Option<String>>(9)?, row.try_get(10)?) {
            (Some(schedule), Some(slot)) => Some(ScheduleSlot { schedule, slot }),
            _ => None,
        },
        rerun_of: row.try_get(11)?,
        removed_at: None,
    })
}

/// Up to `limit` tasks matching `filter`, newest first, with ids below `before`: a
/// keyset page walking the primary key backwards (never an OFFSET).
pub fn list_tasks(
    conn: &mut Db<'_, impl GenericClient>,
    filter: &TaskFilter,
    before: Option<&str>,
    limit: usize,
) -> Result<Vec<TaskSummary>, Failure> {
    let floor = filter.created_since.map(taskd_engine::ids::time_floor);
    let conditions: [(&str, Option<&str>); 6] = [
        ("id <", before),
        ("id >=", floor.as_deref()),
        ("id <=", filter.through.as_deref()),
        ("status =", filter.status.map(TaskStatus::as_str)),
        ("tool =", filter.tool.as_deref()),
        ("principal =", filter.principal.as_deref()),
    ];
    let (sql, values) = super::keyset_page(
        SUMMARY_COLUMNS,
        "tasks",
        filter
            .unfinished
            .then_some("status IN ('working', 'input_required')"),
        &conditions,
        limit,
    );
    let params: Vec<&dyn Param> = values.iter().map(|value| value as &dyn Param).collect();
    let rows = conn.query_built(&sql, &params)?;
    rows.iter().map(summary).collect()
}

/// Everything stored about one task, expired or not.
pub fn task_detail(
    conn: &mut Db<'_, impl GenericClient>,
    task_id: &str,
) -> Result<Option<TaskDetail>, Failure> {
    let sql = format!(
        "SELECT {SUMMARY_COLUMNS}, ttl_ms, expires_at, cancel_requested, error, \
         input_requests, origin, result, input_responses, trace_context FROM tasks WHERE id = $1"
    );
    let Some(row) = conn.query_opt_built(&sql, &[&task_id])? else {
        return Ok(None);
    };
    let mut detail = TaskDetail {
        summary: summary(&row)?,
        ttl_ms: row.try_get(DETAIL)?,
        expires_at: row.try_get(DETAIL + 1)?,
        cancel_requested: row.try_get(DETAIL + 2)?,
        error: row.try_get(DETAIL + 3)?,
        input_requests: row.try_get(DETAIL + 4)?,
        origin: row.try_get(DETAIL + 5)?,
        result: row.try_get(DETAIL + 6)?,
        input_responses: row.try_get(DETAIL + 7)?,
        trace: super::trace_column(&row, DETAIL + 8)?,
        job: None,
        attempts: Vec::new(),
    };
    detail.job = match conn.query_opt(
        "SELECT state, attempt, max_attempts, run_after, lease_expires, last_error \
         FROM jobs WHERE task_id = $1",
        &[&task_id],
    )? {
        Some(row) => Some(JobRecord {
            state: row.try_get(0)?,
            attempt: row.try_get(1)?,
            max_attempts: row.try_get(2)?,
            run_after: row.try_get(3)?,
            lease_expires: row.try_get(4)?,
            last_error: row.try_get(5)?,
        }),
        None => None,
    };
    let attempts = conn.query(
        "SELECT attempt, started_at, ended_at, outcome FROM attempts \
         WHERE task_id = $1 ORDER BY attempt",
        &[&task_id],
    )?;
    detail.attempts = attempts
        .iter()
        .map(|row| {
            Ok(AttemptRecord {
                attempt: row.try_get(0)?,
                started_at: row.try_get(1)?,
                ended_at: row.try_get(2)?,
                outcome: row.try_get(3)?,
            })
        })
        .collect::<Result<_, Failure>>()?;
    Ok(Some(detail))
}

/// `tasks/cancel` without the identity check: the same effects on any task.
pub fn cancel(tx: &mut Tx<'_, '_>, task_id: &str) -> Result<CancelEffect, Failure> {
    let Some(row) = tx.query_opt(
        "SELECT status FROM tasks WHERE id = $1 FOR NO KEY UPDATE",
        &[&task_id],
    )?
    else {
        return Ok(CancelEffect::NotFound);
    };
    let status = status_column(&row, 0)?;
    super::client::cancel_found(tx, task_id, status)
}

/// The binding, tool and origin a rerun copies: the task's, or its history summary's
/// when that kept the origin.
pub fn rerun_source(
    conn: &mut Db<'_, impl GenericClient>,
    task_id: &str,
) -> Result<Option<RerunSource>, Failure> {
    let Some(row) = conn.query_opt(
        "SELECT endpoint, issuer, tenant, principal, tool, origin FROM tasks WHERE id = $1 \
         UNION ALL SELECT endpoint, issuer, tenant, principal, tool, origin FROM task_history \
         WHERE id = $1 AND origin IS NOT NULL LIMIT 1",
        &[&task_id],
    )?
    else {
        return Ok(None);
    };
    Ok(Some(RerunSource {
        identity: Identity {
            endpoint: row.try_get(0)?,
            issuer: row.try_get(1)?,
            tenant: row.try_get(2)?,
            principal: row.try_get(3)?,
        },
        tool: row.try_get(4)?,
        origin: row.try_get(5)?,
    }))
}

/// The counts of `mcp-taskd stats`: the folded counts and deltas, a primary-key range
/// for recent creations, and a scan of `attempts` for the recent outcomes (on demand,
/// never on a timer).
pub fn stats_detail(
    conn: &mut Db<'_, impl GenericClient>,
    now: i64,
) -> Result<StatsDetail, Failure> {
    let rows = conn.query(
        "SELECT tool, status, SUM(n)::bigint FROM (SELECT tool, status, n FROM task_counts \
         UNION ALL SELECT tool, status, n FROM task_count_deltas) AS c \
         GROUP BY tool, status HAVING SUM(n) > 0 ORDER BY tool, status",
        &[],
    )?;
    let by_tool_status = rows
        .iter()
        .map(|row| {
            Ok((
                row.try_get::<_, String>(0)?,
                status_column(row, 1)?,
                row.try_get::<_, i64>(2)?.max(0) as u64,
            ))
        })
        .collect::<Result<Vec<_>, Failure>>()?;
    let jobs = super::upkeep::job_counts(conn)?;
    let oldest: i64 = conn
        .query_one(
            "SELECT COALESCE(taskd_now_ms() - MIN(run_after), 0) FROM jobs \
             WHERE state = 'queued' AND run_after <= taskd_now_ms()",
            &[],
        )?
        .try_get(0)?;
    let mut created_since = |ms: i64| -> Result<u64, Failure> {
        let floor = taskd_engine::ids::time_floor(now - ms);
        let count: i64 = conn
            .query_one("SELECT COUNT(*) FROM tasks WHERE id >= $1", &[&floor])?
            .try_get(0)?;
        Ok(count.max(0) as u64)
    };
    let created_last_minute = created_since(60_000)?;
    let created_last_hour = created_since(3_600_000)?;
    // One pass over jobs by owner: on demand, never on a timer.
    let by_identity = conn
        .query(
            "SELECT owner, COUNT(*) FILTER (WHERE state = 'queued'), \
             COUNT(*) FILTER (WHERE state = 'running'), \
             COUNT(*) FILTER (WHERE state = 'waiting') FROM jobs GROUP BY owner \
             ORDER BY COUNT(*) DESC, owner LIMIT $1",
            &[&STATS_IDENTITIES],
        )?
        .iter()
        .map(|row| {
            let count = |at: usize| -> Result<u64, Failure> {
                Ok(row.try_get::<_, i64>(at)?.max(0) as u64)
            };
            Ok(IdentityJobs {
                owner: row.try_get(0)?,
                queued: count(1)?,
                running: count(2)?,
                waiting: count(3)?,
            })
        })
        .collect::<Result<Vec<_>, Failure>>()?;
    let mut ended_since = |ms: i64| -> Result<Vec<(String, u64)>, Failure> {
        let rows = conn.query(
            "SELECT outcome, COUNT(*) FROM attempts WHERE ended_at >= taskd_now_ms() - $1 \
             AND outcome IS NOT NULL GROUP BY outcome ORDER BY outcome",
            &[&ms],
        )?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get::<_, String>(0)?,
                    row.try_get::<_, i64>(1)?.max(0) as u64,
                ))
            })
            .collect()
    };
    Ok(StatsDetail {
        by_tool_status,
        jobs,
        oldest_ready_age_ms: oldest.max(0) as u64,
        created_last_minute,
        created_last_hour,
        ended_last_minute: ended_since(60_000)?,
        ended_last_hour: ended_since(3_600_000)?,
        by_identity,
    })
}
