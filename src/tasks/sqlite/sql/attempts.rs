//! The attempt lifecycle, as workers and upkeep drive it: claim, finish, renew the
//! lease, set the status message. Every write after the claim is fenced by its token.

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::{Map, Value};

use super::{append_outbox, set_terminal};
use crate::protocol::TaskStatus;
use crate::tasks::model::{Claim, Finish};

/// Claims up to `limit` ready jobs, each with a fresh fencing token.
pub fn claim(
    conn: &Connection,
    limit: usize,
    now: i64,
    lease_ms: i64,
    mut token: impl FnMut() -> String,
) -> rusqlite::Result<Vec<Claim>> {
    let mut claims = Vec::new();
    while claims.len() < limit {
        let fresh = token();
        let claimed = conn
            .prepare_cached(
                "UPDATE jobs SET state = 'running', attempt = attempt + 1, lease_token = ?2, \
                 lease_expires = ?1 + ?3, deadline = ?1 + timeout_ms \
                 WHERE task_id = (SELECT task_id FROM jobs WHERE state = 'queued' \
                                  AND run_after <= ?1 ORDER BY run_after LIMIT 1) \
                 RETURNING task_id, attempt, deadline",
            )?
            .query_row(params![now, fresh, lease_ms], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                ))
            })
            .optional()?;
        let Some((task_id, attempt, deadline)) = claimed else {
            break;
        };
        let (tool, origin, input_responses, tool_state) = conn
            .prepare_cached(
                "SELECT tool, origin, input_responses, tool_state FROM tasks WHERE id = ?1",
            )?
            .query_row([&task_id], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })?;
        conn.prepare_cached(
            "INSERT OR REPLACE INTO attempts (task_id, attempt, started_at) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![task_id, attempt, now])?;
        claims.push(Claim {
            task_id,
            token: fresh,
            attempt,
            deadline,
            tool,
            origin,
            input_responses,
            tool_state,
        });
    }
    Ok(claims)
}
/// The job as its lease holder left it, for [`finish`].
struct Held {
    attempt: i64,
    max_attempts: i64,
    backoff_ms: i64,
}

/// The job still leased with `token`, if it is.
fn held(conn: &Connection, task_id: &str, token: &str) -> rusqlite::Result<Option<Held>> {
    conn.prepare_cached(
        "SELECT attempt, max_attempts, backoff_ms FROM jobs \
         WHERE task_id = ?1 AND lease_token = ?2 AND state = 'running'",
    )?
    .query_row(params![task_id, token], |row| {
        Ok(Held {
            attempt: row.get(0)?,
            max_attempts: row.get(1)?,
            backoff_ms: row.get(2)?,
        })
    })
    .optional()
}

/// The fenced end of an attempt. Returns `false` (and writes nothing) when the lease is
/// no longer this worker's.
pub fn finish(
    conn: &Connection,
    task_id: &str,
    token: &str,
    outcome: Finish,
    now: i64,
) -> rusqlite::Result<bool> {
    let Some(job) = held(conn, task_id, token)? else {
        return Ok(false);
    };
    let cancel_requested: bool = conn
        .prepare_cached("SELECT cancel_requested FROM tasks WHERE id = ?1")?
        .query_row([task_id], |row| row.get(0))?;
    let outcome = outcome.resolve(job.attempt, job.max_attempts, cancel_requested);
    conn.prepare_cached(
        "UPDATE attempts SET ended_at = ?3, outcome = ?4 WHERE task_id = ?1 AND attempt = ?2",
    )?
    .execute(params![task_id, job.attempt, now, outcome.label()])?;
    match outcome {
        Finish::Completed { result } => {
            let status = TaskStatus::Completed;
            set_terminal(conn, task_id, status, Some(&result), None, now)?;
        }
        Finish::Failed { error } => {
            set_terminal(conn, task_id, TaskStatus::Failed, None, Some(&error), now)?;
        }
        Finish::Cancelled => {
            set_terminal(conn, task_id, TaskStatus::Cancelled, None, None, now)?;
        }
        Finish::InputRequired { requests, state } => {
            ask_for_input(conn, task_id, requests, state, now)?;
        }
        Finish::Retry { reason } => schedule_retry(conn, task_id, &job, &reason, now)?,
        Finish::Release => release(conn, task_id, now)?,
    }
    Ok(true)
}

/// Parks the task until the client answers `requests`. A key the tool used before in
/// this task fails it instead (a response could not tell the two requests apart).
fn ask_for_input(
    conn: &Connection,
    task_id: &str,
    requests: Map<String, Value>,
    state: Option<String>,
    now: i64,
) -> rusqlite::Result<()> {
    for key in requests.keys() {
        let fresh = conn
            .prepare_cached("INSERT OR IGNORE INTO input_keys (task_id, key) VALUES (?1, ?2)")?
            .execute(params![task_id, key])?;
        if fresh == 0 {
            let error = Finish::reused_input_key_error();
            set_terminal(conn, task_id, TaskStatus::Failed, None, Some(&error), now)?;
            return Ok(());
        }
    }
    conn.prepare_cached(concat!(
        "UPDATE tasks SET status = 'input_required', input_requests = ?2, tool_state = ?3, \
         updated_at = ?4, version = version + 1 WHERE id = ?1 AND ",
        live!()
    ))?
    .execute(params![
        task_id,
        Value::Object(requests).to_string(),
        state,
        now
    ])?;
    conn.prepare_cached(
        "UPDATE jobs SET state = 'waiting', lease_token = NULL, lease_expires = NULL, \
         deadline = NULL WHERE task_id = ?1",
    )?
    .execute([task_id])?;
    append_outbox(conn, task_id, now)
}

/// Queues the job again after an exponential backoff, and says so in the status message.
fn schedule_retry(
    conn: &Connection,
    task_id: &str,
    job: &Held,
    reason: &str,
    now: i64,
) -> rusqlite::Result<()> {
    let exponent = (job.attempt - 1).clamp(0, 20) as u32;
    let delay = job.backoff_ms.saturating_mul(1 << exponent).min(600_000);
    conn.prepare_cached(
        "UPDATE jobs SET state = 'queued', run_after = ?2, lease_token = NULL, \
         lease_expires = NULL, deadline = NULL, last_error = ?3 WHERE task_id = ?1",
    )?
    .execute(params![task_id, now + delay, reason])?;
    let message = format!(
        "Attempt {} of {} failed; retrying",
        job.attempt, job.max_attempts
    );
    conn.prepare_cached(concat!(
        "UPDATE tasks SET status_message = ?2, updated_at = ?3, version = version + 1 \
         WHERE id = ?1 AND ",
        live!()
    ))?
    .execute(params![task_id, message, now])?;
    append_outbox(conn, task_id, now)
}

/// Hands the job back to the queue with its attempt uncounted (graceful shutdown).
fn release(conn: &Connection, task_id: &str, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE jobs SET state = 'queued', attempt = attempt - 1, run_after = ?2, \
         lease_token = NULL, lease_expires = NULL, deadline = NULL WHERE task_id = ?1",
    )?
    .execute(params![task_id, now])?;
    Ok(())
}

/// A fenced status-message update from a running attempt.
pub fn set_status_message(
    conn: &Connection,
    task_id: &str,
    token: &str,
    message: &str,
    now: i64,
) -> rusqlite::Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE tasks SET status_message = ?3, updated_at = ?4, version = version + 1 \
             WHERE id = ?1 AND status = 'working' AND EXISTS (SELECT 1 FROM jobs \
             WHERE task_id = ?1 AND lease_token = ?2 AND state = 'running')",
        )?
        .execute(params![task_id, token, message, now])?;
    if changed > 0 {
        append_outbox(conn, task_id, now)?;
    }
    Ok(changed > 0)
}

/// Extends a lease; `false` when the lease is no longer this holder's.
pub fn renew_lease(
    conn: &Connection,
    task_id: &str,
    token: &str,
    expires: i64,
) -> rusqlite::Result<bool> {
    Ok(conn
        .prepare_cached(
            "UPDATE jobs SET lease_expires = ?3 WHERE task_id = ?1 AND lease_token = ?2 \
             AND state = 'running'",
        )?
        .execute(params![task_id, token, expires])?
        > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::TaskStatus;
    use crate::tasks::model::CancelEffect;
    use crate::tasks::sqlite::sql::client::{cancel, find_authorized};
    use crate::tasks::sqlite::sql::create::create_task;
    use crate::tasks::sqlite::tests::{fresh_store, identity, task_at};

    #[test]
    fn a_stale_lease_holder_cannot_write_anything() {
        let (_dir, store) = fresh_store();
        let mut tokens = ["first", "second"].into_iter().map(str::to_owned);
        let (first, second) = store
            .write(move |conn| {
                create_task(conn, &task_at("task", 0))?;
                let first = claim(conn, 1, 10, 100, || tokens.next().unwrap())?.remove(0);
                // The lease runs out; the janitor hands the job back to the queue.
                assert!(finish(
                    conn,
                    "task",
                    &first.token,
                    Finish::Retry {
                        reason: "lost".into()
                    },
                    200
                )?);
                let second = claim(conn, 1, 300, 100, || "second".into())?.remove(0);
                Ok((first, second))
            })
            .unwrap();
        assert_eq!((first.attempt, second.attempt), (1, 2));
        let stale = first.token.clone();
        let written = store
            .write(move |conn| {
                Ok((
                    set_status_message(conn, "task", &stale, "stale", 400)?,
                    renew_lease(conn, "task", &stale, 9999)?,
                    finish(
                        conn,
                        "task",
                        &stale,
                        Finish::Completed {
                            result: "{}".into(),
                        },
                        400,
                    )?,
                ))
            })
            .unwrap();
        assert_eq!(written, (false, false, false));
        let task = find_authorized(&store.read().unwrap(), &identity(), "task", 500)
            .unwrap()
            .unwrap();
        assert_eq!(task.status, TaskStatus::Working);
        assert_eq!(task.result, None);
        // The current holder's outcome lands, and then nothing changes it.
        let current = second.token;
        store
            .write(move |conn| {
                assert!(finish(
                    conn,
                    "task",
                    &current,
                    Finish::Completed {
                        result: "{\"content\":[]}".into()
                    },
                    500
                )?);
                assert_eq!(cancel(conn, &identity(), "task", 600)?, CancelEffect::Done);
                Ok(())
            })
            .unwrap();
        let task = find_authorized(&store.read().unwrap(), &identity(), "task", 700)
            .unwrap()
            .unwrap();
        assert_eq!(task.status, TaskStatus::Completed);
    }
}
