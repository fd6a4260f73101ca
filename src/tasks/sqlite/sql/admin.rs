//! What operators do (`mcp-taskd tasks …`, `stats`): list and inspect any task, cancel
//! one without an identity, copy one for a rerun, and the on-demand counts. No
//! authorization here: the operator interface is trusted (see `src/ops/`).

use rusqlite::{Connection, OptionalExtension};

use super::status_column;
use crate::auth::Identity;
use crate::protocol::TaskStatus;
use crate::tasks::model::{
    AttemptRecord, CancelEffect, JobRecord, RerunSource, StatsDetail, TaskDetail, TaskFilter,
    TaskSummary,
};

const SUMMARY_COLUMNS: &str =
    "id, tool, status, endpoint, tenant, principal, created_at, updated_at, status_message";

fn summary(row: &rusqlite::Row<'_>) -> rusqlite::Result<TaskSummary> {
    Ok(TaskSummary {
        id: row.get(0)?,
        tool: row.get(1)?,
        status: status_column(row, 2)?,
        endpoint: row.get(3)?,
        tenant: row.get(4)?,
        principal: row.get(5)?,
        created_at: row.get(6)?,
        updated_at: row.get(7)?,
        status_message: row.get(8)?,
    })
}

pub use crate::tasks::model::id_floor;

/// Up to `limit` tasks matching `filter`, newest first, with ids below `before`: a
/// keyset page walking the primary key backwards (never an OFFSET). The statement
/// names only the conditions given: `(?1 IS NULL OR col = ?1)` would keep SQLite from
/// using any index on a filtered column.
pub fn list_tasks(
    conn: &Connection,
    filter: &TaskFilter,
    before: Option<&str>,
    limit: usize,
) -> rusqlite::Result<Vec<TaskSummary>> {
    let floor = filter.created_since.map(id_floor);
    let conditions: [(&str, Option<&str>); 5] = [
        ("id < ?", before),
        ("id >= ?", floor.as_deref()),
        ("status = ?", filter.status.map(TaskStatus::as_str)),
        ("tool = ?", filter.tool.as_deref()),
        ("principal = ?", filter.principal.as_deref()),
    ];
    let mut clauses = Vec::new();
    let mut values: Vec<&str> = Vec::new();
    for (clause, value) in conditions {
        if let Some(value) = value {
            clauses.push(clause);
            values.push(value);
        }
    }
    let mut sql = format!("SELECT {SUMMARY_COLUMNS} FROM tasks");
    if !clauses.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&clauses.join(" AND "));
    }
    sql.push_str(&format!(
        " ORDER BY id DESC LIMIT {}",
        limit.min(i64::MAX as usize)
    ));
    let mut statement = conn.prepare_cached(&sql)?;
    let rows = statement.query_map(rusqlite::params_from_iter(values), summary)?;
    rows.collect()
}

/// Everything stored about one task, expired or not.
pub fn task_detail(conn: &Connection, task_id: &str) -> rusqlite::Result<Option<TaskDetail>> {
    let sql = format!(
        "SELECT {SUMMARY_COLUMNS}, ttl_ms, expires_at, cancel_requested, error, \
         input_requests, origin, result, input_responses FROM tasks WHERE id = ?1"
    );
    let found = conn
        .prepare_cached(&sql)?
        .query_row([task_id], |row| {
            Ok(TaskDetail {
                summary: summary(row)?,
                ttl_ms: row.get(9)?,
                expires_at: row.get(10)?,
                cancel_requested: row.get::<_, i64>(11)? != 0,
                error: row.get(12)?,
                input_requests: row.get(13)?,
                origin: row.get(14)?,
                result: row.get(15)?,
                input_responses: row.get(16)?,
                job: None,
                attempts: Vec::new(),
            })
        })
        .optional()?;
    let Some(mut detail) = found else {
        return Ok(None);
    };
    detail.job = conn
        .prepare_cached(
            "SELECT state, attempt, max_attempts, run_after, lease_expires, last_error \
             FROM jobs WHERE task_id = ?1",
        )?
        .query_row([task_id], |row| {
            Ok(JobRecord {
                state: row.get(0)?,
                attempt: row.get(1)?,
                max_attempts: row.get(2)?,
                run_after: row.get(3)?,
                lease_expires: row.get(4)?,
                last_error: row.get(5)?,
            })
        })
        .optional()?;
    let mut statement = conn.prepare_cached(
        "SELECT attempt, started_at, ended_at, outcome FROM attempts \
         WHERE task_id = ?1 ORDER BY attempt",
    )?;
    let attempts = statement.query_map([task_id], |row| {
        Ok(AttemptRecord {
            attempt: row.get(0)?,
            started_at: row.get(1)?,
            ended_at: row.get(2)?,
            outcome: row.get(3)?,
        })
    })?;
    detail.attempts = attempts.collect::<rusqlite::Result<_>>()?;
    Ok(Some(detail))
}

/// `tasks/cancel` without the identity check: the same effects on any task.
pub fn cancel(conn: &Connection, task_id: &str, now: i64) -> rusqlite::Result<CancelEffect> {
    let status = conn
        .prepare_cached("SELECT status FROM tasks WHERE id = ?1")?
        .query_row([task_id], |row| status_column(row, 0))
        .optional()?;
    let Some(status) = status else {
        return Ok(CancelEffect::NotFound);
    };
    super::client::cancel_found(conn, task_id, status, now)
}

/// The binding, tool and origin a rerun copies.
pub fn rerun_source(conn: &Connection, task_id: &str) -> rusqlite::Result<Option<RerunSource>> {
    conn.prepare_cached(
        "SELECT endpoint, tenant, principal, tool, origin FROM tasks WHERE id = ?1",
    )?
    .query_row([task_id], |row| {
        Ok(RerunSource {
            identity: Identity {
                endpoint: row.get(0)?,
                tenant: row.get(1)?,
                principal: row.get(2)?,
            },
            tool: row.get(3)?,
            origin: row.get(4)?,
        })
    })
    .optional()
}

/// The counts of `mcp-taskd stats`. Counts by tool and status, and by job state, are
/// the trigger-kept rows of `task_counts` and `job_counts`; tasks created recently are a
/// primary-key range; counting the attempts of the last hour scans `attempts`: this
/// runs when an operator asks, never on a timer.
pub fn stats_detail(conn: &Connection, now: i64) -> rusqlite::Result<StatsDetail> {
    let mut statement = conn.prepare_cached(
        "SELECT tool, status, n FROM task_counts WHERE n > 0 ORDER BY tool, status",
    )?;
    let by_tool_status = statement
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                status_column(row, 1)?,
                row.get::<_, i64>(2)?.max(0) as u64,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let jobs = super::upkeep::job_counts(conn)?;
    let oldest: Option<i64> = conn.query_row(
        "SELECT MIN(run_after) FROM jobs WHERE state = 'queued' AND run_after <= ?1",
        [now],
        |row| row.get(0),
    )?;
    let created_since = |ms: i64| -> rusqlite::Result<u64> {
        let count: i64 = conn.query_row(
            "SELECT COUNT(*) FROM tasks WHERE id >= ?1",
            [id_floor(now - ms)],
            |row| row.get(0),
        )?;
        Ok(count.max(0) as u64)
    };
    let ended_since = |ms: i64| -> rusqlite::Result<Vec<(String, u64)>> {
        let mut statement = conn.prepare_cached(
            "SELECT outcome, COUNT(*) FROM attempts WHERE ended_at >= ?1 \
             AND outcome IS NOT NULL GROUP BY outcome ORDER BY outcome",
        )?;
        let rows = statement.query_map([now - ms], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, i64>(1)?.max(0) as u64,
            ))
        })?;
        rows.collect()
    };
    Ok(StatsDetail {
        by_tool_status,
        jobs,
        oldest_ready_age_ms: oldest.map_or(0, |at| (now - at).max(0) as u64),
        created_last_minute: created_since(60_000)?,
        created_last_hour: created_since(3_600_000)?,
        ended_last_minute: ended_since(60_000)?,
        ended_last_hour: ended_since(3_600_000)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::sqlite::tests::{fresh_store, task_at};
    use crate::tasks::TaskStore;

    #[test]
    fn pages_walk_back_by_id_and_filters_combine() {
        let (_dir, store) = fresh_store();
        for (n, at) in [1_000_i64, 2_000, 3_000].into_iter().enumerate() {
            let id = format!("{}{n:032x}", id_floor(at));
            let (sender, created) = std::sync::mpsc::channel();
            store.create(task_at(&id, at)).then(move |row| {
                let _ = sender.send(row.is_ok());
            });
            assert!(created.recv().unwrap());
        }
        let all = TaskFilter::default();
        let first = store.list_tasks(&all, None, 2).unwrap();
        assert_eq!(first.len(), 2);
        assert!(first[0].id > first[1].id, "newest first");
        let rest = store.list_tasks(&all, Some(&first[1].id), 2).unwrap();
        assert_eq!(rest.len(), 1, "the next page starts below the last id");
        let since = TaskFilter {
            created_since: Some(2_000),
            ..TaskFilter::default()
        };
        assert_eq!(store.list_tasks(&since, None, 10).unwrap().len(), 2);
        let other_tool = TaskFilter {
            tool: Some("other".into()),
            ..TaskFilter::default()
        };
        assert!(store.list_tasks(&other_tool, None, 10).unwrap().is_empty());
    }
}
