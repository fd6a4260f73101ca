//! Upkeep that runs beside the request path: the outbox relay and the janitor.
//!
//! - The **relay** follows the outbox after every commit and hands each changed task id
//!   to the notification hub; its cursor marks rows as delivered. While no subscription
//!   follows a task it reads nothing, and the janitor moves the cursor past the rows
//!   nobody could hear (see [`skip_unheard`]).
//! - The **janitor** runs every `workers.janitor_interval_ms`, each step in bounded
//!   batches: reclaims jobs whose leases expired (retry with backoff, or fail after the
//!   last attempt — so nothing stays `working` forever), deletes tasks past their TTL,
//!   prunes delivered outbox rows, and checkpoints the WAL so it stays bounded.
//!
//! At start-up, before workers start, [`recover`] reclaims every job still leased: the
//! data-dir lock guarantees no other process holds those leases, so each one is an
//! attempt that died with the previous process.
//!
//! Supervision lives in submodules: [`liveness`] (are the loops making progress?) and
//! [`systemd`] (readiness, status and watchdog for `Type=notify`).

pub mod liveness;
pub mod systemd;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::clock::now_ms;
use crate::metrics::Metrics;
use crate::notifications::Hub;
use crate::tasks::sql::{self, Finish};
use crate::tasks::store::Store;
use crate::workers::{Inflight, Stop};

/// Tasks (or leases) handled per janitor write.
const BATCH: usize = 500;
/// Delivered outbox rows deleted per janitor write (small rows, one range).
const OUTBOX_BATCH: usize = 5_000;
/// Longest a janitor tick keeps removing rows before it sleeps again.
const TICK_BUDGET: Duration = Duration::from_millis(500);
/// How often the WAL is checkpointed with TRUNCATE.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(30);

fn reclaim_reason(restart: bool) -> String {
    if restart {
        "the server stopped while the attempt was running".into()
    } else {
        "the attempt's lease expired (it crashed, hung past its deadline or lost its worker)".into()
    }
}

/// Reclaims leased jobs (all of them at start-up, expired ones later). Returns how many.
fn reclaim(store: &Store, before: Option<i64>) -> usize {
    let leases = match store
        .read()
        .and_then(|conn| sql::expired_leases(&conn, before, BATCH))
    {
        Ok(leases) => leases,
        Err(error) => {
            log::error!("finding expired leases: {error}");
            return 0;
        }
    };
    let count = leases.len();
    if count == 0 {
        return 0;
    }
    let reason = reclaim_reason(before.is_none());
    let result = store.write(move |conn| {
        for (task_id, token) in &leases {
            let retry = Finish::Retry {
                reason: reason.clone(),
            };
            sql::finish(conn, task_id, token, retry, now_ms())?;
        }
        Ok(())
    });
    if let Err(error) = result {
        log::error!("reclaiming leases: {error}");
        return 0;
    }
    count
}

/// Start-up recovery: every leased job belongs to a process that is gone.
pub fn recover(store: &Store) {
    let mut total = 0;
    loop {
        let reclaimed = reclaim(store, None);
        total += reclaimed;
        if reclaimed < BATCH {
            break;
        }
    }
    if total > 0 {
        log::info!("recovered {total} attempt(s) interrupted by the previous stop");
    }
}

pub struct Upkeep {
    stopping: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Upkeep {
    pub fn start(
        store: Arc<Store>,
        hub: Arc<Hub>,
        inflight: Arc<Inflight>,
        metrics: Arc<Metrics>,
        commits: Receiver<()>,
        interval: Duration,
    ) -> Result<Upkeep, String> {
        let stopping = Arc::new(AtomicBool::new(false));
        let start = store
            .read()
            .and_then(|conn| sql::max_outbox_seq(&conn))
            .map_err(|e| format!("reading the outbox: {e}"))?;
        // Rows from before this start have no listener left: they count as delivered.
        let delivered = Arc::new(AtomicI64::new(start));
        let relay = {
            let (store, hub, delivered, stopping) = (
                Arc::clone(&store),
                Arc::clone(&hub),
                Arc::clone(&delivered),
                Arc::clone(&stopping),
            );
            std::thread::Builder::new()
                .name("outbox-relay".into())
                .spawn(move || relay(&store, &hub, &delivered, &commits, &stopping))
                .map_err(|e| e.to_string())?
        };
        let janitor = {
            let stopping = Arc::clone(&stopping);
            std::thread::Builder::new()
                .name("janitor".into())
                .spawn(move || {
                    janitor(
                        &store, &hub, &inflight, &metrics, &delivered, interval, &stopping,
                    )
                })
                .map_err(|e| e.to_string())?
        };
        Ok(Upkeep {
            stopping,
            threads: vec![relay, janitor],
        })
    }

    pub fn stop(self) {
        self.stopping.store(true, Ordering::Release);
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

fn relay(
    store: &Store,
    hub: &Hub,
    delivered: &AtomicI64,
    commits: &Receiver<()>,
    stopping: &AtomicBool,
) {
    while !stopping.load(Ordering::Acquire) {
        // While nobody follows a task, commit pings stay unread: the channel holds one,
        // so once a subscription opens, the first receive returns at once.
        if !hub.await_followers(Duration::from_millis(500)) {
            continue;
        }
        let _ = commits.recv_timeout(Duration::from_millis(500));
        loop {
            let after = delivered.load(Ordering::Acquire);
            let rows = match store
                .read()
                .and_then(|conn| sql::outbox_after(&conn, after, BATCH))
            {
                Ok(rows) => rows,
                Err(error) => {
                    log::error!("reading the outbox: {error}");
                    break;
                }
            };
            let Some(&(last, _)) = rows.last() else {
                break;
            };
            for (seq, task_id) in &rows {
                hub.publish_task_changed(task_id, *seq);
            }
            delivered.fetch_max(last, Ordering::AcqRel);
            if rows.len() < BATCH {
                break;
            }
        }
    }
}

/// Counts every outbox row as delivered when no subscription follows a task, so that
/// the janitor prunes the rows the relay did not read.
///
/// The newest row is read *before* looking for followers. A subscription open when
/// one of those rows was committed and still open now is seen, and nothing is skipped.
/// One opened since then asked for changes after its own start only: the rows skipped
/// were all committed before the look.
fn skip_unheard(store: &Store, hub: &Hub, delivered: &AtomicI64) {
    let newest = match store.read().and_then(|conn| sql::max_outbox_seq(&conn)) {
        Ok(newest) => newest,
        Err(error) => {
            log::error!("reading the outbox: {error}");
            return;
        }
    };
    if !hub.follows_any_task() {
        delivered.fetch_max(newest, Ordering::AcqRel);
    }
}

fn janitor(
    store: &Store,
    hub: &Hub,
    inflight: &Inflight,
    metrics: &Metrics,
    delivered: &AtomicI64,
    interval: Duration,
    stopping: &AtomicBool,
) {
    let mut last_checkpoint = Instant::now();
    while !stopping.load(Ordering::Acquire) {
        std::thread::sleep(interval);
        let reclaimed = reclaim(store, Some(now_ms()));
        metrics.add_reclaimed(reclaimed);
        if reclaimed > 0 {
            log::warn!("reclaimed {reclaimed} job(s) whose lease expired");
        }
        let tick = Instant::now();
        let more = || tick.elapsed() < TICK_BUDGET && !stopping.load(Ordering::Acquire);
        // Expired tasks and delivered outbox rows are removed a bounded batch per write,
        // and again while full batches come back: upkeep keeps pace with any creation
        // rate, yet no single transaction holds up the writer for long.
        loop {
            match store.write(|conn| sql::delete_expired(conn, now_ms(), BATCH)) {
                Ok(expired) => {
                    metrics.add_expired(expired.len());
                    for task_id in &expired {
                        inflight.stop(task_id, Stop::Expired);
                    }
                    if !expired.is_empty() {
                        log::info!("removed {} task(s) past their TTL", expired.len());
                    }
                    if expired.len() < BATCH || !more() {
                        break;
                    }
                }
                Err(error) => {
                    log::error!("expiring tasks: {error}");
                    break;
                }
            }
        }
        skip_unheard(store, hub, delivered);
        let upto = delivered.load(Ordering::Acquire);
        loop {
            match store.write(move |conn| sql::prune_outbox(conn, upto, OUTBOX_BATCH)) {
                Ok(pruned) if pruned == OUTBOX_BATCH && more() => {}
                Ok(_) => break,
                Err(error) => {
                    log::error!("pruning the outbox: {error}");
                    break;
                }
            }
        }
        if last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
            last_checkpoint = Instant::now();
            if let Err(error) = store.checkpoint() {
                log::warn!("WAL checkpoint: {error}");
            }
        }
    }
}
