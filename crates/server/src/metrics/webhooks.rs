//! Webhook deliveries on `/metrics` (issue 49), by webhook: a name from the
//! configuration (lanes run only for configured webhooks), so the label is bounded.
//! Counted by this process since it started, as the other histograms are.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use taskd_base::histogram::{label_value, Histogram};
use taskd_webhooks::DeliveryCounters;

use super::Metrics;

#[derive(Default)]
pub struct WebhookMetrics {
    by_webhook: Mutex<BTreeMap<String, Arc<Counts>>>,
}

#[derive(Default)]
struct Counts {
    delivered: AtomicU64,
    retried: AtomicU64,
    dead: AtomicU64,
    lag: Histogram,
}

impl WebhookMetrics {
    fn of(&self, webhook: &str) -> Arc<Counts> {
        let mut map = self.by_webhook.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(map.entry(webhook.to_owned()).or_default())
    }

    /// The webhook series, if any webhook has delivered or tried.
    pub fn render(&self, out: &mut String) {
        let map = self.by_webhook.lock().unwrap_or_else(|p| p.into_inner());
        if map.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "# HELP mcp_taskd_webhook_deliveries_total Webhook delivery attempts by outcome: delivered (2xx), retried (failed, to be tried again), dead (failed past the webhook's retry_for: undelivered).\n\
             # TYPE mcp_taskd_webhook_deliveries_total counter"
        );
        for (webhook, counts) in map.iter() {
            let webhook = label_value(webhook);
            for (outcome, count) in [
                ("delivered", &counts.delivered),
                ("retried", &counts.retried),
                ("dead", &counts.dead),
            ] {
                let _ = writeln!(
                    out,
                    "mcp_taskd_webhook_deliveries_total{{webhook=\"{webhook}\",outcome=\"{outcome}\"}} {}",
                    count.load(Ordering::Relaxed)
                );
            }
        }
        let name = "mcp_taskd_webhook_delivery_lag_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} From a task's change to its webhook delivery's 2xx answer, by webhook.\n# TYPE {name} histogram"
        );
        for (webhook, counts) in map.iter() {
            counts
                .lag
                .render(out, name, "webhook", &label_value(webhook));
        }
    }
}

impl DeliveryCounters for Metrics {
    fn delivered(&self, webhook: &str, lag: Duration) {
        let counts = self.webhooks.of(webhook);
        counts.delivered.fetch_add(1, Ordering::Relaxed);
        counts.lag.observe(lag);
    }

    fn retried(&self, webhook: &str) {
        self.webhooks
            .of(webhook)
            .retried
            .fetch_add(1, Ordering::Relaxed);
    }

    fn dead(&self, webhook: &str) {
        self.webhooks
            .of(webhook)
            .dead
            .fetch_add(1, Ordering::Relaxed);
    }
}
