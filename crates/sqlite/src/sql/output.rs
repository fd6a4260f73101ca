//! A task's output (schema.sql, migration 19): one row per batch an attempt writes
//! (`taskd_engine::output::OutputBatch`), its lines numbered by position; the newest row
//! carries the task's totals (bytes kept, lines dropped). Kept within the task's cap:
//! the oldest rows go first, and the oldest kept row is cut to its newest lines.

use rusqlite::{params, Connection, OptionalExtension};

use taskd_engine::output::{OutputBatch, OutputLine, OutputPage, OutputRead};

/// Appends `batch` if `token` still holds the task's job's lease (a batch written
/// while the attempt runs); `false` (and nothing kept) once the lease is gone.
pub fn append_fenced(
    conn: &Connection,
    task_id: &str,
    token: &str,
    batch: &OutputBatch,
) -> rusqlite::Result<bool> {
    let leased: Option<i64> = conn
        .prepare_cached(
            "SELECT 1 FROM jobs WHERE task_id = ?1 AND lease_token = ?2 AND state = 'running'",
        )?
        .query_row(params![task_id, token], |row| row.get(0))
        .optional()?;
    if leased.is_none() {
        return Ok(false);
    }
    append(conn, task_id, batch)?;
    Ok(true)
}

/// The newest row's position after its last line, and the task's totals.
struct Totals {
    next: i64,
    kept: i64,
    dropped: i64,
}

/// Appends `batch` (the caller checked the lease: the outcome's write did), then drops
/// the task's oldest lines until at most the batch's cap is kept.
pub fn append(conn: &Connection, task_id: &str, batch: &OutputBatch) -> rusqlite::Result<()> {
    let newest = conn
        .prepare_cached(
            "SELECT seq + lines, kept, dropped FROM task_output WHERE task_id = ?1 \
             ORDER BY seq DESC LIMIT 1",
        )?
        .query_row([task_id], |row| {
            Ok(Totals {
                next: row.get(0)?,
                kept: row.get(1)?,
                dropped: row.get(2)?,
            })
        })
        .optional()?;
    let had_rows = newest.is_some();
    let mut totals = newest.unwrap_or(Totals {
        next: 1,
        kept: 0,
        dropped: 0,
    });
    let cap = i64::try_from(batch.cap).unwrap_or(i64::MAX);
    totals.dropped += i64::try_from(batch.dropped).unwrap_or(i64::MAX);
    // Of a batch larger than the cap, only its newest lines can stay.
    let (skipped, bytes) = batch.newest_within(batch.cap);
    let lines = &batch.lines[skipped..];
    totals.dropped += skipped as i64;
    totals.next += skipped as i64;
    totals.kept += bytes as i64;
    if totals.kept > cap {
        let (lines_gone, bytes_gone) = trim(conn, task_id, totals.kept - cap)?;
        totals.dropped += lines_gone;
        totals.kept -= bytes_gone;
    }
    if lines.is_empty() {
        // Only lines dropped: the newest row says so (or a row of none, which the next
        // batch takes the place of).
        if had_rows {
            conn.prepare_cached(
                "UPDATE task_output SET kept = ?2, dropped = ?3 WHERE task_id = ?1 \
                 AND seq = (SELECT max(seq) FROM task_output WHERE task_id = ?1)",
            )?
            .execute(params![task_id, totals.kept, totals.dropped])?;
            return Ok(());
        }
    }
    conn.prepare_cached(
        "INSERT OR REPLACE INTO task_output \
         (task_id, seq, lines, attempt, bytes, kept, dropped, body) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        task_id,
        totals.next,
        lines.len() as i64,
        batch.attempt,
        bytes as i64,
        totals.kept.max(0),
        totals.dropped,
        OutputBatch::encode(lines),
    ])?;
    Ok(())
}

/// Drops the task's oldest lines until `excess` bytes are gone: whole rows, then the
/// oldest line(s) of the next. Returns the lines and bytes dropped.
fn trim(conn: &Connection, task_id: &str, excess: i64) -> rusqlite::Result<(i64, i64)> {
    let mut oldest = conn.prepare_cached(
        "SELECT seq, lines, bytes, attempt, body FROM task_output WHERE task_id = ?1 \
         ORDER BY seq",
    )?;
    let mut rows = oldest.query([task_id])?;
    let (mut lines_gone, mut bytes_gone) = (0, 0);
    let mut whole_upto = None;
    let mut cut = None;
    while bytes_gone < excess {
        let Some(row) = rows.next()? else {
            break;
        };
        let (seq, lines, bytes): (i64, i64, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
        if bytes_gone + bytes <= excess || lines == 0 {
            lines_gone += lines;
            bytes_gone += bytes;
            whole_upto = Some(seq);
            continue;
        }
        // This row stays, without its oldest lines.
        let attempt: i64 = row.get(3)?;
        let body: String = row.get(4)?;
        let mut kept = OutputBatch::decode(attempt, &body);
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
    drop(rows);
    if let Some(upto) = whole_upto {
        conn.prepare_cached("DELETE FROM task_output WHERE task_id = ?1 AND seq <= ?2")?
            .execute(params![task_id, upto])?;
    }
    if let Some((seq, dropped, kept)) = cut {
        let bytes: u64 = kept.iter().map(OutputLine::bytes).sum();
        conn.prepare_cached(
            "UPDATE task_output SET seq = seq + ?3, lines = lines - ?3, bytes = ?4, body = ?5 \
             WHERE task_id = ?1 AND seq = ?2",
        )?
        .execute(params![
            task_id,
            seq,
            dropped,
            bytes as i64,
            OutputBatch::encode(&kept)
        ])?;
    }
    Ok((lines_gone, bytes_gone))
}

/// The lines `read` asks for, oldest first.
pub fn read(conn: &Connection, task_id: &str, read: OutputRead) -> rusqlite::Result<OutputPage> {
    let dropped: i64 = conn
        .prepare_cached(
            "SELECT dropped FROM task_output WHERE task_id = ?1 ORDER BY seq DESC LIMIT 1",
        )?
        .query_row([task_id], |row| row.get(0))
        .optional()?
        .unwrap_or(0);
    // From the row holding the line after `after` (a row starts at its `seq`).
    let from_row = "seq >= coalesce((SELECT max(seq) FROM task_output WHERE task_id = ?1 \
                    AND seq <= ?2 + 1), 0) AND (?3 IS NULL OR attempt = ?3)";
    let sql = if read.newest {
        format!(
            "SELECT seq, attempt, body FROM task_output WHERE task_id = ?1 AND {from_row} \
             ORDER BY seq DESC"
        )
    } else {
        format!(
            "SELECT seq, attempt, body FROM task_output WHERE task_id = ?1 AND {from_row} \
             ORDER BY seq"
        )
    };
    let mut statement = conn.prepare_cached(&sql)?;
    let batches = statement.query_map(params![task_id, read.after, read.attempt], |row| {
        Ok((row.get(0)?, row.get(1)?, row.get(2)?))
    })?;
    OutputPage::assemble(&read, dropped, batches)
}
