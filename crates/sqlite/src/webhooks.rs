//! The SQLite [`WebhookStore`] (issue 49): the routes and the deliveries the triggers
//! of schema.sql's migration 16 record. This process has the store alone (the data
//! dir's lock), so a claim is a read: what is in flight is the caller's to leave out,
//! and a delivery a killed process was making is simply pending at the next start.
//! Every write goes through the writer, in its group commits.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::{classify, Store};
use taskd_base::clock::now_ms;
use taskd_engine::backend::StoreError;
use taskd_engine::webhooks::{
    Delivery, DeliveryFilter, DeliveryRecord, DeliveryState, Outcome, RetryFilter, Route, TaskNow,
    WebhookCounts, WebhookStore,
};

/// Columns of a [`Delivery`], then of its task (`t`), as [`delivery`] reads them.
const DELIVERY_COLUMNS: &str = "d.seq, d.webhook, d.id, d.task_id, d.event, d.tool, d.status, \
     d.at_ms, d.since, d.attempts, t.id IS NOT NULL, t.created_at, t.updated_at, t.error";

/// Columns of a [`DeliveryRecord`], as [`record`] reads them.
const RECORD_COLUMNS: &str = "seq, webhook, id, task_id, event, tool, state, attempts, at_ms, \
     done_at, next_at, last_status, last_error";

fn delivery(row: &Row<'_>) -> rusqlite::Result<Delivery> {
    let task = if row.get::<_, bool>(10)? {
        Some(TaskNow {
            created_at: row.get(11)?,
            updated_at: row.get(12)?,
            error: row.get(13)?,
            result: row.get(14)?,
            input_requests: row.get(15)?,
        })
    } else {
        None
    };
    Ok(Delivery {
        seq: row.get(0)?,
        webhook: row.get(1)?,
        id: row.get(2)?,
        task_id: row.get(3)?,
        event: row.get(4)?,
        tool: row.get(5)?,
        status: row.get(6)?,
        at_ms: row.get(7)?,
        since_ms: row.get(8)?,
        attempts: row.get(9)?,
        task,
    })
}

pub(crate) fn record(row: &Row<'_>) -> rusqlite::Result<DeliveryRecord> {
    let state: String = row.get(6)?;
    Ok(DeliveryRecord {
        seq: row.get(0)?,
        webhook: row.get(1)?,
        id: row.get(2)?,
        task_id: row.get(3)?,
        event: row.get(4)?,
        tool: row.get(5)?,
        state: DeliveryState::parse(&state).unwrap_or(DeliveryState::Pending),
        attempts: row.get(7)?,
        at_ms: row.get(8)?,
        done_at: row.get(9)?,
        next_at: row.get(10)?,
        last_status: row
            .get::<_, Option<i64>>(11)?
            .and_then(|s| u16::try_from(s).ok()),
        last_error: row.get(12)?,
    })
}

/// Replaces the routes, unless they are the ones stored.
fn set_routes(conn: &Connection, routes: &[Route]) -> rusqlite::Result<()> {
    let mut stored: Vec<Route> = conn
        .prepare("SELECT event, webhook, tool, tenant, principal FROM webhook_routes")?
        .query_map([], |row| {
            Ok(Route {
                event: row.get(0)?,
                webhook: row.get(1)?,
                tool: row.get(2)?,
                tenant: row.get(3)?,
                principal: row.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut wanted = routes.to_vec();
    stored.sort();
    wanted.sort();
    wanted.dedup();
    if stored == wanted {
        return Ok(());
    }
    conn.execute("DELETE FROM webhook_routes", [])?;
    let mut insert = conn.prepare(
        "INSERT OR FAIL INTO webhook_routes (event, webhook, tool, tenant, principal) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for route in &wanted {
        insert.execute(params![
            route.event,
            route.webhook,
            route.tool,
            route.tenant,
            route.principal
        ])?;
    }
    Ok(())
}

/// Due deliveries of `webhook`, oldest first, none behind a pending one of its task.
pub(crate) fn due(
    conn: &Connection,
    webhook: &str,
    now: i64,
    limit: usize,
    payload: bool,
) -> rusqlite::Result<Vec<Delivery>> {
    let sql = format!(
        "SELECT {DELIVERY_COLUMNS}, CASE WHEN ?4 THEN t.result END, \
                CASE WHEN ?4 THEN t.input_requests END \
         FROM webhook_deliveries d LEFT JOIN tasks t ON t.id = d.task_id \
         WHERE d.webhook = ?1 AND d.state = 'pending' AND d.next_at <= ?2 \
           AND NOT EXISTS (SELECT 1 FROM webhook_deliveries e WHERE e.webhook = d.webhook \
               AND e.task_id = d.task_id AND e.state = 'pending' AND e.seq < d.seq) \
         ORDER BY d.next_at, d.seq LIMIT ?3"
    );
    let mut statement = conn.prepare_cached(&sql)?;
    let rows = statement.query_map(params![webhook, now, limit as i64, payload], delivery)?;
    rows.collect()
}

/// Records outcomes (see [`WebhookStore::record_deliveries`]). The deliveries made
/// (nearly all of them) are marked in one statement per status code: the writer runs
/// one statement for a batch, not one per delivery.
pub(crate) fn record_outcomes(
    conn: &Connection,
    outcomes: &[(i64, Outcome)],
    now: i64,
) -> rusqlite::Result<()> {
    let mut delivered: std::collections::BTreeMap<u16, Vec<i64>> = Default::default();
    for (seq, outcome) in outcomes {
        if let Outcome::Delivered { status } = outcome {
            delivered.entry(*status).or_default().push(*seq);
        }
    }
    for (status, seqs) in &delivered {
        let seqs = serde_json::to_string(seqs).unwrap_or_else(|_| "[]".into());
        conn.prepare_cached(
            "UPDATE OR FAIL webhook_deliveries SET state = 'delivered', attempts = attempts + 1, \
                 next_at = 0, holder = NULL, done_at = ?2, last_status = ?3, last_error = NULL \
             WHERE seq IN (SELECT value FROM json_each(?1)) AND state = 'pending'",
        )?
        .execute(params![seqs, now, status])?;
        // Those that had failed before held their task's later deliveries back: due now.
        conn.prepare_cached(
            "UPDATE OR FAIL webhook_deliveries SET next_at = 0 \
             WHERE state = 'pending' AND attempts = 0 AND next_at > 0 \
               AND (webhook, task_id) IN (SELECT webhook, task_id FROM webhook_deliveries \
                   WHERE seq IN (SELECT value FROM json_each(?1)) AND attempts > 1)",
        )?
        .execute(params![seqs])?;
    }
    for (seq, outcome) in outcomes {
        let (state, next_at, status, error) = match outcome {
            Outcome::Delivered { .. } => continue,
            Outcome::Retry {
                delay_ms,
                status,
                error,
            } => (
                "pending",
                now.saturating_add(*delay_ms),
                *status,
                Some(error),
            ),
            Outcome::Dead { status, error } => ("dead", 0, *status, Some(error)),
        };
        let done_at = (state != "pending").then_some(now);
        let changed = conn
            .prepare_cached(
                "UPDATE OR FAIL webhook_deliveries SET state = ?2, attempts = attempts + 1, \
                     next_at = ?3, holder = NULL, done_at = ?4, last_status = ?5, \
                     last_error = ?6 \
                 WHERE seq = ?1 AND state = 'pending' RETURNING webhook, task_id, attempts",
            )?
            .query_row(
                params![seq, state, next_at, done_at, status, error],
                |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, i64>(2)?,
                    ))
                },
            )
            .optional()?;
        let Some((webhook, task_id, attempts)) = changed else {
            continue;
        };
        if state == "pending" {
            // The task's later deliveries wait behind this one.
            conn.prepare_cached(
                "UPDATE OR FAIL webhook_deliveries SET next_at = max(next_at, ?4) \
                 WHERE webhook = ?1 AND task_id = ?2 AND state = 'pending' AND seq > ?3",
            )?
            .execute(params![webhook, task_id, seq, next_at])?;
        } else if attempts > 1 {
            // A dead one: its task's later deliveries go on without it.
            // This one had held them back: they are due now.
            conn.prepare_cached(
                "UPDATE OR FAIL webhook_deliveries SET next_at = 0 \
                 WHERE webhook = ?1 AND task_id = ?2 AND state = 'pending' AND seq > ?3 \
                   AND attempts = 0",
            )?
            .execute(params![webhook, task_id, seq])?;
        }
    }
    Ok(())
}

fn prune(
    conn: &Connection,
    configured: &str,
    now: i64,
    ages: [i64; 3],
    limit: usize,
) -> rusqlite::Result<usize> {
    let [delivered_age, dead_age, orphan_age] = ages;
    let orphaned = conn
        .prepare_cached(
            "UPDATE OR FAIL webhook_deliveries SET state = 'dead', done_at = ?1, holder = NULL, \
                 last_error = 'the webhook is no longer configured' \
             WHERE seq IN (SELECT seq FROM webhook_deliveries WHERE state = 'pending' \
                 AND at_ms < ?2 AND webhook NOT IN (SELECT value FROM json_each(?3)) LIMIT ?4)",
        )?
        .execute(params![now, now - orphan_age, configured, limit as i64])?;
    let deleted = conn
        .prepare_cached(
            "DELETE FROM webhook_deliveries WHERE seq IN (SELECT seq FROM webhook_deliveries \
                 WHERE state <> 'pending' AND done_at < ?1 \
                 AND (state = 'delivered' OR done_at < ?2) LIMIT ?3)",
        )?
        .execute(params![now - delivered_age, now - dead_age, limit as i64])?;
    Ok(orphaned + deleted)
}

fn counts(conn: &Connection) -> rusqlite::Result<Vec<WebhookCounts>> {
    let mut statement = conn.prepare_cached(
        "SELECT webhook, SUM(state = 'pending'), SUM(state = 'dead'), SUM(state = 'delivered'), \
             MIN(CASE WHEN state = 'pending' THEN at_ms END), \
             MAX(CASE WHEN state = 'delivered' THEN done_at END) \
         FROM webhook_deliveries GROUP BY webhook ORDER BY webhook",
    )?;
    let rows = statement.query_map([], |row| {
        Ok(WebhookCounts {
            webhook: row.get(0)?,
            pending: row.get::<_, i64>(1)?.max(0) as u64,
            dead: row.get::<_, i64>(2)?.max(0) as u64,
            delivered: row.get::<_, i64>(3)?.max(0) as u64,
            oldest_pending_at: row.get(4)?,
            last_delivered_at: row.get(5)?,
        })
    })?;
    rows.collect()
}

fn list(
    conn: &Connection,
    filter: &DeliveryFilter,
    limit: usize,
) -> rusqlite::Result<Vec<DeliveryRecord>> {
    let sql = format!(
        "SELECT {RECORD_COLUMNS} FROM webhook_deliveries \
         WHERE (?1 IS NULL OR webhook = ?1) AND (?2 IS NULL OR state = ?2) \
           AND (?3 IS NULL OR seq < ?3) \
         ORDER BY seq DESC LIMIT ?4"
    );
    let mut statement = conn.prepare_cached(&sql)?;
    let rows = statement.query_map(
        params![
            filter.webhook,
            filter.state.map(DeliveryState::as_str),
            filter.before,
            limit as i64
        ],
        record,
    )?;
    rows.collect()
}

fn retry(conn: &Connection, filter: &RetryFilter, now: i64) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "UPDATE OR FAIL webhook_deliveries SET state = 'pending', attempts = 0, next_at = 0, \
             since = ?3, done_at = NULL, holder = NULL \
         WHERE state = 'dead' AND (?1 IS NULL OR webhook = ?1) AND (?2 IS NULL OR id = ?2)",
    )?
    .execute(params![filter.webhook, filter.id, now])
}

impl WebhookStore for Store {
    fn set_webhook_routes(&self, routes: &[Route]) -> Result<(), StoreError> {
        let routes = routes.to_vec();
        self.write(move |conn| set_routes(conn, &routes))
    }

    fn release_webhook_claims(&self) -> Result<usize, StoreError> {
        // Claims are never written here: nothing to release.
        Ok(0)
    }

    fn claim_deliveries(
        &self,
        webhook: &str,
        limit: usize,
        _lease_ms: i64,
        in_flight: &[i64],
        payload: bool,
    ) -> Result<Vec<Delivery>, StoreError> {
        let conn = self.read()?;
        let mut due =
            due(&conn, webhook, now_ms(), limit + in_flight.len(), payload).map_err(classify)?;
        due.retain(|delivery| !in_flight.contains(&delivery.seq));
        due.truncate(limit);
        Ok(due)
    }

    fn record_deliveries(&self, outcomes: &[(i64, Outcome)]) -> Result<(), StoreError> {
        let outcomes = outcomes.to_vec();
        self.write(move |conn| record_outcomes(conn, &outcomes, now_ms()))
    }

    fn hasten_deliveries(&self, webhook: &str) -> Result<usize, StoreError> {
        let webhook = webhook.to_owned();
        self.write(move |conn| {
            conn.prepare_cached(
                "UPDATE OR FAIL webhook_deliveries SET next_at = 0 \
                 WHERE webhook = ?1 AND state = 'pending' AND next_at > ?2",
            )?
            .execute(params![webhook, now_ms()])
        })
    }

    fn prune_deliveries(
        &self,
        configured: &[String],
        delivered_age_ms: i64,
        dead_age_ms: i64,
        orphan_age_ms: i64,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let configured = serde_json::to_string(configured)
            .map_err(|error| StoreError::Other(Box::new(error)))?;
        self.write(move |conn| {
            prune(
                conn,
                &configured,
                now_ms(),
                [delivered_age_ms, dead_age_ms, orphan_age_ms],
                limit,
            )
        })
    }

    fn delivery_counts(&self) -> Result<Vec<WebhookCounts>, StoreError> {
        let conn = self.read()?;
        counts(&conn).map_err(classify)
    }

    fn list_deliveries(
        &self,
        filter: &DeliveryFilter,
        limit: usize,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        let conn = self.read()?;
        list(&conn, filter, limit).map_err(classify)
    }

    fn retry_deliveries(&self, filter: &RetryFilter) -> Result<usize, StoreError> {
        let filter = filter.clone();
        self.write(move |conn| retry(conn, &filter, now_ms()))
    }
}
