//! Task creation: the task, its job and its outbox row in one transaction, with its
//! idempotency key checked under an advisory lock of the key.

use super::super::statements::Tx;

use super::{append_outbox, flow, task_row_at, Failure};
use taskd_engine::model::{arguments_digest, Created, KeyConflict, NewTask, Origin};
use taskd_protocol::TraceContext;

/// Creates tasks without an idempotency key or a gate, their jobs and their outbox rows, in ONE
/// statement however many there are: the group commit of concurrent creations
/// ([`super::super::creations`]) runs one of these per transaction. The foreign key of
/// each job is checked at the end of the statement, when its task row is there.
///
/// Each job takes its owner's next turn (`taskd_turn`, schema-postgres.sql): the
/// function sees the queue as the statement found it, so the jobs of one owner and
/// priority here follow each other by their rank in the batch.
const CREATE_BATCH: &str = "WITH new AS ( \
       SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
         $6::bytea[], $7::bigint[], $8::bigint[], $9::bigint[], $10::text[], $11::bigint[], \
         $12::bigint[], $13::bigint[], $14::text[], $15::text[], $16::text[], \
         $17::bigint[], $18::bigint[]) WITH ORDINALITY \
       AS n(id, endpoint, tenant, principal, tool, origin, now, ttl_ms, poll_interval_ms, \
         input_responses, max_attempts, backoff_ms, timeout_ms, issuer, trace_context, \
         owner, priority, stride, rank)), \
     task_rows AS ( \
       INSERT INTO tasks (id, endpoint, issuer, tenant, principal, tool, origin, status, \
         created_at, updated_at, ttl_ms, expires_at, poll_interval_ms, input_responses, \
         trace_context) \
       SELECT id, endpoint, issuer, tenant, principal, tool, origin, 'working', now, now, ttl_ms, \
         CASE WHEN ttl_ms IS NOT NULL THEN taskd_after_ms(ttl_ms) END, poll_interval_ms, \
         input_responses, trace_context FROM new), \
     job_rows AS ( \
       INSERT INTO jobs (task_id, tool, state, max_attempts, backoff_ms, timeout_ms, run_after, \
         owner, priority, stride, turn) \
       SELECT id, tool, 'queued', max_attempts, backoff_ms, timeout_ms, taskd_now_ms(), \
         owner, priority, stride, taskd_turn(owner, priority, stride) \
           + (row_number() OVER (PARTITION BY owner, priority ORDER BY rank) - 1) * stride \
       FROM new) \
     INSERT INTO outbox (task_id, created_at) SELECT id, taskd_now_ms() FROM new";

/// The `trace_context` column of a new task.
fn stored_trace(task: &NewTask) -> Option<String> {
    task.trace.as_ref().map(TraceContext::to_stored)
}

/// Creates `tasks` (none with an idempotency key) with their jobs and outbox rows, as
/// [`create_task`] does one by one.
pub fn create_tasks(tx: &mut Tx<'_, '_>, tasks: &[&NewTask]) -> Result<(), Failure> {
    fn column<'t, T>(tasks: &[&'t NewTask], field: impl Fn(&'t NewTask) -> T) -> Vec<T> {
        tasks.iter().map(|task| field(task)).collect()
    }
    tx.execute(
        CREATE_BATCH,
        &[
            &column(tasks, |t| t.id.as_str()),
            &column(tasks, |t| t.identity.endpoint.as_str()),
            &column(tasks, |t| t.identity.tenant.as_str()),
            &column(tasks, |t| t.identity.principal.as_str()),
            &column(tasks, |t| t.tool.as_str()),
            &column(tasks, |t| t.origin.as_slice()),
            &column(tasks, |t| t.now),
            &column(tasks, |t| t.ttl_ms),
            &column(tasks, |t| t.poll_interval_ms),
            &column(tasks, |t| t.input_responses.as_str()),
            &column(tasks, |t| t.max_attempts),
            &column(tasks, |t| t.backoff_ms),
            &column(tasks, |t| t.timeout_ms),
            &column(tasks, |t| t.identity.issuer.as_str()),
            &column(tasks, stored_trace),
            &column(tasks, |t| t.identity.key()),
            &column(tasks, |t| t.priority),
            &column(tasks, |t| t.stride),
        ],
    )?;
    Ok(())
}

/// Creates the task, its job (admitted or held by its gate, if it has one) and its
/// outbox row (and its link to the task it re-runs). With an idempotency key, a live task
/// of the same identity that holds the key answers instead: itself when it has the same
/// tool and arguments, a [`KeyConflict`] otherwise (nothing is stored either way).
///
/// Two nodes creating with one key at once take turns on a transaction advisory lock
/// of the key's hash (held until commit), so the second sees the first's task: keys
/// stay unique among live tasks without a unique index (which old keys could violate,
/// as in SQLite).
pub fn create_task(tx: &mut Tx<'_, '_>, task: &NewTask) -> Result<Created, Failure> {
    if let Some(key) = &task.idempotency_key {
        tx.execute(
            "SELECT pg_advisory_xact_lock(1801812339, \
             hashtext(concat_ws(chr(31), $1::text, $2::text, $3::text, $4::text)))",
            &[
                &task.identity.endpoint,
                &task.identity.tenant,
                &task.identity.principal,
                key,
            ],
        )?;
        if let Some(answer) = key_holder(tx, task, key)? {
            return Ok(answer);
        }
        // An expired task may still hold the key until the janitor removes it.
        tx.execute(
            "DELETE FROM tasks WHERE endpoint = $1 AND tenant = $2 AND principal = $3 \
             AND idempotency_key = $4 AND issuer = $5",
            &[
                &task.identity.endpoint,
                &task.identity.tenant,
                &task.identity.principal,
                key,
                &task.identity.issuer,
            ],
        )?;
    }
    // Expiry and the first claim run on the database clock; created_at and updated_at
    // are what the client is told (this node's clock), as in SQLite. A schedule slot
    // that has its task already (another node's, committed or committing: the insert
    // waits for it) stores nothing.
    let slot = task.schedule.as_ref().map(|slot| &slot.slot);
    let inserted = tx.execute(
        "INSERT INTO tasks (id, endpoint, tenant, principal, tool, origin, status, \
         created_at, updated_at, ttl_ms, expires_at, poll_interval_ms, input_responses, \
         idempotency_key, arguments_digest, issuer, trace_context, schedule, schedule_slot, \
         rerun_of) VALUES ($1, $2, $3, $4, $5, $6, 'working', $7, $7, $8, \
         CASE WHEN $8::bigint IS NOT NULL THEN taskd_after_ms($8) END, $9, $10, $11, $12, $13, \
         $14, $15, $16, $17) \
         ON CONFLICT (schedule, schedule_slot) WHERE schedule IS NOT NULL DO NOTHING",
        &[
            &task.id,
            &task.identity.endpoint,
            &task.identity.tenant,
            &task.identity.principal,
            &task.tool,
            &task.origin,
            &task.now,
            &task.ttl_ms,
            &task.poll_interval_ms,
            &task.input_responses,
            &task.idempotency_key,
            &task.arguments_digest,
            &task.identity.issuer,
            &stored_trace(task),
            &slot.map(|slot| slot.schedule.as_str()),
            &slot.map(|slot| slot.slot),
            &task.rerun_of,
        ],
    )?;
    if inserted == 0 {
        return Ok(Created::SlotTaken);
    }
    // A keyed task's job is admitted by its gate, or held (no turn) until a place
    // frees: counted under the gate's lock, held until this commits (see `flow`).
    let held = match &task.gate {
        Some(gate) => !flow::admits(tx, gate)?,
        None => false,
    };
    let gate = task.gate.as_ref();
    // A later start takes its turn when its time comes, as a retry after its backoff.
    let later = task.run_after.filter(|at| *at > task.now);
    tx.execute(
        "INSERT INTO jobs (task_id, tool, state, max_attempts, backoff_ms, timeout_ms, \
         run_after, owner, priority, stride, turn, gate, gate_label, gate_limit, held) \
         VALUES ($1, $2, 'queued', $3, $4, $5, coalesce($13::bigint, taskd_now_ms()), $6, \
         $7, $8, CASE WHEN $12 OR $13::bigint IS NOT NULL THEN NULL \
         ELSE taskd_turn($6, $7, $8) END, $9, $10, $11, $12)",
        &[
            &task.id,
            &task.tool,
            &task.max_attempts,
            &task.backoff_ms,
            &task.timeout_ms,
            &task.identity.key(),
            &task.priority,
            &task.stride,
            &gate.map(|gate| gate.id.as_str()),
            &gate.map(|gate| gate.label.as_str()),
            &gate.map(|gate| gate.limit),
            &held,
            &later,
        ],
    )?;
    append_outbox(tx, &task.id)?;
    if let Some(slot) = &task.schedule {
        super::schedules::claimed(tx, &task.id, slot, task.now)?;
    }
    Ok(Created::Task(task.created()))
}

/// What the live tasks holding `key` for this identity say about creating `task`.
fn key_holder(tx: &mut Tx<'_, '_>, task: &NewTask, key: &str) -> Result<Option<Created>, Failure> {
    let holders = tx.query(
        concat!(
            "SELECT arguments_digest, CASE WHEN arguments_digest IS NULL THEN origin END, ",
            task_columns!(),
            " FROM tasks WHERE endpoint = $1 AND tenant = $2 AND principal = $3 \
             AND idempotency_key = $4 AND issuer = $5 \
             AND (expires_at IS NULL OR expires_at > taskd_now_ms())"
        ),
        &[
            &task.identity.endpoint,
            &task.identity.tenant,
            &task.identity.principal,
            &key,
            &task.identity.issuer,
        ],
    )?;
    let mut conflict = None;
    for holder in &holders {
        let digest: Option<Vec<u8>> = holder.try_get(0)?;
        let origin: Option<Vec<u8>> = holder.try_get(1)?;
        let existing = task_row_at(holder, 2)?;
        if existing.tool != task.tool {
            conflict.get_or_insert(KeyConflict::OtherTool(existing.tool));
            continue;
        }
        let digest = digest.or_else(|| {
            serde_json::from_slice::<Origin>(origin.as_deref()?)
                .ok()
                .map(|origin| arguments_digest(&origin.arguments))
        });
        if digest.is_some() && digest == task.arguments_digest {
            return Ok(Some(Created::Task(existing)));
        }
        conflict = Some(KeyConflict::OtherArguments);
    }
    Ok(conflict.map(Created::KeyInUse))
}
