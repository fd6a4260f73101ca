//! Task creation: one task with its idempotency key checked, or many without one in
//! multi-row `INSERT`s (the writer groups the creations that meet in a batch).

use rusqlite::{params, params_from_iter, Connection, ToSql};

use super::flow::Admissions;
use super::task_row_at;
use super::turns::Turns;
use taskd_engine::ids;
use taskd_engine::model::{arguments_digest, Created, KeyConflict, NewTask, Origin, TaskRow};
use taskd_protocol::TraceContext;

/// The columns of a new `tasks` row, and the values of one row ([`task_values`]).
/// Every `INSERT` here says `OR FAIL`: a statement that inserts several rows, or fires
/// the counting triggers, would otherwise get a statement journal (a copy of each page
/// it changes, to undo that one statement); the writer's savepoint around every write
/// undoes a failed one whole (see [`attempts`](super::attempts)).
/// A row-keyed id's task goes in the row its id names (`taskd_engine::ids`); any
/// other id (`rowid` NULL) in the next free row.
const TASK_INSERT: &str = "INSERT OR FAIL INTO tasks (rowid, id, endpoint, issuer, tenant, \
     principal, tool, origin, status, created_at, updated_at, ttl_ms, expires_at, \
     poll_interval_ms, input_responses, idempotency_key, arguments_digest, trace_context) \
     VALUES ";
const TASK_ROW: &str = "(?, ?, ?, ?, ?, ?, ?, ?, 'working', ?, ?, ?, ?, ?, ?, ?, ?, ?)";
/// The columns of a new `jobs` row, and the values of one row ([`job_values`]).
const JOB_INSERT: &str = "INSERT OR FAIL INTO jobs (task_id, state, max_attempts, backoff_ms, \
     timeout_ms, run_after, tool, owner, priority, stride, turn, gate, gate_label, \
     gate_limit, held) VALUES ";
const JOB_ROW: &str = "(?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
const OUTBOX_INSERT: &str = "INSERT OR FAIL INTO outbox (task_id, created_at) VALUES ";
const OUTBOX_ROW: &str = "(?, ?)";

fn task_values<'t>(
    task: &'t NewTask,
    (rowid, expires_at, trace): &'t (Option<i64>, Option<i64>, Option<String>),
) -> [&'t dyn ToSql; 17] {
    [
        rowid,
        &task.id,
        &task.identity.endpoint,
        &task.identity.issuer,
        &task.identity.tenant,
        &task.identity.principal,
        &task.tool,
        &task.origin,
        &task.now,
        &task.now,
        &task.ttl_ms,
        expires_at,
        &task.poll_interval_ms,
        &task.input_responses,
        &task.idempotency_key,
        &task.arguments_digest,
        trace,
    ]
}

/// Where a new job joins the queue: its owner's key, its turn (`None`: it is held by
/// its gate, see [`Admissions`], or waits for its later start) and its first start.
struct Queued {
    owner: String,
    turn: Option<i64>,
    held: bool,
    run_after: i64,
}

/// The values of a job row.
fn job_values<'t>(task: &'t NewTask, queued: &'t Queued) -> [&'t dyn ToSql; 14] {
    let gate = task.gate.as_ref();
    [
        &task.id,
        &task.max_attempts,
        &task.backoff_ms,
        &task.timeout_ms,
        &queued.run_after,
        &task.tool,
        &queued.owner,
        &task.priority,
        &task.stride,
        &queued.turn,
        gate.map(|gate| &gate.id as &dyn ToSql).unwrap_or(&NULL),
        gate.map(|gate| &gate.label as &dyn ToSql).unwrap_or(&NULL),
        gate.map(|gate| &gate.limit as &dyn ToSql).unwrap_or(&NULL),
        &queued.held,
    ]
}

/// A SQL NULL, for the gate columns of a job without a gate.
const NULL: rusqlite::types::Null = rusqlite::types::Null;

/// The `trace_context` column of a new task.
fn stored_trace(task: &NewTask) -> Option<String> {
    task.trace.as_ref().map(TraceContext::to_stored)
}

/// Where each task's job joins the queue, in order: the turn it takes (see [`Turns`]),
/// unless its gate holds it (see [`Admissions`]); a job that starts later takes its
/// turn when its time comes, as a retry after its backoff ([`super::turns::give_due`]).
fn turns_of(conn: &Connection, tasks: &[NewTask]) -> rusqlite::Result<Vec<Queued>> {
    let mut turns = Turns::default();
    let mut admissions = Admissions::default();
    tasks
        .iter()
        .map(|task| {
            let owner = task.identity.key();
            let later = task.run_after.filter(|at| *at > task.now);
            let run_after = later.unwrap_or(task.now);
            if let Some(gate) = &task.gate {
                if !admissions.admits(conn, gate)? {
                    return Ok(Queued {
                        owner,
                        turn: None,
                        held: true,
                        run_after,
                    });
                }
            }
            let turn = match later {
                Some(_) => None,
                None => Some(turns.take(conn, &owner, task.priority, task.stride)?),
            };
            Ok(Queued {
                owner,
                turn,
                held: false,
                run_after,
            })
        })
        .collect()
}

/// `INSERT ... VALUES` text for `rows` rows.
fn insert_sql(insert: &str, row: &str, rows: usize) -> String {
    let mut sql = String::with_capacity(insert.len() + rows * (row.len() + 2));
    sql.push_str(insert);
    for i in 0..rows {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(row);
    }
    sql
}

/// Rows per multi-row `INSERT` in [`create_tasks`], largest first: a few statement
/// shapes, so each stays prepared in the connection's statement cache.
const CHUNKS: [usize; 3] = [16, 4, 1];

/// The `tasks`, `jobs` and `outbox` insert statements for each of [`CHUNKS`].
static CHUNK_SQL: std::sync::LazyLock<[[String; 3]; 3]> = std::sync::LazyLock::new(|| {
    CHUNKS.map(|rows| {
        [
            insert_sql(TASK_INSERT, TASK_ROW, rows),
            insert_sql(JOB_INSERT, JOB_ROW, rows),
            insert_sql(OUTBOX_INSERT, OUTBOX_ROW, rows),
        ]
    })
});

/// Creates tasks that carry no idempotency key, each with its job and outbox row, with
/// one multi-row `INSERT` per table and chunk (measured alone, 20 tasks at a time: 2.8
/// against 7.1 µs per task inserted one by one). On an error, earlier chunks stay
/// inserted: run it under a savepoint, as every write is (`Store::write`, `Batch`).
pub fn create_tasks(conn: &Connection, tasks: &[NewTask]) -> rusqlite::Result<Vec<TaskRow>> {
    debug_assert!(tasks.iter().all(|task| !task.creates_alone()));
    let turns = turns_of(conn, tasks)?;
    let mut rest = tasks;
    let mut rest_turns = turns.as_slice();
    while !rest.is_empty() {
        let (index, rows) = CHUNKS
            .iter()
            .copied()
            .enumerate()
            .find(|&(_, rows)| rows <= rest.len())
            .unwrap_or((CHUNKS.len() - 1, 1));
        let (chunk, tail) = rest.split_at(rows);
        let (chunk_turns, turns_tail) = rest_turns.split_at(rows);
        insert_chunk(conn, &CHUNK_SQL[index], chunk, chunk_turns)?;
        rest = tail;
        rest_turns = turns_tail;
    }
    Ok(tasks.iter().map(NewTask::created).collect())
}

/// Inserts `chunk`, whose jobs take the owners and turns `turns` (one each, in order).
fn insert_chunk(
    conn: &Connection,
    sql: &[String; 3],
    chunk: &[NewTask],
    turns: &[Queued],
) -> rusqlite::Result<()> {
    let derived: Vec<_> = chunk
        .iter()
        .map(|task| {
            (
                ids::row_key(&task.id),
                task.expires_at(),
                stored_trace(task),
            )
        })
        .collect();
    let tasks = chunk
        .iter()
        .zip(&derived)
        .flat_map(|(task, derived)| task_values(task, derived));
    conn.prepare_cached(&sql[0])?
        .execute(params_from_iter(tasks))?;
    let jobs = chunk
        .iter()
        .zip(turns)
        .flat_map(|(task, queued)| job_values(task, queued));
    conn.prepare_cached(&sql[1])?
        .execute(params_from_iter(jobs))?;
    let outbox = chunk
        .iter()
        .flat_map(|task| [&task.id as &dyn ToSql, &task.now as &dyn ToSql]);
    conn.prepare_cached(&sql[2])?
        .execute(params_from_iter(outbox))?;
    Ok(())
}

/// Creates the task, its job and its outbox row (and its link to the task it re-runs).
/// With an idempotency key, a live task
/// of the same identity that holds the key answers instead: itself when it has the same
/// tool and arguments, a [`KeyConflict`] otherwise (nothing is stored either way).
pub fn create_task(conn: &Connection, task: &NewTask) -> rusqlite::Result<Created> {
    if let Some(key) = &task.idempotency_key {
        if let Some(answer) = key_holder(conn, task, key)? {
            return Ok(answer);
        }
        // An expired task may still hold the key until the janitor removes it.
        conn.prepare_cached(
            "DELETE FROM tasks WHERE endpoint = ?1 AND tenant = ?2 AND principal = ?3 \
             AND issuer = ?5 AND idempotency_key = ?4",
        )?
        .execute(params![
            task.identity.endpoint,
            task.identity.tenant,
            task.identity.principal,
            key,
            task.identity.issuer,
        ])?;
    }
    if let Some(slot) = &task.schedule {
        if super::schedules::slot_taken(conn, &slot.slot)? {
            return Ok(Created::SlotTaken);
        }
    }
    let alone = std::slice::from_ref(task);
    let turns = turns_of(conn, alone)?;
    insert_chunk(conn, &CHUNK_SQL[CHUNKS.len() - 1], alone, &turns)?;
    if let Some(slot) = &task.schedule {
        super::schedules::claim_slot(conn, &task.id, slot, task.now)?;
    }
    // A rerun's link: rare, so written apart rather than in every creation's insert.
    if let Some(rerun_of) = &task.rerun_of {
        conn.prepare_cached("UPDATE OR FAIL tasks SET rerun_of = ?1 WHERE id = ?2")?
            .execute(params![rerun_of, task.id])?;
    }
    Ok(Created::Task(task.created()))
}

/// What the live tasks holding `key` for this identity say about creating `task`: the
/// key is per identity, across tools. (Keys stored per tool before migration 3 may
/// still be held by several tasks: one with the same tool and arguments answers.)
fn key_holder(conn: &Connection, task: &NewTask, key: &str) -> rusqlite::Result<Option<Created>> {
    let mut statement = conn.prepare_cached(concat!(
        // The origin only where it is needed: a key stored without its digest.
        "SELECT arguments_digest, CASE WHEN arguments_digest IS NULL THEN origin END, ",
        task_columns!(),
        " FROM tasks WHERE endpoint = ?1 AND tenant = ?2 AND principal = ?3 \
         AND issuer = ?6 AND idempotency_key = ?4 AND (expires_at IS NULL OR expires_at > ?5)"
    ))?;
    let holders = statement.query_map(
        params![
            task.identity.endpoint,
            task.identity.tenant,
            task.identity.principal,
            key,
            task.now,
            task.identity.issuer,
        ],
        |row| {
            let digest: Option<Vec<u8>> = row.get(0)?;
            let origin: Option<Vec<u8>> = row.get(1)?;
            Ok((digest, origin, task_row_at(row, 2)?))
        },
    )?;
    let mut conflict = None;
    for holder in holders {
        let (digest, origin, existing) = holder?;
        if existing.tool != task.tool {
            conflict.get_or_insert(KeyConflict::OtherTool(existing.tool));
            continue;
        }
        let digest = digest.or_else(|| stored_arguments_digest(origin.as_deref()?));
        if digest.is_some() && digest == task.arguments_digest {
            return Ok(Some(Created::Task(existing)));
        }
        conflict = Some(KeyConflict::OtherArguments);
    }
    Ok(conflict.map(Created::KeyInUse))
}

/// The digest of the arguments in a stored origin (for keys stored before their digest
/// was); `None` if the origin cannot be read, which counts as other arguments.
fn stored_arguments_digest(origin: &[u8]) -> Option<Vec<u8>> {
    serde_json::from_slice::<Origin>(origin)
        .ok()
        .map(|origin| arguments_digest(&origin.arguments))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{fresh_store, task_at};
    use taskd_protocol::TaskStatus;

    /// Everything stored about a task but its id, in its `tasks`, `jobs` and `outbox`
    /// rows.
    fn stored(conn: &Connection, id: &str) -> Vec<rusqlite::types::Value> {
        let row = |sql: &str| -> Vec<rusqlite::types::Value> {
            conn.query_row(sql, [id], |row| {
                (0..row.as_ref().column_count())
                    .map(|i| row.get::<_, rusqlite::types::Value>(i))
                    .collect()
            })
            .unwrap()
        };
        let mut values = row(
            "SELECT endpoint, issuer, tenant, principal, tool, origin, status, \
             created_at, updated_at, ttl_ms, expires_at, poll_interval_ms, result, error, \
             input_requests, input_responses, tool_state, cancel_requested, \
             idempotency_key, version, trace_context FROM tasks WHERE id = ?1",
        );
        values.extend(row(
            "SELECT state, attempt, max_attempts, backoff_ms, timeout_ms, \
             run_after, lease_token, lease_expires, deadline, last_error \
             FROM jobs WHERE task_id = ?1",
        ));
        values.extend(row(
            "SELECT COUNT(*), MAX(created_at) FROM outbox WHERE task_id = ?1",
        ));
        values
    }

    #[test]
    fn tasks_created_together_are_stored_as_if_created_one_by_one() {
        let (_dir, store) = fresh_store();
        store
            .write(|conn| {
                let traced = |id: &str| NewTask {
                    trace: TraceContext::parse(
                        "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",
                        Some("k=v"),
                    ),
                    ..task_at(id, 7)
                };
                create_task(conn, &traced("alone"))?;
                // 21 tasks: one statement shape of each chunk size (16, 4 and 1).
                let together: Vec<NewTask> = (0..21).map(|i| traced(&format!("t{i:02}"))).collect();
                let created = create_tasks(conn, &together)?;
                assert_eq!(created.len(), 21);
                let expected = stored(conn, "alone");
                for (task, row) in together.iter().zip(&created) {
                    assert_eq!(row.id, task.id);
                    assert_eq!((row.status, row.created_at), (TaskStatus::Working, 7));
                    assert_eq!(stored(conn, &task.id), expected, "{}", task.id);
                }
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn tasks_created_together_go_in_all_or_nothing_under_the_writers_savepoint() {
        let (_dir, store) = fresh_store();
        // The duplicate is the third chunk (chunks of 1): two inserts ran before it.
        let tasks = vec![task_at("a", 1), task_at("b", 1), task_at("a", 1)];
        let created = store.write(move |conn| create_tasks(conn, &tasks));
        assert!(created.is_err(), "a duplicate id");
        let left: i64 = store
            .read()
            .unwrap()
            .query_row(
                "SELECT (SELECT COUNT(*) FROM tasks) + (SELECT COUNT(*) FROM jobs) \
                 + (SELECT COUNT(*) FROM outbox)",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(left, 0);
    }

    #[test]
    fn a_key_stored_without_a_digest_is_checked_against_its_origins_arguments() {
        let (_dir, store) = fresh_store();
        let arguments = serde_json::json!({"n": 1}).as_object().unwrap().clone();
        let digest = arguments_digest(&arguments);
        let keyed = move |id: &str, tool: &str, digest: Option<Vec<u8>>| NewTask {
            tool: tool.into(),
            origin: serde_json::to_vec(&Origin {
                v: 1,
                tool: tool.into(),
                arguments: arguments.clone(),
                protocol_version: "2026-07-28".into(),
                capabilities: Default::default(),
            })
            .unwrap(),
            idempotency_key: Some("k".into()),
            arguments_digest: digest,
            ..task_at(id, 1)
        };
        let other = arguments_digest(serde_json::json!({"n": 2}).as_object().unwrap());
        store
            .write(move |conn| {
                // As stored before migration 3: a key and no digest.
                create_task(conn, &keyed("old", "tool", None))?;
                let same = create_task(conn, &keyed("new", "tool", Some(digest)))?;
                assert!(matches!(same, Created::Task(row) if row.id == "old"));
                let changed = create_task(conn, &keyed("new", "tool", Some(other)))?;
                assert!(matches!(
                    changed,
                    Created::KeyInUse(KeyConflict::OtherArguments)
                ));
                let elsewhere = create_task(conn, &keyed("new", "else", None))?;
                assert!(matches!(
                    elsewhere,
                    Created::KeyInUse(KeyConflict::OtherTool(tool)) if tool == "tool"
                ));
                let stored: i64 = conn.query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get(0))?;
                assert_eq!(stored, 1);
                Ok(())
            })
            .unwrap();
    }
}
