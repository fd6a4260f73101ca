//! The attempt lifecycle, as workers and upkeep drive it: claim, finish, renew the
//! lease, set the status message. Every write after the claim is fenced by its token.
//!
//! The statements that fire the counting triggers say `OR FAIL`: with the default
//! (`ABORT`), SQLite gives each of them a statement journal, a copy of every page it
//! changes, to undo that one statement. The writer's savepoint around every write
//! already undoes a failed write whole (schema.sql, migration 5).

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::{Map, Value};

use super::{append_outbox, flow, set_terminal, turns};
use taskd_engine::backend::Claimant;
use taskd_engine::model::{Claim, Finish};
use taskd_protocol::TaskStatus;

/// What a claim reads of the job it leases and of its task, in [`Claim`]'s order
/// (`jobs` and `tasks` joined; ?1 is now).
macro_rules! claim_columns {
    () => {
        "jobs.task_id, jobs.attempt + 1, ?1 + jobs.timeout_ms, ?1 - jobs.run_after, \
         tasks.tool, tasks.origin, tasks.input_responses, tasks.tool_state, \
         tasks.trace_context, jobs.owner, jobs.gate"
    };
}

/// The next job in turn (see `tasks::model::TURN`): of the highest priority, then the
/// smallest turn, then the oldest. One seek in `jobs_turns` and one in `tasks`, however
/// many identities have jobs queued. Every job with a turn is ready: a job waiting for
/// its `run_after` has none yet ([`turns::give_due`]).
const NEXT_IN_TURN: &str = concat!(
    "SELECT ",
    claim_columns!(),
    " FROM jobs JOIN tasks ON tasks.id = jobs.task_id \
     WHERE jobs.state = 'queued' AND jobs.turn IS NOT NULL \
     ORDER BY jobs.priority DESC, jobs.turn, jobs.task_id LIMIT 1"
);

/// The next job in turn of a tool not in the JSON array ?2. Walking `jobs_turns` past
/// the passed-over tools' jobs would read every one of them (100 000 queued jobs of a
/// saturated tool: each claim would read them all); instead it visits
/// `jobs_turns_by_tool` one tool at a time: one seek to find each queued tool, one to
/// find its next job in turn. The cost grows with the number of tools that have queued
/// jobs, not with the number of jobs or identities. (Measured with 100 000 queued jobs
/// of a saturated tool and 2 000 of ten others, release build, when it walked the same
/// way by age: 60-150 µs per claim, against 100-145 ms filtering; an unsaturated claim
/// stays one seek, ~14 µs.)
const NEXT_IN_TURN_EXCEPT: &str = concat!(
    "WITH RECURSIVE queued(tool) AS ( \
       SELECT MIN(tool) FROM jobs WHERE state = 'queued' AND turn IS NOT NULL \
       UNION ALL \
       SELECT (SELECT MIN(tool) FROM jobs WHERE state = 'queued' AND turn IS NOT NULL \
               AND tool > queued.tool) \
       FROM queued WHERE queued.tool IS NOT NULL), \
     next(task_id) AS ( \
       SELECT (SELECT task_id FROM jobs WHERE state = 'queued' AND turn IS NOT NULL \
               AND tool = queued.tool ORDER BY priority DESC, turn, task_id LIMIT 1) \
       FROM queued WHERE queued.tool IS NOT NULL \
       AND queued.tool NOT IN (SELECT value FROM json_each(?2))) \
     SELECT ",
    claim_columns!(),
    " FROM next JOIN jobs ON jobs.task_id = next.task_id \
     JOIN tasks ON tasks.id = jobs.task_id \
     ORDER BY jobs.priority DESC, jobs.turn, jobs.task_id LIMIT 1"
);

/// Leases a job found by [`NEXT_IN_TURN`] or [`NEXT_IN_TURN_EXCEPT`]. A separate
/// statement rather than an `UPDATE ... RETURNING`: `RETURNING` opens a temporary
/// b-tree for its rows on every run (~7% of the writer's time draining quick jobs), and
/// a job the claimant refuses is then never written at all.
const LEASE: &str = "UPDATE OR FAIL jobs SET state = 'running', attempt = ?2, \
     lease_token = ?3, lease_expires = ?4, deadline = ?5 WHERE task_id = ?1";

/// Claims up to `limit` ready jobs in turn, each with a fresh fencing token, passing
/// over the jobs of the tools `claimant` says are saturated. Each job goes to
/// `claimant` before it is leased; one it refuses stays queued, untouched. Jobs whose
/// wait has ended get their turns first.
pub fn claim(
    conn: &Connection,
    limit: usize,
    now: i64,
    lease_ms: i64,
    mut token: impl FnMut() -> String,
    claimant: &mut dyn Claimant,
) -> rusqlite::Result<Vec<Claim>> {
    turns::give_due(conn, now)?;
    let mut claims = Vec::new();
    // Paused tools, and tools refused in this claim (no slot, or no rate token).
    let mut refused: Vec<String> = flow::paused_names(conn)?;
    while claims.len() < limit {
        let mut passed_over = claimant.saturated();
        passed_over.extend(refused.iter().cloned());
        let found = if passed_over.is_empty() {
            conn.prepare_cached(NEXT_IN_TURN)?
                .query_row([now], |row| ready_job(row, &mut token))
        } else {
            let passed_over = Value::from(passed_over).to_string();
            conn.prepare_cached(NEXT_IN_TURN_EXCEPT)?
                .query_row(params![now, passed_over], |row| ready_job(row, &mut token))
        }
        .optional()?;
        let Some(claim) = found else {
            break;
        };
        let rate = claimant.rate_limit(&claim);
        if let Some(rate) = &rate {
            if let Err(until) = flow::take_token(conn, rate, now)? {
                if rate.per_key {
                    // Its key's bucket is empty: the job waits as a retry waits for
                    // its backoff, and the tool's other keys go on.
                    conn.prepare_cached(
                        "UPDATE OR FAIL jobs SET turn = NULL, run_after = ?2 WHERE task_id = ?1",
                    )?
                    .execute(params![claim.task_id, until])?;
                } else {
                    claimant.rate_exhausted(&claim.tool, until);
                    refused.push(claim.tool);
                }
                continue;
            }
        }
        if !claimant.take(&claim) {
            if let Some(rate) = &rate {
                flow::give_token_back(conn, rate)?;
            }
            refused.push(claim.tool);
            continue;
        }
        conn.prepare_cached(LEASE)?.execute(params![
            claim.task_id,
            claim.attempt,
            claim.token,
            now.saturating_add(lease_ms),
            claim.deadline
        ])?;
        conn.prepare_cached(
            "INSERT OR REPLACE INTO attempts (task_id, attempt, started_at) VALUES (?1, ?2, ?3)",
        )?
        .execute(params![claim.task_id, claim.attempt, now])?;
        claims.push(claim);
    }
    Ok(claims)
}

/// A [`claim_columns`] row as the [`Claim`] it becomes once leased with a fresh token.
fn ready_job(
    row: &rusqlite::Row<'_>,
    token: &mut impl FnMut() -> String,
) -> rusqlite::Result<Claim> {
    Ok(Claim {
        task_id: row.get(0)?,
        attempt: row.get(1)?,
        deadline: row.get(2)?,
        queue_wait_ms: row.get(3)?,
        tool: row.get(4)?,
        origin: row.get(5)?,
        input_responses: row.get(6)?,
        tool_state: row.get(7)?,
        trace: super::trace_column(row, 8)?,
        owner: row.get(9)?,
        gate: row.get(10)?,
        token: token(),
    })
}

/// The job as its lease holder left it, for [`finish`].
struct Held {
    attempt: i64,
    max_attempts: i64,
    backoff_ms: i64,
    /// Whether the task's client asked to cancel it meanwhile.
    cancel_requested: bool,
}

/// The job still leased with `token`, if it is.
fn held(conn: &Connection, task_id: &str, token: &str) -> rusqlite::Result<Option<Held>> {
    conn.prepare_cached(
        "SELECT jobs.attempt, jobs.max_attempts, jobs.backoff_ms, tasks.cancel_requested \
         FROM jobs JOIN tasks ON tasks.id = jobs.task_id \
         WHERE jobs.task_id = ?1 AND jobs.lease_token = ?2 AND jobs.state = 'running'",
    )?
    .query_row(params![task_id, token], |row| {
        Ok(Held {
            attempt: row.get(0)?,
            max_attempts: row.get(1)?,
            backoff_ms: row.get(2)?,
            cancel_requested: row.get(3)?,
        })
    })
    .optional()
}

/// The fenced end of an attempt. Returns `false` (and writes nothing) when the lease is
/// no longer this worker's. Takes the outcome by reference: a write that fails among
/// others grouped with it runs again alone (see the writer's batch).
pub fn finish(
    conn: &Connection,
    task_id: &str,
    token: &str,
    outcome: &Finish,
    now: i64,
) -> rusqlite::Result<bool> {
    let Some(job) = held(conn, task_id, token)? else {
        return Ok(false);
    };
    let overridden = outcome.overridden(job.attempt, job.max_attempts, job.cancel_requested);
    let outcome = overridden.as_ref().unwrap_or(outcome);
    conn.prepare_cached(
        "UPDATE attempts SET ended_at = ?3, outcome = ?4 WHERE task_id = ?1 AND attempt = ?2",
    )?
    .execute(params![task_id, job.attempt, now, outcome.label()])?;
    match outcome {
        Finish::Completed { result } => {
            let status = TaskStatus::Completed;
            set_terminal(conn, task_id, status, Some(result), None, now)?;
        }
        Finish::Failed { error } => {
            set_terminal(conn, task_id, TaskStatus::Failed, None, Some(error), now)?;
        }
        Finish::Cancelled => {
            set_terminal(conn, task_id, TaskStatus::Cancelled, None, None, now)?;
        }
        Finish::InputRequired { requests, state } => {
            ask_for_input(conn, task_id, requests, state.as_deref(), now)?;
        }
        Finish::Retry { reason } => schedule_retry(conn, task_id, &job, reason, now)?,
        Finish::Release => release(conn, task_id, now)?,
    }
    Ok(true)
}

/// Parks the task until the client answers `requests`. A key the tool used before in
/// this task fails it instead (a response could not tell the two requests apart).
fn ask_for_input(
    conn: &Connection,
    task_id: &str,
    requests: &Map<String, Value>,
    state: Option<&str>,
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
        "UPDATE OR FAIL tasks SET status = 'input_required', input_requests = ?2, \
         tool_state = ?3, updated_at = ?4, version = version + 1 WHERE id = ?1 AND ",
        live!()
    ))?
    .execute(params![
        task_id,
        serde_json::to_string(requests)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?,
        state,
        now
    ])?;
    conn.prepare_cached(
        "UPDATE OR FAIL jobs SET state = 'waiting', lease_token = NULL, lease_expires = NULL, \
         deadline = NULL WHERE task_id = ?1",
    )?
    .execute([task_id])?;
    append_outbox(conn, task_id, now)
}

/// Queues the job again after an exponential backoff, and says so in the status message.
/// It takes a new turn once the backoff has passed ([`turns::give_due`]).
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
        "UPDATE OR FAIL jobs SET state = 'queued', run_after = ?2, turn = NULL, \
         lease_token = NULL, lease_expires = NULL, deadline = NULL, last_error = ?3 \
         WHERE task_id = ?1",
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

/// Hands the job back to the queue with its attempt uncounted (graceful shutdown). It
/// keeps its turn, which is past: it runs again first.
fn release(conn: &Connection, task_id: &str, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE OR FAIL jobs SET state = 'queued', attempt = attempt - 1, run_after = ?2, \
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

/// A fenced write of the tool's state from a running attempt. No outbox entry: the
/// state is the tool's, and no client sees it change.
pub fn set_tool_state(
    conn: &Connection,
    task_id: &str,
    token: &str,
    state: &str,
) -> rusqlite::Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE tasks SET tool_state = ?3 WHERE id = ?1 AND status = 'working' AND \
             EXISTS (SELECT 1 FROM jobs WHERE task_id = ?1 AND lease_token = ?2 AND \
             state = 'running')",
        )?
        .execute(params![task_id, token, state])?;
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
    use crate::sql::client::{cancel, find_authorized};
    use crate::sql::create::create_task;
    use crate::sql::create::create_tasks;
    use crate::tests::{fresh_store, identity, task_at};
    use taskd_engine::model::CancelEffect;
    use taskd_protocol::TaskStatus;

    /// A claimant that passes over `saturated`, refuses the jobs of `refuse` and takes
    /// the rest.
    #[derive(Default)]
    struct Takes {
        saturated: Vec<String>,
        refuse: Vec<String>,
    }

    impl Takes {
        fn all() -> Takes {
            Takes::default()
        }
    }

    impl Claimant for Takes {
        fn saturated(&self) -> Vec<String> {
            self.saturated.clone()
        }

        fn take(&mut self, claim: &Claim) -> bool {
            !self.refuse.contains(&claim.tool)
        }

        fn give_back(&mut self) {}

        fn rate_limit(&self, _: &Claim) -> Option<taskd_engine::flow::RateLimit> {
            None
        }

        fn rate_exhausted(&mut self, _: &str, _: i64) {}
    }

    fn job_of(id: &str, tool: &str, now: i64) -> taskd_engine::model::NewTask {
        taskd_engine::model::NewTask {
            tool: tool.into(),
            ..task_at(id, now)
        }
    }

    #[test]
    fn a_claim_passes_over_saturated_tools_and_puts_back_what_it_cannot_take() {
        let (_dir, store) = fresh_store();
        let claimed = store
            .write(|conn| {
                let mut tasks: Vec<_> = (0..3).map(|i| job_of(&format!("busy{i}"), "busy", 1)).collect();
                tasks.push(job_of("quick", "quick", 2));
                tasks.push(job_of("other", "other", 3));
                create_tasks(conn, &tasks)?;
                let mut takes = Takes {
                    saturated: vec!["busy".into()],
                    refuse: vec!["quick".into()],
                };
                let first: Vec<String> = claim(conn, 10, 10, 100, || "t1".into(), &mut takes)?
                    .into_iter()
                    .map(|claim| claim.task_id)
                    .collect();
                let quick: (String, i64, Option<String>, Option<i64>) = conn.query_row(
                    "SELECT state, attempt, lease_token, deadline FROM jobs WHERE task_id = 'quick'",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )?;
                assert_eq!(quick, ("queued".into(), 0, None, None), "put back as it was");
                let then: Vec<String> = claim(conn, 2, 10, 100, || "t2".into(), &mut Takes::all())?
                    .into_iter()
                    .map(|claim| claim.task_id)
                    .collect();
                Ok((first, then))
            })
            .unwrap();
        assert_eq!(claimed.0, vec!["other"]);
        assert_eq!(claimed.1, vec!["busy0", "busy1"], "oldest first again");
    }

    #[test]
    fn passing_over_a_saturated_backlog_does_not_read_it() {
        let (_dir, store) = fresh_store();
        let steps = store
            .write(|conn| {
                let backlog: Vec<_> = (0..20_000)
                    .map(|i| job_of(&format!("busy{i:05}"), "busy", 1))
                    .collect();
                create_tasks(conn, &backlog)?;
                create_tasks(conn, &[job_of("quick", "quick", 2), job_of("z", "zzz", 3)])?;
                let mut takes = Takes {
                    saturated: vec!["busy".into()],
                    ..Takes::default()
                };
                let claimed = claim(conn, 1, 10, 100, || "t".into(), &mut takes)?;
                assert_eq!(claimed[0].task_id, "quick");
                let steps = conn
                    .prepare_cached(NEXT_IN_TURN_EXCEPT)?
                    .get_status(rusqlite::StatementStatus::VmStep);
                Ok(steps)
            })
            .unwrap();
        // Reading the backlog would take well over 20 000 steps.
        assert!(steps < 500, "{steps} virtual machine steps");
    }

    #[test]
    fn a_stale_lease_holder_cannot_write_anything() {
        let (_dir, store) = fresh_store();
        let mut tokens = ["first", "second"].into_iter().map(str::to_owned);
        let (first, second) = store
            .write(move |conn| {
                create_task(conn, &task_at("task", 0))?;
                let first = claim(
                    conn,
                    1,
                    10,
                    100,
                    || tokens.next().unwrap(),
                    &mut Takes::all(),
                )?
                .remove(0);
                // The lease runs out; the janitor hands the job back to the queue.
                assert!(finish(
                    conn,
                    "task",
                    &first.token,
                    &Finish::Retry {
                        reason: "lost".into()
                    },
                    200
                )?);
                let second =
                    claim(conn, 1, 300, 100, || "second".into(), &mut Takes::all())?.remove(0);
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
                        &Finish::Completed {
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
                    &Finish::Completed {
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
