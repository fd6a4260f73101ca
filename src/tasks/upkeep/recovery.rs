//! Lease reclaiming, at start-up and by the janitor. At start-up, [`recover`] reclaims
//! every job still leased by an attempt that started before this process: the data-dir
//! lock guarantees no other process holds those leases, so each one is an attempt that
//! died with the previous one. It runs on the janitor's thread while the server already
//! serves and its workers claim (its pass never touches the attempts they start), so a
//! large backlog does not hold up start-up: 100k interrupted attempts took ~17 s to
//! reclaim on the 2-core VM, which used to pass before `/healthz` answered.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::BATCH;
use crate::tasks::backend::TaskStore;
use crate::tasks::model::Orphans;

fn reclaim_reason(which: Orphans) -> String {
    match which {
        Orphans::StartedBefore(_) => "the server stopped while the attempt was running".into(),
        Orphans::ExpiredBefore(_) => {
            "the attempt's lease expired (it crashed, hung past its deadline or lost its worker)"
                .into()
        }
    }
}

/// Reclaims up to one batch of the leased jobs `which` chooses. Returns how many.
pub(super) fn reclaim(store: &dyn TaskStore, which: Orphans) -> usize {
    match store.reclaim_leases(which, BATCH, reclaim_reason(which)) {
        Ok(count) => count,
        Err(error) => {
            log::log!(error.log_level(), "reclaiming leases: {error}");
            0
        }
    }
}

/// Start-up recovery: reclaims, a batch per write, every attempt that started before
/// `started` (Unix ms, taken before the workers started), until none is left or the
/// server stops. Logs what it found, what it did and how long it took.
pub(super) fn recover(store: &dyn TaskStore, started: i64, stopping: &AtomicBool) {
    let clock = Instant::now();
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
    if running == 0 {
        return;
    }
    log::info!(
        "start-up recovery: {running} attempt(s) were running when the previous process \
         stopped; reclaiming them while serving"
    );
    let (mut total, mut writes) = (0, 0);
    while !stopping.load(Ordering::Acquire) {
        let reclaimed = reclaim(store, Orphans::StartedBefore(started));
        total += reclaimed;
        writes += 1;
        if reclaimed < BATCH {
            break;
        }
    }
    log::info!(
        "start-up recovery: reclaimed {total} interrupted attempt(s) in {} ms ({writes} \
         write(s) of up to {BATCH})",
        clock.elapsed().as_millis()
    );
}
