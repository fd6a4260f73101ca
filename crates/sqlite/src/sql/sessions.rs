//! Legacy sessions (issue 28): one row each, written when `initialize` opens one and
//! when its state changes, read when a server that does not hold it in memory (it
//! restarted) is asked for it.

use rusqlite::{params, Connection, OptionalExtension};

use taskd_engine::model::SessionRecord;

/// Writes `session` whole (new, or its state since it was last written).
pub fn save(conn: &Connection, session: &SessionRecord) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO sessions (id, owner, version, capabilities, client_info, \
         log_level, subscriptions, followed, last_used) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        session.id,
        session.owner,
        session.version,
        session.capabilities,
        session.client_info,
        session.log_level,
        session.subscriptions,
        session.followed,
        session.last_used
    ])?;
    Ok(())
}

/// Session `id`, if it was used at or after `used_since` (Unix ms).
pub fn load(
    conn: &Connection,
    id: &str,
    used_since: i64,
) -> rusqlite::Result<Option<SessionRecord>> {
    conn.prepare_cached(
        "SELECT id, owner, version, capabilities, client_info, log_level, subscriptions, \
         followed, last_used FROM sessions WHERE id = ?1 AND last_used >= ?2",
    )?
    .query_row(params![id, used_since], |row| {
        Ok(SessionRecord {
            id: row.get(0)?,
            owner: row.get(1)?,
            version: row.get(2)?,
            capabilities: row.get(3)?,
            client_info: row.get(4)?,
            log_level: row.get(5)?,
            subscriptions: row.get(6)?,
            followed: row.get(7)?,
            last_used: row.get(8)?,
        })
    })
    .optional()
}

/// Deletes session `id` (`DELETE`, or ended to make room).
pub fn delete(conn: &Connection, id: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM sessions WHERE id = ?1")?
        .execute([id])?;
    Ok(())
}

/// Deletes up to 100 sessions last used before `used_since` (a sweep runs with each
/// new session: the table stays clean without one `initialize` paying for a backlog).
pub fn sweep(conn: &Connection, used_since: i64) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "DELETE FROM sessions WHERE id IN (SELECT id FROM sessions \
         WHERE last_used < ?1 ORDER BY last_used LIMIT 100)",
    )?
    .execute([used_since])
}
