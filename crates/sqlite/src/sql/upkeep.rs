//! Upkeep queries: expired leases, the outbox, and the counts for `GET /metrics`
//! (expired tasks and their history summaries: `history`).

use rusqlite::{params, Connection, OptionalExtension};

use taskd_engine::model::{Stats, ToolTotals};
use taskd_protocol::TaskStatus;

/// Which leased jobs a pass reclaims: [`taskd_engine::backend::Reclaim`] in this
/// process's clock (the data dir's lock makes every lease this process's).
#[derive(Debug, Clone, Copy)]
pub enum Orphans {
    /// Jobs whose lease expired before this time (Unix ms): the janitor's pass.
    ExpiredBefore(i64),
    /// Jobs whose current attempt started before this time (Unix ms): start-up
    /// recovery's pass, for attempts of a process that is gone. Attempts this process
    /// started later are left alone, so recovery can run while workers claim.
    StartedBefore(i64),
}

/// Every state a job can be in (the CHECK of `jobs.state`).
pub const JOB_STATES: [&str; 3] = ["queued", "running", "waiting"];

/// Leased jobs chosen by `which`, with their fencing tokens. Both walk `jobs_leased`;
/// start-up's pass looks up each job's current attempt (an attempt row is written in
/// the claim's transaction; one missing counts as old) and passes over the few this
/// process started.
pub fn orphaned_leases(
    conn: &Connection,
    which: Orphans,
    limit: usize,
) -> rusqlite::Result<Vec<(String, String)>> {
    let (sql, at) = match which {
        Orphans::ExpiredBefore(at) => (
            "SELECT task_id, lease_token FROM jobs WHERE state = 'running' \
             AND lease_expires < ?1 LIMIT ?2",
            at,
        ),
        Orphans::StartedBefore(at) => (
            "SELECT jobs.task_id, jobs.lease_token FROM jobs LEFT JOIN attempts \
             ON attempts.task_id = jobs.task_id AND attempts.attempt = jobs.attempt \
             WHERE jobs.state = 'running' \
             AND (attempts.started_at IS NULL OR attempts.started_at < ?1) LIMIT ?2",
            at,
        ),
    };
    let mut statement = conn.prepare_cached(sql)?;
    let rows = statement.query_map(params![at, limit as i64], |row| {
        Ok((row.get(0)?, row.get(1)?))
    })?;
    rows.collect()
}

/// Outbox rows after `after`, oldest first.
pub fn outbox_after(
    conn: &Connection,
    after: i64,
    limit: usize,
) -> rusqlite::Result<Vec<(i64, String)>> {
    let mut statement = conn
        .prepare_cached("SELECT seq, task_id FROM outbox WHERE seq > ?1 ORDER BY seq LIMIT ?2")?;
    let rows = statement.query_map(params![after, limit as i64], |row| {
        Ok((row.get(0)?, row.get(1)?))
    })?;
    rows.collect()
}

/// Deletes up to `limit` delivered outbox rows (`seq <= upto`); returns how many.
///
/// The newest row always stays: `seq` has no AUTOINCREMENT, and a new row takes the
/// largest `seq` plus one, so keeping it is what keeps `seq` growing (subscriptions
/// compare it with where they started).
pub fn prune_outbox(conn: &Connection, upto: i64, limit: usize) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox \
         WHERE seq <= ?1 AND seq < (SELECT MAX(seq) FROM outbox) LIMIT ?2)",
    )?
    .execute(params![upto, limit as i64])
}

/// Every status and state with its count (zero included, so series never vanish), and
/// the per-tool totals. The counts come from `task_counts`, `task_totals` and
/// `job_counts`, which triggers keep (schema.sql, migration 4): a few rows, whatever the
/// number of tasks. The oldest ready job is one seek in `jobs_ready`; the outbox is kept
/// short by the janitor.
pub fn stats(conn: &Connection, now: i64) -> rusqlite::Result<Stats> {
    let mut tasks: Vec<(String, u64)> = TaskStatus::ALL
        .iter()
        .map(|status| (status.as_str().to_owned(), 0))
        .collect();
    let mut statement =
        conn.prepare_cached("SELECT status, SUM(n) FROM task_counts GROUP BY status")?;
    let rows = statement.query_map([], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
    })?;
    for row in rows {
        let (status, count) = row?;
        if let Some(entry) = tasks.iter_mut().find(|(known, _)| *known == status) {
            entry.1 = count.max(0) as u64;
        }
    }
    let mut statement = conn.prepare_cached(
        "SELECT tool, created, completed, failed, cancelled FROM task_totals ORDER BY tool",
    )?;
    let totals = statement
        .query_map([], |row| {
            let count = |i| row.get::<_, i64>(i).map(|n| n.max(0) as u64);
            Ok(ToolTotals {
                tool: row.get(0)?,
                created: count(1)?,
                completed: count(2)?,
                failed: count(3)?,
                cancelled: count(4)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let oldest: Option<i64> = conn.query_row(
        "SELECT MIN(run_after) FROM jobs WHERE state = 'queued' AND run_after <= ?1",
        [now],
        |row| row.get(0),
    )?;
    let outbox_rows: i64 = conn.query_row("SELECT COUNT(*) FROM outbox", [], |row| row.get(0))?;
    Ok(Stats {
        tasks,
        jobs: job_counts(conn)?,
        totals,
        oldest_ready_age_ms: oldest.map_or(0, |at| (now - at).max(0) as u64),
        outbox_rows: outbox_rows.max(0) as u64,
    })
}

/// Jobs by state, every state included: the rows of `job_counts`.
pub fn job_counts(conn: &Connection) -> rusqlite::Result<Vec<(String, u64)>> {
    let mut jobs: Vec<(String, u64)> = JOB_STATES
        .iter()
        .map(|state| ((*state).to_owned(), 0))
        .collect();
    let mut statement = conn.prepare_cached("SELECT state, n FROM job_counts")?;
    let rows = statement.query_map([], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
    })?;
    for row in rows {
        let (state, count) = row?;
        if let Some(entry) = jobs.iter_mut().find(|(known, _)| *known == state) {
            entry.1 = count.max(0) as u64;
        }
    }
    Ok(jobs)
}

pub fn max_outbox_seq(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT COALESCE(MAX(seq), 0) FROM outbox", [], |row| {
        row.get(0)
    })
}

/// Tasks of `owner` not yet terminal (each has its job until then), up to `at_most`:
/// its rows of `identity_queue`, one per priority it has used.
pub fn live_tasks(conn: &Connection, owner: &str, at_most: u64) -> rusqlite::Result<u64> {
    let count: i64 = conn
        .prepare_cached("SELECT COALESCE(SUM(jobs), 0) FROM identity_queue WHERE owner = ?1")?
        .query_row([owner], |row| row.get(0))?;
    Ok((count.max(0) as u64).min(at_most))
}

/// Forgets up to 1,000 identities' places in the queue once they have no jobs left:
/// their last turns are behind the head of the queue, where their next jobs start
/// anyway (schema.sql, migration 12). Returns how many.
pub fn prune_identity_queue(conn: &Connection) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "DELETE FROM identity_queue WHERE (owner, priority) IN \
         (SELECT owner, priority FROM identity_queue WHERE jobs <= 0 LIMIT 1000)",
    )?
    .execute([])
}

/// Jobs waiting for a worker (backoff included): one row of `job_counts`.
pub fn queued_jobs(conn: &Connection) -> rusqlite::Result<u64> {
    let count: Option<i64> = conn
        .query_row(
            "SELECT n FROM job_counts WHERE state = 'queued'",
            [],
            |row| row.get(0),
        )
        .optional()?;
    Ok(count.unwrap_or(0).max(0) as u64)
}
