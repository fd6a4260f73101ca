//! A task's output (schema.sql, migration 14): appended by its running attempt (fenced),
//! kept within the task's cap (the oldest lines go first, counted), read by position.

use rusqlite::{params, Connection, OptionalExtension};

use taskd_engine::output::{OutputLine, OutputPage, OutputRead, OutputStream};

/// Appends `lines` to the task's output if `token` still holds its job's lease, then
/// drops its oldest lines until at most `cap` bytes are kept. `dropped` lines were
/// dropped before they came here. `false` (and nothing kept) once the lease is gone.
pub fn append(
    conn: &Connection,
    task_id: &str,
    token: &str,
    lines: &[OutputLine],
    dropped: u64,
    cap: u64,
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
    let (mut next_seq, mut kept, mut gone): (i64, i64, i64) = conn
        .prepare_cached(
            "SELECT next_seq, kept_bytes, dropped FROM task_output_totals WHERE task_id = ?1",
        )?
        .query_row([task_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .optional()?
        .unwrap_or((1, 0, 0));
    gone += dropped as i64;
    let cap = i64::try_from(cap).unwrap_or(i64::MAX);
    // Of a batch larger than the cap, only its newest lines can stay.
    let mut first = 0;
    let mut batch: i64 = lines.iter().map(|line| line.text.len() as i64).sum();
    while batch > cap && first < lines.len() {
        batch -= lines[first].text.len() as i64;
        first += 1;
    }
    gone += first as i64;
    next_seq += first as i64;
    {
        let mut insert = conn.prepare_cached(
            "INSERT INTO task_output (task_id, seq, attempt, at_ms, stream, line) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for line in &lines[first..] {
            insert.execute(params![
                task_id,
                next_seq,
                line.attempt,
                line.at_ms,
                line.stream.as_str(),
                line.text
            ])?;
            next_seq += 1;
        }
    }
    kept += batch;
    if kept > cap {
        // The oldest lines, up to the one that brings the task within its cap.
        let mut oldest = conn.prepare_cached(
            "SELECT seq, length(CAST(line AS BLOB)) FROM task_output WHERE task_id = ?1 \
             ORDER BY seq",
        )?;
        let mut rows = oldest.query([task_id])?;
        let mut upto = None;
        let mut count = 0;
        while kept > cap {
            let Some(row) = rows.next()? else {
                break;
            };
            let (seq, bytes): (i64, i64) = (row.get(0)?, row.get(1)?);
            kept -= bytes;
            count += 1;
            upto = Some(seq);
        }
        drop(rows);
        if let Some(upto) = upto {
            conn.prepare_cached("DELETE FROM task_output WHERE task_id = ?1 AND seq <= ?2")?
                .execute(params![task_id, upto])?;
            gone += count;
        }
    }
    conn.prepare_cached(
        "INSERT INTO task_output_totals (task_id, next_seq, kept_bytes, dropped) \
         VALUES (?1, ?2, ?3, ?4) ON CONFLICT (task_id) DO UPDATE SET \
         next_seq = excluded.next_seq, kept_bytes = excluded.kept_bytes, \
         dropped = excluded.dropped",
    )?
    .execute(params![task_id, next_seq, kept.max(0), gone])?;
    Ok(true)
}

/// The lines `read` asks for, oldest first.
pub fn read(conn: &Connection, task_id: &str, read: OutputRead) -> rusqlite::Result<OutputPage> {
    let dropped: i64 = conn
        .prepare_cached("SELECT dropped FROM task_output_totals WHERE task_id = ?1")?
        .query_row([task_id], |row| row.get(0))
        .optional()?
        .unwrap_or(0);
    let order = if read.newest { "DESC" } else { "ASC" };
    let sql = format!(
        "SELECT seq, attempt, at_ms, stream, line FROM task_output \
         WHERE task_id = ?1 AND seq > ?2 AND (?3 IS NULL OR attempt = ?3) \
         ORDER BY seq {order} LIMIT ?4"
    );
    let limit = i64::try_from(read.limit).unwrap_or(i64::MAX);
    let mut lines = conn
        .prepare_cached(&sql)?
        .query_map(params![task_id, read.after, read.attempt, limit], |row| {
            let stream: String = row.get(3)?;
            Ok((
                row.get::<_, i64>(0)?,
                OutputLine {
                    attempt: row.get(1)?,
                    at_ms: row.get(2)?,
                    stream: OutputStream::parse(&stream).unwrap_or(OutputStream::Stdout),
                    text: row.get(4)?,
                },
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    if read.newest {
        lines.reverse();
    }
    let next = lines.last().map_or(read.after, |(seq, _)| *seq);
    Ok(OutputPage {
        lines,
        dropped,
        next,
    })
}
