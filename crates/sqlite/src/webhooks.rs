//! The SQLite [`WebhookStore`] (issue 49): the routes and the deliveries the triggers
//! of schema.sql's migration 16 record. This process has the store alone (the data
//! dir's lock), so a claim is a read: what is in flight is the caller's to leave out,
//! and a delivery a killed process was making is simply pending at the next start.
//! Every write goes through the writer, in its group commits.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::{classify, Store};
use taskd_base::clock::now_ms;
use taskd_engine::backend::StoreError;
use taskd_engine::webhooks::{
    DeliveredBatch, Delivery, DeliveryFilter, DeliveryRecord, DeliveryState, Outcome, RetryFilter,
    Route, TaskNow, WebhookCounts, WebhookStore,
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
    let delivered = DeliveredBatch::of(outcomes);
    for (status, seqs) in &delivered.by_status {
        let seqs = serde_json::to_string(seqs).unwrap_or_else(|_| "[]".into());
        conn.prepare_cached(
            "UPDATE OR FAIL webhook_deliveries SET state = 'delivered', attempts = attempts + 1, \
                 next_at = 0, holder = NULL, done_at = ?2, last_status = ?3, last_error = NULL \
             WHERE seq IN (SELECT value FROM json_each(?1)) AND state = 'pending'",
        )?
        .execute(params![seqs, now, status])?;
    }
    if !delivered.retried.is_empty() {
        // Those that had failed before held their task's later deliveries back: due now.
        // (Only they: the statement is not run for the batches of first attempts.)
        let seqs = serde_json::to_string(&delivered.retried).unwrap_or_else(|_| "[]".into());
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

/// Rows of webhook_deliveries the janitor reads per window, oldest first.
const PRUNE_WINDOW: i64 = 4096;
/// Windows one prune reads at most; the next goes on from where it stopped.
const PRUNE_WINDOWS: usize = 16;

/// Marks dead the old pending deliveries of webhooks no longer configured, and deletes
/// delivered and dead rows past their ages. The latter are found by walking the table
/// in seq order from `from` (where the last prune stopped; 0 after the newest row), a
/// window at a time, up to [`PRUNE_WINDOWS`] windows or `limit` rows deleted: no index
/// of done rows is kept for it (schema.sql, migration 21), so that marking a delivery
/// done writes no index page. Rows are inserted oldest first, so the walk meets the
/// old ones first; one not old enough yet is met again on the next lap.
fn prune(
    conn: &Connection,
    configured: &str,
    now: i64,
    ages: [i64; 3],
    limit: usize,
    from: &AtomicI64,
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
    let mut deleted = 0;
    for _ in 0..PRUNE_WINDOWS {
        let start = from.load(Ordering::Relaxed);
        let (last, rows): (Option<i64>, i64) = conn
            .prepare_cached(
                "SELECT max(seq), count(*) FROM (SELECT seq FROM webhook_deliveries \
                 WHERE seq > ?1 ORDER BY seq LIMIT ?2)",
            )?
            .query_row(params![start, PRUNE_WINDOW], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?;
        let Some(last) = last else {
            from.store(0, Ordering::Relaxed);
            break;
        };
        deleted += conn
            .prepare_cached(
                "DELETE FROM webhook_deliveries WHERE seq > ?1 AND seq <= ?2 \
                 AND state <> 'pending' AND done_at < ?3 \
                 AND (state = 'delivered' OR done_at < ?4)",
            )?
            .execute(params![start, last, now - delivered_age, now - dead_age])?;
        let lap_ended = rows < PRUNE_WINDOW;
        from.store(if lap_ended { 0 } else { last }, Ordering::Relaxed);
        if lap_ended || deleted >= limit {
            break;
        }
    }
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
        let from = Arc::clone(&self.webhook_prune_from);
        self.write(move |conn| {
            prune(
                conn,
                &configured,
                now_ms(),
                [delivered_age_ms, dead_age_ms, orphan_age_ms],
                limit,
                &from,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{fresh_store, rows_in};

    const HOUR: i64 = 3_600_000;
    const DAY: i64 = 24 * HOUR;

    /// Inserts `count` deliveries in `state`, done (or changed, for pending ones)
    /// `age_ms` before now, and returns their seqs.
    fn insert(store: &Store, count: usize, state: &'static str, age_ms: i64) -> Vec<i64> {
        store
            .write(move |conn| {
                let at = now_ms() - age_ms;
                let done_at = (state != "pending").then_some(at);
                let mut insert = conn.prepare(
                    "INSERT INTO webhook_deliveries \
                       (webhook, id, task_id, event, tool, status, at_ms, since, state, done_at) \
                     VALUES ('hook', 'msg_' || ?1, 't' || ?1, 'task.completed', 'tool', \
                       'completed', ?2, ?2, ?3, ?4) RETURNING seq",
                )?;
                (0..count)
                    .map(|n| {
                        let key = format!("{state}{age_ms}_{n}");
                        insert.query_row(params![key, at, state, done_at], |row| row.get(0))
                    })
                    .collect()
            })
            .unwrap()
    }

    fn remaining(store: &Store) -> Vec<i64> {
        let conn = store.read().unwrap();
        let mut statement = conn
            .prepare("SELECT seq FROM webhook_deliveries ORDER BY seq")
            .unwrap();
        let seqs = statement.query_map([], |row| row.get(0)).unwrap();
        seqs.collect::<rusqlite::Result<_>>().unwrap()
    }

    /// Prunes as the janitor does: calls while a call deletes `limit` rows.
    fn prune_all(store: &Store, limit: usize) {
        let hook = ["hook".to_owned()];
        while store
            .prune_deliveries(&hook, HOUR, 7 * DAY, DAY, limit)
            .unwrap()
            >= limit
        {}
    }

    #[test]
    fn pruning_walks_every_window_and_keeps_what_is_not_old_enough() {
        let (_dir, store) = fresh_store();
        // Rows kept at the head hold nothing back: the walk goes past them.
        let mut kept = insert(&store, 5000, "dead", 2 * DAY);
        kept.extend(insert(&store, 3000, "pending", 2 * HOUR));
        insert(&store, 6000, "delivered", 2 * HOUR);
        insert(&store, 2000, "dead", 8 * DAY);
        kept.extend(insert(&store, 3000, "delivered", HOUR / 2));
        insert(&store, 5000, "delivered", 3 * HOUR);
        prune_all(&store, 1000);
        assert_eq!(remaining(&store), kept);

        // What was too young on the last lap is met on the next one, from the start.
        let newer = insert(&store, 10, "delivered", 0);
        store
            .write(|conn| {
                conn.execute(
                    "UPDATE webhook_deliveries SET done_at = done_at - ?1 \
                     WHERE state = 'delivered'",
                    [HOUR],
                )
            })
            .unwrap();
        prune_all(&store, 1000);
        let left = remaining(&store);
        assert!(newer.iter().all(|seq| !left.contains(seq)), "{left:?}");
        assert_eq!(rows_in(&store, "webhook_deliveries"), 8000);
    }

    #[test]
    fn a_prune_reads_a_bounded_part_and_the_next_goes_on_from_there() {
        let (_dir, store) = fresh_store();
        // More rows to keep than one janitor pass reads, then rows to delete.
        let bound = PRUNE_WINDOW as usize * PRUNE_WINDOWS;
        insert(&store, bound + 100, "dead", 2 * DAY);
        let old = insert(&store, 500, "delivered", 2 * HOUR);
        prune_all(&store, 1000);
        assert_eq!(
            rows_in(&store, "webhook_deliveries") as usize,
            bound + 600,
            "one pass reads {bound} rows at most"
        );
        prune_all(&store, 1000);
        let left = remaining(&store);
        assert_eq!(left.len(), bound + 100, "the next pass went on from there");
        assert!(old.iter().all(|seq| !left.contains(seq)));
    }
}
