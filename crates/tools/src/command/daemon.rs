//! Long-lived programs: the stdio MCP servers of `[[upstreams]]` (`taskd-upstreams`).
//!
//! A daemon is started exactly as a command tool's program is (`spawn`: no shell, its
//! own process group, exactly its declared environment plus a run marker, covered by
//! the run guard, so it dies with the server however the server dies) but it is not
//! supervised by a run's poll loop: its owner reads and writes its pipes on threads of
//! its own and stops it with [`Daemon::stop`], which takes its whole process group and
//! whatever the system lets the server find of its descendants.

use std::fs::File;
use std::io;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use super::reaper::{self, Run, MARKER};
use super::spawn::{self, Launch, Program, RunEnv};
use super::{exit, guard};

/// Pause between two looks at a daemon being stopped.
const STOP_POLL: Duration = Duration::from_millis(10);

/// A started long-lived program, until [`Daemon::stop`] reaps it.
pub struct Daemon {
    program: Program,
    run: Option<Run>,
}

/// The server's ends of a daemon's stdin, stdout and stderr.
pub struct Pipes {
    pub stdin: File,
    pub stdout: File,
    pub stderr: File,
}

impl Daemon {
    /// Starts the program of `launch` with a fresh run marker.
    pub fn start(launch: &Launch) -> io::Result<(Daemon, Pipes)> {
        let run = Run::start();
        let run_env = RunEnv::new((MARKER, run.marker()), None, None)?;
        let mut program = reaper::spawn(|| {
            let program = spawn::start(launch, &run_env)?;
            let pid = program.pid;
            Ok((program, pid))
        })?;
        guard::cover(program.pid);
        let pipe = |fd: Option<std::os::fd::OwnedFd>| {
            fd.map(File::from)
                .ok_or_else(|| io::Error::other("a pipe of the program is missing"))
        };
        let pipes = Pipes {
            stdin: pipe(program.stdin.take())?,
            stdout: pipe(program.stdout.take())?,
            stderr: pipe(program.stderr.take())?,
        };
        Ok((
            Daemon {
                program,
                run: Some(run),
            },
            pipes,
        ))
    }

    pub fn pid(&self) -> libc::pid_t {
        self.program.pid
    }

    /// Whether the program has exited (it stays unreaped until [`Daemon::stop`]).
    pub fn has_exited(&self) -> bool {
        exit::has_exited(self.program.pid)
    }

    /// SIGTERM to the program's group, SIGKILL after `grace` (at once if `grace` is
    /// zero), then sweeps what the run left outside its group and reaps the program.
    pub fn stop(mut self, grace: Duration) -> io::Result<ExitStatus> {
        let pid = self.program.pid;
        if !self.has_exited() {
            signal_group(pid, libc::SIGTERM);
            let deadline = Instant::now() + grace;
            while !self.has_exited() && Instant::now() < deadline {
                std::thread::sleep(STOP_POLL);
            }
        }
        // Whatever the program left in its group goes too, exited or not.
        signal_group(pid, libc::SIGKILL);
        if let Some(run) = self.run.take() {
            reaper::sweep(run, pid, || exit::has_exited(pid));
        }
        guard::release(pid);
        let status = self.program.wait();
        reaper::forget(pid);
        status
    }
}

fn signal_group(pgid: libc::pid_t, signal: libc::c_int) {
    // SAFETY: plain system call; the group is our unreaped child's, so it is ours.
    unsafe {
        libc::killpg(pgid, signal);
    }
}
