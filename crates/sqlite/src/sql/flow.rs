//! Flow control on SQLite (schema.sql, migration 15; the scheme is told at
//! `taskd_engine::flow`): gates' places, rate buckets, paused tools. Every write here
//! runs in the single writer, so a count read and the write that depends on it never
//! interleave with another's.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};

use taskd_engine::flow::{Bucket, Gate, Pause, RateLimit};

/// The places a gate has taken: its admitted jobs (queued or running) and its holds.
const PLACES: &str = "SELECT (SELECT count(*) FROM jobs WHERE gate = ?1 AND held = 0 \
       AND state <> 'waiting') + (SELECT count(*) FROM gate_holds WHERE gate = ?1), \
     EXISTS (SELECT 1 FROM jobs WHERE gate = ?1 AND held = 1)";

/// A gate's places taken, and whether any of its jobs is held.
fn places(conn: &Connection, gate: &str) -> rusqlite::Result<(i64, bool)> {
    conn.prepare_cached(PLACES)?
        .query_row([gate], |row| Ok((row.get(0)?, row.get(1)?)))
}

/// Whether the jobs created in one write are admitted by their gates, in order: each
/// gate is read once, then counted as its jobs are admitted or held.
#[derive(Default)]
pub struct Admissions {
    gates: HashMap<String, (i64, bool)>,
}

impl Admissions {
    /// Whether a new job of `gate` is admitted (else it is held): its gate has a place,
    /// and no older job of it is held (new jobs are the newest: any held job is older).
    pub fn admits(&mut self, conn: &Connection, gate: &Gate) -> rusqlite::Result<bool> {
        let state = match self.gates.get_mut(&gate.id) {
            Some(state) => state,
            None => {
                let read = places(conn, &gate.id)?;
                self.gates.entry(gate.id.clone()).or_insert(read)
            }
        };
        let (taken, held) = state;
        if *held || *taken >= gate.limit {
            *held = true;
            return Ok(false);
        }
        *taken += 1;
        Ok(true)
    }
}

/// An inline call takes a place of `gate` until `expires_at`, when the gate admits it.
pub fn hold(
    conn: &Connection,
    gate: &Gate,
    holder: &str,
    expires_at: i64,
) -> rusqlite::Result<bool> {
    let (taken, held) = places(conn, &gate.id)?;
    if held || taken >= gate.limit {
        return Ok(false);
    }
    conn.prepare_cached(
        "INSERT OR FAIL INTO gate_holds (gate, holder, expires_at) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![gate.id, holder, expires_at])?;
    Ok(true)
}

/// The inline call gives its place back (a trigger admits the oldest held job).
pub fn release(conn: &Connection, gate: &str, holder: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM gate_holds WHERE gate = ?1 AND holder = ?2")?
        .execute(params![gate, holder])?;
    Ok(())
}

/// Upkeep: drops up to `limit` holds past their time (their calls died with a process),
/// and admits held jobs of up to `limit` gates that have places free (a reload raised
/// their limit). Returns how many holds lapsed.
pub fn upkeep(conn: &Connection, now: i64, limit: usize) -> rusqlite::Result<usize> {
    let lapsed = conn
        .prepare_cached(
            "DELETE FROM gate_holds WHERE (gate, holder) IN (SELECT gate, holder \
             FROM gate_holds WHERE expires_at <= ?1 LIMIT ?2)",
        )?
        .execute(params![now, limit as i64])?;
    let gates: Vec<String> = conn
        .prepare_cached(
            "SELECT DISTINCT gate FROM jobs WHERE gate IS NOT NULL AND held = 1 LIMIT ?1",
        )?
        .query_map([limit as i64], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for gate in gates {
        conn.prepare_cached(
            "UPDATE OR FAIL jobs SET held = 0 WHERE task_id IN (
                SELECT task_id FROM jobs WHERE gate = ?1 AND held = 1 ORDER BY task_id
                LIMIT max(0, coalesce((SELECT gate_limit FROM jobs WHERE gate = ?1
                              AND held = 1 ORDER BY task_id DESC LIMIT 1), 0)
                    - (SELECT count(*) FROM jobs WHERE gate = ?1 AND held = 0
                       AND state <> 'waiting')
                    - (SELECT count(*) FROM gate_holds WHERE gate = ?1)))",
        )?
        .execute([&gate])?;
    }
    Ok(lapsed)
}

/// Takes a token from `limit`'s bucket at `now`: `Err(until)` when it is empty.
pub fn take_token(
    conn: &Connection,
    limit: &RateLimit,
    now: i64,
) -> rusqlite::Result<Result<(), i64>> {
    let stored = bucket(conn, &limit.bucket)?;
    let bucket = stored.map_or_else(|| Bucket::full(limit, now), |b| b.at(limit, now));
    let (after, taken) = match bucket.take() {
        Ok(after) => (after, Ok(())),
        Err(until) => (bucket, Err(until)),
    };
    conn.prepare_cached(
        "INSERT INTO rate_buckets (bucket, tokens, updated_at, per_ms, burst) \
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (bucket) DO UPDATE SET \
         tokens = excluded.tokens, updated_at = excluded.updated_at, \
         per_ms = excluded.per_ms, burst = excluded.burst",
    )?
    .execute(params![
        limit.bucket,
        after.tokens,
        after.updated_at,
        after.per_ms,
        after.burst
    ])?;
    Ok(taken)
}

/// Puts back a token [`take_token`] took for a start that did not happen.
pub fn give_token_back(conn: &Connection, limit: &RateLimit) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE rate_buckets SET tokens = min(burst, tokens + 1) WHERE bucket = ?1",
    )?
    .execute([&limit.bucket])?;
    Ok(())
}

/// A bucket as stored.
pub fn bucket(conn: &Connection, name: &str) -> rusqlite::Result<Option<Bucket>> {
    conn.prepare_cached(
        "SELECT tokens, updated_at, per_ms, burst FROM rate_buckets WHERE bucket = ?1",
    )?
    .query_row([name], |row| {
        Ok(Bucket {
            tokens: row.get(0)?,
            updated_at: row.get(1)?,
            per_ms: row.get(2)?,
            burst: row.get(3)?,
        })
    })
    .optional()
}

/// Pauses `tool`; `false` when it was paused already (its reason is replaced).
pub fn pause(conn: &Connection, tool: &str, reason: &str, now: i64) -> rusqlite::Result<bool> {
    let was = conn
        .prepare_cached("UPDATE tool_pauses SET reason = ?2 WHERE tool = ?1")?
        .execute(params![tool, reason])?;
    if was > 0 {
        return Ok(false);
    }
    conn.prepare_cached("INSERT INTO tool_pauses (tool, reason, paused_at) VALUES (?1, ?2, ?3)")?
        .execute(params![tool, reason, now])?;
    Ok(true)
}

/// Resumes `tool`; `false` when it was not paused.
pub fn resume(conn: &Connection, tool: &str) -> rusqlite::Result<bool> {
    let removed = conn
        .prepare_cached("DELETE FROM tool_pauses WHERE tool = ?1")?
        .execute([tool])?;
    Ok(removed > 0)
}

/// Every paused tool, by name.
pub fn paused(conn: &Connection) -> rusqlite::Result<Vec<Pause>> {
    conn.prepare_cached("SELECT tool, reason, paused_at FROM tool_pauses ORDER BY tool")?
        .query_map([], |row| {
            Ok(Pause {
                tool: row.get(0)?,
                reason: row.get(1)?,
                since: row.get(2)?,
            })
        })?
        .collect()
}

/// The names of the paused tools (what a claim passes over).
pub fn paused_names(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    conn.prepare_cached("SELECT tool FROM tool_pauses")?
        .query_map([], |row| row.get(0))?
        .collect()
}
