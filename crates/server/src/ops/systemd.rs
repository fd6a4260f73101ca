//! The systemd side of `Type=notify`: `READY=1` once serving, a `STATUS=` line kept
//! current, `WATCHDOG=1` only while the loops in [`LIVENESS`] make progress, and
//! `STOPPING=1` when the drain starts. Outside systemd (no `NOTIFY_SOCKET`) it does
//! nothing and starts no thread.
//!
//! The status line carries counts and the listen address only, never task contents.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use sd_notify::NotifyState;

use taskd_base::liveness::{Stall, LIVENESS};
use taskd_engine::workers::Inflight;
use taskd_engine::TaskStore;

/// How often the status line is refreshed when the watchdog asks for nothing faster.
const STATUS_EVERY: Duration = Duration::from_secs(10);

/// What the status line reports.
pub struct Serving {
    pub address: SocketAddr,
    pub store: Arc<dyn TaskStore>,
    pub inflight: Arc<Inflight>,
}

/// The notification thread, while systemd listens.
pub struct Notifier {
    running: Option<(Sender<()>, JoinHandle<()>, Arc<Inflight>)>,
}

impl Notifier {
    /// Tells systemd the server is ready, then keeps the status (and the watchdog, when
    /// the unit sets `WatchdogSec=`) fed from a thread of its own.
    pub fn ready(serving: Serving) -> Notifier {
        if std::env::var_os("NOTIFY_SOCKET").is_none() {
            return Notifier { running: None };
        }
        let watchdog = sd_notify::watchdog_enabled();
        notify(&[NotifyState::Ready, NotifyState::Status(&summary(&serving))]);
        let inflight = Arc::clone(&serving.inflight);
        let (stop, stopped) = crossbeam_channel::bounded(1);
        let thread = std::thread::Builder::new()
            .name("systemd-notify".into())
            .spawn(move || keep_notifying(&serving, watchdog, &stopped));
        match thread {
            Ok(thread) => Notifier {
                running: Some((stop, thread, inflight)),
            },
            Err(error) => {
                // Without the thread systemd's watchdog (if set) restarts the service:
                // say why first.
                log::error!("cannot start the systemd notification thread: {error}");
                Notifier { running: None }
            }
        }
    }

    /// Tells systemd the drain has started; the watchdog stops being fed (systemd stops
    /// watching a unit that is stopping, and `TimeoutStopSec=` bounds the drain).
    pub fn stopping(self) {
        let Some((stop, thread, inflight)) = self.running else {
            return;
        };
        let _ = stop.send(());
        let _ = thread.join();
        let status = format!(
            "draining: {} running attempt(s) get their grace period",
            inflight.len()
        );
        notify(&[NotifyState::Stopping, NotifyState::Status(&status)]);
    }
}

fn notify(states: &[NotifyState]) {
    if let Err(error) = sd_notify::notify(states) {
        log::warn!("cannot notify systemd: {error}");
    }
}

/// One line for `systemctl status`.
fn summary(serving: &Serving) -> String {
    let queued = serving
        .store
        .queued_jobs()
        .map_or_else(|_| "unknown".to_owned(), |count| count.to_string());
    format!(
        "serving on {}; {} running attempt(s), {queued} queued",
        serving.address,
        serving.inflight.len()
    )
}

/// Refreshes the status, and pings the watchdog while no loop is stalled: a loop stuck
/// for half the watchdog period stops the pings, and systemd restarts the service a
/// full period after the last one.
fn keep_notifying(serving: &Serving, watchdog: Option<Duration>, stopped: &Receiver<()>) {
    let tick = watchdog.map_or(STATUS_EVERY, |period| (period / 4).min(STATUS_EVERY));
    let stall_limit = watchdog.map(|period| period / 2);
    let mut was_stalled = false;
    loop {
        let stalled = stall_limit.map_or_else(Vec::new, |limit| LIVENESS.stalled(limit));
        if stalled.is_empty() {
            if was_stalled {
                log::info!("watchdog: every loop makes progress again");
            }
            let status = summary(serving);
            let mut states = vec![NotifyState::Status(&status)];
            if watchdog.is_some() {
                states.push(NotifyState::Watchdog);
            }
            notify(&states);
        } else {
            let why = describe(&stalled);
            if !was_stalled {
                log::error!("watchdog: {why}; no longer telling systemd the server is alive");
            }
            notify(&[NotifyState::Status(&format!("stalled: {why}"))]);
        }
        was_stalled = !stalled.is_empty();
        // A stop, or a notifier dropped without one: either way the server is done.
        if !matches!(stopped.recv_timeout(tick), Err(RecvTimeoutError::Timeout)) {
            return;
        }
    }
}

fn describe(stalled: &[(&'static str, Stall)]) -> String {
    stalled
        .iter()
        .map(|(component, stall)| match stall {
            Stall::Stuck(busy) => format!("{component} busy for {}s", busy.as_secs()),
            Stall::Gone => format!("{component} stopped"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Tells systemd a reload has started: `RELOADING=1` with the `MONOTONIC_USEC=` that
/// systemd 253's `Type=notify-reload` requires (older ones ignore it). Nothing outside
/// systemd.
pub fn reloading() {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    let mut states = vec![NotifyState::Reloading];
    match NotifyState::monotonic_usec_now() {
        Ok(now) => states.push(now),
        Err(error) => log::warn!("cannot read the monotonic clock for systemd: {error}"),
    }
    notify(&states);
}

/// Tells systemd the reload is over (whatever its outcome: the server serves either
/// way), with a status line saying how it went.
pub fn reloaded(status: &str) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    notify(&[NotifyState::Ready, NotifyState::Status(status)]);
}
