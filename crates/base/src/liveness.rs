//! Liveness of the server's long-lived loops, read by the systemd watchdog.
//!
//! Each loop thread registers a [`Heartbeat`] under its component's name (`writer`,
//! `dispatcher`; `http` for connection threads, see [`Registry::register_elastic`]) and holds a [`Working`] guard while it handles one unit of work
//! (a write batch, a claim round, a request). Waiting for work is not work, so an idle
//! component is healthy however long it idles. A component is **stalled** when every
//! one of its threads has been inside one unit of work for longer than the limit (a
//! pool with one free thread still makes progress), or when all its threads are gone.
//!
//! Work that has a deadline of its own is not watched: an inline tool run (bounded by
//! the tool's timeout) goes through [`unwatched`], so a request thread running one for
//! minutes is not taken for a stuck one.
//!
//! The registry is process-wide ([`LIVENESS`]) because the loops it watches are started
//! by different modules; a static keeps each hook to a line, with no handle threaded
//! through their constructors. Tests build their own [`Registry`].

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// The registry the server's loops report to.
pub static LIVENESS: Registry = Registry::new();

/// Heartbeats by component, and every component name ever registered.
pub struct Registry {
    state: Mutex<State>,
}

struct State {
    slots: Vec<Weak<Slot>>,
    components: Vec<Component>,
}

struct Component {
    name: &'static str,
    /// Its threads come and go with the work: having none is idle, not gone.
    elastic: bool,
}

/// One thread's heartbeat: when its current unit of work began (0 while idle), in
/// milliseconds of [`monotonic_ms`].
struct Slot {
    component: &'static str,
    busy_since: AtomicU64,
}

/// A loop thread's registration; dropping it (the thread ends) unregisters the thread.
pub struct Heartbeat(Arc<Slot>);

/// Held while one unit of work runs; dropping it marks the thread idle again.
pub struct Working<'a>(&'a Slot);

/// Why a component counts as stalled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stall {
    /// Every thread has been inside one unit of work for at least this long.
    Stuck(Duration),
    /// The component had threads, and none is left.
    Gone,
}

thread_local! {
    /// The calling thread's heartbeat, for [`unwatched`].
    static OWN: RefCell<Weak<Slot>> = const { RefCell::new(Weak::new()) };
}

/// Runs `work` without counting its time against the calling thread's heartbeat: for
/// work bounded by a deadline of its own. The unit of work around it starts afresh after.
pub fn unwatched<T>(work: impl FnOnce() -> T) -> T {
    let slot = OWN.with(|own| own.borrow().upgrade());
    let busy = slot
        .as_ref()
        .is_some_and(|slot| slot.busy_since.swap(0, Ordering::AcqRel) != 0);
    let result = work();
    if let (true, Some(slot)) = (busy, slot) {
        slot.busy_since.store(monotonic_ms(), Ordering::Release);
    }
    result
}

/// Milliseconds on a monotonic clock (wall-clock jumps are not progress), never 0.
fn monotonic_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let since_start = START.get_or_init(Instant::now).elapsed().as_millis();
    u64::try_from(since_start).unwrap_or(u64::MAX - 1) + 1
}

impl Registry {
    pub const fn new() -> Registry {
        Registry {
            state: Mutex::new(State {
                slots: Vec::new(),
                components: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update replaces whole entries: a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers the calling loop thread under `component`.
    pub fn register(&self, component: &'static str) -> Heartbeat {
        self.register_as(component, false)
    }

    /// Registers the calling thread under a component whose threads come and go with
    /// the work, such as one per open connection: when none is left, the component is
    /// idle rather than gone.
    pub fn register_elastic(&self, component: &'static str) -> Heartbeat {
        self.register_as(component, true)
    }

    fn register_as(&self, component: &'static str, elastic: bool) -> Heartbeat {
        let slot = Arc::new(Slot {
            component,
            busy_since: AtomicU64::new(0),
        });
        let mut state = self.lock();
        state.slots.retain(|slot| slot.strong_count() > 0);
        state.slots.push(Arc::downgrade(&slot));
        if !state.components.iter().any(|known| known.name == component) {
            state.components.push(Component {
                name: component,
                elastic,
            });
        }
        OWN.with(|own| *own.borrow_mut() = Arc::downgrade(&slot));
        Heartbeat(slot)
    }

    /// The components that made no progress within `limit`, each with why.
    pub fn stalled(&self, limit: Duration) -> Vec<(&'static str, Stall)> {
        let now = monotonic_ms();
        let mut state = self.lock();
        state.slots.retain(|slot| slot.strong_count() > 0);
        let live: Vec<Arc<Slot>> = state.slots.iter().filter_map(Weak::upgrade).collect();
        let mut stalled = Vec::new();
        for &Component {
            name: component,
            elastic,
        } in &state.components
        {
            // How long each of the component's threads has been busy (None: idle).
            let busy: Vec<Option<u64>> = live
                .iter()
                .filter(|slot| slot.component == component)
                .map(|slot| match slot.busy_since.load(Ordering::Acquire) {
                    0 => None,
                    since => Some(now.saturating_sub(since)),
                })
                .collect();
            if busy.is_empty() {
                if !elastic {
                    stalled.push((component, Stall::Gone));
                }
            } else if busy.iter().all(Option::is_some) {
                // Every thread is busy: the pool is stuck once its freshest start is old.
                let least = busy.iter().flatten().copied().min().unwrap_or(0);
                let least = Duration::from_millis(least);
                if least >= limit {
                    stalled.push((component, Stall::Stuck(least)));
                }
            }
        }
        stalled
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

impl Heartbeat {
    /// Marks the thread busy until the returned guard drops.
    pub fn working(&self) -> Working<'_> {
        self.0.busy_since.store(monotonic_ms(), Ordering::Release);
        Working(&self.0)
    }
}

impl Drop for Working<'_> {
    fn drop(&mut self) {
        self.0.busy_since.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(3600);

    #[test]
    fn idle_threads_are_healthy_however_long_they_idle() {
        let registry = Registry::new();
        let _writer = registry.register("writer");
        assert!(registry.stalled(Duration::ZERO).is_empty());
    }

    #[test]
    fn a_thread_busy_past_the_limit_stalls_its_component_until_it_finishes() {
        let registry = Registry::new();
        let writer = registry.register("writer");
        let working = writer.working();
        assert!(
            registry.stalled(LONG).is_empty(),
            "busy, but within the limit"
        );
        let stalled = registry.stalled(Duration::ZERO);
        assert_eq!(stalled.len(), 1);
        assert_eq!(stalled[0].0, "writer");
        assert!(matches!(stalled[0].1, Stall::Stuck(_)));
        drop(working);
        assert!(registry.stalled(Duration::ZERO).is_empty());
    }

    #[test]
    fn a_pool_progresses_while_one_thread_is_free() {
        let registry = Registry::new();
        let (first, second) = (registry.register("http"), registry.register("http"));
        let _busy = first.working();
        assert!(registry.stalled(Duration::ZERO).is_empty());
        let _also_busy = second.working();
        assert_eq!(registry.stalled(Duration::ZERO)[0].0, "http");
    }

    #[test]
    fn work_with_its_own_deadline_is_not_watched() {
        let registry = Registry::new();
        let http = registry.register("http");
        let _working = http.working();
        let inside = unwatched(|| registry.stalled(Duration::ZERO));
        assert!(inside.is_empty(), "an inline tool run is not a stall");
        assert_eq!(
            registry.stalled(Duration::ZERO)[0].0,
            "http",
            "watched again after"
        );
        drop(_working);
        unwatched(|| ());
        assert!(
            registry.stalled(Duration::ZERO).is_empty(),
            "an idle thread stays idle"
        );
    }

    #[test]
    fn an_elastic_component_without_threads_is_idle_not_gone() {
        let registry = Registry::new();
        let connection = registry.register_elastic("http");
        let working = connection.working();
        assert_eq!(registry.stalled(Duration::ZERO)[0].0, "http");
        drop(working);
        drop(connection);
        assert!(registry.stalled(Duration::ZERO).is_empty());
    }

    #[test]
    fn a_component_whose_threads_all_ended_is_gone() {
        let registry = Registry::new();
        let dispatcher = registry.register("dispatcher");
        let _writer = registry.register("writer");
        drop(dispatcher);
        assert_eq!(
            registry.stalled(LONG),
            vec![("dispatcher", Stall::Gone)],
            "the writer still idles healthily"
        );
    }
}
