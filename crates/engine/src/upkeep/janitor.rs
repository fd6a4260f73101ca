//! The janitor: every `workers.janitor_interval_ms` (after start-up recovery, on the
//! same thread), in bounded batches, reclaims expired
//! leases (retry, or fail after the last attempt), deletes tasks past their TTL (each
//! finished one leaving its history summary, `[history]` as in force at each round),
//! prunes history summaries past their time and delivered outbox rows, and now and then
//! lets the store shrink its log. When several
//! nodes share the store, only the upkeep leader (see [`TaskStore::upkeep_leader`]) does
//! that store-wide work; every node still moves its own relay's cursor.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};

use super::recovery::reclaim;
use super::relay::skip_unheard;
use super::{UpkeepCounters, BATCH};
use crate::backend::{Reclaim, TaskStore};
use crate::settings::SettingsSource;
use crate::workers::{Inflight, Stop};
use taskd_notifications::Hub;

/// Delivered outbox rows deleted per janitor write (small rows, one range).
const OUTBOX_BATCH: usize = 5_000;
/// Longest a janitor tick keeps removing rows before it sleeps again.
const TICK_BUDGET: Duration = Duration::from_millis(500);
/// How often the store maintains its files (SQLite: checkpoints the WAL with TRUNCATE).
const CHECKPOINT_EVERY: Duration = Duration::from_secs(30);

#[allow(clippy::too_many_arguments)]
pub(super) fn janitor(
    store: &dyn TaskStore,
    settings: &dyn SettingsSource,
    hub: &Hub,
    inflight: &Inflight,
    counters: &dyn UpkeepCounters,
    delivered: &AtomicI64,
    interval: Duration,
    stopped: &Receiver<()>,
) {
    let mut last_checkpoint = Instant::now();
    // A tick every `interval`, until upkeep stops (its sender is dropped).
    while matches!(
        stopped.recv_timeout(interval),
        Err(RecvTimeoutError::Timeout)
    ) {
        skip_unheard(store, hub, delivered);
        if let Err(error) = store.note_delivered(delivered.load(Ordering::Acquire)) {
            log::log!(error.log_level(), "noting the relay's position: {error}");
        }
        if !store.upkeep_leader() {
            continue;
        }
        if let Err(error) = store.fold_counts() {
            log::log!(error.log_level(), "folding counts: {error}");
        }
        let reclaimed = reclaim(store, Reclaim::Expired);
        counters.reclaimed(reclaimed);
        if reclaimed > 0 {
            log::warn!("reclaimed {reclaimed} job(s) whose lease expired");
        }
        let tick = Instant::now();
        let more = || tick.elapsed() < TICK_BUDGET && !has_stopped(stopped);
        // Expired tasks and delivered outbox rows are removed a bounded batch per write,
        // and again while full batches come back: upkeep keeps pace with any creation
        // rate, yet no single transaction holds up the writer for long.
        let history = settings.current().history().clone();
        loop {
            match store.delete_expired(BATCH, &history) {
                Ok(expired) => {
                    counters.expired(expired.len());
                    for task_id in &expired {
                        inflight.stop(task_id, Stop::Expired);
                    }
                    if !expired.is_empty() {
                        log::info!("removed {} task(s) past their TTL", expired.len());
                    }
                    if expired.len() < BATCH || !more() {
                        break;
                    }
                }
                Err(error) => {
                    log::log!(error.log_level(), "expiring tasks: {error}");
                    break;
                }
            }
        }
        loop {
            match store.prune_history(BATCH) {
                Ok(pruned) if pruned == BATCH && more() => {}
                Ok(_) => break,
                Err(error) => {
                    log::log!(error.log_level(), "pruning the history: {error}");
                    break;
                }
            }
        }
        let upto = delivered.load(Ordering::Acquire);
        loop {
            match store.prune_outbox(upto, OUTBOX_BATCH) {
                Ok(pruned) if pruned == OUTBOX_BATCH && more() => {}
                Ok(_) => break,
                Err(error) => {
                    log::log!(error.log_level(), "pruning the outbox: {error}");
                    break;
                }
            }
        }
        if last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
            last_checkpoint = Instant::now();
            if let Err(error) = store.maintain() {
                log::log!(error.log_level(), "WAL checkpoint: {error}");
            }
        }
    }
}

/// Whether upkeep has stopped: its sender is gone.
fn has_stopped(stopped: &Receiver<()>) -> bool {
    matches!(stopped.try_recv(), Err(TryRecvError::Disconnected))
}
