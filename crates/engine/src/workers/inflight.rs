//! The attempts running in this process: each one's [`AttemptControl`] (why it should
//! stop, a wake-up for its sleeps, and its tool's concurrency slot), by task id, and
//! the claims registered before their write commits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::backend::{ClaimRequest, Claimant};
use crate::flow::RateLimit;
use crate::model::Claim;
use taskd_base::clock::now_ms;
use taskd_tools::slots::Slot;
use taskd_tools::Registry;

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
    /// The tool's concurrency slot, taken with the claim: freed when the run ends
    /// ([`AttemptControl::release_slot`]), or at the latest with the control (a claim
    /// that did not commit, a worker that panicked).
    slot: Mutex<Option<Slot>>,
}

impl AttemptControl {
    pub(super) fn new(token: String, deadline: i64, slot: Option<Slot>) -> AttemptControl {
        AttemptControl {
            token,
            deadline,
            stop: AtomicU8::new(Stop::Running as u8),
            wake: crossbeam_channel::bounded(1),
            slot: Mutex::new(slot),
        }
    }

    /// Frees the tool's concurrency slot: the run is over. `true` if it held one.
    pub(super) fn release_slot(&self) -> bool {
        let slot = self.slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        slot.is_some()
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

    /// Takes every attempt noted so far back out of `inflight` (freeing its slot), and
    /// forgets them.
    pub(super) fn forget(&self, inflight: &Inflight) {
        let noted = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        for (task_id, token) in noted {
            inflight.remove(&task_id, &token);
        }
    }
}

/// The workers' side of a claim: passes over the jobs of saturated tools, takes each
/// claimed job's concurrency slot, and registers its attempt in `inflight` inside the
/// claiming write. A `tasks/cancel` runs in the same writer, so one that sees the job
/// running always finds its attempt to signal. (Registered after the commit, a cancel
/// arriving in between was recorded but never reached the attempt.)
struct Registering {
    inflight: Arc<Inflight>,
    rate_waits: Arc<RateWaits>,
    tools: Arc<Registry>,
    registered: Registered,
}

/// The tools whose rate's bucket a claim found empty, each until its next token (the
/// store's clock): claims pass them over till then, and the dispatcher wakes then.
#[derive(Default)]
pub struct RateWaits(Mutex<HashMap<String, i64>>);

impl RateWaits {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tools still waiting at `now`.
    fn waiting(&self, now: i64) -> Vec<String> {
        let mut waits = self.lock();
        waits.retain(|_, until| *until > now);
        waits.keys().cloned().collect()
    }

    fn wait(&self, tool: &str, until: i64) {
        self.lock().insert(tool.to_owned(), until);
    }

    /// How long until the first waiting tool's next token, if any waits.
    pub(super) fn next_token_in(&self, now: i64) -> Option<Duration> {
        let mut waits = self.lock();
        waits.retain(|_, until| *until > now);
        let first = waits.values().copied().min()?;
        Some(Duration::from_millis(
            u64::try_from(first - now).unwrap_or(0),
        ))
    }
}

impl Claimant for Registering {
    fn saturated(&self) -> Vec<String> {
        let mut passed_over = self.tools.saturated();
        passed_over.extend(self.rate_waits.waiting(now_ms()));
        passed_over
    }

    fn rate_limit(&self, claim: &Claim) -> Option<RateLimit> {
        let tool = self.tools.get(&claim.tool)?;
        RateLimit::of(&claim.tool, &tool.spec.flow, claim.gate.as_deref())
    }

    fn rate_exhausted(&mut self, tool: &str, until: i64) {
        self.rate_waits.wait(tool, until);
    }

    fn take(&mut self, claim: &Claim) -> bool {
        // A tool no longer served has no slots: its attempt fails at once.
        let slots = self
            .tools
            .get(&claim.tool)
            .and_then(|tool| tool.slots.as_ref());
        let slot = match slots {
            None => None,
            Some(slots) => match slots.try_take() {
                Some(slot) => Some(slot),
                None => return false,
            },
        };
        let control = AttemptControl::new(claim.token.clone(), claim.deadline, slot);
        self.inflight.insert(&claim.task_id, Arc::new(control));
        self.registered.note(claim);
        true
    }

    fn give_back(&mut self) {
        self.registered.forget(&self.inflight);
    }
}

/// A request for up to `limit` jobs, taken by [`Registering`]. The [`Registered`]
/// takes their attempts back (and frees their slots) if the write does not commit:
/// they never run.
pub(super) fn registering(
    inflight: &Arc<Inflight>,
    rate_waits: &Arc<RateWaits>,
    tools: &Arc<Registry>,
    limit: usize,
    lease_ms: i64,
) -> (ClaimRequest, Registered) {
    let registered = Registered::default();
    let claimant = Registering {
        inflight: Arc::clone(inflight),
        rate_waits: Arc::clone(rate_waits),
        tools: Arc::clone(tools),
        registered: registered.clone(),
    };
    let request = ClaimRequest {
        limit,
        lease_ms,
        claimant: Box::new(claimant),
    };
    (request, registered)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use taskd_tools::{Outcome, ToolSpec};

    #[test]
    fn a_claimed_jobs_slot_is_freed_when_its_run_ends_or_its_claim_does_not_commit() {
        let mut tools = Registry::default();
        let schema = json!({"type": "object"});
        let mut limited = ToolSpec::new("limited", "one at a time", schema.clone());
        limited.max_concurrency = Some(1);
        let run = |_: &mut taskd_tools::Invocation<'_>| Outcome::Cancelled;
        tools.register(limited, Arc::new(run)).unwrap();
        tools
            .register(ToolSpec::new("free", "unbounded", schema), Arc::new(run))
            .unwrap();
        let (tools, inflight) = (Arc::new(tools), Arc::new(Inflight::default()));
        let waits = Arc::new(RateWaits::default());

        let (mut request, registered) = registering(&inflight, &waits, &tools, 4, 1000);
        assert!(request.claimant.saturated().is_empty());
        assert!(request.claimant.take(&Claim::of("a", "limited")));
        assert_eq!(request.claimant.saturated(), vec!["limited".to_owned()]);
        assert!(
            !request.claimant.take(&Claim::of("b", "limited")),
            "no slot"
        );
        assert!(request.claimant.take(&Claim::of("c", "free")));
        assert!(
            request.claimant.take(&Claim::of("d", "gone")),
            "no longer served"
        );
        assert_eq!(inflight.len(), 3);
        // The claim did not commit: its attempts never run, and the slot is free.
        registered.forget(&inflight);
        assert!(inflight.is_empty());
        assert!(tools.saturated().is_empty());

        // A run that ends frees its slot, even while its control is still held.
        let (mut request, _) = registering(&inflight, &waits, &tools, 1, 1000);
        assert!(request.claimant.take(&Claim::of("e", "limited")));
        let control = inflight.get("e", "e-token").unwrap();
        assert_eq!(tools.saturated(), vec!["limited".to_owned()]);
        assert!(control.release_slot());
        assert!(tools.saturated().is_empty());
        assert!(!control.release_slot(), "once");
    }
}
