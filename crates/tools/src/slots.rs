//! Concurrency slots: `max_concurrency` bounds one tool's runs at once, inline calls
//! and task attempts together. Task attempts take their slot when their job is claimed
//! (a job of a tool without a free slot stays queued and holds no worker); inline calls
//! wait for one, up to the tool's timeout.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// A counting semaphore bounding one tool's concurrent runs.
#[derive(Debug)]
pub struct Slots {
    /// Changed only by a reload (see [`Slots::set_limit`]).
    limit: AtomicUsize,
    used: Mutex<usize>,
    freed: Condvar,
}

/// One taken slot; dropping it frees the slot.
#[derive(Debug)]
pub struct Slot(Arc<Slots>);

impl Drop for Slot {
    fn drop(&mut self) {
        let mut used = self.0.used();
        *used = used.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

impl Slots {
    pub fn new(limit: usize) -> Arc<Slots> {
        Arc::new(Slots {
            limit: AtomicUsize::new(limit),
            used: Mutex::new(0),
            freed: Condvar::new(),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Acquire)
    }

    /// A reload changed the tool's `max_concurrency`: runs holding slots keep them, and
    /// new ones start only while fewer than `limit` run.
    pub fn set_limit(&self, limit: usize) {
        let _used = self.used();
        self.limit.store(limit, Ordering::Release);
        self.freed.notify_all();
    }

    fn used(&self) -> MutexGuard<'_, usize> {
        // A count is updated whole; a poisoned one is still right.
        self.used.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether every slot is taken right now.
    pub fn is_full(&self) -> bool {
        *self.used() >= self.limit()
    }

    /// A free slot, if there is one now.
    pub fn try_take(self: &Arc<Self>) -> Option<Slot> {
        let mut used = self.used();
        if *used >= self.limit() {
            return None;
        }
        *used += 1;
        Some(Slot(Arc::clone(self)))
    }

    /// Waits up to `patience` for a free slot.
    pub fn take_within(self: &Arc<Self>, patience: Duration) -> Option<Slot> {
        let deadline = Instant::now() + patience;
        let mut used = self.used();
        loop {
            if *used < self.limit() {
                *used += 1;
                return Some(Slot(Arc::clone(self)));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            used = self
                .freed
                .wait_timeout(used, left)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner().0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_bound_the_runs_and_come_back_when_dropped() {
        let slots = Slots::new(2);
        let first = slots.try_take().unwrap();
        assert!(!slots.is_full());
        let _second = slots.try_take().unwrap();
        assert!(slots.is_full());
        assert!(slots.try_take().is_none());
        assert!(slots.take_within(Duration::from_millis(20)).is_none());
        let waiter = {
            let slots = Arc::clone(&slots);
            std::thread::spawn(move || slots.take_within(Duration::from_secs(5)))
        };
        drop(first);
        let taken = waiter.join().unwrap();
        assert!(taken.is_some(), "a freed slot wakes a waiter");
        assert!(slots.is_full(), "the waiter holds it now");
        drop(taken);
        assert!(!slots.is_full());
    }
}
