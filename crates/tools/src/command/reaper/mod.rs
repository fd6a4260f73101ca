//! Descendants that leave the program's process group (`setsid`, `setpgid`, double
//! fork): finding them when a run ends, killing them, and reaping their zombies —
//! where the system lets the server find them.
//!
//! This file is the part every system shares: each run's marker, [`MARKER`] in its
//! environment (which its descendants inherit, and the run guard looks for), and the
//! calls the supervision makes. What a run's end can find is the system's:
//!
//! - `linux.rs`: the server is a child subreaper, so orphans come back to it, and
//!   `/proc` shows their environment, group and descriptors: a run's end kills and
//!   reaps those of the run (the details and the limits are there);
//! - `portable.rs` (macOS and every system but Linux, and Linux with `--features
//!   portable`): orphans go to init (launchd), and without `/proc` the server can
//!   neither list another process's children nor read its environment. Nothing is
//!   swept: what the program left in its process group dies with the group (see
//!   `process`), and a descendant that left the group outlives the run (see
//!   docs/macos.md, "What differs from Linux").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::spawn::Program;

#[cfg(all(target_os = "linux", not(feature = "portable")))]
mod linux;
#[cfg(all(target_os = "linux", not(feature = "portable")))]
use linux as imp;
// The run guard's scan of the server's runs (Linux only).
#[cfg(all(target_os = "linux", not(feature = "portable")))]
pub(super) use linux::{all_pids, carries_marker, process_group, start_time};
#[cfg(any(not(target_os = "linux"), feature = "portable"))]
mod portable;
#[cfg(any(not(target_os = "linux"), feature = "portable"))]
use portable as imp;

pub use imp::{become_subreaper, spawn, sweep_all};

/// The environment variable that marks a run's descendants.
pub const MARKER: &str = "MCP_TASKD_RUN";

static NEXT_RUN: AtomicU64 = AtomicU64::new(1);

/// This process's id, asked of the kernel once: every run needs it twice (its marker,
/// its sweep).
fn server_pid() -> libc::pid_t {
    static PID: OnceLock<libc::pid_t> = OnceLock::new();
    *PID.get_or_init(|| std::process::id() as libc::pid_t)
}

/// How the markers of every run of the server `server` start.
pub fn marker_prefix(server: libc::pid_t) -> String {
    format!("{server}.")
}

/// One run of a program: its marker, which counts as running until [`sweep`], and what
/// the sweep may recognise its orphans by.
pub struct Run {
    marker: String,
    traces: imp::Traces,
}

impl Run {
    pub fn start() -> Run {
        let marker = format!(
            "{}{}",
            marker_prefix(server_pid()),
            NEXT_RUN.fetch_add(1, Ordering::Relaxed)
        );
        imp::run_started(&marker);
        Run {
            marker,
            traces: imp::Traces::new(),
        }
    }

    /// Remembers the program's pipes, where a sweep can tell who holds them.
    pub fn watch_pipes(&mut self, program: &Program) {
        self.traces.watch_pipes(program);
    }

    /// Records the descendants of the live program, before it is stopped, where the
    /// system can list them.
    pub fn record_descendants(&mut self, program: libc::pid_t) {
        self.traces.record_descendants(program);
    }

    /// The value of [`MARKER`] in the program's environment.
    pub fn marker(&self) -> &str {
        &self.marker
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        imp::run_ended(&self.marker);
    }
}

/// Ends a run: call it once its program has exited (or been killed), *before* reaping
/// it, so that the program's pid, which is also its process group id, cannot be reused.
/// Kills what the system lets the server find of the run's descendants outside its
/// group (see the module doc).
pub fn sweep(mut run: Run, group: libc::pid_t, has_exited: impl Fn() -> bool) {
    let ended = run.marker.clone();
    let traces = std::mem::take(&mut run.traces);
    // From here on the run no longer counts as running.
    drop(run);
    imp::sweep(&ended, traces, group, has_exited);
}

/// Called once the program has been reaped.
pub fn forget(program: libc::pid_t) {
    imp::forget(program);
}
