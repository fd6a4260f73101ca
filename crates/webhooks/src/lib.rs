//! Webhooks (issue 49): task events delivered to HTTP receivers from the store, signed
//! as Standard Webhooks specifies (<https://www.standardwebhooks.com>), so that a
//! receiver verifies them with its own library.
//!
//! - **Recorded with the change.** The store's triggers write a pending delivery for
//!   each webhook that wants a task's change, in the change's own transaction
//!   (`taskd_engine::webhooks`): a crash can lose neither.
//! - **At least once, in order per task.** A delivery is pending until its receiver
//!   answers 2xx (then delivered) or its webhook's `retry_for` has passed (then dead,
//!   kept for `mcp-taskd webhooks retry`). A `kill -9` mid-delivery leaves it pending:
//!   it goes again. One task's deliveries to one webhook go one after the other, oldest
//!   first. `webhook-id` is the same on every attempt, so receivers drop duplicates by
//!   it. On a store several nodes share, each delivery is leased to one node.
//! - **Safe by default.** https only, and no loopback, private or link-local address
//!   (checked on the address connected to), except for the hosts a webhook lists in
//!   `allow_http`; bounded timeouts, no redirects, no proxy, a bounded read of the
//!   answer ([`target`], [`send`]).
//!
//! [`Webhooks`] runs one [`lane`] per configured webhook, follows the configuration in
//! force (a reload adds, changes and removes webhooks within a second), and prunes old
//! deliveries. What it counts goes through [`DeliveryCounters`] (the server's metrics).
//!
//! May depend on: `taskd-engine` (the store's interface), `taskd-protocol`,
//! `taskd-base`. Must never know: SQL, the configuration file, the server.

pub mod config;
mod lane;
pub mod payload;
pub mod send;
pub mod sign;
pub mod target;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Sender;

use taskd_engine::webhooks::WebhookStore;

pub use config::{WebhookConfig, WebhookConfigError};
use lane::{Lane, Prepared};

/// Where delivery outcomes are counted (the server's `/metrics`). Webhook names come
/// from the configuration only: bounded labels.
pub trait DeliveryCounters: Send + Sync {
    /// Delivered, `lag` after the change it tells of.
    fn delivered(&self, webhook: &str, lag: Duration);
    /// An attempt failed; the delivery will be tried again.
    fn retried(&self, webhook: &str);
    /// An attempt failed past the horizon: the delivery is undelivered for good.
    fn dead(&self, webhook: &str);
}

/// The webhooks in force: what [`Webhooks::start`] reads each second.
pub type ConfigSource = Box<dyn Fn() -> Vec<WebhookConfig> + Send>;

/// How often the configuration in force is compared with the lanes running.
const FOLLOW: Duration = Duration::from_secs(1);
/// How often old deliveries are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(30);
/// Delivered rows are kept this long (the recent deliveries operators see).
pub const KEEP_DELIVERED_MS: i64 = 3_600_000;
/// Dead rows are kept this long (or until retried).
pub const KEEP_DEAD_MS: i64 = 7 * 86_400_000;
/// Pending deliveries of a webhook no longer configured are given up after this.
const ORPHAN_AFTER_MS: i64 = 86_400_000;
/// Rows pruned per statement.
const PRUNE_BATCH: usize = 1000;

/// The delivery of every configured webhook.
pub struct Webhooks {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Why webhooks did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("webhooks: {0}")]
    Store(#[from] taskd_engine::StoreError),
    #[error("webhooks: {0}")]
    Thread(#[from] std::io::Error),
}

impl Webhooks {
    /// Releases the deliveries this node's earlier runs had claimed, writes the routes
    /// of `source`'s webhooks and starts their lanes; then follows `source`.
    pub fn start(
        store: Arc<dyn WebhookStore>,
        counters: Arc<dyn DeliveryCounters>,
        source: ConfigSource,
    ) -> Result<Webhooks, StartError> {
        let released = store.release_webhook_claims()?;
        if released > 0 {
            log::info!("webhooks: {released} deliveries interrupted by the last stop go again");
        }
        let mut lanes = BTreeMap::new();
        apply(&source(), &mut lanes, &store, &counters)?;
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name("webhooks".into())
            .spawn(move || {
                let mut pruned_at = std::time::Instant::now();
                let mut running = source();
                loop {
                    crossbeam_channel::select! {
                        recv(stopped) -> _ => break,
                        default(FOLLOW) => {}
                    }
                    let wanted = source();
                    if wanted != running {
                        match apply(&wanted, &mut lanes, &store, &counters) {
                            Ok(()) => running = wanted,
                            Err(error) => log::error!("{error}"),
                        }
                    }
                    if pruned_at.elapsed() >= PRUNE_EVERY {
                        pruned_at = std::time::Instant::now();
                        prune(store.as_ref(), &running);
                    }
                }
                for (_, lane) in std::mem::take(&mut lanes) {
                    lane.stop();
                }
            })?;
        Ok(Webhooks {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops every lane (attempts in flight get a moment to end and be recorded; one
    /// that does not goes again at the next start).
    pub fn stop(mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Makes `wanted` the webhooks delivered: routes first (so that no change is recorded
/// for a webhook without a lane for long), then lanes started, updated or stopped.
fn apply(
    wanted: &[WebhookConfig],
    lanes: &mut BTreeMap<String, Lane>,
    store: &Arc<dyn WebhookStore>,
    counters: &Arc<dyn DeliveryCounters>,
) -> Result<(), StartError> {
    let routes: Vec<_> = wanted.iter().flat_map(WebhookConfig::routes).collect();
    store.set_webhook_routes(&routes)?;
    let names: Vec<String> = wanted.iter().map(WebhookConfig::name).collect();
    let gone: Vec<String> = lanes
        .keys()
        .filter(|name| !names.contains(name))
        .cloned()
        .collect();
    for name in gone {
        if let Some(lane) = lanes.remove(&name) {
            log::info!("webhook {name}: no longer configured");
            lane.stop();
        }
    }
    for config in wanted {
        let name = config.name();
        if let Some(lane) = lanes.get(&name) {
            let running = lane.prepared.load();
            if running.config == *config {
                continue;
            }
            if running.config.concurrency == config.concurrency {
                lane.prepared.store(Arc::new(Prepared::new(config.clone())));
                continue;
            }
            if let Some(lane) = lanes.remove(&name) {
                lane.stop();
            }
        }
        let lane = Lane::start(
            Prepared::new(config.clone()),
            Arc::clone(store),
            Arc::clone(counters),
        )?;
        lanes.insert(name, lane);
    }
    Ok(())
}

/// Deletes old delivered and dead rows, and gives up the deliveries of webhooks no
/// longer configured.
fn prune(store: &dyn WebhookStore, running: &[WebhookConfig]) {
    let configured: Vec<String> = running.iter().map(WebhookConfig::name).collect();
    loop {
        match store.prune_deliveries(
            &configured,
            KEEP_DELIVERED_MS,
            KEEP_DEAD_MS,
            ORPHAN_AFTER_MS,
            PRUNE_BATCH,
        ) {
            Ok(pruned) if pruned >= PRUNE_BATCH => continue,
            Ok(_) => break,
            Err(error) => {
                log::log!(error.log_level(), "webhooks: pruning deliveries: {error}");
                break;
            }
        }
    }
}
