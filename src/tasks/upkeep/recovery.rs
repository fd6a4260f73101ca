//! Lease reclaiming, at start-up and by the janitor. At start-up, before workers start,
//! [`recover`] reclaims every job still leased: the data-dir lock guarantees no other
//! process holds those leases, so each one is an attempt that died with the previous one.
//! (A store shared by several nodes reclaims those this node claimed, by its id: see
//! [`Reclaim::Orphaned`].)

use super::BATCH;
use crate::tasks::backend::{Reclaim, TaskStore};

fn reclaim_reason(leases: Reclaim) -> String {
    if leases == Reclaim::Orphaned {
        "the server stopped while the attempt was running".into()
    } else {
        "the attempt's lease expired (it crashed, hung past its deadline or lost its worker)".into()
    }
}

/// Reclaims leased jobs (all of them at start-up, expired ones later). Returns how many.
pub(super) fn reclaim(store: &dyn TaskStore, leases: Reclaim) -> usize {
    let reason = reclaim_reason(leases);
    match store.reclaim_leases(leases, BATCH, reason) {
        Ok(count) => count,
        Err(error) => {
            log::log!(error.log_level(), "reclaiming leases: {error}");
            0
        }
    }
}

/// Start-up recovery: every leased job belongs to a process that is gone.
pub fn recover(store: &dyn TaskStore) {
    let mut total = 0;
    loop {
        let reclaimed = reclaim(store, Reclaim::Orphaned);
        total += reclaimed;
        if reclaimed < BATCH {
            break;
        }
    }
    if total > 0 {
        log::info!("recovered {total} attempt(s) interrupted by the previous stop");
    }
}
