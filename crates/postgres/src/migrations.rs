//! Applies schema-postgres.sql at start-up: each `-- migration N` block not applied yet,
//! in order, one transaction each, recorded in `taskd_migrations`. The whole run holds a
//! session advisory lock, so nodes starting together take turns and the second finds
//! the work done.

use postgres::Client;

use super::connection::OpenError;

const SCHEMA: &str = include_str!("../../../schema-postgres.sql");
/// The advisory lock of migrations (schema-postgres.sql lists them all).
const LOCK: &str = "SELECT pg_advisory_lock(1952542059, 2)";
const UNLOCK: &str = "SELECT pg_advisory_unlock(1952542059, 2)";

/// The numbered blocks of the schema, in order.
fn blocks() -> Vec<(i32, String)> {
    let mut blocks: Vec<(i32, String)> = Vec::new();
    for line in SCHEMA.lines() {
        if let Some(number) = line.strip_prefix("-- migration ") {
            if let Ok(number) = number.trim().parse() {
                blocks.push((number, String::new()));
                continue;
            }
        }
        if let Some((_, sql)) = blocks.last_mut() {
            sql.push_str(line);
            sql.push('\n');
        }
    }
    blocks
}

/// Migrates the database to the newest block; returns its number.
pub fn migrate(client: &mut Client) -> Result<i32, OpenError> {
    let failed = |e: postgres::Error| OpenError::Migration(e.to_string());
    client.execute(LOCK, &[]).map_err(failed)?;
    let migrated = apply(client);
    // The lock is the session's: released here, or when the connection closes.
    let unlocked = client.execute(UNLOCK, &[]);
    let version = migrated?;
    unlocked.map_err(failed)?;
    Ok(version)
}

fn apply(client: &mut Client) -> Result<i32, OpenError> {
    let failed = |e: postgres::Error| OpenError::Migration(e.to_string());
    client
        .batch_execute(
            "SET client_min_messages = warning; \
             CREATE TABLE IF NOT EXISTS taskd_migrations (\
             version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .map_err(failed)?;
    let current: i32 = client
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM taskd_migrations",
            &[],
        )
        .map_err(failed)?
        .get(0);
    let blocks = blocks();
    let newest = blocks.last().map_or(0, |(number, _)| *number);
    if current > newest {
        return Err(OpenError::Migration(format!(
            "the database is at schema version {current}, newer than this binary's {newest}: \
             upgrade mcp-taskd"
        )));
    }
    for (number, sql) in blocks.iter().filter(|(number, _)| *number > current) {
        let mut tx = client.transaction().map_err(failed)?;
        tx.batch_execute(sql)
            .map_err(|e| OpenError::Migration(format!("migration {number}: {e}")))?;
        tx.execute(
            "INSERT INTO taskd_migrations (version) VALUES ($1)",
            &[number],
        )
        .map_err(failed)?;
        tx.commit().map_err(failed)?;
        log::info!("applied PostgreSQL migration {number}");
    }
    Ok(newest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_has_numbered_blocks_in_order() {
        let numbers: Vec<i32> = blocks().iter().map(|(n, _)| *n).collect();
        assert!(!numbers.is_empty());
        assert_eq!(numbers, (1..=numbers.len() as i32).collect::<Vec<_>>());
    }
}
