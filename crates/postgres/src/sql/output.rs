//! A task's output on PostgreSQL (schema-postgres.sql, migration 14), as
//! `sqlite::sql::output`: one row per batch, the newest holding the task's totals, kept
//! within the task's cap (the oldest rows go first, the oldest kept one is cut).

use postgres::GenericClient;

use super::super::statements::{Db, Tx};
use super::Failure;
use taskd_engine::output::{OutputBatch, OutputLine, OutputPage, OutputRead};

/// Appends `batch` if `token` still holds the task's job's lease (a batch written while
/// the attempt runs); `false` (and nothing kept) once the lease is gone.
pub fn append_fenced(
    tx: &mut Tx<'_, '_>,
    task_id: &str,
    token: &str,
    batch: &OutputBatch,
) -> Result<bool, Failure> {
    let leased = tx.query_opt(
        "SELECT 1 FROM jobs WHERE task_id = $1 AND lease_token = $2 AND state = 'running'",
        &[&task_id, &token],
    )?;
    if leased.is_none() {
        return Ok(false);
    }
    append(tx, task_id, batch)?;
    Ok(true)
}

/// Appends `batch` (the caller checked the lease: the outcome's write did), then drops
/// the task's oldest lines until at most the batch's cap is kept. The task's newest row
/// is locked first, so that two writes of one task's output take turns (only a stale
/// attempt's could meet a live one's, and the fence refuses it after).
pub fn append(tx: &mut Tx<'_, '_>, task_id: &str, batch: &OutputBatch) -> Result<(), Failure> {
    let newest = tx.query_opt(
        "SELECT seq + lines, kept, dropped FROM task_output WHERE task_id = $1 \
         ORDER BY seq DESC LIMIT 1 FOR UPDATE",
        &[&task_id],
    )?;
    let had_rows = newest.is_some();
    let (mut next, mut kept, mut dropped): (i64, i64, i64) = match &newest {
        Some(row) => (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?),
        None => (1, 0, 0),
    };
    let cap = i64::try_from(batch.cap).unwrap_or(i64::MAX);
    dropped += i64::try_from(batch.dropped).unwrap_or(i64::MAX);
    // Of a batch larger than the cap, only its newest lines can stay.
    let (skipped, bytes) = batch.newest_within(batch.cap);
    let lines = &batch.lines[skipped..];
    dropped += skipped as i64;
    next += skipped as i64;
    kept += bytes as i64;
    if kept > cap {
        let (lines_gone, bytes_gone) = trim(tx, task_id, kept - cap)?;
        dropped += lines_gone;
        kept -= bytes_gone;
    }
    let kept = kept.max(0);
    if lines.is_empty() && had_rows {
        tx.execute(
            "UPDATE task_output SET kept = $2, dropped = $3 WHERE task_id = $1 \
             AND seq = (SELECT max(seq) FROM task_output WHERE task_id = $1)",
            &[&task_id, &kept, &dropped],
        )?;
        return Ok(());
    }
    tx.execute(
        "INSERT INTO task_output (task_id, seq, lines, attempt, bytes, kept, dropped, body) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (task_id, seq) DO UPDATE SET \
         lines = excluded.lines, attempt = excluded.attempt, bytes = excluded.bytes, \
         kept = excluded.kept, dropped = excluded.dropped, body = excluded.body",
        &[
            &task_id,
            &next,
            &(lines.len() as i64),
            &batch.attempt,
            &(bytes as i64),
            &kept,
            &dropped,
            &OutputBatch::encode(lines),
        ],
    )?;
    Ok(())
}

/// Drops the task's oldest lines until `excess` bytes are gone: whole rows, then the
/// oldest line(s) of the next. Returns the lines and bytes dropped.
fn trim(tx: &mut Tx<'_, '_>, task_id: &str, excess: i64) -> Result<(i64, i64), Failure> {
    let rows = tx.query(
        "SELECT seq, lines, bytes, attempt, body FROM task_output WHERE task_id = $1 \
         ORDER BY seq",
        &[&task_id],
    )?;
    let (mut lines_gone, mut bytes_gone) = (0, 0);
    let mut whole_upto = None;
    let mut cut = None;
    for row in &rows {
        if bytes_gone >= excess {
            break;
        }
        let (seq, lines, bytes): (i64, i64, i64) =
            (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        if bytes_gone + bytes <= excess || lines == 0 {
            lines_gone += lines;
            bytes_gone += bytes;
            whole_upto = Some(seq);
            continue;
        }
        // This row stays, without its oldest lines.
        let body: String = row.try_get(4)?;
        let mut kept = OutputBatch::decode(row.try_get(3)?, &body);
        let mut dropped = 0;
        while bytes_gone < excess && dropped < kept.len() {
            bytes_gone += kept[dropped].bytes() as i64;
            dropped += 1;
        }
        kept.drain(..dropped);
        lines_gone += dropped as i64;
        cut = Some((seq, dropped as i64, kept));
        break;
    }
    if let Some(upto) = whole_upto {
        tx.execute(
            "DELETE FROM task_output WHERE task_id = $1 AND seq <= $2",
            &[&task_id, &upto],
        )?;
    }
    if let Some((seq, dropped, kept)) = cut {
        let bytes: u64 = kept.iter().map(OutputLine::bytes).sum();
        tx.execute(
            "UPDATE task_output SET seq = seq + $3, lines = lines - $3, bytes = $4, body = $5 \
             WHERE task_id = $1 AND seq = $2",
            &[
                &task_id,
                &seq,
                &dropped,
                &(bytes as i64),
                &OutputBatch::encode(&kept),
            ],
        )?;
    }
    Ok((lines_gone, bytes_gone))
}

/// The lines `read` asks for, oldest first.
pub fn read(
    conn: &mut Db<'_, impl GenericClient>,
    task_id: &str,
    read: OutputRead,
) -> Result<OutputPage, Failure> {
    let dropped: i64 = conn
        .query_opt(
            "SELECT dropped FROM task_output WHERE task_id = $1 ORDER BY seq DESC LIMIT 1",
            &[&task_id],
        )?
        .map_or(Ok(0), |row| row.try_get(0))?;
    let params: [&dyn super::super::statements::Param; 3] = [&task_id, &read.after, &read.attempt];
    // From the row holding the line after `after` (a row starts at its `seq`).
    let rows = if read.newest {
        conn.query(
            "SELECT seq, attempt, body FROM task_output WHERE task_id = $1 \
             AND seq >= coalesce((SELECT max(seq) FROM task_output WHERE task_id = $1 \
             AND seq <= $2::bigint + 1), 0) AND ($3::bigint IS NULL OR attempt = $3) \
             ORDER BY seq DESC",
            &params,
        )?
    } else {
        conn.query(
            "SELECT seq, attempt, body FROM task_output WHERE task_id = $1 \
             AND seq >= coalesce((SELECT max(seq) FROM task_output WHERE task_id = $1 \
             AND seq <= $2::bigint + 1), 0) AND ($3::bigint IS NULL OR attempt = $3) \
             ORDER BY seq",
            &params,
        )?
    };
    let batches = rows
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)));
    OutputPage::assemble(&read, dropped, batches)
}
