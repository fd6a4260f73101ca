//! Upkeep that runs beside the request path: the outbox relay and the janitor (one
//! thread each), and start-up recovery.
//!
//! - The **relay** follows the outbox after every commit and hands each changed task id
//!   to the notification hub; its cursor marks rows as delivered. While no subscription
//!   follows a task it reads nothing, and the janitor moves the cursor past the rows
//!   nobody could hear (see [`relay::skip_unheard`]).
//! - The **janitor** runs every `workers.janitor_interval_ms`, each step in bounded
//!   batches: reclaims jobs whose leases expired (retry with backoff, or fail after the
//!   last attempt — so nothing stays `working` forever), deletes tasks past their TTL
//!   (keeping the history summaries of finished ones, [`crate::history`]), prunes the
//!   summaries and delivered outbox rows past their time, and checkpoints the WAL so it
//!   stays bounded.
//! - When other nodes share the store, a third thread hands their cancellations of
//!   running attempts to [`Inflight`]: the attempt may be running here.
//! - At start-up, the janitor first reclaims every job still leased by an attempt of the
//!   previous run (`recovery::recover`), while the server serves.

mod janitor;
mod recovery;
mod relay;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Sender;

use crate::backend::{StoreError, TaskStore};
use crate::settings::SettingsSource;
use crate::workers::Inflight;
use taskd_notifications::Hub;

/// Tasks (or leases, or outbox rows read) handled per upkeep read or write.
const BATCH: usize = 500;

/// Where upkeep reports what it removed (`GET /metrics` counts it). A trait, so that the
/// engine does not depend on the metrics page.
pub trait UpkeepCounters: Send + Sync {
    /// Attempts whose expired lease the janitor reclaimed.
    fn reclaimed(&self, count: usize);
    /// Tasks deleted past their TTL.
    fn expired(&self, count: usize);
}

/// Why upkeep did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("reading the outbox: {0}")]
    Outbox(StoreError),
    #[error("{0}")]
    Thread(std::io::Error),
}

pub struct Upkeep {
    stopping: Arc<AtomicBool>,
    /// Dropped by [`Upkeep::stop`]: every upkeep thread waiting for its next tick or
    /// commit wakes at once (its receiver disconnects), so a stop is not held up by a
    /// janitor interval.
    stop: Sender<()>,
    threads: Vec<JoinHandle<()>>,
}

impl Upkeep {
    /// Starts the relay and the janitor (every `interval`; `settings` give it the
    /// `[history]` in force).
    pub fn start(
        store: Arc<dyn TaskStore>,
        settings: Arc<dyn SettingsSource>,
        hub: Arc<Hub>,
        inflight: Arc<Inflight>,
        counters: Arc<dyn UpkeepCounters>,
        interval: Duration,
    ) -> Result<Upkeep, StartError> {
        let stopping = Arc::new(AtomicBool::new(false));
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let start = store.outbox_newest().map_err(StartError::Outbox)?;
        let commits = store.subscribe();
        // Rows from before this start have no listener left: they count as delivered.
        let delivered = Arc::new(AtomicI64::new(start));
        let relay = {
            let (store, hub, delivered, stopping, stopped) = (
                Arc::clone(&store),
                Arc::clone(&hub),
                Arc::clone(&delivered),
                Arc::clone(&stopping),
                stopped.clone(),
            );
            std::thread::Builder::new()
                .name("outbox-relay".into())
                .spawn(move || {
                    relay::relay(
                        store.as_ref(),
                        &hub,
                        &delivered,
                        &commits,
                        &stopping,
                        &stopped,
                    )
                })
                .map_err(StartError::Thread)?
        };
        let mut threads = vec![relay];
        if let Some(cancellations) = store.remote_cancellations() {
            let (inflight, stopped) = (Arc::clone(&inflight), stopped.clone());
            let thread = std::thread::Builder::new()
                .name("remote-cancel".into())
                .spawn(move || loop {
                    crossbeam_channel::select! {
                        recv(cancellations) -> task_id => match task_id {
                            Ok(task_id) => inflight.cancel(&task_id),
                            Err(_) => break,
                        },
                        recv(stopped) -> _ => break,
                    }
                })
                .map_err(StartError::Thread)?;
            threads.push(thread);
        }
        let janitor = {
            let stopping = Arc::clone(&stopping);
            let stopped = stopped.clone();
            std::thread::Builder::new()
                .name("janitor".into())
                .spawn(move || {
                    recovery::recover(store.as_ref(), &stopping);
                    janitor::janitor(
                        store.as_ref(),
                        settings.as_ref(),
                        &hub,
                        &inflight,
                        counters.as_ref(),
                        &delivered,
                        interval,
                        &stopped,
                    )
                })
                .map_err(StartError::Thread)?
        };
        threads.push(janitor);
        Ok(Upkeep {
            stopping,
            stop,
            threads,
        })
    }

    pub fn stop(self) {
        let Upkeep {
            stopping,
            stop,
            threads,
        } = self;
        stopping.store(true, Ordering::Release);
        drop(stop);
        for thread in threads {
            let _ = thread.join();
        }
    }
}
