//! The run guard (Linux): one long-lived helper process per server that kills every
//! program still running, with whatever it left behind, when the server dies, however
//! it dies (`kill -9` included).
//!
//! How: at start-up the server starts this binary in a hidden mode ([`GUARD_ARG`]) in a
//! process group of its own, with the read end of a pipe as its stdin; the server keeps
//! the write end (close-on-exec, so no program inherits it). The guard blocks reading
//! it. When the server dies the kernel closes the write end and the guard reads EOF;
//! it then kills, with SIGKILL, every process whose environment carries this server's
//! run marker ([`reaper::MARKER`], which every run's processes inherit) together with
//! its process group, and repeats until a pass finds none left, then exits.
//!
//! Why a guard instead of `PR_SET_PDEATHSIG` on each program: only the new process can
//! arm that signal, between its start and its `exec`. A `pre_exec` hook does it but
//! makes std `fork` the server (about 8 ms of server CPU a run in copy-on-write faults);
//! a launcher (this binary started with `posix_spawn`, arming the signal, then `exec`ing
//! the program) cost every run a second `exec` of this large binary, about 0.6 ms of
//! CPU (benches/README.md, "Command tools"). With the guard, nothing of ours runs in the
//! new process before its `exec` (`spawn` starts it as `posix_spawn` would), and a run
//! pays nothing for the guarantee. It also covers more: the parent-death signal reached
//! the program only, while the guard finds every descendant that kept the marker, and
//! the program's process group.
//!
//! No per-run message is needed, so there is no race between a spawn and its
//! registration: a program carries the marker from its `exec`. A program whose start
//! was between `clone` and `exec` when the server died shows the server's environment
//! for a moment: the guard looks again twice after [`SETTLE`] before it exits.
//!
//! If the guard itself dies while the server lives, the server logs an error and
//! starts a new one ([`keep`]): at once, or no sooner than [`RESTART_PAUSE`] after the
//! previous start; the new guard covers every run, earlier ones included,
//! since it finds them by their marker. Only a server killed in the moment between the
//! two guards leaves its programs running (as does one whose guard cannot be restarted,
//! which the log says every [`RESTART_PAUSE`]).
//!
//! Limits, as for the reaper: a descendant that replaced its environment and left the
//! program's process group is not found; a descendant that joined the server's (or
//! the session leader's) process group is killed but that group is not.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::reaper;

/// The first argument that puts `mcp-taskd` in guard mode (not a subcommand: it is
/// handled before the command line is parsed, and is nobody's to type).
pub const GUARD_ARG: &str = "__run-guard";

/// How long the guard keeps killing before it gives up (a process stuck in the kernel
/// can stay visible after SIGKILL).
const KILL_LIMIT: Duration = Duration::from_secs(5);
/// Pause between two passes once one found nothing new: time for a program caught
/// between `clone` and `exec` to show its environment.
const SETTLE: Duration = Duration::from_millis(20);
/// How many quiet passes end the guard's work.
const QUIET_PASSES: u32 = 3;
/// Least time between two starts of a guard, so one that cannot start does not spin.
const RESTART_PAUSE: Duration = Duration::from_secs(1);

/// Starts the guard of this server and a thread that restarts it if it dies. An error
/// means the server cannot promise that programs die with it: start-up fails.
pub fn keep() -> std::io::Result<()> {
    let first = Guard::start()?;
    std::thread::Builder::new()
        .name("run-guard".into())
        .spawn(move || {
            let mut guard = Some(first);
            let mut last_start = Instant::now();
            loop {
                if let Some(running) = guard.take() {
                    running.wait_and_report();
                }
                // At once after a guard that ran a while (programs are unguarded until
                // the next one runs); paced when guards die or fail as they start.
                std::thread::sleep(RESTART_PAUSE.saturating_sub(last_start.elapsed()));
                last_start = Instant::now();
                match Guard::start() {
                    Ok(started) => {
                        log::warn!("run guard restarted");
                        guard = Some(started);
                    }
                    Err(error) => log::error!(
                        "cannot restart the run guard ({error}): programs of command tools \
                         will not be killed if the server dies abruptly"
                    ),
                }
            }
        })?;
    Ok(())
}

/// A running guard and the write end of its pipe.
struct Guard {
    child: std::process::Child,
    /// Held open for as long as the guard should wait: its EOF is the server's death.
    _lifeline: OwnedFd,
}

impl Guard {
    fn start() -> std::io::Result<Guard> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two descriptors we own from here on.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nothing else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // `/proc/self/exe` names the running image, even if an upgrade replaced the file.
        let mut command = Command::new("/proc/self/exe");
        command
            // What `ps` shows (the kernel's own name for it is set by the guard).
            .arg0("mcp-taskd")
            .arg(GUARD_ARG)
            .arg(std::process::id().to_string())
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .env_remove(reaper::MARKER)
            // Its own group: a signal to the server's group (a terminal's ^C, a
            // supervisor stopping a job) must not take the guard with the server.
            .process_group(0);
        // Registered like a program, so that no sweep takes it for an orphan.
        let child = reaper::spawn(|| {
            let child = command.spawn()?;
            let pid = child.id() as libc::pid_t;
            Ok((child, pid))
        })?;
        Ok(Guard {
            child,
            _lifeline: write,
        })
    }

    fn wait_and_report(mut self) {
        let pid = self.child.id() as libc::pid_t;
        let status = self.child.wait();
        reaper::forget(pid);
        match status {
            Ok(status) => log::error!("the run guard exited ({status})"),
            Err(error) => log::error!("cannot wait for the run guard: {error}"),
        }
    }
}

/// If this process was started as a guard, guards (never returns); otherwise returns
/// at once.
pub fn run_if_guard() {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(GUARD_ARG.as_ref()) {
        return;
    }
    let rest: Vec<OsString> = args.collect();
    let server = match rest.as_slice() {
        [server] => server
            .to_str()
            .and_then(|pid| pid.parse::<libc::pid_t>().ok()),
        _ => None,
    };
    let Some(server) = server else {
        eprintln!("mcp-taskd {GUARD_ARG}: usage: SERVER_PID");
        std::process::exit(2);
    };
    // Started as `/proc/self/exe`, the kernel would call it `exe` (in `top`, `pkill`).
    // SAFETY: plain system call with a NUL-terminated name of at most 16 bytes.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"mcp-taskd-guard".as_ptr());
    }
    guard(server);
    std::process::exit(0);
}

/// Waits for EOF on stdin, then kills what the server's runs left.
fn guard(server: libc::pid_t) {
    // The server's own group and session are never killed as a whole, even if a
    // program's descendant joined one of them.
    // SAFETY: plain system calls.
    let spared = unsafe { [libc::getpgid(server), libc::getsid(0), libc::getpgid(0)] };
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // A signal meant for the server or its terminal must not end the guard first:
        // it ends when the server is gone.
        // SAFETY: plain system call; SIG_IGN needs no handler.
        unsafe {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    wait_for_eof();
    kill_marked(&reaper::marker_prefix(server), &spared);
}

/// Blocks until stdin reads EOF (or fails): the server closed its end by dying or
/// exiting.
fn wait_for_eof() {
    let stdin = std::io::stdin();
    let fd = stdin.as_raw_fd();
    let mut buffer = [0u8; 64];
    loop {
        // SAFETY: reads into a buffer we own, of the length given.
        let read = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) };
        if read > 0 {
            continue;
        }
        if read < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return;
    }
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
