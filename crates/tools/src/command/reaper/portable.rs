//! Portable: nothing to sweep. Orphans are re-parented to init (launchd on macOS), not
//! to the server, and the server cannot list another process's children or read its
//! environment without `/proc`. So a run's end finds nothing beyond the program's own
//! process group, which `process` kills; these are the calls the supervision makes,
//! doing nothing.

use crate::command::spawn::Program;

/// Nothing can make the server the reaper of its orphaned descendants here.
pub fn become_subreaper() {
    log::debug!(
        "descendants that leave a command tool's process group are not tracked on this \
         system: they may outlive their run"
    );
}

/// Nothing to recognise orphans by, since none can be found.
#[derive(Default)]
pub struct Traces;

impl Traces {
    pub fn new() -> Traces {
        Traces
    }

    pub fn watch_pipes(&mut self, _program: &Program) {}

    pub fn record_descendants(&mut self, _program: libc::pid_t) {}
}

pub fn run_started(_marker: &str) {}

pub fn run_ended(_marker: &str) {}

/// Starts a program with `start`, which returns it with its pid (no registration: no
/// sweep could take it for an orphan).
pub fn spawn<T>(start: impl FnOnce() -> std::io::Result<(T, libc::pid_t)>) -> std::io::Result<T> {
    start().map(|(program, _)| program)
}

pub fn forget(_program: libc::pid_t) {}

pub fn sweep(_ended: &str, _traces: Traces, _group: libc::pid_t, _has_exited: impl Fn() -> bool) {}

pub fn sweep_all() {}
