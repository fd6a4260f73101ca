//! Portable: the server tells the guard which process groups to kill.
//!
//! Without `/proc` the guard cannot find the server's runs by their marker, so the
//! server keeps its own record of its running programs ([`cover`] when one has
//! started, [`release`] before it is reaped) and writes each change down the guard's
//! pipe as a line, `+PID` or `-PID` (a program's pid is its process group's id). The
//! guard keeps the same set; at EOF it sends SIGKILL to each group, again until the
//! group is gone (a member that was forking may have missed the first), for at most
//! `KILL_LIMIT`. A guard started later (after one died) is first handed the whole
//! record.
//!
//! The pipe is non-blocking on the server's side, so a spawn never waits for the
//! guard: a guard that stops reading (its pipe full) is killed, and the one started
//! after it hears the whole record; one that died is restarted the same way.
//!
//! Limits, beyond the Linux guard's (this one cannot find a descendant that left its
//! program's process group, whatever its environment):
//! - a program whose start returned in the server just before the server died, and
//!   that the server had not yet written down (a few µs), is not killed;
//! - a program that had exited, unreaped, when the server died is re-parented and
//!   reaped by init; its group's id could then be reused by an unrelated new group
//!   before the guard kills it (the guard acts within milliseconds of the death, and
//!   a pid comes back only after the system went through all the others).

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::KILL_LIMIT;

/// Pause between two rounds of SIGKILL to the groups still there.
const SETTLE: Duration = Duration::from_millis(20);

/// The programs running (their process groups), and the pipe to the guard.
struct Record {
    groups: BTreeSet<libc::pid_t>,
    /// The server's end of the current guard's pipe, and the guard's pid.
    guard: Option<(File, libc::pid_t)>,
}

static RECORD: Mutex<Record> = Mutex::new(Record {
    groups: BTreeSet::new(),
    guard: None,
});

fn record() -> MutexGuard<'static, Record> {
    // Plain sets and a file: a panic elsewhere cannot leave them inconsistent.
    RECORD
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Record {
    /// Writes one change to the guard. A guard that is gone (EPIPE) or no longer
    /// reading (its pipe full) no longer counts; a stuck one is killed, so that the
    /// guard's keeper starts another, which is handed the whole record.
    fn tell(&mut self, sign: char, group: libc::pid_t) {
        let Some((pipe, guard)) = &mut self.guard else {
            return;
        };
        let line = format!("{sign}{group}\n");
        // Shorter than PIPE_BUF: written whole or not at all.
        match pipe.write(line.as_bytes()) {
            Ok(written) if written == line.len() => {}
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                log::error!("the run guard stopped reading; killing it to start another");
                // SAFETY: plain system call; the guard is our child, not yet reaped
                // (its keeper waits for it), so the pid is still its.
                unsafe {
                    libc::kill(*guard, libc::SIGKILL);
                }
                self.guard = None;
            }
            _ => self.guard = None,
        }
    }
}

/// A program started: the guard kills its group if the server dies.
pub fn cover(program: libc::pid_t) {
    let mut record = record();
    record.groups.insert(program);
    record.tell('+', program);
}

/// A program is about to be reaped (after which its pid may name another process).
pub fn release(program: libc::pid_t) {
    let mut record = record();
    record.groups.remove(&program);
    record.tell('-', program);
}

/// The binary the guard runs: this one, by the path it was started from.
pub fn own_binary() -> std::io::Result<PathBuf> {
    std::env::current_exe()
}

/// Nothing to hold: the record holds the server's end of the pipe.
pub struct Lifeline;

impl Lifeline {
    /// Hands a guard just started the whole record, then makes it the guard every
    /// change goes to.
    pub fn hand_over(write: OwnedFd, guard: libc::pid_t) -> std::io::Result<Lifeline> {
        let mut record = record();
        let mut pipe = File::from(write);
        // Blocking while the record goes over (the new guard reads it at once), then
        // never again.
        let lines: String = record
            .groups
            .iter()
            .map(|group| format!("+{group}\n"))
            .collect();
        pipe.write_all(lines.as_bytes())?;
        // SAFETY: plain system call on a descriptor we own; a pipe has no other status
        // flag worth keeping.
        if unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        record.guard = Some((pipe, guard));
        Ok(Lifeline)
    }
}

/// What the guard heard: the groups of the programs running.
#[derive(Default)]
pub struct Heard {
    groups: BTreeSet<libc::pid_t>,
    /// The start of a line whose end has not arrived yet.
    partial: Vec<u8>,
}

impl Heard {
    pub fn new() -> Heard {
        Heard::default()
    }

    pub fn take(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        while let Some(end) = self.partial.iter().position(|&byte| byte == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let parsed = std::str::from_utf8(&line[..end])
                .ok()
                .and_then(|line| Some((line.chars().next()?, line.get(1..)?.parse().ok()?)));
            match parsed {
                Some(('+', group)) if group > 1 => {
                    self.groups.insert(group);
                }
                Some(('-', group)) => {
                    self.groups.remove(&group);
                }
                _ => {}
            }
        }
    }
}

/// Kills every group the server had running (but those spared), until they are gone
/// or [`KILL_LIMIT`] has passed.
pub fn kill_what_is_left(heard: Heard, _server: libc::pid_t, spared: &[libc::pid_t]) {
    let deadline = Instant::now() + KILL_LIMIT;
    let mut left: Vec<libc::pid_t> = heard
        .groups
        .into_iter()
        .filter(|group| !spared.contains(group))
        .collect();
    loop {
        // SAFETY: plain system call. ESRCH: the group is gone.
        left.retain(|&group| unsafe { libc::killpg(group, libc::SIGKILL) } == 0);
        if left.is_empty() || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(SETTLE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_keeps_the_groups_it_hears_of_whatever_the_reads_split() {
        let mut heard = Heard::new();
        for chunk in ["+12", "3\n+45", "6\n-123\n", "+7\nbad\n+1\n-", "8\n+", "99"] {
            heard.take(chunk.as_bytes());
        }
        assert_eq!(heard.groups.into_iter().collect::<Vec<_>>(), vec![7, 456]);
    }
}
