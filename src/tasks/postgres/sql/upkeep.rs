//! Upkeep queries on PostgreSQL: expired leases and tasks (by the database clock), the
//! outbox, and the counts for `GET /metrics` (folded totals plus the few deltas not
//! folded yet: no scan of `tasks` or `jobs`).

use postgres::{GenericClient, Transaction};

use super::attempts::finish;
use super::Failure;
use crate::protocol::TaskStatus;
use crate::tasks::model::{Finish, Stats, ToolTotals};

/// Every state a job can be in (the CHECK of `jobs.state`).
const JOB_STATES: [&str; 3] = ["queued", "running", "waiting"];

/// How long a node's relay cursor counts after its janitor last wrote it: a node
/// silent for longer is gone (or cut off), and the outbox is pruned without it.
const CURSOR_LIFETIME_MS: i64 = 30_000;

/// Ends up to `limit` attempts whose lease expired by the database clock, as retries;
/// returns how many. Each goes through the fenced [`finish`], which locks task then job
/// like every writer: an attempt its holder is finishing right now keeps its outcome.
///
/// With `orphans_of`, the leases that node holds go too, expired or not: at its
/// start-up, they are the attempts its previous run left (one process per data dir,
/// hence per node id), and another node's live leases are never among them.
pub fn reclaim_expired(
    tx: &mut Transaction<'_>,
    orphans_of: Option<&str>,
    limit: usize,
    reason: &str,
) -> Result<usize, Failure> {
    let leases = tx.query(
        "SELECT task_id, lease_token FROM jobs WHERE state = 'running' \
         AND (lease_expires < taskd_now_ms() OR lease_node = $2) \
         ORDER BY lease_expires LIMIT $1",
        &[&i64::try_from(limit).unwrap_or(i64::MAX), &orphans_of],
    )?;
    let mut reclaimed = 0;
    for lease in &leases {
        let (task_id, token): (String, String) = (lease.try_get(0)?, lease.try_get(1)?);
        let retry = Finish::Retry {
            reason: reason.to_owned(),
        };
        if finish(tx, &task_id, &token, retry)? {
            reclaimed += 1;
        }
    }
    Ok(reclaimed)
}

/// Deletes up to `limit` tasks past their TTL; returns their ids.
pub fn delete_expired(tx: &mut Transaction<'_>, limit: usize) -> Result<Vec<String>, Failure> {
    let rows = tx.query(
        "DELETE FROM tasks WHERE id IN (SELECT id FROM tasks \
         WHERE expires_at <= taskd_now_ms() LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id",
        &[&i64::try_from(limit).unwrap_or(i64::MAX)],
    )?;
    rows.iter()
        .map(|row| row.try_get(0).map_err(Failure::from))
        .collect()
}

/// Outbox rows after `after`, oldest first. `seq` is the commit order (see
/// `taskd_append_outbox`): a row committed later never has a smaller `seq`, so reading
/// past the last one seen skips nothing.
pub fn outbox_after(
    conn: &mut impl GenericClient,
    after: i64,
    limit: usize,
) -> Result<Vec<(i64, String)>, Failure> {
    let rows = conn.query(
        "SELECT seq, task_id FROM outbox WHERE seq > $1 ORDER BY seq LIMIT $2",
        &[&after, &i64::try_from(limit).unwrap_or(i64::MAX)],
    )?;
    rows.iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
        .collect()
}

pub fn max_outbox_seq(conn: &mut impl GenericClient) -> Result<i64, Failure> {
    Ok(conn
        .query_one("SELECT COALESCE(MAX(seq), 0) FROM outbox", &[])?
        .try_get(0)?)
}

/// Records how far `node`'s relay has delivered.
pub fn note_delivered(
    conn: &mut impl GenericClient,
    node: &str,
    delivered: i64,
) -> Result<(), Failure> {
    conn.execute(
        "INSERT INTO relay_cursors (node, delivered, seen_at) VALUES ($1, $2, taskd_now_ms()) \
         ON CONFLICT (node) DO UPDATE SET delivered = excluded.delivered, \
         seen_at = excluded.seen_at",
        &[&node, &delivered],
    )?;
    Ok(())
}

/// Deletes up to `limit` rows every live node's relay has delivered (and this one's,
/// `upto`); the newest row always stays (so that [`max_outbox_seq`] never goes back).
pub fn prune_outbox(
    conn: &mut impl GenericClient,
    upto: i64,
    limit: usize,
) -> Result<usize, Failure> {
    conn.execute(
        "DELETE FROM relay_cursors WHERE seen_at < taskd_now_ms() - 3600000",
        &[],
    )?;
    let pruned = conn.execute(
        "DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox \
         WHERE seq <= LEAST($1, (SELECT MIN(delivered) FROM relay_cursors \
                                 WHERE seen_at >= taskd_now_ms() - $3)) \
         AND seq < (SELECT MAX(seq) FROM outbox) ORDER BY seq LIMIT $2)",
        &[
            &upto,
            &i64::try_from(limit).unwrap_or(i64::MAX),
            &CURSOR_LIFETIME_MS,
        ],
    )?;
    Ok(usize::try_from(pruned).unwrap_or(usize::MAX))
}

/// Folds the count deltas into the counts (`taskd_fold_counts`).
pub fn fold_counts(conn: &mut impl GenericClient) -> Result<(), Failure> {
    conn.execute("SELECT taskd_fold_counts()", &[])?;
    Ok(())
}

/// Every status and state with its count (zero included), and the per-tool totals.
pub fn stats(conn: &mut impl GenericClient) -> Result<Stats, Failure> {
    let mut tasks: Vec<(String, u64)> = TaskStatus::ALL
        .iter()
        .map(|status| (status.as_str().to_owned(), 0))
        .collect();
    let rows = conn.query(
        "SELECT status, SUM(n)::bigint FROM (SELECT status, n FROM task_counts \
         UNION ALL SELECT status, n FROM task_count_deltas) AS c GROUP BY status",
        &[],
    )?;
    for row in &rows {
        let (status, count): (String, i64) = (row.try_get(0)?, row.try_get(1)?);
        if let Some(entry) = tasks.iter_mut().find(|(known, _)| *known == status) {
            entry.1 = count.max(0) as u64;
        }
    }
    let rows = conn.query(
        "SELECT tool, SUM(created)::bigint, SUM(completed)::bigint, SUM(failed)::bigint, \
         SUM(cancelled)::bigint FROM (SELECT tool, created, completed, failed, cancelled \
         FROM task_totals UNION ALL SELECT tool, created, completed, failed, cancelled \
         FROM task_total_deltas) AS t GROUP BY tool ORDER BY tool",
        &[],
    )?;
    let totals = rows
        .iter()
        .map(|row| {
            let count = |i| row.try_get::<_, i64>(i).map(|n| n.max(0) as u64);
            Ok(ToolTotals {
                tool: row.try_get(0)?,
                created: count(1)?,
                completed: count(2)?,
                failed: count(3)?,
                cancelled: count(4)?,
            })
        })
        .collect::<Result<Vec<_>, Failure>>()?;
    let oldest: i64 = conn
        .query_one(
            "SELECT COALESCE(taskd_now_ms() - MIN(run_after), 0) FROM jobs \
             WHERE state = 'queued' AND run_after <= taskd_now_ms()",
            &[],
        )?
        .try_get(0)?;
    // The span of sequence numbers kept: an upper bound (rolled-back rows leave gaps),
    // read from the two ends of the primary key instead of counting the rows.
    let outbox_rows: i64 = conn
        .query_one(
            "SELECT COALESCE(MAX(seq) - MIN(seq) + 1, 0) FROM outbox",
            &[],
        )?
        .try_get(0)?;
    Ok(Stats {
        tasks,
        jobs: job_counts(conn)?,
        totals,
        oldest_ready_age_ms: oldest.max(0) as u64,
        outbox_rows: outbox_rows.max(0) as u64,
    })
}

/// Jobs by state, every state included.
pub fn job_counts(conn: &mut impl GenericClient) -> Result<Vec<(String, u64)>, Failure> {
    let mut jobs: Vec<(String, u64)> = JOB_STATES
        .iter()
        .map(|state| ((*state).to_owned(), 0))
        .collect();
    let rows = conn.query(
        "SELECT state, SUM(n)::bigint FROM (SELECT state, n FROM job_counts \
         UNION ALL SELECT state, n FROM job_count_deltas) AS j GROUP BY state",
        &[],
    )?;
    for row in &rows {
        let (state, count): (String, i64) = (row.try_get(0)?, row.try_get(1)?);
        if let Some(entry) = jobs.iter_mut().find(|(known, _)| *known == state) {
            entry.1 = count.max(0) as u64;
        }
    }
    Ok(jobs)
}

/// Jobs waiting for a worker (backoff included).
pub fn queued_jobs(conn: &mut impl GenericClient) -> Result<u64, Failure> {
    Ok(job_counts(conn)?
        .into_iter()
        .find(|(state, _)| state == "queued")
        .map_or(0, |(_, n)| n))
}
