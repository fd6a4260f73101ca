//! Lease reclaiming, at start-up and by the janitor. At start-up, [`recover`] reclaims
//! every job still leased by an attempt of this process's previous run
//! ([`Reclaim::Orphaned`]): the data-dir lock guarantees no other process holds those
//! leases, so each one is an attempt that died with the previous run. (A store shared
//! by several nodes reclaims those this node's previous run claimed, never another
//! node's live lease.) It runs on the janitor's thread while the server already serves
//! and its workers claim (its pass never touches the attempts they start), so a large
//! backlog does not hold up start-up: 100k interrupted attempts took ~17 s to reclaim on
//! the 2-core VM, which used to pass before `/healthz` answered.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::BATCH;
use crate::backend::{Reclaim, TaskStore};

fn reclaim_reason(leases: Reclaim) -> String {
    match leases {
        Reclaim::Orphaned => "the server stopped while the attempt was running".into(),
        Reclaim::Expired => {
            "the attempt's lease expired (it crashed, hung past its deadline or lost its worker)"
                .into()
        }
    }
}

/// Reclaims up to one batch of the leased jobs `leases` chooses. Returns how many.
pub(super) fn reclaim(store: &dyn TaskStore, leases: Reclaim) -> usize {
    match store.reclaim_leases(leases, BATCH, reclaim_reason(leases)) {
        Ok(count) => count,
        Err(error) => {
            log::log!(error.log_level(), "reclaiming leases: {error}");
            0
        }
    }
}

/// Start-up recovery: reclaims, a batch per write, every attempt the previous run left
/// leased, until none is left or the server stops. Logs what it found, what it did and
/// how long it took.
pub(super) fn recover(store: &dyn TaskStore, stopping: &AtomicBool) {
    let clock = Instant::now();
    // Only for the log: on a shared store the count is every node's, and may lag.
    let running = store
        .stats()
        .ok()
        .and_then(|stats| {
            stats
                .jobs
                .iter()
                .find(|(state, _)| state == "running")
                .map(|(_, count)| *count)
        })
        .unwrap_or(0);
    if running > 0 {
        log::info!(
            "start-up recovery: {running} attempt(s) were running in the store; reclaiming \
             those the previous run left, while serving"
        );
    }
    let (mut total, mut writes) = (0, 0);
    while !stopping.load(Ordering::Acquire) {
        let reclaimed = reclaim(store, Reclaim::Orphaned);
        total += reclaimed;
        writes += 1;
        if reclaimed < BATCH {
            break;
        }
    }
    if total > 0 {
        log::info!(
            "start-up recovery: reclaimed {total} interrupted attempt(s) in {} ms ({writes} \
             write(s) of up to {BATCH})",
            clock.elapsed().as_millis()
        );
    }
}
