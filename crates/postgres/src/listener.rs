//! The listener: one dedicated connection per node that `LISTEN`s to every node's
//! commits, and that watches the database.
//!
//! - `mcp_taskd_outbox` (sent by the node that committed a task change, right after its
//!   commit) pings the relay, which reads the outbox by position (see
//!   schema-postgres.sql, `outbox`).
//! - `mcp_taskd_jobs` (sent with it when the change may have queued jobs ready to run:
//!   creations, answers to input requests) wakes the dispatcher, so that idle workers
//!   claim at once whichever node the task was created on.
//! - `mcp_taskd_cancel` (sent by `tasks/cancel` of a running attempt, payload: the task
//!   id) goes to the engine, which stops the attempt if it runs here: a cancellation
//!   reaches another node's attempt within a round trip of its commit.
//! - Losing the connection marks the store unhealthy (`/healthz` 503), starts a new
//!   pool epoch (pooled connections opened before are dropped), and reconnects every
//!   [`RETRY`]. Once back, the relay is pinged: it reads whatever committed meanwhile,
//!   by position, so no change is missed; cancellations sent while the node was cut off
//!   are lost, and the attempt ends at its next fenced write or lease renewal instead.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use postgres::fallible_iterator::FallibleIterator;

use super::connection::{connect, PING_TIMEOUT};
use super::Health;

/// How often the connection is checked while no notification arrives, and how often a
/// lost database is tried again.
const RETRY: Duration = Duration::from_millis(500);
/// How soon the relay is woken again after a notification (see [`Listener::follow`]),
/// and for how long.
const ECHO: Duration = Duration::from_millis(5);
const ECHO_WINDOW: Duration = Duration::from_millis(100);

pub(super) struct Listener {
    pub settings: postgres::Config,
    pub commits: Sender<()>,
    pub cancellations: Sender<String>,
    pub jobs: Sender<()>,
    pub health: Arc<Health>,
    pub epoch: Arc<AtomicU64>,
    pub stopping: Arc<AtomicBool>,
}

impl Listener {
    pub fn run(self) {
        let mut lost = false;
        while !self.stopping.load(Ordering::Acquire) {
            let mut client = match connect(&self.settings) {
                Ok(client) => client,
                Err(error) => {
                    self.lose(&mut lost, &error);
                    std::thread::sleep(RETRY);
                    continue;
                }
            };
            if let Err(error) = client.batch_execute(
                "LISTEN mcp_taskd_outbox; LISTEN mcp_taskd_jobs; LISTEN mcp_taskd_cancel",
            ) {
                self.lose(&mut lost, &error);
                std::thread::sleep(RETRY);
                continue;
            }
            if lost {
                log::warn!("the PostgreSQL task store is reachable again");
                self.epoch.fetch_add(1, Ordering::AcqRel);
                lost = false;
            }
            self.health.set(None);
            // Whatever committed while nobody listened is read (and claimed) now.
            let _ = self.commits.try_send(());
            let _ = self.jobs.try_send(());
            if let Err(error) = self.follow(&mut client) {
                self.lose(&mut lost, &error);
            }
        }
    }

    /// Hands on notifications until the connection fails or the store stops.
    ///
    /// A relay woken by a commit reads only the rows of transactions older than the
    /// oldest one still running (see `sql::upkeep::outbox_after`): a row whose reading
    /// waits for an older transaction, which may commit without a notification (a
    /// claim, a lease renewal), would wait for the next one. So for [`ECHO_WINDOW`]
    /// after a notification the relay is woken again every [`ECHO`] of silence.
    fn follow(&self, client: &mut postgres::Client) -> Result<(), postgres::Error> {
        let mut echo_until: Option<Instant> = None;
        while !self.stopping.load(Ordering::Acquire) {
            let echoing = echo_until.is_some_and(|until| Instant::now() < until);
            let mut woken = false;
            {
                let mut notifications = client.notifications();
                let mut arriving = notifications.timeout_iter(if echoing { ECHO } else { RETRY });
                while let Some(notification) = arriving.next()? {
                    match notification.channel() {
                        "mcp_taskd_cancel" => {
                            let _ = self
                                .cancellations
                                .try_send(notification.payload().to_owned());
                        }
                        "mcp_taskd_jobs" => {
                            let _ = self.jobs.try_send(());
                        }
                        _ => {
                            let _ = self.commits.try_send(());
                            woken = true;
                        }
                    }
                }
            }
            if woken {
                echo_until = Some(Instant::now() + ECHO_WINDOW);
            } else if echoing {
                let _ = self.commits.try_send(());
            } else {
                client.is_valid(PING_TIMEOUT)?;
                // Reachable: a failure a request noted (see `Store::failed`) is over.
                self.health.set(None);
            }
        }
        Ok(())
    }

    fn lose(&self, lost: &mut bool, error: &dyn std::fmt::Display) {
        if !*lost {
            log::error!("lost the PostgreSQL task store: {error}");
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
        *lost = true;
        self.health
            .set(Some(format!("the database is unreachable: {error}")));
    }
}
