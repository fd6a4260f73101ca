//! The worker pool: claims queued jobs, runs their tools, commits outcomes — fenced.
//!
//! ```text
//! dispatcher ── claim (lease + fresh fencing token) ──► job channel ──► idle workers
//! worker ── commit outcome + claim its next job, in one write ──► runs it (or goes idle)
//! lease keeper ── renews in-flight leases every lease/3, stops renewing at the deadline
//! ```
//!
//! Guarantees kept here:
//! - **At-least-once.** A job runs until an outcome commits; an attempt that crashes,
//!   panics, hangs past its deadline or loses its lease is retried with exponential
//!   backoff up to the tool's `max_attempts`, then the task fails with a clear message.
//! - **Fencing.** Every write of an attempt (status message, outcome) carries the claim's
//!   token; once a lease is taken over, the old attempt's writes change nothing.
//! - **Prompt cancellation.** A running attempt is told through its [`AttemptControl`];
//!   [`taskd_tools::InvocationHost::sleep`] wakes at once, so built-in tools stop within milliseconds.
//! - **Fairness.** A tool's `max_concurrency` slots are taken with the claim, inside its
//!   write: the jobs of a tool at its limit stay queued (the claim passes over them) and
//!   never hold a worker, so other tools' jobs run meanwhile. A slot is freed when the
//!   run ends, before its outcome commits, so the same write may claim the tool's next
//!   job.
//! - **Graceful shutdown never fails or cancels tasks.** Claiming stops, running attempts
//!   get a grace period, and whatever is still running is released back to the queue
//!   with its attempt uncounted.

mod attempt;
mod inflight;
mod lease;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use self::inflight::RateWaits;
pub use self::inflight::{AttemptControl, Inflight, Stop};
use crate::backend::TaskStore;
use crate::config::WorkerConfig;
use crate::model::{Claim, Finish, Lease};
use crate::settings::SettingsSource;

pub struct WorkerPool {
    stopping: Arc<AtomicBool>,
    inflight: Arc<Inflight>,
    store: Arc<dyn TaskStore>,
    wake: Sender<()>,
    threads: Vec<JoinHandle<()>>,
}

/// Told when an attempt starts and ends (the metrics' per-tool histograms).
pub trait AttemptObserver: Send + Sync {
    /// A claimed job starts: `queue_wait` is how long it had been ready to run.
    fn attempt_started(&self, tool: &str, queue_wait: Duration);
    /// The attempt's tool returned (before its outcome commits).
    fn attempt_ended(&self, tool: &str, duration: Duration);
    /// The store refused the attempt's outcome: its lease had been taken over (the
    /// fence at work, e.g. a node that was cut off or paused finishing late).
    fn outcome_discarded(&self, tool: &str);
}

struct Shared {
    store: Arc<dyn TaskStore>,
    observer: Arc<dyn AttemptObserver>,
    /// The tools in force: an attempt runs the definition it was claimed under.
    settings: Arc<dyn SettingsSource>,
    inflight: Arc<Inflight>,
    /// Tools whose rate passed them over, until their next token.
    rate_waits: Arc<RateWaits>,
    idle: AtomicUsize,
    stopping: Arc<AtomicBool>,
    wake: Sender<()>,
    lease_ms: i64,
}

impl WorkerPool {
    /// Starts the dispatcher, `config.threads` workers and the lease keeper.
    pub fn start(
        store: Arc<dyn TaskStore>,
        settings: Arc<dyn SettingsSource>,
        inflight: Arc<Inflight>,
        config: &WorkerConfig,
        observer: Arc<dyn AttemptObserver>,
        wake: Sender<()>,
        woken: Receiver<()>,
    ) -> WorkerPool {
        let stopping = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            store: Arc::clone(&store),
            observer,
            settings,
            inflight: Arc::clone(&inflight),
            rate_waits: Arc::new(RateWaits::default()),
            idle: AtomicUsize::new(config.threads),
            stopping: Arc::clone(&stopping),
            wake: wake.clone(),
            lease_ms: config.lease_ms as i64,
        });
        let (jobs, queue) = crossbeam_channel::bounded::<Claim>(config.threads);
        let mut threads = Vec::new();
        for index in 0..config.threads {
            let shared = Arc::clone(&shared);
            let queue = queue.clone();
            threads.push(spawn(&format!("worker-{index}"), move || {
                for claim in queue {
                    // A worker that finds more work when it commits an outcome keeps it,
                    // without a round through the dispatcher.
                    let mut next = Some(claim);
                    while let Some(claim) = next {
                        next = attempt::run_attempt(&shared, claim);
                    }
                    shared.idle.fetch_add(1, Ordering::AcqRel);
                    let _ = shared.wake.try_send(());
                }
            }));
        }
        let dispatcher = Arc::clone(&shared);
        threads.push(spawn("dispatcher", move || {
            dispatch(&dispatcher, jobs, woken)
        }));
        let keeper = Arc::clone(&shared);
        threads.push(spawn("lease-keeper", move || lease::keep_leases(&keeper)));
        WorkerPool {
            stopping,
            inflight,
            store,
            wake,
            threads,
        }
    }

    /// Stops claiming, waits up to `grace` for running attempts, then releases the rest
    /// back to the queue (their attempts uncounted). Never fails or cancels a task.
    pub fn shutdown(self, grace: Duration) {
        self.stopping.store(true, Ordering::Release);
        let _ = self.wake.try_send(());
        let deadline = Instant::now() + grace;
        while !self.inflight.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let remaining = self.inflight.snapshot();
        for (_, control) in &remaining {
            control.stop(Stop::Shutdown);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while !self.inflight.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Attempts that ignored the signal: release their leases directly; their late
        // writes are fenced off.
        for (task_id, control) in self.inflight.snapshot() {
            let lease = Lease {
                task_id,
                token: control.token.clone(),
            };
            let released = self.store.finish(lease, Finish::Release, None, None);
            if let Err(error) = released {
                log::error!("could not release a lease at shutdown: {error}");
            }
        }
        if !remaining.is_empty() {
            log::info!(
                "released {} running attempt(s) for the next start",
                remaining.len()
            );
        }
        // Workers finishing ignored attempts must not hold up the exit.
        drop(self.threads);
    }
}

fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(body)
        .expect("spawning worker threads at start-up")
}

fn dispatch(shared: &Shared, jobs: Sender<Claim>, woken: Receiver<()>) {
    // Polling bounds the wait for jobs whose backoff ends without any other event.
    const POLL: Duration = Duration::from_millis(200);
    let heartbeat = taskd_base::liveness::LIVENESS.register("dispatcher");
    // Other nodes' creations, on a store several nodes share.
    let queued = shared.store.jobs_queued();
    while !shared.stopping.load(Ordering::Acquire) {
        let working = heartbeat.working();
        let idle = shared.idle.load(Ordering::Acquire);
        let mut claimed = 0;
        if idle > 0 {
            let (request, registered) = inflight::registering(
                &shared.inflight,
                &shared.rate_waits,
                shared.settings.current().tools(),
                idle,
                shared.lease_ms,
            );
            let claimed_now = shared.store.claim(request);
            match claimed_now {
                Ok(claims) => {
                    claimed = claims.len();
                    for claim in claims {
                        shared.idle.fetch_sub(1, Ordering::AcqRel);
                        if jobs.send(claim).is_err() {
                            return;
                        }
                    }
                }
                Err(error) => {
                    registered.forget(&shared.inflight);
                    log::log!(error.log_level(), "claiming jobs: {error}");
                }
            }
        }
        drop(working);
        if claimed == 0 || claimed == idle {
            // A tool passed over for its rate is claimed again at its next token.
            let wait = shared
                .rate_waits
                .next_token_in(taskd_base::clock::now_ms())
                .map_or(POLL, |next| next.min(POLL));
            match &queued {
                Some(queued) => crossbeam_channel::select! {
                    recv(woken) -> _ => {}
                    recv(queued) -> _ => {}
                    default(wait) => {}
                },
                None => {
                    let _ = woken.recv_timeout(wait);
                }
            }
        }
    }
}
