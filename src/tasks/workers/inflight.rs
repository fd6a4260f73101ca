//! The attempts running in this process: each one's [`AttemptControl`] (why it should
//! stop, and a wake-up for its sleeps), by task id, and the claims registered before
//! their write commits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::tasks::backend::ClaimRequest;
use crate::tasks::model::Claim;

/// Why an attempt was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Stop {
    Running = 0,
    Cancelled = 1,
    LeaseLost = 2,
    Deadline = 3,
    Shutdown = 4,
    Expired = 5,
}

/// How the pool talks to one running attempt.
pub struct AttemptControl {
    pub token: String,
    pub deadline: i64,
    stop: AtomicU8,
    wake: (Sender<()>, Receiver<()>),
}

impl AttemptControl {
    pub(super) fn new(token: String, deadline: i64) -> AttemptControl {
        AttemptControl {
            token,
            deadline,
            stop: AtomicU8::new(Stop::Running as u8),
            wake: crossbeam_channel::bounded(1),
        }
    }

    /// Asks the attempt to stop (the first reason wins).
    pub fn stop(&self, reason: Stop) {
        if self
            .stop
            .compare_exchange(
                Stop::Running as u8,
                reason as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            let _ = self.wake.0.try_send(());
        }
    }

    /// Sleeps up to `wait`, waking as soon as the attempt is asked to stop; `true` if
    /// it was.
    pub(super) fn sleep_unless_stopped(&self, wait: Duration) -> bool {
        if self.wake.1.recv_timeout(wait).is_ok() {
            // Keep the wake-up visible to later sleeps.
            let _ = self.wake.0.try_send(());
            return true;
        }
        false
    }

    pub fn reason(&self) -> Stop {
        match self.stop.load(Ordering::Acquire) {
            1 => Stop::Cancelled,
            2 => Stop::LeaseLost,
            3 => Stop::Deadline,
            4 => Stop::Shutdown,
            5 => Stop::Expired,
            _ => Stop::Running,
        }
    }
}

/// The attempts running in this process, by task id.
#[derive(Default)]
pub struct Inflight {
    attempts: Mutex<HashMap<String, Arc<AttemptControl>>>,
}

impl Inflight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<AttemptControl>>> {
        // Entries are inserted and removed whole; a poisoned map is still consistent.
        self.attempts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn insert(&self, task_id: &str, control: Arc<AttemptControl>) {
        self.lock().insert(task_id.to_owned(), control);
    }

    /// Removes the entry only if it still belongs to `token` (a reclaimed job may have
    /// been claimed again meanwhile).
    pub(super) fn remove(&self, task_id: &str, token: &str) {
        let mut attempts = self.lock();
        if attempts.get(task_id).is_some_and(|c| c.token == token) {
            attempts.remove(task_id);
        }
    }

    pub fn stop(&self, task_id: &str, reason: Stop) {
        if let Some(control) = self.lock().get(task_id) {
            control.stop(reason);
        }
    }

    pub fn cancel(&self, task_id: &str) {
        self.stop(task_id, Stop::Cancelled);
    }

    pub(super) fn get(&self, task_id: &str, token: &str) -> Option<Arc<AttemptControl>> {
        self.lock()
            .get(task_id)
            .filter(|control| control.token == token)
            .cloned()
    }

    pub(super) fn snapshot(&self) -> Vec<(String, Arc<AttemptControl>)> {
        self.lock()
            .iter()
            .map(|(id, control)| (id.clone(), Arc::clone(control)))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The attempts a claim registered in [`Inflight`] inside its write, so that the caller
/// can take them back if the write does not commit (they never run).
#[derive(Clone, Default)]
pub(super) struct Registered(Arc<Mutex<Vec<(String, String)>>>);

impl Registered {
    fn note(&self, claim: &Claim) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((claim.task_id.clone(), claim.token.clone()));
    }

    pub(super) fn forget(&self, inflight: &Inflight) {
        for (task_id, token) in self.0.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            inflight.remove(task_id, token);
        }
    }
}

/// A request for up to `limit` jobs whose attempts are registered in `inflight` inside
/// the claiming write: a `tasks/cancel` runs in the same writer, so one that sees the
/// job running always finds its attempt to signal. (Registered after the commit, a
/// cancel arriving in between was recorded but never reached the attempt.) The
/// [`Registered`] takes them back if the write does not commit (they never run).
pub(super) fn registering(
    inflight: &Arc<Inflight>,
    limit: usize,
    lease_ms: i64,
) -> (ClaimRequest, Registered) {
    let registered = Registered::default();
    let (noted, inflight) = (registered.clone(), Arc::clone(inflight));
    let on_claim = Box::new(move |claim: &Claim| {
        inflight.insert(
            &claim.task_id,
            Arc::new(AttemptControl::new(claim.token.clone(), claim.deadline)),
        );
        noted.note(claim);
    });
    let request = ClaimRequest {
        limit,
        lease_ms,
        on_claim,
    };
    (request, registered)
}
