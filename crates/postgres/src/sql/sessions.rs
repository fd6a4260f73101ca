//! Legacy sessions (issue 28), as the SQLite store keeps them
//! (`tasks::sqlite::sql::sessions`): any node serves a session another opened.

use postgres::GenericClient;

use super::super::statements::Db;
use super::Failure;
use taskd_engine::model::SessionRecord;

/// Writes `session` whole (new, or its state since it was last written).
pub fn save(conn: &mut Db<'_, impl GenericClient>, session: &SessionRecord) -> Result<(), Failure> {
    conn.execute(
        "INSERT INTO sessions (id, owner, version, capabilities, client_info, log_level, \
         subscriptions, followed, last_used) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (id) DO UPDATE SET log_level = EXCLUDED.log_level, \
         subscriptions = EXCLUDED.subscriptions, followed = EXCLUDED.followed, \
         last_used = EXCLUDED.last_used",
        &[
            &session.id,
            &session.owner,
            &session.version,
            &session.capabilities,
            &session.client_info,
            &session.log_level,
            &session.subscriptions,
            &session.followed,
            &session.last_used,
        ],
    )?;
    Ok(())
}

/// Session `id`, if it was used at or after `used_since` (Unix ms).
pub fn load(
    conn: &mut Db<'_, impl GenericClient>,
    id: &str,
    used_since: i64,
) -> Result<Option<SessionRecord>, Failure> {
    let Some(row) = conn.query_opt(
        "SELECT id, owner, version, capabilities, client_info, log_level, subscriptions, \
         followed, last_used FROM sessions WHERE id = $1 AND last_used >= $2",
        &[&id, &used_since],
    )?
    else {
        return Ok(None);
    };
    Ok(Some(SessionRecord {
        id: row.try_get(0)?,
        owner: row.try_get(1)?,
        version: row.try_get(2)?,
        capabilities: row.try_get(3)?,
        client_info: row.try_get(4)?,
        log_level: row.try_get(5)?,
        subscriptions: row.try_get(6)?,
        followed: row.try_get(7)?,
        last_used: row.try_get(8)?,
    }))
}

/// Deletes session `id`.
pub fn delete(conn: &mut Db<'_, impl GenericClient>, id: &str) -> Result<(), Failure> {
    conn.execute("DELETE FROM sessions WHERE id = $1", &[&id])?;
    Ok(())
}

/// Deletes up to 100 sessions last used before `used_since`.
pub fn sweep(conn: &mut Db<'_, impl GenericClient>, used_since: i64) -> Result<u64, Failure> {
    Ok(conn.execute(
        "DELETE FROM sessions WHERE id IN (SELECT id FROM sessions \
         WHERE last_used < $1 ORDER BY last_used LIMIT 100)",
        &[&used_since],
    )?)
}
