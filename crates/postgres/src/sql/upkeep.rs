//! Upkeep queries on PostgreSQL: expired leases and tasks (by the database clock), the
//! outbox, and the counts for `GET /metrics` (folded totals plus the few deltas not
//! folded yet: no scan of `tasks` or `jobs`).

use std::time::{Duration, Instant};

use postgres::GenericClient;

use super::super::statements::{Db, Tx};

use super::attempts::finish;
use super::Failure;
use taskd_engine::model::{Finish, Lease, Stats, ToolTotals};
use taskd_protocol::TaskStatus;

/// Every state a job can be in (the CHECK of `jobs.state`).
const JOB_STATES: [&str; 3] = ["queued", "running", "waiting"];

/// How long a node's relay cursor counts after its janitor last wrote it: a node
/// silent for longer is gone (or cut off), and the outbox is pruned without it.
const CURSOR_LIFETIME_MS: i64 = 30_000;

/// Ends up to `limit` attempts whose lease expired by the database clock, as retries;
/// returns how many. They go through the fenced [`finish`], which locks task then job
/// like every writer: an attempt its holder is finishing right now keeps its outcome.
///
/// With `earlier_runs` (a node id and its current run), the leases that node's earlier
/// runs hold go too, expired or not: at its start-up, they are the attempts its
/// previous run left (one process per data dir, hence per node id). Another node's live
/// leases are never among them, nor the current run's (recovery runs while it claims).
pub fn reclaim_expired(
    tx: &mut Tx<'_, '_>,
    earlier_runs: Option<(&str, &str)>,
    limit: usize,
    reason: &str,
) -> Result<usize, Failure> {
    let (node, run) = earlier_runs.unzip();
    let leases = tx.query(
        "SELECT task_id, lease_token FROM jobs WHERE state = 'running' \
         AND (lease_expires < taskd_now_ms() \
              OR (split_part(lease_node, '/', 1) = $2 AND lease_node <> $3)) \
         ORDER BY lease_expires LIMIT $1",
        &[&i64::try_from(limit).unwrap_or(i64::MAX), &node, &run],
    )?;
    let retries = leases
        .iter()
        .map(|lease| {
            let lease = Lease {
                task_id: lease.try_get(0)?,
                token: lease.try_get(1)?,
            };
            let retry = Finish::Retry {
                reason: reason.to_owned(),
            };
            Ok((lease, retry))
        })
        .collect::<Result<Vec<_>, Failure>>()?;
    let applied = finish(tx, &retries)?;
    Ok(applied.into_iter().filter(|applied| *applied).count())
}

/// Outbox rows of the transactions after position `after` that have all ended, oldest
/// first, as (position, task id); a position is the id of the transaction that wrote
/// the row (schema-postgres.sql, `outbox`). Rows of transactions at or past the oldest
/// one still running wait for it: once it ends, every row below the new horizon is
/// visible, and a transaction that commits later has a larger id. Reading past the last
/// position seen therefore skips nothing. `limit` counts transactions (their rows come
/// whole, so that no position is left half read).
pub fn outbox_after(
    conn: &mut Db<'_, impl GenericClient>,
    after: i64,
    limit: usize,
) -> Result<Vec<(i64, String)>, Failure> {
    let rows = conn.query(
        "WITH ended AS ( \
           SELECT DISTINCT xid FROM outbox \
           WHERE xid > $1::text::xid8 AND xid < pg_snapshot_xmin(pg_current_snapshot()) \
           ORDER BY xid LIMIT $2) \
         SELECT outbox.xid::text::bigint, outbox.task_id FROM outbox JOIN ended USING (xid) \
         ORDER BY outbox.xid, outbox.seq",
        &[
            &after.to_string(),
            &i64::try_from(limit).unwrap_or(i64::MAX),
        ],
    )?;
    rows.iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
        .collect()
}

/// How long [`newest_position`] waits for transactions older than the newest committed
/// row to end.
const SETTLE: Duration = Duration::from_millis(50);

/// The outbox position that separates what committed before from what commits after:
/// every row committed now is at or below it, every row committed later above. It is
/// the horizon below the oldest running transaction, once that horizon has passed the
/// newest committed row (exact); while a transaction older than that row still runs
/// (under load, for up to [`SETTLE`]), the horizon alone: then rows committed just
/// before may also count as after (a listen stream then hears of such a task once, with
/// its current state), but none committed after is ever counted before.
pub fn newest_position(conn: &mut Db<'_, impl GenericClient>) -> Result<i64, Failure> {
    let started = Instant::now();
    loop {
        let row = conn.query_one(
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint - 1, \
             COALESCE((SELECT xid::text::bigint FROM outbox ORDER BY xid DESC LIMIT 1), 0)",
            &[],
        )?;
        let (horizon, newest): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        if horizon >= newest || started.elapsed() >= SETTLE {
            return Ok(horizon);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Records how far `node`'s relay has delivered.
pub fn note_delivered(
    conn: &mut Db<'_, impl GenericClient>,
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
/// `upto`).
pub fn prune_outbox(
    conn: &mut Db<'_, impl GenericClient>,
    upto: i64,
    limit: usize,
) -> Result<usize, Failure> {
    conn.execute(
        "DELETE FROM relay_cursors WHERE seen_at < taskd_now_ms() - 3600000",
        &[],
    )?;
    let pruned = conn.execute(
        "DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox \
         WHERE xid <= (LEAST($1, (SELECT MIN(delivered) FROM relay_cursors \
                                  WHERE seen_at >= taskd_now_ms() - $3)))::text::xid8 \
         ORDER BY xid LIMIT $2)",
        &[
            &upto,
            &i64::try_from(limit).unwrap_or(i64::MAX),
            &CURSOR_LIFETIME_MS,
        ],
    )?;
    Ok(usize::try_from(pruned).unwrap_or(usize::MAX))
}

/// Folds the count deltas into the counts (`taskd_fold_counts`).
pub fn fold_counts(tx: &mut Tx<'_, '_>) -> Result<(), Failure> {
    tx.execute("SELECT taskd_fold_counts()", &[])?;
    Ok(())
}

/// Every status and state with its count (zero included), and the per-tool totals.
pub fn stats(conn: &mut Db<'_, impl GenericClient>) -> Result<Stats, Failure> {
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
pub fn job_counts(conn: &mut Db<'_, impl GenericClient>) -> Result<Vec<(String, u64)>, Failure> {
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

/// Tasks of `owner` not yet terminal (each has its job until then), up to `at_most`:
/// at most that many entries of jobs_by_owner.
pub fn live_tasks(
    conn: &mut Db<'_, impl GenericClient>,
    owner: &str,
    at_most: u64,
) -> Result<u64, Failure> {
    let at_most = i64::try_from(at_most).unwrap_or(i64::MAX);
    let row = conn.query_one(
        "SELECT COUNT(*) FROM (SELECT 1 FROM jobs WHERE owner = $1 LIMIT $2) AS live",
        &[&owner, &at_most],
    )?;
    Ok(row.try_get::<_, i64>(0)?.max(0) as u64)
}

/// Jobs waiting for a worker (backoff included).
pub fn queued_jobs(conn: &mut Db<'_, impl GenericClient>) -> Result<u64, Failure> {
    Ok(job_counts(conn)?
        .into_iter()
        .find(|(state, _)| state == "queued")
        .map_or(0, |(_, n)| n))
}
