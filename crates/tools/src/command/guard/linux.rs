//! Linux: the guard finds the server's runs by their marker, in `/proc`.
//!
//! It kills every process whose environment carries this server's run marker
//! (`reaper::MARKER`) together with its process group, and repeats until a pass finds
//! none left. No per-run message is needed, so there is no race between a spawn and
//! its registration: a program carries the marker from its `exec`. A program whose
//! start was between `clone` and `exec` when the server died shows the server's
//! environment for a moment: the guard looks again twice after [`SETTLE`] before it
//! exits.
//!
//! Limits, as for the reaper: a descendant that replaced its environment and left the
//! program's process group is not found; a descendant that joined the server's (or
//! the session leader's) process group is killed but that group is not.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::KILL_LIMIT;
use crate::command::reaper;

/// Pause between two passes once one found nothing new: time for a program caught
/// between `clone` and `exec` to show its environment.
const SETTLE: Duration = Duration::from_millis(20);
/// How many quiet passes end the guard's work.
const QUIET_PASSES: u32 = 3;

/// Programs are found by their marker: nothing to tell the guard.
pub fn cover(_program: libc::pid_t) {}

pub fn release(_program: libc::pid_t) {}

/// The binary the guard runs: `/proc/self/exe` names the running image, even if an
/// upgrade replaced the file.
pub fn own_binary() -> std::io::Result<PathBuf> {
    Ok(PathBuf::from("/proc/self/exe"))
}

/// The write end of the guard's pipe, held by the server.
pub struct Lifeline {
    _write: OwnedFd,
}

impl Lifeline {
    pub fn hand_over(write: OwnedFd, _guard: libc::pid_t) -> std::io::Result<Lifeline> {
        Ok(Lifeline { _write: write })
    }
}

/// What the guard heard from the server: nothing (it writes nothing).
pub struct Heard;

impl Heard {
    pub fn new() -> Heard {
        Heard
    }

    pub fn take(&mut self, _bytes: &[u8]) {}
}

/// Kills what carries the server's markers.
pub fn kill_what_is_left(_heard: Heard, server: libc::pid_t, spared: &[libc::pid_t]) {
    kill_marked(&reaper::marker_prefix(server), spared);
}

/// Kills every process whose marker starts with `prefix`, and its process group (unless
/// spared), until [`QUIET_PASSES`] passes in a row find none new.
fn kill_marked(prefix: &str, spared: &[libc::pid_t]) {
    let deadline = Instant::now() + KILL_LIMIT;
    let own = std::process::id() as libc::pid_t;
    let mut killed = std::collections::HashSet::new();
    let mut quiet = 0;
    while quiet < QUIET_PASSES && Instant::now() < deadline {
        let mut fresh = 0;
        for pid in reaper::all_pids().into_iter().filter(|&pid| pid != own) {
            let Some(target) = Target::open(pid) else {
                continue;
            };
            if !reaper::carries_marker(pid, prefix) {
                continue;
            }
            let Some(group) = reaper::process_group(pid) else {
                continue;
            };
            if !spared.contains(&group) {
                // SAFETY: plain system call. The group is live: it holds `pid`, which the
                // target keeps from being reused.
                unsafe {
                    libc::killpg(group, libc::SIGKILL);
                }
            }
            target.kill();
            if killed.insert((pid, reaper::start_time(pid))) {
                fresh += 1;
            }
        }
        if fresh == 0 {
            quiet += 1;
            std::thread::sleep(SETTLE);
        } else {
            quiet = 0;
        }
    }
}

/// A process to kill, held by a pidfd where the kernel has them (5.3+): what is read
/// about it after opening is about that process, not a later one with its pid.
struct Target {
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
}

impl Target {
    fn open(pid: libc::pid_t) -> Option<Target> {
        // SAFETY: plain system call; a non-negative result is a descriptor we own.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd >= 0 {
            // SAFETY: the descriptor was just created and is owned by nothing else.
            let pidfd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
            return Some(Target {
                pid,
                pidfd: Some(pidfd),
            });
        }
        match std::io::Error::last_os_error().raw_os_error() {
            // Gone already.
            Some(libc::ESRCH) => None,
            // No pidfds: kill by pid (a reuse of the pid in between is the risk).
            _ => Some(Target { pid, pidfd: None }),
        }
    }

    fn kill(&self) {
        // SAFETY: plain system calls on a pidfd we own, or on a pid.
        unsafe {
            match &self.pidfd {
                Some(pidfd) => {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        pidfd.as_raw_fd(),
                        libc::SIGKILL,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    );
                }
                None => {
                    libc::kill(self.pid, libc::SIGKILL);
                }
            }
        }
    }
}
