//! The lease keeper: renews the leases of in-flight attempts every lease/3, and stops
//! renewing (and stops the attempt) once its hard deadline has passed.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::inflight::Stop;
use super::Shared;
use crate::model::Lease;
use taskd_base::clock::now_ms;

pub(super) fn keep_leases(shared: &Shared) {
    let period = Duration::from_millis((shared.lease_ms / 3).max(100) as u64);
    while !shared.stopping.load(Ordering::Acquire) {
        std::thread::sleep(period);
        let now = now_ms();
        let mut renew = Vec::new();
        for (task_id, control) in shared.inflight.snapshot() {
            if now >= control.deadline {
                // Past the hard deadline: stop renewing; the janitor reclaims the job
                // once the lease runs out, even if the tool ignores the signal.
                control.stop(Stop::Deadline);
            } else {
                renew.push((task_id, control));
            }
        }
        if renew.is_empty() {
            continue;
        }
        let leases: Vec<Lease> = renew
            .iter()
            .map(|(id, control)| Lease {
                task_id: id.clone(),
                token: control.token.clone(),
            })
            .collect();
        let held = shared.store.renew_leases(leases, shared.lease_ms);
        match held {
            Ok(held) => {
                for ((_, control), still_held) in renew.iter().zip(held) {
                    if !still_held {
                        control.stop(Stop::LeaseLost);
                    }
                }
            }
            Err(error) => log::log!(error.log_level(), "renewing leases: {error}"),
        }
    }
}
