//! Flow control on PostgreSQL (schema-postgres.sql, migration 10), as `sqlite::sql::flow`
//! on SQLite: gates' places, rate buckets, paused tools. What several nodes could race
//! on is taken under a lock: a gate's advisory lock (`taskd_gate_lock`) before its
//! places are counted, a bucket's row lock before its tokens are read. Buckets keep the
//! database's clock as it reads at the statement (`taskd_clock_ms()`): every node reads
//! the same buckets, and a transaction that waited for a bucket's row must not count
//! from its own start (`now()`).

use postgres::{GenericClient, Row};

use super::super::statements::{Db, Tx};
use super::Failure;
use taskd_engine::flow::{Bucket, Gate, Pause, RateLimit, Waiting};

/// Whether a new job of `gate` is admitted (else it is held), under the gate's lock
/// (held until the creation commits): its gate has a place, and no job of it is held.
pub fn admits(tx: &mut Tx<'_, '_>, gate: &Gate) -> Result<bool, Failure> {
    tx.execute("SELECT taskd_gate_lock($1)", &[&gate.id])?;
    let row = tx.query_one(
        "SELECT taskd_gate_places($1, NULL), \
         EXISTS (SELECT 1 FROM jobs WHERE gate = $1 AND held)",
        &[&gate.id],
    )?;
    let (taken, held): (i64, bool) = (row.try_get(0)?, row.try_get(1)?);
    Ok(!held && taken < gate.limit)
}

/// An inline call takes a place of `gate` for `hold_ms`, when the gate admits it.
pub fn hold(tx: &mut Tx<'_, '_>, gate: &Gate, holder: &str, hold_ms: i64) -> Result<bool, Failure> {
    if !admits(tx, gate)? {
        return Ok(false);
    }
    tx.execute(
        "INSERT INTO gate_holds (gate, holder, expires_at) VALUES ($1, $2, taskd_after_ms($3))",
        &[&gate.id, &holder, &hold_ms],
    )?;
    Ok(true)
}

/// The inline call gives its place back (a trigger admits the oldest held job).
pub fn release(tx: &mut Tx<'_, '_>, gate: &str, holder: &str) -> Result<(), Failure> {
    tx.execute(
        "DELETE FROM gate_holds WHERE gate = $1 AND holder = $2",
        &[&gate, &holder],
    )?;
    Ok(())
}

/// Upkeep (the leader's): drops up to `limit` holds past their time, and admits held
/// jobs of up to `limit` gates that have places free (a reload raised their limit).
pub fn upkeep(tx: &mut Tx<'_, '_>, limit: usize) -> Result<(), Failure> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    tx.execute(
        "DELETE FROM gate_holds WHERE (gate, holder) IN (SELECT gate, holder FROM gate_holds \
         WHERE expires_at <= taskd_now_ms() LIMIT $1)",
        &[&limit],
    )?;
    tx.execute(
        "SELECT taskd_gate_admit(gate) FROM (SELECT DISTINCT gate FROM jobs \
         WHERE gate IS NOT NULL AND held LIMIT $1) AS full_gates",
        &[&limit],
    )?;
    Ok(())
}

/// Takes a token from `limit`'s bucket, its row locked: `Err(until)` when it is empty.
pub fn take_token(tx: &mut Tx<'_, '_>, limit: &RateLimit) -> Result<Result<(), i64>, Failure> {
    tx.execute(
        "INSERT INTO rate_buckets (bucket, tokens, updated_at, per_ms, burst) \
         VALUES ($1, $2, taskd_clock_ms(), $3, $2) ON CONFLICT (bucket) DO NOTHING",
        &[&limit.bucket, &limit.burst, &limit.per_ms],
    )?;
    let row = tx.query_one(
        "SELECT tokens, updated_at, per_ms, burst, taskd_clock_ms() FROM rate_buckets \
         WHERE bucket = $1 FOR UPDATE",
        &[&limit.bucket],
    )?;
    let now: i64 = row.try_get(4)?;
    let bucket = Bucket {
        tokens: row.try_get(0)?,
        updated_at: row.try_get(1)?,
        per_ms: row.try_get(2)?,
        burst: row.try_get(3)?,
    }
    .at(limit, now);
    let (after, taken) = match bucket.take() {
        Ok(after) => (after, Ok(())),
        Err(until) => (bucket, Err(until)),
    };
    tx.execute(
        "UPDATE rate_buckets SET tokens = $2, updated_at = $3, per_ms = $4, burst = $5 \
         WHERE bucket = $1",
        &[
            &limit.bucket,
            &after.tokens,
            &after.updated_at,
            &after.per_ms,
            &after.burst,
        ],
    )?;
    Ok(taken)
}

/// Puts back a token [`take_token`] took for a start that did not happen.
pub fn give_token_back(tx: &mut Tx<'_, '_>, limit: &RateLimit) -> Result<(), Failure> {
    tx.execute(
        "UPDATE rate_buckets SET tokens = LEAST(burst, tokens + 1) WHERE bucket = $1",
        &[&limit.bucket],
    )?;
    Ok(())
}

/// The columns [`waiting_at`] reads: a queued job's tool's pause, its gate if held, its
/// buckets, and the database's now (joined by [`waiting_joins`] on `jobs`).
macro_rules! waiting_columns {
    () => {
        "tool_pauses.reason, jobs.held, jobs.gate_label, jobs.gate_limit, \
         tb.tokens, tb.updated_at, tb.per_ms, tb.burst, \
         kb.tokens, kb.updated_at, kb.per_ms, kb.burst, taskd_clock_ms()"
    };
}
pub(crate) use waiting_columns;

/// What [`waiting_columns`] read, joined to a `jobs` row.
macro_rules! waiting_joins {
    () => {
        " LEFT JOIN tool_pauses ON tool_pauses.tool = jobs.tool \
         LEFT JOIN rate_buckets AS tb ON tb.bucket = jobs.tool \
         LEFT JOIN rate_buckets AS kb ON kb.bucket = jobs.gate "
    };
}
pub(crate) use waiting_joins;

/// Why a working task's job waits in the queue, if it does (see
/// `taskd_engine::flow::Waiting`): one read.
pub fn waiting(
    conn: &mut Db<'_, impl GenericClient>,
    task_id: &str,
) -> Result<Option<Waiting>, Failure> {
    let row = conn.query_opt(
        concat!(
            "SELECT ",
            waiting_columns!(),
            " FROM jobs",
            waiting_joins!(),
            "WHERE jobs.task_id = $1 AND jobs.state = 'queued'"
        ),
        &[&task_id],
    )?;
    match row {
        None => Ok(None),
        Some(row) => waiting_at(&row, 0),
    }
}

/// The [`waiting_columns`] that start at column `first` (all NULL: no queued job).
pub fn waiting_at(row: &Row, first: usize) -> Result<Option<Waiting>, Failure> {
    let Some(held) = row.try_get::<_, Option<bool>>(first + 1)? else {
        return Ok(None);
    };
    let bucket = |at: usize| -> Result<Option<Bucket>, Failure> {
        let tokens: Option<f64> = row.try_get(at)?;
        Ok(match tokens {
            None => None,
            Some(tokens) => Some(Bucket {
                tokens,
                updated_at: row.try_get(at + 1)?,
                per_ms: row.try_get(at + 2)?,
                burst: row.try_get(at + 3)?,
            }),
        })
    };
    let gate = if held {
        Some((
            row.try_get::<_, Option<String>>(first + 2)?
                .unwrap_or_default(),
            row.try_get::<_, Option<i64>>(first + 3)?.unwrap_or(1),
        ))
    } else {
        None
    };
    let bucket = bucket(first + 8)?.or(bucket(first + 4)?);
    Ok(Waiting::of(
        row.try_get(first)?,
        gate,
        bucket,
        row.try_get(first + 12)?,
    ))
}

/// Pauses `tool`; `false` when it was paused already (its reason is replaced).
pub fn pause(tx: &mut Tx<'_, '_>, tool: &str, reason: &str) -> Result<bool, Failure> {
    let row = tx.query_one(
        "INSERT INTO tool_pauses (tool, reason, paused_at) VALUES ($1, $2, taskd_now_ms()) \
         ON CONFLICT (tool) DO UPDATE SET reason = excluded.reason \
         RETURNING (xmax = 0)",
        &[&tool, &reason],
    )?;
    Ok(row.try_get(0)?)
}

/// Resumes `tool`; `false` when it was not paused.
pub fn resume(tx: &mut Tx<'_, '_>, tool: &str) -> Result<bool, Failure> {
    Ok(tx.execute("DELETE FROM tool_pauses WHERE tool = $1", &[&tool])? > 0)
}

/// Every paused tool, by name.
pub fn paused(conn: &mut Db<'_, impl GenericClient>) -> Result<Vec<Pause>, Failure> {
    conn.query(
        "SELECT tool, reason, paused_at FROM tool_pauses ORDER BY tool",
        &[],
    )?
    .iter()
    .map(|row| {
        Ok(Pause {
            tool: row.try_get(0)?,
            reason: row.try_get(1)?,
            since: row.try_get(2)?,
        })
    })
    .collect()
}

/// The names of the paused tools (what a claim passes over).
pub fn paused_names(tx: &mut Tx<'_, '_>) -> Result<Vec<String>, Failure> {
    tx.query("SELECT tool FROM tool_pauses", &[])?
        .iter()
        .map(|row| row.try_get(0).map_err(Failure::from))
        .collect()
}
