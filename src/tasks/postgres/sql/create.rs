//! Task creation: the task, its job and its outbox row in one transaction, with its
//! idempotency key checked under an advisory lock of the key.

use postgres::Transaction;

use super::{append_outbox, task_row_at, Failure};
use crate::tasks::model::{arguments_digest, Created, KeyConflict, NewTask, Origin};

/// Creates the task, its job and its outbox row. With an idempotency key, a live task
/// of the same identity that holds the key answers instead: itself when it has the same
/// tool and arguments, a [`KeyConflict`] otherwise (nothing is stored either way).
///
/// Two nodes creating with one key at once take turns on a transaction advisory lock
/// of the key's hash (held until commit), so the second sees the first's task: keys
/// stay unique among live tasks without a unique index (which old keys could violate,
/// as in SQLite).
pub fn create_task(tx: &mut Transaction<'_>, task: &NewTask) -> Result<Created, Failure> {
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
             AND idempotency_key = $4",
            &[
                &task.identity.endpoint,
                &task.identity.tenant,
                &task.identity.principal,
                key,
            ],
        )?;
    }
    // Expiry and the first claim run on the database clock; created_at and updated_at
    // are what the client is told (this node's clock), as in SQLite.
    tx.execute(
        "INSERT INTO tasks (id, endpoint, tenant, principal, tool, origin, status, \
         created_at, updated_at, ttl_ms, expires_at, poll_interval_ms, input_responses, \
         idempotency_key, arguments_digest) VALUES ($1, $2, $3, $4, $5, $6, 'working', \
         $7, $7, $8, CASE WHEN $8::bigint IS NOT NULL THEN taskd_after_ms($8) END, \
         $9, $10, $11, $12)",
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
        ],
    )?;
    tx.execute(
        "INSERT INTO jobs (task_id, tool, state, max_attempts, backoff_ms, timeout_ms, \
         run_after) VALUES ($1, $2, 'queued', $3, $4, $5, taskd_now_ms())",
        &[
            &task.id,
            &task.tool,
            &task.max_attempts,
            &task.backoff_ms,
            &task.timeout_ms,
        ],
    )?;
    append_outbox(tx, &task.id)?;
    Ok(Created::Task(task.created()))
}

/// What the live tasks holding `key` for this identity say about creating `task`.
fn key_holder(
    tx: &mut Transaction<'_>,
    task: &NewTask,
    key: &str,
) -> Result<Option<Created>, Failure> {
    let holders = tx.query(
        concat!(
            "SELECT arguments_digest, CASE WHEN arguments_digest IS NULL THEN origin END, ",
            task_columns!(),
            " FROM tasks WHERE endpoint = $1 AND tenant = $2 AND principal = $3 \
             AND idempotency_key = $4 AND (expires_at IS NULL OR expires_at > taskd_now_ms())"
        ),
        &[
            &task.identity.endpoint,
            &task.identity.tenant,
            &task.identity.principal,
            &key,
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
