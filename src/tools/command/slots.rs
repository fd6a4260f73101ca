//! Concurrency slots: `max_concurrency` bounds one tool's runs at once; a run beyond it
//! waits for a slot and stops waiting as soon as it is cancelled.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::tools::InvocationHost;

/// A counting semaphore bounding one tool's concurrent runs.
#[derive(Debug)]
pub(super) struct Slots {
    pub(super) limit: usize,
    used: Mutex<usize>,
    freed: Condvar,
}

pub(super) struct Slot<'a>(&'a Slots);

/// Why no slot was taken.
pub(super) enum NoSlot {
    Cancelled,
    TimedOut,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut used = self.0.used.lock().unwrap_or_else(PoisonError::into_inner);
        *used = used.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

impl Slots {
    pub(super) fn new(limit: usize) -> Slots {
        Slots {
            limit,
            used: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// Waits for a free slot; gives up when the run is cancelled or after `patience`
    /// (which bounds inline calls, whose host never cancels).
    pub(super) fn acquire(
        &self,
        host: &mut dyn InvocationHost,
        patience: Duration,
    ) -> Result<Slot<'_>, NoSlot> {
        let started = Instant::now();
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if *used < self.limit {
                *used += 1;
                return Ok(Slot(self));
            }
            if host.cancelled() {
                return Err(NoSlot::Cancelled);
            }
            if started.elapsed() >= patience {
                return Err(NoSlot::TimedOut);
            }
            used = self
                .freed
                .wait_timeout(used, Duration::from_millis(50))
                .map(|(guard, _)| guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner().0);
        }
    }
}
