// Over 600 lines: the migration runner is short; the rest is one test per migration.
//! Schema migrations: the numbered `-- migration N` blocks of `schema.sql`, each applied
//! in its own transaction with foreign keys checked before it commits.

use rusqlite::Connection;

use super::connection::set_verified;
use super::OpenError;

/// The schema, applied by [`migrate`].
pub(super) const SCHEMA: &str = include_str!("../../../schema.sql");

/// Applies every `-- migration N` block of [`SCHEMA`] newer than `user_version`, and
/// refuses a database whose `user_version` is newer than every block (a downgrade).
///
/// Each block runs in its own transaction with foreign keys off, so that it can rebuild
/// a table other tables reference (SQLite's documented procedure for schema changes:
/// with them on, dropping the old table would cascade to its children). Before the
/// block commits, `PRAGMA foreign_key_check` must find nothing; afterwards foreign keys
/// are on again, whatever happened.
pub(super) fn migrate(conn: &mut Connection) -> Result<u32, OpenError> {
    let current: u32 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(|e| OpenError::Migration(format!("reading schema version: {e}")))?;
    let all = migrations(SCHEMA).map_err(OpenError::Migration)?;
    let known = all.len() as u32;
    if current > known {
        // A newer mcp-taskd migrated this database: this binary does not know its
        // tables and could write rows the newer one misreads.
        return Err(OpenError::Migration(format!(
            "the database is at schema version {current}, newer than this mcp-taskd \
             knows ({known}): it was written by a newer release. Run that release, or \
             restore the backup taken before the upgrade (docs/operating.md, \"Upgrade\")"
        )));
    }
    let pending: Vec<(u32, String)> = all
        .into_iter()
        .filter(|(version, _)| *version > current)
        .collect();
    if pending.is_empty() {
        return Ok(current);
    }
    // Takes effect only outside a transaction.
    conn.execute_batch("PRAGMA foreign_keys = OFF")
        .map_err(|e| OpenError::Migration(format!("migrations: {e}")))?;
    let applied = apply_migrations(conn, current, pending);
    let restored = set_verified(conn, "foreign_keys", "ON", 1);
    let applied = applied.map_err(OpenError::Migration)?;
    restored?;
    Ok(applied)
}

fn apply_migrations(
    conn: &mut Connection,
    current: u32,
    pending: Vec<(u32, String)>,
) -> Result<u32, String> {
    let mut applied = current;
    for (version, sql) in pending {
        let failed = |e: rusqlite::Error| format!("migration {version}: {e}");
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(failed)?;
        tx.execute_batch(&format!("{sql}\nPRAGMA user_version = {version};"))
            .map_err(failed)?;
        let violations: i64 = tx
            .query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |row| {
                row.get(0)
            })
            .map_err(failed)?;
        if violations > 0 {
            return Err(format!(
                "migration {version}: would leave {violations} row(s) with a dangling reference"
            ));
        }
        tx.commit().map_err(failed)?;
        applied = version;
    }
    Ok(applied)
}

/// Splits the schema into numbered blocks, checking they count up from 1.
pub(super) fn migrations(schema: &str) -> Result<Vec<(u32, String)>, String> {
    let mut blocks: Vec<(u32, String)> = Vec::new();
    for line in schema.lines() {
        if let Some(number) = line.trim().strip_prefix("-- migration ") {
            let version: u32 = number
                .trim()
                .parse()
                .map_err(|_| format!("schema.sql: bad migration header {line:?}"))?;
            if version as usize != blocks.len() + 1 {
                return Err(format!("schema.sql: migration {version} out of order"));
            }
            blocks.push((version, String::new()));
        } else if let Some((_, sql)) = blocks.last_mut() {
            sql.push_str(line);
            sql.push('\n');
        }
    }
    Ok(blocks)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use rusqlite::Connection;

    use super::*;
    use crate::sql;
    use taskd_protocol::TaskStatus;

    const LATEST: u32 = 21;

    #[test]
    fn schema_blocks_are_numbered_in_order() {
        let blocks = migrations(SCHEMA).unwrap();
        assert!(!blocks.is_empty());
        assert!(migrations("-- migration 2\nSELECT 1;").is_err());
    }

    /// A database at schema version 1 with a task in every state a row can be in.
    fn version_1_database(path: &Path) -> Connection {
        let conn = Connection::open(path).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON;")
            .unwrap();
        let blocks = migrations(SCHEMA).unwrap();
        conn.execute_batch(&format!("{}\nPRAGMA user_version = 1;", blocks[0].1))
            .unwrap();
        for (id, status, job) in [
            ("queued", TaskStatus::Working, Some("queued")),
            ("running", TaskStatus::Working, Some("running")),
            ("waiting", TaskStatus::InputRequired, Some("waiting")),
            ("done", TaskStatus::Completed, None),
        ] {
            conn.execute(
                "INSERT INTO tasks (id, endpoint, tenant, principal, tool, origin, status, \
                 created_at, updated_at, ttl_ms, expires_at, poll_interval_ms, result) \
                 VALUES (?1, '/mcp', 't', 'p', 'noop', x'7b7d', ?2, 1, 2, 10, 11, 5, \
                 CASE WHEN ?2 = 'completed' THEN '{}' END)",
                rusqlite::params![id, status.as_str()],
            )
            .unwrap();
            if let Some(state) = job {
                conn.execute(
                    "INSERT INTO jobs (task_id, state, attempt, max_attempts, backoff_ms, \
                     timeout_ms, run_after, lease_token) VALUES (?1, ?2, 1, 3, 100, 1000, 7, 'tok')",
                    rusqlite::params![id, state],
                )
                .unwrap();
            }
            conn.execute(
                "INSERT INTO attempts (task_id, attempt, started_at) VALUES (?1, 1, 3)",
                [id],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO outbox (task_id, created_at) VALUES (?1, 4)",
                [id],
            )
            .unwrap();
        }
        conn.execute(
            "INSERT INTO input_keys (task_id, key) VALUES ('waiting', 'k')",
            [],
        )
        .unwrap();
        conn
    }

    /// Columns added after version 1 (checked by the test of their migration).
    const ADDED: [(&str, &str); 15] = [
        ("tasks", "rerun_of"),
        ("tasks", "schedule"),
        ("tasks", "schedule_slot"),
        ("jobs", "gate"),
        ("jobs", "gate_label"),
        ("jobs", "gate_limit"),
        ("jobs", "held"),
        ("jobs", "tool"),
        ("tasks", "arguments_digest"),
        ("tasks", "issuer"),
        ("tasks", "trace_context"),
        ("jobs", "owner"),
        ("jobs", "priority"),
        ("jobs", "stride"),
        ("jobs", "turn"),
    ];

    /// Every row of the version 1 columns, as text, in a fixed order (the migrations
    /// must keep them all).
    fn dump(conn: &Connection) -> Vec<String> {
        let mut rows = Vec::new();
        for table in ["tasks", "jobs", "attempts", "outbox", "input_keys"] {
            let mut statement = conn
                .prepare(&format!("SELECT * FROM {table} ORDER BY 1, 2"))
                .unwrap();
            let columns: Vec<usize> = (0..statement.column_count())
                .filter(|&i| {
                    let name = statement.column_name(i).unwrap();
                    !ADDED.contains(&(table, name))
                })
                .collect();
            let mut query = statement.query([]).unwrap();
            while let Some(row) = query.next().unwrap() {
                let values: Vec<String> = columns
                    .iter()
                    .map(|&i| format!("{:?}", row.get_ref(i).unwrap()))
                    .collect();
                rows.push(format!("{table}: {}", values.join(", ")));
            }
        }
        rows
    }

    #[test]
    fn migration_2_rebuilds_the_tables_and_keeps_every_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db");
        let mut conn = version_1_database(&path);
        let before = dump(&conn);
        assert_eq!(before.len(), 4 + 3 + 4 + 4 + 1);

        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
        assert_eq!(dump(&conn), before, "every row survives, unchanged");
        let foreign_keys: i64 = conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert_eq!(foreign_keys, 1, "foreign keys are on again");
        let schema = |name: &str| -> String {
            conn.query_row(
                "SELECT sql FROM sqlite_schema WHERE name = ?1",
                [name],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert!(schema("jobs").contains("WITHOUT ROWID"));
        assert!(!schema("outbox").contains("AUTOINCREMENT"));
        for index in [
            "tasks_by_idempotency_key",
            "tasks_by_expiry",
            "jobs_ready",
            "jobs_leased",
        ] {
            assert!(!schema(index).is_empty(), "{index} is back");
        }

        // The constraints hold as before: status values, and children follow their task.
        let bad = conn.execute("UPDATE tasks SET status = 'bogus' WHERE id = 'done'", []);
        assert!(bad.is_err(), "the status CHECK still holds");
        let bad = conn.execute(
            "UPDATE jobs SET state = 'bogus' WHERE task_id = 'queued'",
            [],
        );
        assert!(bad.is_err(), "the state CHECK still holds");
        let orphan = conn.execute(
            "INSERT INTO jobs (task_id, state, max_attempts, backoff_ms, timeout_ms, run_after) \
             VALUES ('nobody', 'queued', 1, 1, 1, 1)",
            [],
        );
        assert!(orphan.is_err(), "jobs still reference tasks");
        conn.execute("DELETE FROM tasks WHERE id = 'waiting'", [])
            .unwrap();
        let left: i64 = conn
            .query_row(
                "SELECT (SELECT COUNT(*) FROM jobs WHERE task_id = 'waiting') \
                 + (SELECT COUNT(*) FROM attempts WHERE task_id = 'waiting') \
                 + (SELECT COUNT(*) FROM input_keys WHERE task_id = 'waiting')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(left, 0, "deleting a task still cascades");

        // seq goes on growing after the newest row, also once the others are pruned.
        assert_eq!(sql::upkeep::prune_outbox(&conn, 100, 100).unwrap(), 3);
        conn.execute(
            "INSERT INTO outbox (task_id, created_at) VALUES ('done', 5)",
            [],
        )
        .unwrap();
        let seqs: Vec<i64> = conn
            .prepare("SELECT seq FROM outbox ORDER BY seq")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(seqs, vec![4, 5]);
    }

    #[test]
    fn migration_3_names_each_jobs_tool_and_scopes_keys_per_identity() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = version_1_database(&dir.path().join("tasks.db"));
        conn.execute(
            "UPDATE tasks SET tool = 'other', idempotency_key = 'k' WHERE id = 'queued'",
            [],
        )
        .unwrap();
        // Keys were per tool: the same key on two tools of one identity must migrate.
        conn.execute(
            "UPDATE tasks SET idempotency_key = 'k' WHERE id = 'running'",
            [],
        )
        .unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
        let tools: Vec<(String, String)> = conn
            .prepare("SELECT task_id, tool FROM jobs ORDER BY task_id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let expected = [
            ("queued", "other"),
            ("running", "noop"),
            ("waiting", "noop"),
        ]
        .map(|(id, tool)| (id.to_owned(), tool.to_owned()));
        assert_eq!(tools, expected);
        let digests: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM tasks WHERE arguments_digest IS NOT NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(digests, 0, "computed from the origin when needed");
        let plan = |sql: &str| -> String {
            conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map([], |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap()
                .join("; ")
        };
        assert!(plan(
            "SELECT id FROM tasks WHERE endpoint = 'e' AND tenant = 't' AND principal = 'p' \
             AND idempotency_key = 'k'"
        )
        .contains("tasks_by_idempotency_key"));
    }

    #[test]
    fn a_migration_that_would_orphan_rows_does_not_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db");
        let mut conn = version_1_database(&path);
        // A task deleted with foreign keys off leaves its job dangling: migration 2
        // copies it as it is, and the check before COMMIT refuses the result.
        conn.execute_batch("PRAGMA foreign_keys = OFF; DELETE FROM tasks WHERE id = 'queued';")
            .unwrap();
        let before = dump(&conn);
        let error = migrate(&mut conn).unwrap_err().to_string();
        assert!(
            error.contains("migration 2") && error.contains("dangling"),
            "{error}"
        );
        let version: u32 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 1);
        assert_eq!(dump(&conn), before, "nothing changed");
        let foreign_keys: i64 = conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            foreign_keys, 1,
            "foreign keys are on again after a failure too"
        );
    }

    #[test]
    fn migration_4_seeds_the_counts_that_triggers_then_keep() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.db");
        let mut conn = version_1_database(&path);
        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
        let rows = |sql: &str| -> Vec<String> {
            conn.prepare(sql)
                .unwrap()
                .query_map([], |r| {
                    let columns = r.as_ref().column_count();
                    Ok((0..columns)
                        .map(|i| format!("{:?}", r.get::<_, rusqlite::types::Value>(i).unwrap()))
                        .collect::<Vec<_>>()
                        .join(" "))
                })
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        let task_counts = "SELECT status, n FROM task_counts WHERE n > 0 ORDER BY status";
        let job_counts = "SELECT state, n FROM job_counts WHERE n > 0 ORDER BY state";
        let totals = "SELECT created, completed, failed, cancelled FROM task_totals";
        assert_eq!(
            rows(task_counts),
            [
                "Text(\"completed\") Integer(1)",
                "Text(\"input_required\") Integer(1)",
                "Text(\"working\") Integer(2)"
            ]
        );
        assert_eq!(
            rows(job_counts),
            [
                "Text(\"queued\") Integer(1)",
                "Text(\"running\") Integer(1)",
                "Text(\"waiting\") Integer(1)"
            ]
        );
        assert_eq!(
            rows(totals),
            ["Integer(4) Integer(1) Integer(0) Integer(0)"]
        );
        // From here the triggers count: a job ends, its task fails, another is deleted.
        conn.execute_batch(
            "UPDATE tasks SET status = 'failed', error = '{}' WHERE id = 'running';
             DELETE FROM jobs WHERE task_id = 'running';
             DELETE FROM tasks WHERE id = 'queued';",
        )
        .unwrap();
        assert_eq!(
            rows(task_counts),
            [
                "Text(\"completed\") Integer(1)",
                "Text(\"failed\") Integer(1)",
                "Text(\"input_required\") Integer(1)"
            ]
        );
        assert_eq!(rows(job_counts), ["Text(\"waiting\") Integer(1)"]);
        assert_eq!(
            rows(totals),
            ["Integer(4) Integer(1) Integer(1) Integer(0)"],
            "deletions never decrement the totals"
        );
    }

    #[test]
    fn migration_6_binds_every_stored_task_to_no_issuer() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = version_1_database(&dir.path().join("tasks.db"));
        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
        let issuers: Vec<String> = conn
            .prepare("SELECT DISTINCT issuer FROM tasks")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            issuers,
            vec![String::new()],
            "static tokens' tasks stay theirs"
        );
    }

    #[test]
    fn migration_8_names_each_jobs_owner_and_claims_read_one_index_in_turn() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = version_1_database(&dir.path().join("tasks.db"));
        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
        let owners: Vec<(String, String, Option<i64>)> = conn
            .prepare("SELECT task_id, owner, turn FROM jobs ORDER BY task_id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let key = taskd_protocol::Identity {
            endpoint: "/mcp".into(),
            issuer: String::new(),
            tenant: "t".into(),
            principal: "p".into(),
        }
        .key();
        for (task, owner, turn) in &owners {
            assert_eq!(owner, &key, "{task}: the key Identity::key computes");
            assert_eq!(*turn, None, "{task}: given its turn by the first claims");
        }
        let plan = |sql: &str| -> String {
            conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map([1, 2], |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap()
                .join("; ")
        };
        let next = plan(
            "SELECT task_id FROM jobs WHERE state = 'queued' AND turn IS NOT NULL \
             ORDER BY priority DESC, turn, task_id LIMIT ?1 + ?2",
        );
        assert!(
            next.contains("jobs_turns") && !next.contains("TEMP B-TREE"),
            "{next}"
        );
        let by_tool = plan(
            "SELECT task_id FROM jobs WHERE state = 'queued' AND turn IS NOT NULL \
             AND tool = 'a' ORDER BY priority DESC, turn, task_id LIMIT ?1 + ?2",
        );
        assert!(
            by_tool.contains("jobs_turns_by_tool") && !by_tool.contains("TEMP B-TREE"),
            "{by_tool}"
        );
        let tools = plan(
            "SELECT MIN(tool) FROM jobs WHERE state = 'queued' AND turn IS NOT NULL \
             AND tool > 'a' AND ?1 < ?2",
        );
        assert!(tools.contains("jobs_turns_by_tool"), "{tools}");
        let last = plan(
            "SELECT last_turn FROM identity_queue WHERE owner = 'o' AND priority = ?1 \
             AND ?2 > 0",
        );
        assert!(last.contains("PRIMARY KEY"), "{last}");
        let due = plan(
            "SELECT task_id FROM jobs WHERE state = 'queued' AND turn IS NULL \
             AND held = 0 AND run_after <= ?1 ORDER BY run_after LIMIT ?2",
        );
        assert!(due.contains("jobs_due"), "{due}");
    }

    #[test]
    fn migration_12_counts_an_identitys_live_tasks_in_one_row() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = version_1_database(&dir.path().join("tasks.db"));
        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
        let key = taskd_protocol::Identity {
            endpoint: "/mcp".into(),
            issuer: String::new(),
            tenant: "t".into(),
            principal: "p".into(),
        }
        .key();
        let live = sql::upkeep::live_tasks(&conn, &key, 100).unwrap();
        let jobs: i64 = conn
            .query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0))
            .unwrap();
        let jobs = jobs as u64;
        assert_eq!(live, jobs, "every stored job is p's");
        assert_eq!(
            sql::upkeep::live_tasks(&conn, &key, 1).unwrap(),
            1.min(jobs)
        );
    }

    /// Migrations 5, 13 and 20: no statement that fires a trigger may ABORT halfway,
    /// so none gets a statement journal (a copy of every page it changes, taken and
    /// freed per statement, on top of the writer's savepoint). A trigger step's ABORT
    /// constraint check (`HaltIfNull` or `Halt` with P2 = 2, OE_Abort) makes its
    /// firing statement one that may, and so does any call of a function (`Function`,
    /// `PureFunc`: SQLite assumes a function may raise an error); `EXPLAIN` lists the
    /// trigger programs' opcodes, those of the triggers they fire in turn included.
    #[test]
    fn no_trigger_firing_write_needs_a_statement_journal() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = version_1_database(&dir.path().join("tasks.db"));
        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
        const OE_ABORT: i64 = 2;
        for sql in [
            "INSERT OR FAIL INTO jobs (task_id, state, max_attempts, backoff_ms, timeout_ms, \
             run_after, owner, turn) VALUES ('x', 'queued', 1, 1, 1, 1, 'o', 1)",
            "UPDATE OR FAIL jobs SET state = 'running' WHERE task_id = 'x'",
            "UPDATE OR FAIL jobs SET state = 'waiting' WHERE task_id = 'x'",
            "UPDATE OR FAIL jobs SET turn = 5 WHERE task_id = 'x'",
            "DELETE FROM jobs WHERE task_id = 'x'",
            "DELETE FROM gate_holds WHERE gate = 'g'",
            "UPDATE OR FAIL tasks SET status = 'completed' WHERE id = 'x'",
            "DELETE FROM tasks WHERE id = 'x'",
        ] {
            let aborting: Vec<String> = conn
                .prepare(&format!("EXPLAIN {sql}"))
                .unwrap()
                .query_map([], |r| Ok((r.get::<_, String>(1)?, r.get::<_, i64>(3)?)))
                .unwrap()
                .filter_map(|op| match op.unwrap() {
                    (code, OE_ABORT) if code == "Halt" || code == "HaltIfNull" => Some(code),
                    (code, _) if code == "Function" || code == "PureFunc" => Some(code),
                    _ => None,
                })
                .collect();
            assert!(aborting.is_empty(), "{sql}: {aborting:?}");
        }
    }

    #[test]
    fn migration_17_keys_a_schedules_slots_and_leaves_other_tasks_out() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = version_1_database(&dir.path().join("tasks.db"));
        assert_eq!(migrate(&mut conn).unwrap(), LATEST);
        let scheduled: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM tasks WHERE schedule IS NOT NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(scheduled, 0, "no task stored before names a schedule");
        // Tasks of no schedule never meet in the index; two of one slot cannot be.
        conn.execute_batch(
            "UPDATE tasks SET schedule_slot = 1; \
             UPDATE tasks SET schedule = 's', schedule_slot = 7 WHERE id = 'done'",
        )
        .unwrap();
        let twice = conn.execute_batch(
            "UPDATE tasks SET schedule = 's', schedule_slot = 7 WHERE id = 'queued'",
        );
        assert!(twice.is_err(), "a slot with two tasks");
        let plan: String = conn
            .query_row(
                "EXPLAIN QUERY PLAN SELECT 1 FROM tasks WHERE schedule = 's' \
                 AND schedule_slot = 7",
                [],
                |r| r.get(3),
            )
            .unwrap();
        assert!(plan.contains("tasks_by_schedule_slot"), "{plan}");
        let marks: i64 = conn
            .query_row("SELECT COUNT(*) FROM schedule_marks", [], |r| r.get(0))
            .unwrap();
        assert_eq!(marks, 0);
    }

    #[test]
    fn a_database_from_a_newer_release_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = version_1_database(&dir.path().join("tasks.db"));
        conn.execute_batch(&format!("PRAGMA user_version = {}", LATEST + 1))
            .unwrap();
        let error = migrate(&mut conn).unwrap_err().to_string();
        assert!(error.contains("newer than this mcp-taskd knows"), "{error}");
    }
}
