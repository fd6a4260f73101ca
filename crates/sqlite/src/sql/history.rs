//! The operator's history (issue 48, `taskd_engine::history`): the summary a finished
//! task leaves when the janitor deletes it past its TTL (written in the delete's
//! transaction), pruned past its time, and read by `tasks list`, `tasks show` and the
//! dashboard once the task is gone.

use rusqlite::{params, Connection, OptionalExtension};

use super::status_column;
use taskd_engine::history::{HistoryConfig, HistoryRecord};
use taskd_engine::model::{ScheduleSlot, TaskFilter, TaskPage, TaskSummary};
use taskd_protocol::TaskStatus;

/// Deletes up to `limit` tasks past their TTL (`expires_at <= now`), and in the same
/// write keeps a summary of each finished one whose outcome `history` keeps for longer
/// than it has been over; returns the ids deleted.
///
/// The batch is chosen once and named by its ids (a JSON array) in both statements, so
/// that the summaries written are of exactly the tasks deleted. Each summary counts the
/// task's attempts before the delete takes them (and its output) away.
pub fn expire(
    conn: &Connection,
    now: i64,
    limit: usize,
    history: &HistoryConfig,
) -> rusqlite::Result<Vec<String>> {
    let ids: Vec<String> = conn
        .prepare_cached("SELECT id FROM tasks WHERE expires_at <= ?1 LIMIT ?2")?
        .query_map(params![now, limit as i64], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if ids.is_empty() {
        return Ok(ids);
    }
    let batch = serde_json::Value::from(ids.clone()).to_string();
    conn.prepare_cached(
        "INSERT OR FAIL INTO task_history (id, tool, endpoint, issuer, tenant, principal, \
         status, status_message, created_at, updated_at, removed_at, keep_until, error, \
         attempts, rerun_of, schedule, schedule_slot, origin) \
         SELECT id, tool, endpoint, issuer, tenant, principal, status, status_message, \
           created_at, updated_at, ?2, updated_at + keep, error, \
           (SELECT count(*) FROM attempts WHERE attempts.task_id = gone.id), rerun_of, \
           schedule, schedule_slot, CASE WHEN ?6 THEN origin END \
         FROM (SELECT *, CASE status WHEN 'completed' THEN ?3 WHEN 'failed' THEN ?4 \
                 WHEN 'cancelled' THEN ?5 ELSE 0 END AS keep \
               FROM tasks WHERE id IN (SELECT value FROM json_each(?1))) AS gone \
         WHERE keep > 0 AND updated_at + keep > ?2 \
         ON CONFLICT (id) DO NOTHING",
    )?
    .execute(params![
        batch,
        now,
        history.keep_ms(TaskStatus::Completed),
        history.keep_ms(TaskStatus::Failed),
        history.keep_ms(TaskStatus::Cancelled),
        history.keep_arguments,
    ])?;
    conn.prepare_cached("DELETE FROM tasks WHERE id IN (SELECT value FROM json_each(?1))")?
        .execute([batch])?;
    Ok(ids)
}

/// Deletes up to `limit` summaries whose time has passed; returns how many.
pub fn prune(conn: &Connection, now: i64, limit: usize) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "DELETE FROM task_history WHERE id IN (SELECT id FROM task_history \
         WHERE keep_until <= ?1 LIMIT ?2)",
    )?
    .execute(params![now, limit as i64])
}

/// The columns [`summary`] reads.
const SUMMARY_COLUMNS: &str = "id, tool, status, endpoint, tenant, principal, created_at, \
    updated_at, status_message, rerun_of, removed_at, schedule, schedule_slot";
/// Where the columns of a [`HistoryRecord`] start, after the summary's.
const RECORD: usize = 13;

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
        rerun_of: row.get(9)?,
        removed_at: row.get(10)?,
        schedule: match (row.get::<_, Option<String>>(11)?, row.get(12)?) {
            (Some(schedule), Some(slot)) => Some(ScheduleSlot { schedule, slot }),
            _ => None,
        },
    })
}

/// How far before `created_since` a walk down the ids goes on: ids sort by creation,
/// give or take the few milliseconds between creations made together.
const SINCE_SLACK_MS: i64 = 60_000;

/// Up to `limit` summaries matching `filter`, newest first, with ids below `before`:
/// a keyset page down the primary key that examines at most `examine` rows, as
/// `admin::list_tasks` does (and says where to continue when it stops early).
pub fn list(
    conn: &Connection,
    filter: &TaskFilter,
    before: Option<&str>,
    limit: usize,
    examine: usize,
) -> rusqlite::Result<TaskPage> {
    let mut page = TaskPage::default();
    if filter.live_only() {
        return Ok(page);
    }
    let mut clauses = Vec::new();
    let mut values: Vec<&str> = Vec::new();
    for (clause, value) in [("id < ?", before), ("id <= ?", filter.through.as_deref())] {
        if let Some(value) = value {
            clauses.push(clause);
            values.push(value);
        }
    }
    let mut sql = format!("SELECT {SUMMARY_COLUMNS} FROM task_history");
    if !clauses.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&clauses.join(" AND "));
    }
    sql.push_str(" ORDER BY id DESC");
    let mut statement = conn.prepare_cached(&sql)?;
    let mut rows = statement.query(rusqlite::params_from_iter(values))?;
    let mut examined = 0;
    while page.tasks.len() < limit {
        let Some(row) = rows.next()? else {
            return Ok(page);
        };
        examined += 1;
        let task = summary(row)?;
        if let Some(since) = filter.created_since {
            if task.created_at < since.saturating_sub(SINCE_SLACK_MS) {
                return Ok(page);
            }
        }
        let id = task.id.clone();
        if filter.matches(&task) {
            page.tasks.push(task);
        }
        if examined == examine && page.tasks.len() < limit {
            page.resume = Some(id);
            return Ok(page);
        }
    }
    Ok(page)
}

/// The summary of task `task_id`, if one is kept.
pub fn record(conn: &Connection, task_id: &str) -> rusqlite::Result<Option<HistoryRecord>> {
    let sql = format!(
        "SELECT {SUMMARY_COLUMNS}, error, attempts, keep_until, origin FROM task_history \
         WHERE id = ?1"
    );
    conn.prepare_cached(&sql)?
        .query_row([task_id], |row| {
            Ok(HistoryRecord {
                summary: summary(row)?,
                error: row.get(RECORD)?,
                attempts: row.get(RECORD + 1)?,
                keep_until: row.get(RECORD + 2)?,
                origin: row.get(RECORD + 3)?,
            })
        })
        .optional()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::create::create_task;
    use crate::tests::{fresh_store, task_at};
    use taskd_engine::TaskStore;

    /// Tasks created at 1 s, ended at 2 s (or not) as `status`, with two attempts, and
    /// expired: the summaries written are of the finished ones the configuration keeps,
    /// with their attempts counted and no arguments unless asked; then pruned.
    #[test]
    fn expiry_keeps_a_summary_of_each_finished_task_for_its_outcomes_time() {
        let (_dir, store) = fresh_store();
        let statuses = ["completed", "failed", "cancelled", "working"];
        store
            .write(move |conn| {
                for status in statuses {
                    create_task(conn, &task_at(status, 1_000))?;
                    conn.execute(
                        "UPDATE tasks SET status = ?1, updated_at = 2000, expires_at = 3000, \
                         error = CASE WHEN ?1 = 'failed' THEN '{\"code\":1}' END WHERE id = ?1",
                        [status],
                    )?;
                    conn.execute(
                        "INSERT INTO attempts (task_id, attempt, started_at) \
                         VALUES (?1, 1, 1100), (?1, 2, 1500)",
                        [status],
                    )?;
                }
                Ok(())
            })
            .unwrap();
        let history = HistoryConfig {
            completed: 0,
            failed: 10_000,
            cancelled: 500,
            keep_arguments: false,
        };
        // At 4 s, in batches of two: the cancelled task's summary (until 2.5 s) is over
        // already, completed tasks keep none, and an unfinished task leaves none.
        let first = store
            .write({
                let history = history.clone();
                move |conn| expire(conn, 4_000, 2, &history)
            })
            .unwrap();
        assert_eq!(first.len(), 2, "a bounded batch");
        let rest = store
            .write(move |conn| expire(conn, 4_000, 10, &history))
            .unwrap();
        assert_eq!(rest.len(), 2);
        let conn = store.read().unwrap();
        let left: i64 = conn
            .query_row("SELECT count(*) FROM tasks", [], |row| row.get(0))
            .unwrap();
        assert_eq!(left, 0, "every expired task is gone");
        let kept: Vec<String> = conn
            .prepare("SELECT id FROM task_history ORDER BY id")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(kept, ["failed"]);
        let failed = record(&conn, "failed")
            .unwrap()
            .expect("the failure is kept");
        assert_eq!(failed.summary.status, TaskStatus::Failed);
        assert_eq!(failed.summary.removed_at, Some(4_000));
        assert_eq!(failed.attempts, 2);
        assert_eq!(failed.keep_until, 12_000);
        assert_eq!(failed.error.as_deref(), Some("{\"code\":1}"));
        assert_eq!(failed.origin, None, "no arguments unless configured");
        drop(conn);
        let listed = store
            .list_history(&TaskFilter::default(), None, 10)
            .unwrap()
            .tasks;
        assert_eq!(listed.len(), 1);
        assert_eq!(store.write(|conn| prune(conn, 11_999, 10)).unwrap(), 0);
        assert_eq!(store.write(|conn| prune(conn, 12_000, 10)).unwrap(), 1);
        assert!(store.history_record("failed").unwrap().is_none());
    }

    #[test]
    fn arguments_are_kept_when_configured_and_a_summary_can_be_re_run() {
        let (_dir, store) = fresh_store();
        store
            .write(|conn| {
                create_task(conn, &task_at("done", 1_000))?;
                conn.execute(
                    "UPDATE tasks SET status = 'completed', updated_at = 2000, \
                     expires_at = 3000 WHERE id = 'done'",
                    [],
                )?;
                let keeping = HistoryConfig {
                    keep_arguments: true,
                    ..HistoryConfig::default()
                };
                expire(conn, 4_000, 10, &keeping)
            })
            .unwrap();
        let kept = store.history_record("done").unwrap().expect("kept");
        assert_eq!(
            kept.origin.as_deref(),
            Some(&br#"{"arguments":{"n":1}}"#[..])
        );
        let source = store.rerun_source("done").unwrap().expect("re-runnable");
        assert_eq!(source.tool, "tool");
    }
}
