//! A task's output on PostgreSQL (schema-postgres.sql, migration 9), as
//! `sqlite::sql::output`: appended by its running attempt (fenced), kept within the
//! task's cap (the oldest lines go first, counted), read by position.

use postgres::GenericClient;

use super::super::statements::{Db, Tx};
use super::Failure;
use taskd_engine::output::{OutputLine, OutputPage, OutputRead, OutputStream};

/// Appends `lines` to the task's output if `token` still holds its job's lease, then
/// drops its oldest lines until at most `cap` bytes are kept. `dropped` lines were
/// dropped before they came here. `false` (and nothing kept) once the lease is gone.
/// Three statements whatever the batch's size: the totals row (locked, so that the
/// positions of two appends never collide), the lines as arrays, the trim.
pub fn append(
    tx: &mut Tx<'_, '_>,
    task_id: &str,
    token: &str,
    lines: &[OutputLine],
    dropped: u64,
    cap: u64,
) -> Result<bool, Failure> {
    let leased = tx.query_opt(
        "SELECT 1 FROM jobs WHERE task_id = $1 AND lease_token = $2 AND state = 'running'",
        &[&task_id, &token],
    )?;
    if leased.is_none() {
        return Ok(false);
    }
    let totals = tx.query_one(
        "INSERT INTO task_output_totals (task_id, next_seq, kept_bytes, dropped) \
         VALUES ($1, 1, 0, 0) ON CONFLICT (task_id) DO UPDATE SET next_seq = \
         task_output_totals.next_seq RETURNING next_seq, kept_bytes, dropped",
        &[&task_id],
    )?;
    let (mut next_seq, mut kept, mut gone): (i64, i64, i64) =
        (totals.get(0), totals.get(1), totals.get(2));
    gone += i64::try_from(dropped).unwrap_or(i64::MAX);
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
    let kept_lines = &lines[first..];
    if !kept_lines.is_empty() {
        let seqs: Vec<i64> = (next_seq..).take(kept_lines.len()).collect();
        let attempts: Vec<i64> = kept_lines.iter().map(|line| line.attempt).collect();
        let times: Vec<i64> = kept_lines.iter().map(|line| line.at_ms).collect();
        let streams: Vec<String> = kept_lines
            .iter()
            .map(|line| line.stream.as_str().to_owned())
            .collect();
        let texts: Vec<String> = kept_lines.iter().map(|line| line.text.clone()).collect();
        tx.execute(
            "INSERT INTO task_output (task_id, seq, attempt, at_ms, stream, line) \
             SELECT $1, * FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], \
             $5::text[], $6::text[])",
            &[&task_id, &seqs, &attempts, &times, &streams, &texts],
        )?;
        next_seq += kept_lines.len() as i64;
    }
    kept += batch;
    if kept > cap {
        // The shortest run of oldest lines whose bytes bring the task within its cap.
        let excess = kept - cap;
        let trimmed = tx.query_one(
            "WITH oldest AS ( \
               SELECT seq, octet_length(line) AS bytes, \
                 sum(octet_length(line)) OVER (ORDER BY seq) AS running \
               FROM task_output WHERE task_id = $1), \
             gone AS ( \
               DELETE FROM task_output WHERE task_id = $1 AND seq IN \
                 (SELECT seq FROM oldest WHERE running - bytes < $2) \
               RETURNING octet_length(line) AS bytes) \
             SELECT count(*)::bigint, coalesce(sum(bytes), 0)::bigint FROM gone",
            &[&task_id, &excess],
        )?;
        let (count, bytes): (i64, i64) = (trimmed.get(0), trimmed.get(1));
        gone += count;
        kept -= bytes;
    }
    tx.execute(
        "UPDATE task_output_totals SET next_seq = $2, kept_bytes = $3, dropped = $4 \
         WHERE task_id = $1",
        &[&task_id, &next_seq, &kept.max(0), &gone],
    )?;
    Ok(true)
}

/// The lines `read` asks for, oldest first.
pub fn read(
    conn: &mut Db<'_, impl GenericClient>,
    task_id: &str,
    read: OutputRead,
) -> Result<OutputPage, Failure> {
    let dropped: i64 = conn
        .query_opt(
            "SELECT dropped FROM task_output_totals WHERE task_id = $1",
            &[&task_id],
        )?
        .map_or(0, |row| row.get(0));
    let limit = i64::try_from(read.limit).unwrap_or(i64::MAX);
    let params: [&dyn super::super::statements::Param; 4] =
        [&task_id, &read.after, &read.attempt, &limit];
    let rows = if read.newest {
        conn.query(
            "SELECT seq, attempt, at_ms, stream, line FROM task_output \
             WHERE task_id = $1 AND seq > $2 AND ($3::bigint IS NULL OR attempt = $3) \
             ORDER BY seq DESC LIMIT $4",
            &params,
        )?
    } else {
        conn.query(
            "SELECT seq, attempt, at_ms, stream, line FROM task_output \
             WHERE task_id = $1 AND seq > $2 AND ($3::bigint IS NULL OR attempt = $3) \
             ORDER BY seq LIMIT $4",
            &params,
        )?
    };
    let mut lines: Vec<(i64, OutputLine)> = rows
        .iter()
        .map(|row| {
            let stream: String = row.get(3);
            (
                row.get(0),
                OutputLine {
                    attempt: row.get(1),
                    at_ms: row.get(2),
                    stream: OutputStream::parse(&stream).unwrap_or(OutputStream::Stdout),
                    text: row.get(4),
                },
            )
        })
        .collect();
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
