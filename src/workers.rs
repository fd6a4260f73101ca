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
//!   [`InvocationHost::sleep`] wakes at once, so built-in tools stop within milliseconds.
//! - **Graceful shutdown never fails or cancels tasks.** Claiming stops, running attempts
//!   get a grace period, and whatever is still running is released back to the queue
//!   with its attempt uncounted.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use serde_json::{json, Map, Value};

use crate::clock::now_ms;
use crate::config::WorkerConfig;
use crate::protocol::RpcError;
use crate::protocol::{ClientCapabilities, InputKind, LogLevel};
use crate::tasks::sql::{self, Claim, Finish};
use crate::tasks::store::{Store, StoreError};
use crate::tasks::Origin;
use crate::tools::{Invocation, InvocationHost, Outcome, Registry};

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
    fn new(token: String, deadline: i64) -> AttemptControl {
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
    fn remove(&self, task_id: &str, token: &str) {
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

    fn get(&self, task_id: &str, token: &str) -> Option<Arc<AttemptControl>> {
        self.lock()
            .get(task_id)
            .filter(|control| control.token == token)
            .cloned()
    }

    fn snapshot(&self) -> Vec<(String, Arc<AttemptControl>)> {
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

pub struct WorkerPool {
    stopping: Arc<AtomicBool>,
    inflight: Arc<Inflight>,
    store: Arc<Store>,
    wake: Sender<()>,
    threads: Vec<JoinHandle<()>>,
}

struct Shared {
    store: Arc<Store>,
    tools: Arc<Registry>,
    inflight: Arc<Inflight>,
    idle: AtomicUsize,
    stopping: Arc<AtomicBool>,
    wake: Sender<()>,
    lease_ms: i64,
}

impl WorkerPool {
    /// Starts the dispatcher, `config.threads` workers and the lease keeper.
    pub fn start(
        store: Arc<Store>,
        tools: Arc<Registry>,
        inflight: Arc<Inflight>,
        config: &WorkerConfig,
        wake: Sender<()>,
        woken: Receiver<()>,
    ) -> WorkerPool {
        let stopping = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            store: Arc::clone(&store),
            tools,
            inflight: Arc::clone(&inflight),
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
                        next = run_attempt(&shared, claim);
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
        threads.push(spawn("lease-keeper", move || keep_leases(&keeper)));
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
            let token = control.token.clone();
            let released = self
                .store
                .write(move |conn| sql::finish(conn, &task_id, &token, Finish::Release, now_ms()));
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

/// A fresh fencing token: 128 random bits.
fn fresh_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

fn dispatch(shared: &Shared, jobs: Sender<Claim>, woken: Receiver<()>) {
    // Polling bounds the wait for jobs whose backoff ends without any other event.
    const POLL: Duration = Duration::from_millis(200);
    while !shared.stopping.load(Ordering::Acquire) {
        let idle = shared.idle.load(Ordering::Acquire);
        let mut claimed = 0;
        if idle > 0 {
            let (inflight, lease_ms) = (Arc::clone(&shared.inflight), shared.lease_ms);
            let registered = Registered::default();
            let noted = registered.clone();
            let claimed_now = shared
                .store
                .write(move |conn| claim_registered(conn, idle, lease_ms, &inflight, &noted));
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
                    log::error!("claiming jobs: {error}");
                }
            }
        }
        if claimed == 0 || claimed == idle {
            let _ = woken.recv_timeout(POLL);
        }
    }
}

fn keep_leases(shared: &Shared) {
    let period = Duration::from_millis((shared.lease_ms / 3).max(100) as u64);
    while !shared.stopping.load(Ordering::Acquire) {
        std::thread::sleep(period);
        let now = now_ms();
        let mut renew = Vec::new();
        for (task_id, control) in shared.inflight.snapshot() {
            if now >= control.deadline {
                // Past the hard deadline: stop renewing; the janitor reclaims the job
                // once the lease runs out, even if the tool ignores the signal.
                control.stop(Stop::Deadline);
            } else {
                renew.push((task_id, control));
            }
        }
        if renew.is_empty() {
            continue;
        }
        let leases: Vec<(String, String)> = renew
            .iter()
            .map(|(id, control)| (id.clone(), control.token.clone()))
            .collect();
        let expires = now.saturating_add(shared.lease_ms);
        let held = shared.store.write(move |conn| {
            leases
                .iter()
                .map(|(id, token)| sql::renew_lease(conn, id, token, expires))
                .collect::<Result<Vec<bool>, _>>()
        });
        match held {
            Ok(held) => {
                for ((_, control), still_held) in renew.iter().zip(held) {
                    if !still_held {
                        control.stop(Stop::LeaseLost);
                    }
                }
            }
            Err(error) => log::error!("renewing leases: {error}"),
        }
    }
}

/// The attempts a claim registered in [`Inflight`] inside its write, so that the caller
/// can take them back if the write does not commit (they never run).
#[derive(Clone, Default)]
struct Registered(Arc<Mutex<Vec<(String, String)>>>);

impl Registered {
    fn note(&self, claim: &Claim) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((claim.task_id.clone(), claim.token.clone()));
    }

    fn forget(&self, inflight: &Inflight) {
        for (task_id, token) in self.0.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            inflight.remove(task_id, token);
        }
    }
}

/// Claims up to `limit` ready jobs within a write, registering each attempt in
/// `inflight` before the write commits: a `tasks/cancel` runs in the same writer, so one
/// that sees the job running always finds its attempt to signal. (Registered after the
/// commit, a cancel arriving in between was recorded but never reached the attempt.)
fn claim_registered(
    conn: &rusqlite::Connection,
    limit: usize,
    lease_ms: i64,
    inflight: &Inflight,
    registered: &Registered,
) -> Result<Vec<Claim>, StoreError> {
    let claims = sql::claim(conn, limit, now_ms(), lease_ms, fresh_token)?;
    for claim in &claims {
        inflight.insert(
            &claim.task_id,
            Arc::new(AttemptControl::new(claim.token.clone(), claim.deadline)),
        );
        registered.note(claim);
    }
    Ok(claims)
}

/// Runs one claimed attempt and commits its outcome (fenced by the claim's token). The
/// same write claims the worker's next job, unless the pool is stopping: under load a
/// worker goes from job to job with one commit each, and the dispatcher only feeds
/// workers that found nothing.
fn run_attempt(shared: &Shared, claim: Claim) -> Option<Claim> {
    let control = shared
        .inflight
        .get(&claim.task_id, &claim.token)
        .unwrap_or_else(|| Arc::new(AttemptControl::new(claim.token.clone(), claim.deadline)));
    let finish = execute(shared, &claim, &control);
    let (task_id, token) = (claim.task_id.clone(), claim.token.clone());
    let claim_next = !shared.stopping.load(Ordering::Acquire);
    let (inflight, lease_ms) = (Arc::clone(&shared.inflight), shared.lease_ms);
    let registered = Registered::default();
    let noted = registered.clone();
    let committed = shared.store.write(move |conn| {
        let applied = sql::finish(conn, &task_id, &token, finish, now_ms())?;
        let next = if claim_next {
            claim_registered(conn, 1, lease_ms, &inflight, &noted)?.pop()
        } else {
            None
        };
        Ok((applied, next))
    });
    shared.inflight.remove(&claim.task_id, &claim.token);
    match committed {
        Ok((applied, next)) => {
            if !applied {
                log::warn!("an attempt finished after losing its lease; its outcome was discarded");
            }
            next
        }
        Err(error) => {
            registered.forget(&shared.inflight);
            log::error!("committing an attempt's outcome: {error}");
            None
        }
    }
}

fn failed(error: RpcError) -> Finish {
    Finish::Failed {
        error: error.to_json().to_string(),
    }
}

fn execute(shared: &Shared, claim: &Claim, control: &Arc<AttemptControl>) -> Finish {
    let Ok(origin) = serde_json::from_slice::<Origin>(&claim.origin) else {
        log::error!("a task's stored origin is unreadable");
        return failed(RpcError::internal());
    };
    let Some(tool) = shared.tools.get(&claim.tool) else {
        log::error!("task for tool {} which is no longer served", claim.tool);
        return failed(RpcError::new(
            crate::protocol::code::INTERNAL_ERROR,
            format!("The tool \"{}\" is no longer served", claim.tool),
        ));
    };
    let responses: Map<String, Value> =
        serde_json::from_str(&claim.input_responses).unwrap_or_default();
    let state: Option<Value> = claim
        .tool_state
        .as_deref()
        .and_then(|text| serde_json::from_str(text).ok());
    let capabilities = ClientCapabilities(origin.capabilities.clone());
    let mut host = TaskHost {
        store: &shared.store,
        task_id: &claim.task_id,
        attempt: claim.attempt,
        token: &claim.token,
        control,
        last_status: None,
    };
    let mut invocation = Invocation {
        arguments: &origin.arguments,
        input_responses: &responses,
        state: state.as_ref(),
        capabilities: &capabilities,
        host: &mut host,
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| tool.tool.run(&mut invocation)));
    match outcome {
        Err(_) => {
            log::error!("tool {} panicked in a task attempt", claim.tool);
            Finish::Retry {
                reason: "the tool panicked".into(),
            }
        }
        Ok(Outcome::Complete(result)) => match tool.check_result(result) {
            Ok(mut result) => {
                result["resultType"] = json!("complete");
                Finish::Completed {
                    result: result.to_string(),
                }
            }
            Err(error) => failed(error),
        },
        Ok(Outcome::InputRequired { requests, state }) => {
            if requests.is_empty()
                || !requests
                    .values()
                    .all(|request| InputKind::of(request).is_some())
            {
                log::error!(
                    "tool {} asked for input without valid input requests",
                    claim.tool
                );
                return failed(RpcError::internal());
            }
            Finish::InputRequired {
                requests,
                state: state.map(|state| state.to_string()),
            }
        }
        Ok(Outcome::Error(error)) => failed(error),
        Ok(Outcome::Retry(reason)) => {
            log::warn!(
                "tool {} failed attempt {}: {reason}",
                claim.tool,
                claim.attempt
            );
            Finish::Retry { reason }
        }
        Ok(Outcome::Cancelled) => match control.reason() {
            Stop::Shutdown => Finish::Release,
            Stop::Deadline => Finish::Retry {
                reason: format!(
                    "the attempt exceeded its deadline (timeout {} ms)",
                    tool.spec.execution.timeout.as_millis()
                ),
            },
            Stop::LeaseLost | Stop::Expired => Finish::Retry {
                reason: "the attempt lost its lease".into(),
            },
            Stop::Cancelled | Stop::Running => Finish::Cancelled,
        },
    }
}

/// The host of a task attempt: progress becomes the task's status message.
struct TaskHost<'a> {
    store: &'a Arc<Store>,
    task_id: &'a str,
    attempt: i64,
    token: &'a str,
    control: &'a Arc<AttemptControl>,
    last_status: Option<Instant>,
}

/// Least time between two status-message writes of one attempt.
const STATUS_INTERVAL: Duration = Duration::from_millis(200);

impl InvocationHost for TaskHost<'_> {
    fn progress(&mut self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let finished = total.is_some_and(|total| progress >= total);
        if !finished
            && self
                .last_status
                .is_some_and(|at| at.elapsed() < STATUS_INTERVAL)
        {
            return;
        }
        self.last_status = Some(Instant::now());
        let text = match (message, total) {
            (Some(message), _) => message.to_owned(),
            (None, Some(total)) => format!("{progress}/{total}"),
            (None, None) => format!("{progress}"),
        };
        let (id, token) = (self.task_id.to_owned(), self.token.to_owned());
        let written = self
            .store
            .write(move |conn| sql::set_status_message(conn, &id, &token, &text, now_ms()));
        if let Ok(false) = written {
            self.control.stop(Stop::LeaseLost);
        }
    }

    fn log(&mut self, _level: LogLevel, _data: Value) {
        // Tasks carry no log stream (SEP-2663); tool output belongs in the result.
    }

    fn cancelled(&self) -> bool {
        if now_ms() >= self.control.deadline {
            self.control.stop(Stop::Deadline);
        }
        self.control.reason() != Stop::Running
    }

    fn sleep(&mut self, duration: Duration) -> bool {
        let until_deadline = (self.control.deadline - now_ms()).max(0) as u64;
        let wait = duration.min(Duration::from_millis(until_deadline));
        if self.control.wake.1.recv_timeout(wait).is_ok() {
            // Keep the wake-up visible to later sleeps.
            let _ = self.control.wake.0.try_send(());
            return false;
        }
        if wait < duration {
            self.control.stop(Stop::Deadline);
            return false;
        }
        !self.cancelled()
    }

    fn task_attempt(&self) -> Option<(&str, i64)> {
        Some((self.task_id, self.attempt))
    }
}
