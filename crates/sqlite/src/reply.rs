//! A one-shot reply slot: where the writer leaves one write's answer for the thread
//! blocked in [`super::Store::write`].

use std::sync::{Arc, Condvar, Mutex};

/// Where the writer leaves one write's answer for the thread waiting on it.
///
/// The waiting thread sleeps on a condition variable straight away. (A channel receive
/// spins and calls `sched_yield` several times before it sleeps; with dozens of request
/// threads waiting on one writer, on two cores, those yields took about a fifth of the
/// server's CPU during a burst of task creations and slowed the writer they waited for.)
struct Slot<T> {
    /// `Some(None)`: the writer dropped the write without answering.
    value: Mutex<Option<Option<T>>>,
    ready: Condvar,
}

/// The writer's end of a [`Slot`]; answers `None` if dropped unanswered.
pub(super) struct Replier<T> {
    slot: Arc<Slot<T>>,
    answered: bool,
}

/// The waiting end of a [`Slot`].
pub(super) struct Answer<T> {
    slot: Arc<Slot<T>>,
}

pub(super) fn reply_slot<T>() -> (Replier<T>, Answer<T>) {
    let slot = Arc::new(Slot {
        value: Mutex::new(None),
        ready: Condvar::new(),
    });
    (
        Replier {
            slot: Arc::clone(&slot),
            answered: false,
        },
        Answer { slot },
    )
}

impl<T> Slot<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Option<T>>> {
        // The slot holds plain data, written whole: a poisoned lock is still consistent.
        self.value.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<T> Replier<T> {
    pub(super) fn send(mut self, value: T) {
        self.put(Some(value));
    }

    fn put(&mut self, value: Option<T>) {
        *self.slot.lock() = Some(value);
        self.answered = true;
        self.slot.ready.notify_one();
    }
}

impl<T> Drop for Replier<T> {
    fn drop(&mut self) {
        if !self.answered {
            self.put(None);
        }
    }
}

impl<T> Answer<T> {
    /// Blocks until the writer answers; `None` when it dropped the write.
    pub(super) fn wait(self) -> Option<T> {
        let mut value = self.slot.lock();
        loop {
            if let Some(answer) = value.take() {
                return answer;
            }
            value = self
                .slot
                .ready
                .wait(value)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_slot_answers_once_or_reports_a_dropped_write() {
        let (reply, answer) = reply_slot();
        let waiter = std::thread::spawn(move || answer.wait());
        reply.send(7);
        assert_eq!(waiter.join().unwrap(), Some(7));
        let (reply, answer) = reply_slot::<i32>();
        drop(reply);
        assert_eq!(answer.wait(), None);
    }
}
