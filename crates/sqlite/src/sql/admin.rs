//! What operators do (`mcp-taskd tasks …`, `stats`): list and inspect any task, cancel
//! one without an identity, copy one for a rerun, and the on-demand counts. No
//! authorization here: the operator interface is trusted (see `crates/server/src/ops/`).

use rusqlite::{Connection, OptionalExtension};

use super::status_column;
use taskd_engine::ids;
use taskd_engine::model::{
    AttemptRecord, CancelEffect, IdentityJobs, JobRecord, RerunSource, ScheduleSlot, StatsDetail,
    TaskDetail, TaskFilter, TaskPage, TaskSummary, STATS_IDENTITIES,
};
use taskd_protocol::Identity;
use taskd_protocol::TaskStatus;

/// Qualified, so that a page may read them through a join with `jobs`.
const SUMMARY_COLUMNS: &str = "tasks.id, tasks.tool, tasks.status, tasks.endpoint, \
    tasks.tenant, tasks.principal, tasks.created_at, tasks.updated_at, tasks.status_message, \
    tasks.schedule, tasks.schedule_slot, tasks.rerun_of";
/// Where [`summary`] finds the columns a page filters on.
const TOOL: usize = 1;
const STATUS: usize = 2;
const PRINCIPAL: usize = 5;
/// Where the columns of a task's detail start, after the summary's.
const DETAIL: usize = 12;

fn summary(row: &rusqlite::Row<'_>) -> rusqlite::Result<TaskSummary> {
    Ok(TaskSummary {
        id: row.get(0)?,
        tool: row.get(TOOL)?,
        status: status_column(row, STATUS)?,
        endpoint: row.get(3)?,
        tenant: row.get(4)?,
        principal: row.get(PRINCIPAL)?,
        created_at: row.get(6)?,
        updated_at: row.get(7)?,
        status_message: row.get(8)?,
        schedule: match (row.get::<_, Option<String>>(9)?, row.get(10)?) {
            (Some(schedule), Some(slot)) => Some(ScheduleSlot { schedule, slot }),
            _ => None,
        },
        rerun_of: row.get(11)?,
        removed_at: None,
    })
}

/// The smallest id of the tasks created at or after `ms`, as a bound on `id`; a bound
/// above every id when there are none.
///
/// A time-ordered id starts with its creation time, a row-keyed one with its rowid
/// (`taskd_engine::ids`). Rows are inserted in creation order (each id's row is handed
/// out as the task is made, and before row keys SQLite gave each insert the next
/// rowid), so `created_at` grows with `rowid`, give or take the few milliseconds
/// between creations that were made together: a binary search over `rowid` (about 24
/// seeks at 10M tasks) finds the first task created at or after `ms`. Its id is the
/// bound when row-keyed; when time-ordered, the time floor is (exact for those ids,
/// and below every row-keyed id, all issued after them).
pub fn created_floor(conn: &Connection, ms: i64) -> rusqlite::Result<String> {
    let mut first_from = conn.prepare_cached(
        "SELECT rowid, created_at, id FROM tasks WHERE rowid >= ?1 ORDER BY rowid LIMIT 1",
    )?;
    let mut first_from = |rowid: i64| {
        first_from
            .query_row([rowid], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, String>(2)?,
                ))
            })
            .optional()
    };
    let last: Option<i64> = conn.query_row("SELECT max(rowid) FROM tasks", [], |row| row.get(0))?;
    let (Some(last), Some((mut low, ..))) = (last, first_from(i64::MIN)?) else {
        return Ok(ABOVE_EVERY_ID.into());
    };
    // The first rowid from which the first row was created at or after `ms`.
    let mut high = last.saturating_add(1);
    while low < high {
        let middle = low + (high - low) / 2;
        match first_from(middle)? {
            Some((_, created_at, _)) if created_at < ms => low = middle + 1,
            _ => high = middle,
        }
    }
    Ok(match first_from(low)? {
        None => ABOVE_EVERY_ID.into(),
        Some((_, _, id)) if ids::row_key(&id).is_some() => id,
        Some(_) => ids::time_floor(ms),
    })
}

/// Sorts after every id this store issues (all start with `0` or `1`).
const ABOVE_EVERY_ID: &str = "2";

/// Rows one page examines at most. A filter that matches few of millions of tasks would
/// otherwise walk all of them for one page; past this many rows the page ends early
/// with a cursor to continue from ([`TaskPage::resume`]). At 10M tasks on the loaded
/// 2-core VM such a page took 10–50 ms (benches/scale.sh).
pub const PAGE_EXAMINES: usize = 20_000;

/// Up to `limit` tasks matching `filter`, newest first, with ids below `before`: a
/// keyset page (never an OFFSET) that examines at most `examine` rows. It walks the
/// primary key backwards and filters each row as it goes — or, for the statuses of
/// live tasks (`working`, `input_required`, or any unfinished one), the `jobs` table,
/// which holds a row for every live task and no other: a walk of the live tasks only. There is no index
/// by status, tool or principal: each would cost every task creation an index insert
/// (three of them cost ~11% of the creation rate, issue 17), while the examine bound
/// keeps every page quick whatever the filter.
pub fn list_tasks(
    conn: &Connection,
    filter: &TaskFilter,
    before: Option<&str>,
    limit: usize,
    examine: usize,
) -> rusqlite::Result<TaskPage> {
    let floor = filter
        .created_since
        .map(|ms| created_floor(conn, ms))
        .transpose()?;
    let live = filter.unfinished
        || matches!(
            filter.status,
            Some(TaskStatus::Working | TaskStatus::InputRequired)
        );
    let (source, key) = if live {
        (
            "jobs CROSS JOIN tasks ON tasks.id = jobs.task_id",
            "jobs.task_id",
        )
    } else {
        ("tasks", "tasks.id")
    };
    let mut clauses = Vec::new();
    let mut values: Vec<&str> = Vec::new();
    let bounds = [
        (" < ?", before),
        (" >= ?", floor.as_deref()),
        (" <= ?", filter.through.as_deref()),
    ];
    for (clause, value) in bounds {
        if let Some(value) = value {
            clauses.push(format!("{key}{clause}"));
            values.push(value);
        }
    }
    let mut sql = format!("SELECT {SUMMARY_COLUMNS} FROM {source}");
    if !clauses.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&clauses.join(" AND "));
    }
    sql.push_str(&format!(" ORDER BY {key} DESC"));
    let mut statement = conn.prepare_cached(&sql)?;
    let mut rows = statement.query(rusqlite::params_from_iter(values))?;
    let mut page = TaskPage::default();
    let mut examined = 0;
    while page.tasks.len() < limit {
        let Some(row) = rows.next()? else {
            return Ok(page);
        };
        examined += 1;
        // Compared in place: no string is copied for a row that does not match.
        let text = |index| row.get_ref(index).map(|value| value.as_str().ok());
        let matches = filter
            .status
            .is_none_or(|status| text(STATUS).ok().flatten() == Some(status.as_str()))
            && filter
                .tool
                .as_deref()
                .is_none_or(|tool| text(TOOL).ok().flatten() == Some(tool))
            && filter
                .principal
                .as_deref()
                .is_none_or(|principal| text(PRINCIPAL).ok().flatten() == Some(principal));
        if matches {
            page.tasks.push(summary(row)?);
        }
        if examined == examine && page.tasks.len() < limit {
            page.resume = Some(row.get(0)?);
            return Ok(page);
        }
    }
    Ok(page)
}

/// Everything stored about one task, expired or not.
pub fn task_detail(conn: &Connection, task_id: &str) -> rusqlite::Result<Option<TaskDetail>> {
    let sql = format!(
        "SELECT {SUMMARY_COLUMNS}, ttl_ms, expires_at, cancel_requested, error, \
         input_requests, origin, result, input_responses, trace_context FROM tasks WHERE id = ?1"
    );
    let found = conn
        .prepare_cached(&sql)?
        .query_row([task_id], |row| {
            Ok(TaskDetail {
                summary: summary(row)?,
                ttl_ms: row.get(DETAIL)?,
                expires_at: row.get(DETAIL + 1)?,
                cancel_requested: row.get::<_, i64>(DETAIL + 2)? != 0,
                error: row.get(DETAIL + 3)?,
                input_requests: row.get(DETAIL + 4)?,
                origin: row.get(DETAIL + 5)?,
                result: row.get(DETAIL + 6)?,
                input_responses: row.get(DETAIL + 7)?,
                trace: super::trace_column(row, DETAIL + 8)?,
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

/// The binding, tool and origin a rerun copies: the task's, or its history summary's
/// when that kept the origin.
pub fn rerun_source(conn: &Connection, task_id: &str) -> rusqlite::Result<Option<RerunSource>> {
    conn.prepare_cached(
        "SELECT endpoint, issuer, tenant, principal, tool, origin FROM tasks WHERE id = ?1 \
         UNION ALL SELECT endpoint, issuer, tenant, principal, tool, origin FROM task_history \
         WHERE id = ?1 AND origin IS NOT NULL LIMIT 1",
    )?
    .query_row([task_id], |row| {
        Ok(RerunSource {
            identity: Identity {
                endpoint: row.get(0)?,
                issuer: row.get(1)?,
                tenant: row.get(2)?,
                principal: row.get(3)?,
            },
            tool: row.get(4)?,
            origin: row.get(5)?,
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
            [created_floor(conn, now - ms)?],
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
    // One pass over the jobs (live tasks only): on demand (`mcp-taskd stats`, and an
    // open dashboard every 5 s), never on a server timer.
    let by_identity = conn
        .prepare_cached(
            "SELECT owner, SUM(state = 'queued'), SUM(state = 'running'), \
             SUM(state = 'waiting') FROM jobs GROUP BY owner \
             ORDER BY COUNT(*) DESC, owner LIMIT ?1",
        )?
        .query_map([STATS_IDENTITIES], |row| {
            let count =
                |at: usize| -> rusqlite::Result<u64> { Ok(row.get::<_, i64>(at)?.max(0) as u64) };
            Ok(IdentityJobs {
                owner: row.get(0)?,
                queued: count(1)?,
                running: count(2)?,
                waiting: count(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(StatsDetail {
        by_tool_status,
        jobs,
        by_identity,
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
    use crate::tests::{fresh_store, task_at};
    use taskd_engine::TaskStore;

    /// Creates a task of `tool` created at `at` ms (its id says so) and returns its id.
    fn create(store: &crate::Store, n: usize, at: i64, tool: &str) -> String {
        let id = format!("{}{n:032x}", ids::time_floor(at));
        let mut task = task_at(&id, at);
        task.tool = tool.into();
        let (sender, created) = std::sync::mpsc::channel();
        store.create(task).then(move |row| {
            let _ = sender.send(row.is_ok());
        });
        assert!(created.recv().unwrap());
        id
    }

    #[test]
    fn pages_walk_back_by_id_and_filters_combine() {
        let (_dir, store) = fresh_store();
        for (n, at) in [1_000_i64, 2_000, 3_000].into_iter().enumerate() {
            create(&store, n, at, "tool");
        }
        let all = TaskFilter::default();
        let first = store.list_tasks(&all, None, 2).unwrap().tasks;
        assert_eq!(first.len(), 2);
        assert!(first[0].id > first[1].id, "newest first");
        let rest = store.list_tasks(&all, Some(&first[1].id), 2).unwrap();
        assert_eq!(
            rest.tasks.len(),
            1,
            "the next page starts below the last id"
        );
        assert_eq!(rest.resume, None);
        let since = TaskFilter {
            created_since: Some(2_000),
            ..TaskFilter::default()
        };
        assert_eq!(store.list_tasks(&since, None, 10).unwrap().tasks.len(), 2);
        let other_tool = TaskFilter {
            tool: Some("other".into()),
            ..TaskFilter::default()
        };
        assert!(store
            .list_tasks(&other_tool, None, 10)
            .unwrap()
            .tasks
            .is_empty());
    }

    #[test]
    fn a_sparse_filter_gets_short_pages_that_say_where_to_continue() {
        let (_dir, store) = fresh_store();
        // Ten tasks, two of them of tool `rare`: the 3rd and the 8th oldest.
        let ids: Vec<String> = (0..10)
            .map(|n| {
                let tool = if n == 2 || n == 7 { "rare" } else { "tool" };
                create(&store, n, 1_000 + n as i64, tool)
            })
            .collect();
        let rare = TaskFilter {
            tool: Some("rare".into()),
            ..TaskFilter::default()
        };
        let conn = store.read().unwrap();
        let mut before: Option<String> = None;
        let mut pages = Vec::new();
        loop {
            let page = list_tasks(&conn, &rare, before.as_deref(), 5, 3).unwrap();
            let found: Vec<String> = page.tasks.into_iter().map(|task| task.id).collect();
            pages.push(found);
            match page.resume {
                Some(resume) => before = Some(resume),
                None => break,
            }
        }
        // Three rows examined a page, newest first: 9 8 [7] | 6 5 4 | 3 [2] 1 | 0.
        assert_eq!(
            pages,
            vec![vec![ids[7].clone()], vec![], vec![ids[2].clone()], vec![]]
        );
    }

    #[test]
    fn live_statuses_walk_the_jobs_only() {
        let (_dir, store) = fresh_store();
        let ids: Vec<String> = (0..4)
            .map(|n| create(&store, n, 1_000 + n as i64, "tool"))
            .collect();
        // Two end (their job goes); the two left working are all a page can see.
        let ended = ids[1..3].to_vec();
        store
            .write(move |conn| {
                for id in &ended {
                    conn.execute("UPDATE tasks SET status = 'completed' WHERE id = ?1", [id])?;
                    conn.execute("DELETE FROM jobs WHERE task_id = ?1", [id])?;
                }
                Ok(())
            })
            .unwrap();
        let working = TaskFilter {
            status: Some(TaskStatus::Working),
            ..TaskFilter::default()
        };
        let conn = store.read().unwrap();
        // Two rows may be examined: the two jobs, not the completed tasks between them.
        let page = list_tasks(&conn, &working, None, 5, 2).unwrap();
        let found: Vec<&str> = page.tasks.iter().map(|task| task.id.as_str()).collect();
        assert_eq!(found, [ids[3].as_str(), ids[0].as_str()]);
    }
}
