//! The PostgreSQL [`WebhookStore`] (issue 49): the routes and the deliveries that the
//! triggers of schema-postgres.sql's migration 11 record. Several nodes share them, so
//! a claim leases each delivery to this run (`holder`, and `next_at` moved past the
//! lease) with `FOR UPDATE SKIP LOCKED`: each delivery is made by one node, and by
//! another only once the lease has lapsed (the node died mid-delivery). An outcome is
//! recorded only while the lease is still this run's. Times are the database clock.

use postgres::Row;

use super::statements::{Db, Tx};
use super::{Failure, Store};
use taskd_engine::backend::StoreError;
use taskd_engine::webhooks::{
    DeliveredBatch, Delivery, DeliveryFilter, DeliveryRecord, DeliveryState, Outcome, RetryFilter,
    Route, TaskNow, WebhookCounts, WebhookStore,
};

fn limit_of(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

fn delivery(row: &Row) -> Result<Delivery, Failure> {
    let task = if row.try_get::<_, bool>(10)? {
        Some(TaskNow {
            created_at: row.try_get(11)?,
            updated_at: row.try_get(12)?,
            error: row.try_get(13)?,
            result: row.try_get(14)?,
            input_requests: row.try_get(15)?,
        })
    } else {
        None
    };
    Ok(Delivery {
        seq: row.try_get(0)?,
        webhook: row.try_get(1)?,
        id: row.try_get(2)?,
        task_id: row.try_get(3)?,
        event: row.try_get(4)?,
        tool: row.try_get(5)?,
        status: row.try_get(6)?,
        at_ms: row.try_get(7)?,
        since_ms: row.try_get(8)?,
        attempts: row.try_get(9)?,
        task,
    })
}

fn record(row: &Row) -> Result<DeliveryRecord, Failure> {
    let state: String = row.try_get(6)?;
    Ok(DeliveryRecord {
        seq: row.try_get(0)?,
        webhook: row.try_get(1)?,
        id: row.try_get(2)?,
        task_id: row.try_get(3)?,
        event: row.try_get(4)?,
        tool: row.try_get(5)?,
        state: DeliveryState::parse(&state).unwrap_or(DeliveryState::Pending),
        attempts: row.try_get(7)?,
        at_ms: row.try_get(8)?,
        done_at: row.try_get(9)?,
        next_at: row.try_get(10)?,
        last_status: row
            .try_get::<_, Option<i32>>(11)?
            .and_then(|s| u16::try_from(s).ok()),
        last_error: row.try_get(12)?,
    })
}

fn set_routes(tx: &mut Tx<'_, '_>, routes: &[Route]) -> Result<(), Failure> {
    // One writer of the routes at a time, across nodes (each reload may write them).
    tx.execute("LOCK TABLE webhook_routes IN EXCLUSIVE MODE", &[])?;
    let mut stored = tx
        .query(
            "SELECT event, webhook, tool, tenant, principal FROM webhook_routes",
            &[],
        )?
        .iter()
        .map(|row| {
            Ok(Route {
                event: row.try_get(0)?,
                webhook: row.try_get(1)?,
                tool: row.try_get(2)?,
                tenant: row.try_get(3)?,
                principal: row.try_get(4)?,
            })
        })
        .collect::<Result<Vec<Route>, Failure>>()?;
    let mut wanted = routes.to_vec();
    stored.sort();
    wanted.sort();
    wanted.dedup();
    if stored == wanted {
        return Ok(());
    }
    tx.execute("DELETE FROM webhook_routes", &[])?;
    for route in &wanted {
        tx.execute(
            "INSERT INTO webhook_routes (event, webhook, tool, tenant, principal) \
             VALUES ($1, $2, $3, $4, $5)",
            &[
                &route.event.as_str(),
                &route.webhook.as_str(),
                &route.tool.as_str(),
                &route.tenant.as_str(),
                &route.principal.as_str(),
            ],
        )?;
    }
    Ok(())
}

fn claim(
    tx: &mut Tx<'_, '_>,
    run: &str,
    webhook: &str,
    limit: usize,
    lease_ms: i64,
    in_flight: &[i64],
    payload: bool,
) -> Result<Vec<Delivery>, Failure> {
    let in_flight = in_flight.to_vec();
    let rows = tx.query(
        "WITH picked AS ( \
             SELECT d.seq FROM webhook_deliveries d \
             WHERE d.webhook = $1 AND d.state = 'pending' AND d.next_at <= taskd_now_ms() \
               AND NOT (d.seq = ANY($3)) \
               AND NOT EXISTS (SELECT 1 FROM webhook_deliveries e WHERE e.webhook = d.webhook \
                   AND e.task_id = d.task_id AND e.state = 'pending' AND e.seq < d.seq) \
             ORDER BY d.next_at, d.seq LIMIT $2 \
             FOR UPDATE OF d SKIP LOCKED), \
         leased AS ( \
             UPDATE webhook_deliveries w SET next_at = taskd_after_ms($4), holder = $5 \
             FROM picked WHERE w.seq = picked.seq \
             RETURNING w.seq, w.webhook, w.id, w.task_id, w.event, w.tool, w.status, w.at_ms, \
                 w.since, w.attempts) \
         SELECT l.seq, l.webhook, l.id, l.task_id, l.event, l.tool, l.status, l.at_ms, l.since, \
             l.attempts, t.id IS NOT NULL, t.created_at, t.updated_at, t.error, \
             CASE WHEN $6 THEN t.result END, CASE WHEN $6 THEN t.input_requests END \
         FROM leased l LEFT JOIN tasks t ON t.id = l.task_id ORDER BY l.seq",
        &[
            &webhook,
            &limit_of(limit),
            &in_flight,
            &lease_ms,
            &run,
            &payload,
        ],
    )?;
    rows.iter().map(delivery).collect()
}

fn record_outcomes(
    tx: &mut Tx<'_, '_>,
    run: &str,
    outcomes: &[(i64, Outcome)],
) -> Result<(), Failure> {
    // The deliveries made (nearly all): one statement per status code for the batch.
    let delivered = DeliveredBatch::of(outcomes);
    for (status, seqs) in delivered.by_status {
        let status = i32::from(status);
        tx.execute(
            "UPDATE webhook_deliveries SET state = 'delivered', attempts = attempts + 1, \
                 next_at = 0, holder = NULL, done_at = taskd_now_ms(), last_status = $2, \
                 last_error = NULL \
             WHERE seq = ANY($1) AND state = 'pending' AND holder = $3",
            &[&seqs, &status, &run],
        )?;
    }
    if !delivered.retried.is_empty() {
        // Those that had failed before held their task's later deliveries back: due now.
        // (Only they: the statement is not run for the batches of first attempts.)
        tx.execute(
            "UPDATE webhook_deliveries SET next_at = 0 \
             WHERE state = 'pending' AND attempts = 0 AND next_at > 0 AND holder IS NULL \
               AND (webhook, task_id) IN (SELECT webhook, task_id FROM webhook_deliveries \
                   WHERE seq = ANY($1) AND attempts > 1)",
            &[&delivered.retried],
        )?;
    }
    for (seq, outcome) in outcomes {
        let (state, delay, status, error) = match outcome {
            Outcome::Delivered { .. } => continue,
            Outcome::Retry {
                delay_ms,
                status,
                error,
            } => ("pending", *delay_ms, *status, Some(error.as_str())),
            Outcome::Dead { status, error } => ("dead", 0, *status, Some(error.as_str())),
        };
        let status = status.map(i32::from);
        let changed = tx.query_opt(
            "UPDATE webhook_deliveries SET state = $2, attempts = attempts + 1, \
                 next_at = CASE WHEN $2 = 'pending' THEN taskd_after_ms($3) ELSE 0 END, \
                 holder = NULL, done_at = CASE WHEN $2 = 'pending' THEN NULL ELSE taskd_now_ms() END, \
                 last_status = $4, last_error = $5 \
             WHERE seq = $1 AND state = 'pending' AND holder = $6 \
             RETURNING webhook, task_id, attempts, next_at",
            &[seq, &state, &delay, &status, &error, &run],
        )?;
        let Some(changed) = changed else {
            continue;
        };
        let webhook: String = changed.try_get(0)?;
        let task_id: String = changed.try_get(1)?;
        let attempts: i64 = changed.try_get(2)?;
        let next_at: i64 = changed.try_get(3)?;
        if state == "pending" {
            tx.execute(
                "UPDATE webhook_deliveries SET next_at = GREATEST(next_at, $4) \
                 WHERE webhook = $1 AND task_id = $2 AND state = 'pending' AND seq > $3 \
                   AND holder IS NULL",
                &[&webhook, &task_id, seq, &next_at],
            )?;
        } else if attempts > 1 {
            tx.execute(
                "UPDATE webhook_deliveries SET next_at = 0 \
                 WHERE webhook = $1 AND task_id = $2 AND state = 'pending' AND seq > $3 \
                   AND attempts = 0 AND holder IS NULL",
                &[&webhook, &task_id, seq],
            )?;
        }
    }
    Ok(())
}

fn counts(conn: &mut Db<'_, postgres::Client>) -> Result<Vec<WebhookCounts>, Failure> {
    let rows = conn.query(
        "SELECT webhook, COUNT(*) FILTER (WHERE state = 'pending'), \
             COUNT(*) FILTER (WHERE state = 'dead'), COUNT(*) FILTER (WHERE state = 'delivered'), \
             MIN(at_ms) FILTER (WHERE state = 'pending'), \
             MAX(done_at) FILTER (WHERE state = 'delivered') \
         FROM webhook_deliveries GROUP BY webhook ORDER BY webhook",
        &[],
    )?;
    rows.iter()
        .map(|row| {
            Ok(WebhookCounts {
                webhook: row.try_get(0)?,
                pending: row.try_get::<_, i64>(1)?.max(0) as u64,
                dead: row.try_get::<_, i64>(2)?.max(0) as u64,
                delivered: row.try_get::<_, i64>(3)?.max(0) as u64,
                oldest_pending_at: row.try_get(4)?,
                last_delivered_at: row.try_get(5)?,
            })
        })
        .collect()
}

impl WebhookStore for Store {
    fn set_webhook_routes(&self, routes: &[Route]) -> Result<(), StoreError> {
        self.transaction(|tx| set_routes(tx, routes))
    }

    fn release_webhook_claims(&self) -> Result<usize, StoreError> {
        let (node, run) = (self.node.as_str(), self.run.as_str());
        let released = self.transaction(|tx| {
            Ok(tx.execute(
                "UPDATE webhook_deliveries SET next_at = 0, holder = NULL \
                 WHERE state = 'pending' AND holder IS NOT NULL \
                   AND split_part(holder, '/', 1) = $1 AND holder <> $2",
                &[&node, &run],
            )?)
        })?;
        Ok(usize::try_from(released).unwrap_or(usize::MAX))
    }

    fn claim_deliveries(
        &self,
        webhook: &str,
        limit: usize,
        lease_ms: i64,
        in_flight: &[i64],
        payload: bool,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.transaction(|tx| claim(tx, &self.run, webhook, limit, lease_ms, in_flight, payload))
    }

    fn record_deliveries(&self, outcomes: &[(i64, Outcome)]) -> Result<(), StoreError> {
        self.transaction(|tx| record_outcomes(tx, &self.run, outcomes))
    }

    fn hasten_deliveries(&self, webhook: &str) -> Result<usize, StoreError> {
        let hastened = self.transaction(|tx| {
            Ok(tx.execute(
                "UPDATE webhook_deliveries SET next_at = 0 \
                 WHERE webhook = $1 AND state = 'pending' AND next_at > taskd_now_ms() \
                   AND holder IS NULL",
                &[&webhook],
            )?)
        })?;
        Ok(usize::try_from(hastened).unwrap_or(usize::MAX))
    }

    fn prune_deliveries(
        &self,
        configured: &[String],
        delivered_age_ms: i64,
        dead_age_ms: i64,
        orphan_age_ms: i64,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let configured = configured.to_vec();
        let pruned = self.transaction(|tx| {
            let orphaned = tx.execute(
                "UPDATE webhook_deliveries SET state = 'dead', done_at = taskd_now_ms(), \
                     holder = NULL, last_error = 'the webhook is no longer configured' \
                 WHERE seq IN (SELECT seq FROM webhook_deliveries WHERE state = 'pending' \
                     AND at_ms < taskd_now_ms() - $1 AND NOT (webhook = ANY($2)) LIMIT $3)",
                &[&orphan_age_ms, &configured, &limit_of(limit)],
            )?;
            let deleted = tx.execute(
                "DELETE FROM webhook_deliveries WHERE seq IN (SELECT seq FROM webhook_deliveries \
                     WHERE state <> 'pending' AND done_at < taskd_now_ms() - $1 \
                     AND (state = 'delivered' OR done_at < taskd_now_ms() - $2) LIMIT $3)",
                &[&delivered_age_ms, &dead_age_ms, &limit_of(limit)],
            )?;
            Ok(orphaned + deleted)
        })?;
        Ok(usize::try_from(pruned).unwrap_or(usize::MAX))
    }

    fn delivery_counts(&self) -> Result<Vec<WebhookCounts>, StoreError> {
        self.read(counts)
    }

    fn list_deliveries(
        &self,
        filter: &DeliveryFilter,
        limit: usize,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        let state = filter.state.map(DeliveryState::as_str);
        self.read(|conn| {
            conn.query(
                "SELECT seq, webhook, id, task_id, event, tool, state, attempts, at_ms, done_at, \
                     next_at, last_status, last_error FROM webhook_deliveries \
                 WHERE ($1::text IS NULL OR webhook = $1) AND ($2::text IS NULL OR state = $2) \
                   AND ($3::bigint IS NULL OR seq < $3) \
                 ORDER BY seq DESC LIMIT $4",
                &[&filter.webhook, &state, &filter.before, &limit_of(limit)],
            )?
            .iter()
            .map(record)
            .collect()
        })
    }

    fn retry_deliveries(&self, filter: &RetryFilter) -> Result<usize, StoreError> {
        let retried = self.transaction(|tx| {
            Ok(tx.execute(
                "UPDATE webhook_deliveries SET state = 'pending', attempts = 0, next_at = 0, \
                     since = (extract(epoch FROM clock_timestamp()) * 1000)::bigint, \
                     done_at = NULL, holder = NULL \
                 WHERE state = 'dead' AND ($1::text IS NULL OR webhook = $1) \
                   AND ($2::text IS NULL OR id = $2)",
                &[&filter.webhook, &filter.id],
            )?)
        })?;
        Ok(usize::try_from(retried).unwrap_or(usize::MAX))
    }
}
