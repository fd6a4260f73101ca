//! What the protocol handlers and operators ask of flow control ([`crate::flow`]):
//! whether a tool is paused (read from the store, trusted for a second), pausing and
//! resuming it, and the place an inline call of a keyed or rate-limited tool takes
//! before it runs.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{internal, TaskService};
use crate::backend::{StoreError, TaskStore};
use crate::flow::{Gate, Pause, RateLimit};
use taskd_base::clock::now_ms;
use taskd_protocol::RpcError;
use taskd_tools::Registered;

/// How long a node trusts what it last read of the paused tools, for new calls (claims
/// read the store itself, so nothing paused ever starts): a pause made on another node
/// refuses (or queues) new calls here within this.
const PAUSES_FRESH: Duration = Duration::from_secs(1);

/// The paused tools as last read, and when.
#[derive(Default)]
pub(super) struct PauseCache(Mutex<Option<(Instant, Arc<Vec<Pause>>)>>);

impl PauseCache {
    fn forget(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// Longest pause between two tries of an inline call waiting for its key's place.
const PLACE_RETRY_AT_MOST: Duration = Duration::from_millis(200);

/// Why an inline call did not get to run.
#[derive(Debug, thiserror::Error)]
pub enum NoPlace {
    #[error("the {0} stayed taken")]
    Key(String),
    #[error("the tool's rate limit allowed no start")]
    Rate,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The place of an inline call of a keyed tool: given back when dropped (a trigger then
/// admits the gate's oldest held task).
pub struct InlinePlace {
    store: Arc<dyn TaskStore>,
    held: Option<(String, String)>,
}

impl Drop for InlinePlace {
    fn drop(&mut self) {
        if let Some((gate, holder)) = self.held.take() {
            if let Err(error) = self.store.release_gate(&gate, &holder) {
                // It lapses at its time, when the janitor lets it go.
                log::warn!("an inline call's place could not be given back: {error}");
            }
        }
    }
}

impl TaskService {
    /// The pause of `tool`, if it is paused (as read within [`PAUSES_FRESH`]).
    pub fn pause_of(&self, tool: &str) -> Result<Option<Pause>, RpcError> {
        let mut cached = self.pauses.0.lock().unwrap_or_else(|p| p.into_inner());
        let pauses = match &*cached {
            Some((read, pauses)) if read.elapsed() < PAUSES_FRESH => Arc::clone(pauses),
            _ => {
                let pauses = Arc::new(self.store.paused_tools().map_err(internal)?);
                *cached = Some((Instant::now(), Arc::clone(&pauses)));
                pauses
            }
        };
        Ok(pauses.iter().find(|pause| pause.tool == tool).cloned())
    }

    /// Pauses `tool` on every node (operators); `false` when it was paused already.
    pub fn pause_tool(&self, tool: &str, reason: &str) -> Result<bool, StoreError> {
        let paused = self.store.pause_tool(tool, reason)?;
        self.pauses.forget();
        Ok(paused)
    }

    /// Resumes `tool`; `false` when it was not paused. Its queued tasks may start now.
    pub fn resume_tool(&self, tool: &str) -> Result<bool, StoreError> {
        let resumed = self.store.resume_tool(tool)?;
        self.pauses.forget();
        let _ = self.wake.try_send(());
        Ok(resumed)
    }

    /// The paused tools, by name.
    pub fn paused_tools(&self) -> Result<Vec<Pause>, StoreError> {
        self.store.paused_tools()
    }

    /// The tools served now (what an operator may pause), by name, with their flow
    /// control.
    pub fn served_tools(&self) -> Vec<(String, taskd_tools::flow::FlowControl)> {
        let tools = Arc::clone(self.settings.current().tools());
        let mut served: Vec<_> = tools
            .all()
            .iter()
            .map(|tool| (tool.spec.name.clone(), tool.spec.flow.clone()))
            .collect();
        served.sort_by(|a, b| a.0.cmp(&b.0));
        served
    }

    /// Waits, up to `within`, for an inline call of `tool` with `arguments` to be
    /// allowed to start: a place of its key's gate, and a token of its rate. The place
    /// is held until the returned value is dropped.
    pub fn enter_inline(
        &self,
        tool: &Registered,
        arguments: &serde_json::Map<String, serde_json::Value>,
        within: Duration,
    ) -> Result<InlinePlace, NoPlace> {
        let deadline = Instant::now() + within;
        let flow = &tool.spec.flow;
        let gate = Gate::of(&tool.spec.name, flow, arguments);
        let mut place = InlinePlace {
            store: Arc::clone(&self.store),
            held: None,
        };
        if let Some(gate) = &gate {
            let holder = self
                .store
                .new_task_id(now_ms())
                .map_err(|error| StoreError::Other(Box::new(error)))?;
            // Past its timeout the call is over; a place that outlives a dead process
            // lapses a minute after that.
            let hold_ms = i64::try_from(within.as_millis()).unwrap_or(i64::MAX) + 60_000;
            let mut pause = Duration::from_millis(10);
            while !self.store.hold_gate(gate, &holder, hold_ms)? {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(NoPlace::Key(format!(
                        "place{} for {}",
                        if gate.limit == 1 { "" } else { "s" },
                        gate.label
                    )));
                }
                std::thread::sleep(pause.min(left));
                pause = (pause * 2).min(PLACE_RETRY_AT_MOST);
            }
            place.held = Some((gate.id.clone(), holder));
        }
        let gate_id = gate.as_ref().map(|gate| gate.id.as_str());
        if let Some(limit) = RateLimit::of(&tool.spec.name, flow, gate_id) {
            loop {
                match self.store.take_token(&limit)? {
                    Ok(()) => break,
                    Err(until) => {
                        let wait =
                            Duration::from_millis(u64::try_from(until - now_ms()).unwrap_or(0));
                        if Instant::now() + wait > deadline {
                            return Err(NoPlace::Rate);
                        }
                        std::thread::sleep(wait.max(Duration::from_millis(1)));
                    }
                }
            }
        }
        Ok(place)
    }
}
