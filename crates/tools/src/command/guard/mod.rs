//! The run guard: one long-lived helper process per server that kills every program
//! still running, with what it left behind, when the server dies, however it dies
//! (`kill -9` included).
//!
//! How: at start-up the server starts this binary in a hidden mode ([`GUARD_ARG`]) in a
//! process group of its own, with the read end of a pipe as its stdin; the server keeps
//! the write end (close-on-exec, so no program inherits it). The guard blocks reading
//! it. When the server dies the kernel closes the write end and the guard reads EOF;
//! it then kills, with SIGKILL, what the server's runs left, and exits. What it finds is
//! the system's:
//!
//! - `linux.rs`: every process whose environment carries this server's run marker
//!   (`reaper::MARKER`, which every run's processes inherit), with its process group,
//!   found in `/proc`. The server writes nothing down the pipe.
//! - `portable.rs` (macOS and every system but Linux, and Linux with `--features
//!   portable`): the process groups of the programs still running, which the server
//!   writes down the pipe as it starts and reaps them — the server's own record of its
//!   children, since nothing else lists them. Descendants that left their program's
//!   group are not found.
//!
//! Why a guard instead of `PR_SET_PDEATHSIG` on each program (Linux): only the new
//! process can arm that signal, between its start and its `exec`. A `pre_exec` hook
//! does it but makes std `fork` the server (about 8 ms of server CPU a run in
//! copy-on-write faults); a launcher (this binary started with `posix_spawn`, arming
//! the signal, then `exec`ing the program) cost every run a second `exec` of this large
//! binary, about 0.6 ms of CPU (docs/benchmarks/command-tools.md). With the guard,
//! nothing of ours runs in the new process before its `exec` (`spawn` starts it as
//! `posix_spawn` would), and a run pays nothing for the guarantee. It also covers more:
//! the parent-death signal reached the program only, while the guard finds the
//! program's process group (and on Linux every descendant that kept the marker).
//! macOS has no parent-death signal at all.
//!
//! If the guard itself dies while the server lives, the server logs an error and
//! starts a new one ([`keep`]): at once, or no sooner than [`RESTART_PAUSE`] after the
//! previous start; the new guard covers every run, earlier ones included (on Linux it
//! finds them by their marker; the portable one is handed the whole record first).
//! Only a server killed in the moment between the two guards leaves its programs
//! running (as does one whose guard cannot be restarted, which the log says every
//! [`RESTART_PAUSE`]).

#[cfg(all(target_os = "linux", not(feature = "portable")))]
mod linux;
#[cfg(all(target_os = "linux", not(feature = "portable")))]
use linux as imp;
#[cfg(any(not(target_os = "linux"), feature = "portable"))]
mod portable;
#[cfg(any(not(target_os = "linux"), feature = "portable"))]
use portable as imp;

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::reaper;

pub use imp::{cover, release};

/// The first argument that puts `mcp-taskd` in guard mode (not a subcommand: it is
/// handled before the command line is parsed, and is nobody's to type).
pub const GUARD_ARG: &str = "__run-guard";

/// How long the guard keeps killing before it gives up (a process stuck in the kernel
/// can stay visible after SIGKILL).
const KILL_LIMIT: Duration = Duration::from_secs(5);
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
    _lifeline: imp::Lifeline,
}

impl Guard {
    fn start() -> std::io::Result<Guard> {
        // Both ends close-on-exec.
        let (read, write) = std::io::pipe()?;
        let mut command = Command::new(imp::own_binary()?);
        command
            // What `ps` shows.
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
        let lifeline = imp::Lifeline::hand_over(write.into(), child.id() as libc::pid_t)?;
        Ok(Guard {
            child,
            _lifeline: lifeline,
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
    #[cfg(target_os = "linux")]
    // SAFETY: plain system call with a NUL-terminated name of at most 16 bytes.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"mcp-taskd-guard".as_ptr());
    }
    guard(server);
    std::process::exit(0);
}

/// Reads what the server writes until EOF, then kills what the server's runs left.
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
    let mut heard = imp::Heard::new();
    read_until_eof(|bytes| heard.take(bytes));
    imp::kill_what_is_left(heard, server, &spared);
}

/// Hands what stdin brings to `take` until it reads EOF (or fails): the server closed
/// its end by dying or exiting.
fn read_until_eof(mut take: impl FnMut(&[u8])) {
    let stdin = std::io::stdin();
    let fd = stdin.as_raw_fd();
    let mut buffer = [0u8; 4096];
    loop {
        // SAFETY: reads into a buffer we own, of the length given.
        let read = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) };
        if read > 0 {
            take(&buffer[..read as usize]);
            continue;
        }
        if read < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return;
    }
}
