//! The attempt lifecycle on PostgreSQL: claim, finish, renew the lease, set the status
//! message. Every write after the claim is fenced by its token; lease and deadline times
//! are on the database clock, so a node whose clock runs fast cannot find a live lease
//! expired and steal it.

use std::collections::HashMap;

use postgres::{GenericClient, Row};

use super::super::statements::{Db, Tx};
use serde_json::{Map, Value};

use super::{append_outbox, flow, set_terminal, set_terminals, Ending, Failure};
use taskd_base::clock::now_ms;
use taskd_engine::backend::Claimant;
use taskd_engine::model::{Claim, Finish, Lease};
use taskd_protocol::TaskStatus;

/// Claims up to `$1` ready jobs in turn (`tasks::model::TURN`: the highest priority,
/// then the smallest turn, then the oldest), of tools not in `$2`, in ONE statement:
/// `FOR UPDATE SKIP LOCKED` passes over the jobs another node is claiming at this very
/// moment instead of waiting for them, so nodes claim side by side. Each job gets a
/// fresh fencing token (122 random bits), a lease of `$3` ms from the database's now,
/// and the claiming node's id `$4` (so that its next start knows its orphans).
///
/// The same statement first gives their turns to up to 64 retries whose backoff has
/// passed (`due`, `given`: one seek in jobs_due when there are none), so that no extra
/// round trip is spent on them; they are claimed from the next claim on (a statement
/// does not see its own changes). `picked` reads only jobs that already had a turn, so
/// no row is changed twice.
const CLAIM_BATCH: &str = "WITH due AS ( \
       SELECT task_id, owner, priority, stride, run_after FROM jobs \
       WHERE state = 'queued' AND turn IS NULL AND NOT held AND run_after <= taskd_now_ms() \
       ORDER BY run_after LIMIT 64 FOR UPDATE SKIP LOCKED), \
     ranked AS ( \
       SELECT task_id, taskd_turn(owner, priority, stride) + (row_number() OVER \
         (PARTITION BY owner, priority ORDER BY run_after, task_id) - 1) * stride AS turn \
       FROM due), \
     given AS ( \
       UPDATE jobs SET turn = ranked.turn FROM ranked WHERE jobs.task_id = ranked.task_id), \
     picked AS ( \
       SELECT task_id FROM jobs \
       WHERE state = 'queued' AND turn IS NOT NULL AND NOT (tool = ANY($2)) \
       ORDER BY priority DESC, turn, task_id LIMIT $1 FOR UPDATE SKIP LOCKED) \
     UPDATE jobs SET state = 'running', attempt = jobs.attempt + 1, \
       lease_token = replace(gen_random_uuid()::text, '-', ''), lease_node = $4, \
       lease_expires = taskd_after_ms($3), deadline = taskd_after_ms(jobs.timeout_ms) \
     FROM picked, tasks \
     WHERE jobs.task_id = picked.task_id AND tasks.id = jobs.task_id \
     RETURNING jobs.task_id, jobs.lease_token, jobs.attempt, \
       jobs.deadline - taskd_now_ms(), taskd_now_ms() - jobs.run_after, jobs.priority, \
       jobs.turn, tasks.tool, tasks.origin, tasks.input_responses, tasks.tool_state, \
       tasks.trace_context, jobs.owner, jobs.gate";

/// Most claim statements per claim: a round whose jobs the claimant partly refuses
/// (its tool filled up meanwhile) is followed by one that passes over that tool.
const CLAIM_ROUNDS: usize = 4;

/// Claims up to `limit` ready jobs in turn, passing over the jobs of the tools
/// `claimant` says are saturated. Each job goes to `claimant` before the transaction
/// commits; one it refuses is put back as it was.
pub fn claim(
    tx: &mut Tx<'_, '_>,
    node: &str,
    limit: usize,
    lease_ms: i64,
    claimant: &mut dyn Claimant,
) -> Result<Vec<Claim>, Failure> {
    let mut claims = Vec::new();
    // Paused tools, and tools refused in this claim (no slot, or no rate token).
    let mut refused_tools: Vec<String> = flow::paused_names(tx)?;
    for _ in 0..CLAIM_ROUNDS {
        let wanted = limit - claims.len();
        if wanted == 0 {
            break;
        }
        let mut passed_over = claimant.saturated();
        passed_over.extend(refused_tools.iter().cloned());
        let rows = tx.query(
            CLAIM_BATCH,
            &[
                &i64::try_from(wanted).unwrap_or(i64::MAX),
                &passed_over,
                &lease_ms,
                &node,
            ],
        )?;
        let got = rows.len();
        let mut batch = rows
            .iter()
            .map(claimed_job)
            .collect::<Result<Vec<_>, Failure>>()?;
        // RETURNING keeps no order: the claimant takes them in turn.
        batch.sort_by(|(a, first), (b, second)| a.cmp(b).then(first.task_id.cmp(&second.task_id)));
        let mut refused: Vec<String> = Vec::new();
        // Jobs whose key's bucket is empty, with when its next token comes.
        let mut deferred: Vec<(String, i64)> = Vec::new();
        let mut started: Vec<(String, i64)> = Vec::new();
        for (_, claim) in batch {
            if refused_tools.contains(&claim.tool) {
                refused.push(claim.task_id);
                continue;
            }
            let rate = claimant.rate_limit(&claim);
            if let Some(rate) = &rate {
                if let Err(until) = flow::take_token(tx, rate)? {
                    if rate.per_key {
                        deferred.push((claim.task_id, until));
                    } else {
                        claimant.rate_exhausted(&claim.tool, until);
                        refused_tools.push(claim.tool.clone());
                        refused.push(claim.task_id);
                    }
                    continue;
                }
            }
            if !claimant.take(&claim) {
                if let Some(rate) = &rate {
                    flow::give_token_back(tx, rate)?;
                }
                refused_tools.push(claim.tool.clone());
                refused.push(claim.task_id);
                continue;
            }
            started.push((claim.task_id.clone(), claim.attempt));
            claims.push(claim);
        }
        if !refused.is_empty() {
            tx.execute(
                "UPDATE jobs SET state = 'queued', attempt = attempt - 1, lease_token = NULL, \
                 lease_node = NULL, lease_expires = NULL, deadline = NULL \
                 WHERE task_id = ANY($1)",
                &[&refused],
            )?;
        }
        let put_back = refused.len() + deferred.len();
        if !deferred.is_empty() {
            // They wait as a retry waits for its backoff: no turn until the token.
            let (ids, untils): (Vec<String>, Vec<i64>) = deferred.into_iter().unzip();
            tx.execute(
                "UPDATE jobs SET state = 'queued', attempt = jobs.attempt - 1, \
                 lease_token = NULL, lease_node = NULL, lease_expires = NULL, \
                 deadline = NULL, turn = NULL, run_after = d.until \
                 FROM unnest($1::text[], $2::bigint[]) AS d(id, until) \
                 WHERE jobs.task_id = d.id",
                &[&ids, &untils],
            )?;
        }
        if !started.is_empty() {
            let (ids, numbers): (Vec<String>, Vec<i64>) = started.into_iter().unzip();
            tx.execute(
                "INSERT INTO attempts (task_id, attempt, started_at) \
                 SELECT id, n, taskd_clock_ms() FROM unnest($1::text[], $2::bigint[]) AS a(id, n) \
                 ON CONFLICT (task_id, attempt) DO UPDATE \
                 SET started_at = excluded.started_at, ended_at = NULL, outcome = NULL",
                &[&ids, &numbers],
            )?;
        }
        if got < wanted || put_back == 0 {
            break;
        }
    }
    Ok(claims)
}

/// A claimed job's row, with its place in turn to sort by (priority descending, then
/// turn). The deadline is handed to the worker on this node's clock (the time left,
/// from now), for its own timer.
fn claimed_job(row: &Row) -> Result<((std::cmp::Reverse<i64>, i64), Claim), Failure> {
    let remaining: i64 = row.try_get(3)?;
    let priority: i64 = row.try_get(5)?;
    let turn: Option<i64> = row.try_get(6)?;
    Ok((
        (std::cmp::Reverse(priority), turn.unwrap_or(0)),
        Claim {
            task_id: row.try_get(0)?,
            token: row.try_get(1)?,
            attempt: row.try_get(2)?,
            deadline: now_ms().saturating_add(remaining),
            queue_wait_ms: row.try_get::<_, i64>(4)?.max(0),
            tool: row.try_get(7)?,
            origin: row.try_get(8)?,
            input_responses: row.try_get(9)?,
            tool_state: row.try_get(10)?,
            trace: super::trace_column(row, 11)?,
            owner: row.try_get(12)?,
            gate: row.try_get(13)?,
        },
    ))
}

/// The job as its lease holder left it, for [`finish`].
struct Held {
    /// The lease's fencing token: a group may hold a stale worker's end beside the
    /// current holder's for the same task, and only the holder's counts.
    token: String,
    attempt: i64,
    max_attempts: i64,
    backoff_ms: i64,
}

/// Ends attempts, each fenced by its lease: `false` (and nothing written) for one whose
/// lease is no longer its worker's. A few statements for the whole group, however many
/// attempts: the task rows are locked, then the job rows still leased with their
/// tokens, and every terminal outcome is written by one [`set_terminals`]; the rarer
/// ones (input requests, retries, releases) take their own statements.
///
/// Locks are taken in the order every writer takes them, task then job, and within a
/// group in id order: no deadlock with a `tasks/cancel` or `tasks/update` of one of
/// these tasks on another node, nor with another group.
pub fn finish(tx: &mut Tx<'_, '_>, ends: &[(Lease, Finish)]) -> Result<Vec<bool>, Failure> {
    let mut leases: Vec<&Lease> = ends.iter().map(|(lease, _)| lease).collect();
    leases.sort_by(|a, b| a.task_id.cmp(&b.task_id));
    let ids: Vec<&str> = leases.iter().map(|lease| lease.task_id.as_str()).collect();
    let tokens: Vec<&str> = leases.iter().map(|lease| lease.token.as_str()).collect();
    let mut cancel_requested: HashMap<String, bool> = HashMap::new();
    for task in tx.query(
        "SELECT id, cancel_requested FROM tasks WHERE id = ANY($1) ORDER BY id \
         FOR NO KEY UPDATE",
        &[&ids],
    )? {
        cancel_requested.insert(task.try_get(0)?, task.try_get(1)?);
    }
    let mut held: HashMap<String, Held> = HashMap::new();
    for job in tx.query(
        "SELECT jobs.task_id, jobs.lease_token, jobs.attempt, jobs.max_attempts, \
         jobs.backoff_ms FROM jobs \
         JOIN unnest($1::text[], $2::text[]) AS lease(task_id, token) \
         ON jobs.task_id = lease.task_id AND jobs.lease_token = lease.token \
         WHERE jobs.state = 'running' ORDER BY jobs.task_id FOR UPDATE OF jobs",
        &[&ids, &tokens],
    )? {
        let job_held = Held {
            token: job.try_get(1)?,
            attempt: job.try_get(2)?,
            max_attempts: job.try_get(3)?,
            backoff_ms: job.try_get(4)?,
        };
        held.insert(job.try_get(0)?, job_held);
    }
    // Each attempt still held, with what the store records instead of its reported
    // outcome, if anything (a requested cancellation, the last retry).
    let decided: Vec<Option<(&Held, Option<Finish>)>> = ends
        .iter()
        .map(|(lease, reported)| {
            let cancel_requested = *cancel_requested.get(&lease.task_id)?;
            let job = held
                .get(lease.task_id.as_str())
                .filter(|job| job.token == lease.token)?;
            let overridden = reported.overridden(job.attempt, job.max_attempts, cancel_requested);
            Some((job, overridden))
        })
        .collect();
    let now = now_ms();
    let mut endings = Vec::new();
    for ((lease, reported), decided) in ends.iter().zip(&decided) {
        let Some((job, overridden)) = decided else {
            continue;
        };
        let task_id = lease.task_id.as_str();
        let outcome = overridden.as_ref().unwrap_or(reported);
        let ending = |status, result, error| Ending {
            task_id,
            status,
            result,
            error,
            attempt: Some(job.attempt),
        };
        match outcome {
            Finish::Completed { result } => {
                endings.push(ending(TaskStatus::Completed, Some(result.as_str()), None));
            }
            Finish::Failed { error } => {
                endings.push(ending(TaskStatus::Failed, None, Some(error.as_str())));
            }
            Finish::Cancelled => endings.push(ending(TaskStatus::Cancelled, None, None)),
            Finish::InputRequired { requests, state } => {
                end_attempt(tx, task_id, job, outcome)?;
                ask_for_input(tx, task_id, requests, state.as_deref(), now)?;
            }
            Finish::Retry { reason } => {
                end_attempt(tx, task_id, job, outcome)?;
                schedule_retry(tx, task_id, job, reason, now)?;
            }
            Finish::Release => {
                end_attempt(tx, task_id, job, outcome)?;
                release(tx, task_id)?;
            }
        }
    }
    if !endings.is_empty() {
        set_terminals(tx, &endings, now)?;
    }
    let applied = decided.iter().map(Option::is_some).collect();
    Ok(applied)
}

/// Ends a running attempt whose task goes on (a terminal outcome ends it in
/// [`set_terminals`]' own statement).
fn end_attempt(
    tx: &mut Tx<'_, '_>,
    task_id: &str,
    job: &Held,
    outcome: &Finish,
) -> Result<(), Failure> {
    tx.execute(
        "UPDATE attempts SET ended_at = taskd_clock_ms(), outcome = $3 \
         WHERE task_id = $1 AND attempt = $2",
        &[&task_id, &job.attempt, &outcome.label()],
    )?;
    Ok(())
}

/// Parks the task until the client answers `requests`. A key the tool used before in
/// this task fails it instead.
fn ask_for_input(
    tx: &mut Tx<'_, '_>,
    task_id: &str,
    requests: &Map<String, Value>,
    state: Option<&str>,
    now: i64,
) -> Result<(), Failure> {
    for key in requests.keys() {
        let fresh = tx.execute(
            "INSERT INTO input_keys (task_id, key) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&task_id, key],
        )?;
        if fresh == 0 {
            let error = Finish::reused_input_key_error();
            let ending = Ending {
                task_id,
                status: TaskStatus::Failed,
                result: None,
                error: Some(&error),
                attempt: None,
            };
            set_terminal(tx, ending, now)?;
            return Ok(());
        }
    }
    let requests =
        serde_json::to_string(requests).map_err(|error| Failure::Data(error.to_string()))?;
    tx.execute(
        concat!(
            "UPDATE tasks SET status = 'input_required', input_requests = $2, tool_state = $3, \
             updated_at = $4, version = version + 1 WHERE id = $1 AND ",
            live!()
        ),
        &[&task_id, &requests, &state, &now],
    )?;
    tx.execute(
        "UPDATE jobs SET state = 'waiting', lease_token = NULL, lease_expires = NULL, \
         deadline = NULL WHERE task_id = $1",
        &[&task_id],
    )?;
    append_outbox(tx, task_id)
}

/// Queues the job again after an exponential backoff, and says so in the status message.
/// It takes a new turn once the backoff has passed (see [`CLAIM_BATCH`]).
fn schedule_retry(
    tx: &mut Tx<'_, '_>,
    task_id: &str,
    job: &Held,
    reason: &str,
    now: i64,
) -> Result<(), Failure> {
    let exponent = (job.attempt - 1).clamp(0, 20) as u32;
    let delay = job.backoff_ms.saturating_mul(1 << exponent).min(600_000);
    tx.execute(
        "UPDATE jobs SET state = 'queued', run_after = taskd_after_ms($2), turn = NULL, \
         lease_token = NULL, lease_expires = NULL, deadline = NULL, last_error = $3 \
         WHERE task_id = $1",
        &[&task_id, &delay, &reason],
    )?;
    let message = format!(
        "Attempt {} of {} failed; retrying",
        job.attempt, job.max_attempts
    );
    tx.execute(
        concat!(
            "UPDATE tasks SET status_message = $2, updated_at = $3, version = version + 1 \
             WHERE id = $1 AND ",
            live!()
        ),
        &[&task_id, &message, &now],
    )?;
    append_outbox(tx, task_id)
}

/// Hands the job back to the queue with its attempt uncounted (graceful shutdown). It
/// keeps its turn, which is past: it runs again first.
fn release(tx: &mut Tx<'_, '_>, task_id: &str) -> Result<(), Failure> {
    tx.execute(
        "UPDATE jobs SET state = 'queued', attempt = attempt - 1, run_after = taskd_now_ms(), \
         lease_token = NULL, lease_expires = NULL, deadline = NULL WHERE task_id = $1",
        &[&task_id],
    )?;
    Ok(())
}

/// A fenced status-message update from a running attempt.
pub fn set_status_message(
    tx: &mut Tx<'_, '_>,
    task_id: &str,
    token: &str,
    message: &str,
) -> Result<bool, Failure> {
    let changed = tx.execute(
        "UPDATE tasks SET status_message = $3, updated_at = $4, version = version + 1 \
         WHERE id = $1 AND status = 'working' AND EXISTS (SELECT 1 FROM jobs \
         WHERE task_id = $1 AND lease_token = $2 AND state = 'running')",
        &[&task_id, &token, &message, &now_ms()],
    )?;
    if changed > 0 {
        append_outbox(tx, task_id)?;
    }
    Ok(changed > 0)
}

/// A fenced write of the tool's state from a running attempt. No outbox entry: the
/// state is the tool's, and no client sees it change.
pub fn set_tool_state(
    tx: &mut Tx<'_, '_>,
    task_id: &str,
    token: &str,
    state: &str,
) -> Result<bool, Failure> {
    let changed = tx.execute(
        "UPDATE tasks SET tool_state = $3 WHERE id = $1 AND status = 'working' AND \
         EXISTS (SELECT 1 FROM jobs WHERE task_id = $1 AND lease_token = $2 AND \
         state = 'running')",
        &[&task_id, &token, &state],
    )?;
    Ok(changed > 0)
}

/// Extends the leases still held with their tokens to `lease_ms` from the database's
/// now, in one statement; `true` for each one still held, in order. The jobs are locked
/// in id order, as [`finish`] locks a group's: a renewal and a group of finishes never
/// wait on each other in a cycle.
pub fn renew_leases(
    conn: &mut Db<'_, impl GenericClient>,
    leases: &[(String, String)],
    lease_ms: i64,
) -> Result<Vec<bool>, Failure> {
    let (ids, tokens): (Vec<String>, Vec<String>) = leases.iter().cloned().unzip();
    let renewed = conn.query(
        "UPDATE jobs SET lease_expires = taskd_after_ms($3) \
         FROM (SELECT jobs.task_id FROM jobs \
           JOIN unnest($1::text[], $2::text[]) AS held(id, token) \
           ON jobs.task_id = held.id AND jobs.lease_token = held.token \
           WHERE jobs.state = 'running' ORDER BY jobs.task_id FOR UPDATE OF jobs) AS renewed \
         WHERE jobs.task_id = renewed.task_id RETURNING jobs.task_id",
        &[&ids, &tokens, &lease_ms],
    )?;
    let renewed: Vec<String> = renewed
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()?;
    Ok(ids.iter().map(|id| renewed.contains(id)).collect())
}
