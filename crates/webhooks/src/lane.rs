//! One webhook's deliveries: a dispatcher thread that claims due deliveries from the
//! store and records their outcomes, and `concurrency` sender threads that make the
//! attempts. The store keeps one task's deliveries in order (a delivery is due only
//! once the task's earlier ones are done), so the senders may take any due ones.
//!
//! Retries back off per delivery (1 s, doubling, at most [`MAX_BACKOFF_MS`], with
//! jitter) until the webhook's horizon, when the delivery is recorded dead. When the
//! receiver itself seems down (no answer, or 429/502/503/504), the lane also stops
//! claiming for a while (growing to [`MAX_PAUSE`]) and then sends one probe; the first
//! success makes every delivery waiting for a retry due at once, so a receiver that
//! comes back gets its backlog without waiting out each delivery's backoff.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use crossbeam_channel::{Receiver, Sender};

use taskd_base::clock::now_ms;
use taskd_engine::webhooks::{Delivery, Outcome, WebhookStore};

use crate::config::WebhookConfig;
use crate::send::{self, Attempt};
use crate::{payload, sign, DeliveryCounters};

/// How often an idle lane looks for due deliveries.
const POLL: Duration = Duration::from_millis(100);
/// How long a claim on a shared store is this node's (well past `timeout_ms`).
const LEASE_MS: i64 = 180_000;
/// The longest wait between two attempts of one delivery.
const MAX_BACKOFF_MS: i64 = 3_600_000;
/// The longest a lane waits before probing a receiver that seemed down.
const MAX_PAUSE: Duration = Duration::from_secs(10);
/// Deliveries claimed ahead per sender thread.
const QUEUED_PER_SENDER: usize = 8;
/// How long a stopping lane waits for its attempts in flight to end.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// A webhook ready to send: its configuration, client and name.
pub struct Prepared {
    pub config: WebhookConfig,
    pub name: String,
    pub agent: ureq::Agent,
}

impl Prepared {
    pub fn new(config: WebhookConfig) -> Prepared {
        Prepared {
            name: config.name(),
            agent: send::agent(&config),
            config,
        }
    }
}

/// A running lane.
pub struct Lane {
    pub prepared: Arc<ArcSwap<Prepared>>,
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Lane {
    pub fn start(
        prepared: Prepared,
        store: Arc<dyn WebhookStore>,
        counters: Arc<dyn DeliveryCounters>,
    ) -> std::io::Result<Lane> {
        let prepared = Arc::new(ArcSwap::from_pointee(prepared));
        let (stop, stopped) = crossbeam_channel::bounded(0);
        let name = prepared.load().name.clone();
        let shared = Arc::clone(&prepared);
        let thread = std::thread::Builder::new()
            .name(format!("webhook {name}").chars().take(15).collect())
            .spawn(move || dispatch(&shared, store.as_ref(), counters.as_ref(), &stopped))?;
        Ok(Lane {
            prepared,
            stop,
            thread,
        })
    }

    /// Stops claiming, lets attempts in flight end (for a moment) and records them.
    pub fn stop(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
}

/// What a sender hands back.
struct Done {
    seq: i64,
    delivery: Delivery,
    attempt: Attempt,
}

/// The delay before the next attempt of a delivery that has failed `attempts` times.
fn backoff_ms(attempts: i64) -> i64 {
    let doublings = u32::try_from(attempts.saturating_sub(1).clamp(0, 30)).unwrap_or(30);
    let base = 1_000i64.saturating_mul(1 << doublings).min(MAX_BACKOFF_MS);
    let mut noise = [0u8; 2];
    let jitter = match getrandom::fill(&mut noise) {
        // ±20 %.
        Ok(()) => base * (i64::from(u16::from_le_bytes(noise) % 401) - 200) / 1000,
        Err(_) => 0,
    };
    (base + jitter).max(100)
}

/// What a failed attempt of `delivery` (its `attempts` before it) comes to under a
/// horizon of `horizon_ms`.
fn after_failure(delivery: &Delivery, attempt: &Attempt, horizon_ms: i64, now: i64) -> Outcome {
    let (status, error) = match attempt {
        Attempt::Answered(status) => (Some(*status), format!("the receiver answered {status}")),
        Attempt::Failed(why) => (None, why.clone()),
    };
    let deadline = delivery.since_ms.saturating_add(horizon_ms);
    if now >= deadline {
        return Outcome::Dead { status, error };
    }
    let delay = backoff_ms(delivery.attempts + 1).min(deadline - now);
    Outcome::Retry {
        delay_ms: delay.max(1),
        status,
        error,
    }
}

/// Makes the calling thread yield the CPU to the rest of the server: webhook threads run
/// under `SCHED_IDLE` (Linux; at nice +10 where that is refused; elsewhere they keep
/// the process's priority). When the box is busy, requests and task attempts go first
/// and deliveries fall behind (their lag grows, nothing is lost); when it has room,
/// they catch up. Idle rather than only niced: the server's threads mostly wait on each
/// other (a worker for the writer's commit, the writer for the next outcome), and one
/// that wakes on a core a niced thread is using may wait for that thread's slice to
/// end, while an idle thread is set aside at once. At nice +10, one webhook took the
/// drain to 0.67x of its rate without one, and creations to 0.71x; idle, 0.80x and
/// 0.95x (docs/benchmarks/webhooks.md).
fn yield_to_the_server() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid, sched_setscheduler and setpriority are given this thread's own id
    // and a parameter that outlives the call; lowering one's own scheduling needs no
    // privilege.
    unsafe {
        let thread = libc::gettid();
        let param = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(thread, libc::SCHED_IDLE, &param) != 0 {
            let _ = libc::setpriority(libc::PRIO_PROCESS, thread as libc::id_t, 10);
        }
    }
}

fn sender(jobs: &Receiver<(Delivery, Arc<Prepared>)>, done: &Sender<Done>) {
    yield_to_the_server();
    for (delivery, prepared) in jobs {
        let body = payload::body(&delivery, prepared.config.include_result);
        let timestamp = now_ms() / 1000;
        let signature = sign::signature(&prepared.config.secrets.0, &delivery.id, timestamp, &body);
        let attempt = send::post(
            &prepared.agent,
            &prepared.config.url,
            &delivery.id,
            timestamp,
            &signature,
            &body,
        );
        let seq = delivery.seq;
        if done
            .send(Done {
                seq,
                delivery,
                attempt,
            })
            .is_err()
        {
            return;
        }
    }
}

/// Whether the receiver is answering, as the lane's last attempts found.
#[derive(Default)]
struct Health {
    /// Failures in a row that looked like the receiver's, not the event's.
    troubles: u32,
    /// No claims before this (then one probe).
    paused_until: Option<Instant>,
}

fn dispatch(
    prepared: &ArcSwap<Prepared>,
    store: &dyn WebhookStore,
    counters: &dyn DeliveryCounters,
    stopped: &Receiver<()>,
) {
    yield_to_the_server();
    let concurrency = prepared.load().config.concurrency.max(1);
    // Claimed ahead of the senders, so that a claim and a record serve many attempts.
    let capacity = concurrency * QUEUED_PER_SENDER;
    let (jobs, take) = crossbeam_channel::bounded::<(Delivery, Arc<Prepared>)>(capacity);
    let (done, finished) = crossbeam_channel::unbounded::<Done>();
    let senders: Vec<JoinHandle<()>> = (0..concurrency)
        .filter_map(|_| {
            let (take, done) = (take.clone(), done.clone());
            std::thread::Builder::new()
                .name("webhook-send".into())
                .spawn(move || sender(&take, &done))
                .ok()
        })
        .collect();
    drop(done);
    let mut in_flight: Vec<i64> = Vec::new();
    // Outcomes not yet recorded (a failed write is tried again).
    let mut unrecorded: Vec<(i64, Outcome)> = Vec::new();
    let mut health = Health::default();
    let mut stopping = false;
    let mut stop_deadline = Instant::now();
    // Attempts that ended while the loop waited.
    let mut waiting: Vec<Done> = Vec::new();
    loop {
        // Take what the senders finished.
        let mut recovered = false;
        let ended: Vec<Done> = waiting.drain(..).chain(finished.try_iter()).collect();
        for finished in ended {
            let current = prepared.load();
            let now = now_ms();
            let outcome = if finished.attempt.delivered() {
                let status = match finished.attempt {
                    Attempt::Answered(status) => status,
                    Attempt::Failed(_) => 0,
                };
                recovered |= health.troubles > 0;
                health = Health::default();
                let lag = Duration::from_millis(
                    u64::try_from(now - finished.delivery.at_ms).unwrap_or(0),
                );
                counters.delivered(&current.name, lag);
                Outcome::Delivered {
                    status,
                    retried: finished.delivery.attempts > 0,
                }
            } else {
                if finished.attempt.endpoint_trouble() {
                    health.troubles = health.troubles.saturating_add(1);
                    let pause = Duration::from_millis(
                        u64::try_from(backoff_ms(i64::from(health.troubles))).unwrap_or(1_000),
                    )
                    .min(MAX_PAUSE);
                    if health.troubles == 1 {
                        log::warn!(
                            "webhook {}: the receiver does not answer; retrying",
                            current.name
                        );
                    }
                    health.paused_until = Some(Instant::now() + pause);
                }
                let outcome = after_failure(
                    &finished.delivery,
                    &finished.attempt,
                    current.config.retry_for_ms(),
                    now,
                );
                match outcome {
                    Outcome::Dead { .. } => counters.dead(&current.name),
                    _ => counters.retried(&current.name),
                }
                outcome
            };
            unrecorded.push((finished.seq, outcome));
        }
        if !unrecorded.is_empty() {
            match store.record_deliveries(&unrecorded) {
                Ok(()) => {
                    in_flight.retain(|seq| !unrecorded.iter().any(|(done, _)| done == seq));
                    unrecorded.clear();
                }
                Err(error) => {
                    log::log!(error.log_level(), "webhooks: recording deliveries: {error}")
                }
            }
        }
        if recovered {
            let name = prepared.load().name.clone();
            log::info!("webhook {name}: the receiver answers again");
            if let Err(error) = store.hasten_deliveries(&name) {
                log::log!(error.log_level(), "webhooks: {error}");
            }
        }
        if stopping {
            if in_flight.is_empty() || Instant::now() >= stop_deadline {
                break;
            }
        } else if stopped.try_recv() == Err(crossbeam_channel::TryRecvError::Disconnected) {
            stopping = true;
            stop_deadline = Instant::now() + STOP_GRACE;
            continue;
        }
        // Claim.
        let mut claimed = 0;
        let room = capacity.saturating_sub(in_flight.len());
        let paused = health
            .paused_until
            .is_some_and(|until| Instant::now() < until);
        if !stopping && room > 0 && !paused {
            let current = prepared.load_full();
            // A receiver that seemed down gets one probe at a time.
            let limit = if health.troubles > 0 {
                usize::from(in_flight.is_empty())
            } else {
                room
            };
            if limit > 0 {
                match store.claim_deliveries(
                    &current.name,
                    limit,
                    LEASE_MS,
                    &in_flight,
                    current.config.include_result,
                ) {
                    Ok(due) => {
                        claimed = due.len();
                        for delivery in due {
                            in_flight.push(delivery.seq);
                            if jobs.send((delivery, Arc::clone(&current))).is_err() {
                                break;
                            }
                        }
                    }
                    Err(error) => {
                        log::log!(error.log_level(), "webhooks: claiming deliveries: {error}")
                    }
                }
            }
        }
        if claimed == 0 || claimed < room || health.troubles > 0 {
            // Nothing more due now: wait for an attempt to end, the stop, or the poll.
            let watch_stop = if stopping { None } else { Some(stopped) };
            if let Some(done) = wait(&finished, watch_stop, POLL) {
                waiting.push(done);
            }
        } else if let Some(done) = wait(&finished, None, Duration::ZERO) {
            waiting.push(done);
        }
    }
    drop(jobs);
    // Senders still in an attempt end with it (bounded by `timeout_ms`); not waited for.
    drop(senders);
}

/// Waits until a sender finishes (its attempt is returned), `stopped` is, or `limit`
/// passes.
fn wait(
    finished: &Receiver<Done>,
    stopped: Option<&Receiver<()>>,
    limit: Duration,
) -> Option<Done> {
    match stopped {
        Some(stopped) => crossbeam_channel::select! {
            recv(finished) -> done => done.ok(),
            recv(stopped) -> _ => None,
            default(limit) => None,
        },
        None => finished.recv_timeout(limit).ok(),
    }
}
