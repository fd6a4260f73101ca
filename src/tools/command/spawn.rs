//! Starting a program: its C strings, built once per tool ([`Launch`]), and on Linux
//! the start itself, `clone(CLONE_VM | CLONE_VFORK)` as glibc's `posix_spawn` does, on
//! a stack each thread keeps for the next run.
//!
//! Why not `std::process::Command` (which calls `posix_spawn`): per run std builds the
//! environment, the arguments and the working directory as fresh C strings and
//! `posix_spawn`'s attributes and file actions, glibc asks for the descriptor limit
//! twice per `dup2` action, and glibc maps a new stack for the child and unmaps it
//! once the child has `exec`ed — an unmap of a multi-threaded process's memory, so a
//! TLB shoot-down on the other core, every run. Measured side by side with
//! `noop_raw` runs as in `benches/spawn.sh` (benches/README.md, "Command tools"): the
//! worker threads' CPU per no-op run fell from 161–183 µs to 113–133 µs.
//!
//! What the child does is what `posix_spawn` does for std: between `clone` and
//! `execve` it runs on its own stack in the server's memory while the spawning thread
//! is suspended, making system calls only (no allocation, no locks). Every signal is
//! blocked around the `clone`, so no server signal handler can run in the child; the
//! child resets handled signals and SIGPIPE (which std ignores) to their default,
//! moves into its own process group, puts the pipes on 0, 1 and 2, changes directory,
//! unblocks every signal and `exec`s.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use crate::protocol::TraceContext;

/// The environment variables a task attempt gets from the server, which replace
/// values of the same name in the tool's `env`.
const TASK_KEYS: [&str; 2] = ["MCP_TASK_ID", "MCP_TASK_ATTEMPT"];

/// The W3C trace context a traced run gets (`TRACEPARENT`, and `TRACESTATE` when there
/// is one), the names OpenTelemetry's environment carrier uses. They replace both
/// values of the tool's `env`: a `TRACESTATE` of another trace would be wrong.
const TRACE_KEYS: [&str; 2] = ["TRACEPARENT", "TRACESTATE"];

/// Which of the run's own variables replace a variable of the tool's `env`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplacedBy {
    /// None: the tool's value stays.
    Nothing,
    /// The task attempt's [`TASK_KEYS`].
    Task,
    /// A traced run's [`TRACE_KEYS`].
    Trace,
}

/// A tool's program, arguments, working directory and environment, as the C strings
/// `execve` takes.
#[derive(Debug)]
pub struct Launch {
    program: CString,
    /// `argv`, the program's path first.
    argv: Vec<CString>,
    dir: CString,
    /// `KEY=value` for each variable of the tool's `env` but the run marker (which each
    /// run sets), and what of the run's own replaces it.
    env: Vec<(CString, ReplacedBy)>,
}

impl Launch {
    /// Fails on a NUL byte in the program's path, an argument or the directory (`env`
    /// is checked when the tool is declared).
    pub fn new(
        program: &Path,
        args: &[String],
        dir: &Path,
        env: &BTreeMap<String, String>,
        marker: &str,
    ) -> Result<Launch, String> {
        let c = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| "the command holds a NUL byte".to_owned())
        };
        let program = c(program.as_os_str().as_bytes())?;
        let mut argv = vec![program.clone()];
        for arg in args {
            argv.push(c(arg.as_bytes())?);
        }
        let env = env
            .iter()
            .filter(|(key, _)| key.as_str() != marker)
            .map(|(key, value)| {
                let entry = c(format!("{key}={value}").as_bytes())?;
                let replaced = if TASK_KEYS.contains(&key.as_str()) {
                    ReplacedBy::Task
                } else if TRACE_KEYS.contains(&key.as_str()) {
                    ReplacedBy::Trace
                } else {
                    ReplacedBy::Nothing
                };
                Ok((entry, replaced))
            })
            .collect::<Result<_, String>>()?;
        Ok(Launch {
            program,
            argv,
            dir: c(dir.as_os_str().as_bytes())?,
            env,
        })
    }
}

/// A started program: its pid (also its process group) and the server's ends of its
/// pipes, close-on-exec. Whoever holds it reaps it with [`Program::wait`].
pub struct Program {
    pub pid: libc::pid_t,
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

impl Program {
    /// Waits for the program to exit and reaps it.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        let mut status = 0;
        loop {
            // SAFETY: plain system call on our own child.
            if unsafe { libc::waitpid(self.pid, &mut status, 0) } == self.pid {
                return Ok(ExitStatus::from_raw(status));
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

/// The variables a run adds to its tool's environment: its marker, for a task attempt
/// the task's id and the attempt's number, and for a traced run its trace context.
pub struct RunEnv {
    entries: Vec<CString>,
    task: bool,
    trace: bool,
}

impl RunEnv {
    pub fn new(
        marker: (&str, &str),
        task: Option<(&str, i64)>,
        trace: Option<&TraceContext>,
    ) -> io::Result<RunEnv> {
        let c = |key: &str, value: &str| {
            CString::new(format!("{key}={value}"))
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte"))
        };
        let mut entries = vec![c(marker.0, marker.1)?];
        if let Some((id, attempt)) = task {
            entries.push(c(TASK_KEYS[0], id)?);
            entries.push(c(TASK_KEYS[1], &attempt.to_string())?);
        }
        if let Some(trace) = trace {
            entries.push(c(TRACE_KEYS[0], trace.traceparent())?);
            if let Some(state) = trace.tracestate() {
                entries.push(c(TRACE_KEYS[1], state)?);
            }
        }
        Ok(RunEnv {
            entries,
            task: task.is_some(),
            trace: trace.is_some(),
        })
    }

    /// Whether a variable of the tool's `env` stays in this run's environment.
    fn keeps(&self, replaced: ReplacedBy) -> bool {
        match replaced {
            ReplacedBy::Nothing => true,
            ReplacedBy::Task => !self.task,
            ReplacedBy::Trace => !self.trace,
        }
    }
}

/// Starts the program in its own process group, its stdin, stdout and stderr on new
/// pipes, its environment exactly the tool's plus the run's.
#[cfg(target_os = "linux")]
pub fn start(launch: &Launch, run_env: &RunEnv) -> io::Result<Program> {
    linux::start(launch, run_env)
}

#[cfg(target_os = "linux")]
mod linux {
    use std::cell::RefCell;
    use std::ffi::{c_int, c_void};
    use std::mem::MaybeUninit;
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::sync::atomic::{AtomicI32, Ordering};

    use super::*;

    /// Stack of the child between `clone` and `execve`: a handful of system calls deep.
    const CHILD_STACK: usize = 64 * 1024;

    thread_local! {
        /// This thread's stack for its children, free again once `clone` returns
        /// (CLONE_VFORK: the child has `exec`ed or exited by then).
        static STACK: RefCell<Vec<MaybeUninit<u8>>> = const { RefCell::new(Vec::new()) };
    }

    /// What the child reads, and where it leaves the `errno` of a failed step.
    struct ChildArgs {
        program: *const libc::c_char,
        argv: *const *const libc::c_char,
        envp: *const *const libc::c_char,
        dir: *const libc::c_char,
        /// Descriptors (all ≥ 3) that become its stdin, stdout and stderr.
        stdio: [c_int; 3],
        error: AtomicI32,
    }

    pub fn start(launch: &Launch, run_env: &RunEnv) -> io::Result<Program> {
        let (stdin_child, stdin) = pipe()?;
        let (stdout, stdout_child) = pipe()?;
        let (stderr, stderr_child) = pipe()?;
        let argv = null_terminated(launch.argv.iter());
        let envp = null_terminated(
            launch
                .env
                .iter()
                .filter(|(_, replaced)| run_env.keeps(*replaced))
                .map(|(entry, _)| entry)
                .chain(&run_env.entries),
        );
        let args = ChildArgs {
            program: launch.program.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            dir: launch.dir.as_ptr(),
            stdio: [
                stdin_child.as_raw_fd(),
                stdout_child.as_raw_fd(),
                stderr_child.as_raw_fd(),
            ],
            error: AtomicI32::new(0),
        };
        let pid = STACK.with(|stack| {
            let mut stack = stack.borrow_mut();
            if stack.capacity() < CHILD_STACK {
                *stack = Vec::with_capacity(CHILD_STACK);
            }
            // SAFETY: the end of the buffer we own, aligned down to 16 bytes as the ABI
            // wants; the stack grows down from there.
            let top = unsafe {
                let end = stack.as_mut_ptr().add(CHILD_STACK) as usize;
                (end & !15) as *mut c_void
            };
            let _blocked = BlockedSignals::new()?;
            // SAFETY: `child_main` makes only system calls, on the stack given; the stack,
            // `args`, `argv` and `envp` stay alive until `clone` returns, which
            // CLONE_VFORK delays until the child has exec'd or exited.
            let pid = unsafe {
                libc::clone(
                    child_main,
                    top,
                    libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                    &args as *const ChildArgs as *mut c_void,
                )
            };
            if pid < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(pid)
        })?;
        // The child has exec'd or exited: its ends of the pipes are its own now.
        drop((stdin_child, stdout_child, stderr_child));
        let mut program = Program {
            pid,
            stdin: Some(stdin),
            stdout: Some(stdout),
            stderr: Some(stderr),
        };
        let error = args.error.load(Ordering::Acquire);
        if error != 0 {
            // It exited without exec'ing.
            let _ = program.wait();
            return Err(io::Error::from_raw_os_error(error));
        }
        Ok(program)
    }

    extern "C" fn child_main(raw: *mut c_void) -> c_int {
        // SAFETY: `raw` is the `ChildArgs` the suspended parent keeps alive; every call
        // below is a system call wrapper, on the child's own stack.
        unsafe {
            let args = &*(raw as *const ChildArgs);
            let fail = |args: &ChildArgs| -> ! {
                let errno = *libc::__errno_location();
                args.error.store(errno.max(1), Ordering::Release);
                libc::_exit(127)
            };
            // Default dispositions for every handled signal: `exec` would reset them, but
            // a signal delivered before it would run a server handler here. SIGPIPE too,
            // which std ignores in the server; other ignored signals stay ignored, as
            // with `posix_spawn`.
            for signal in 1..=libc::SIGRTMAX() {
                let mut action: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(signal, std::ptr::null(), &mut action) != 0 {
                    continue;
                }
                let handled =
                    action.sa_sigaction != libc::SIG_DFL && action.sa_sigaction != libc::SIG_IGN;
                if handled || (signal == libc::SIGPIPE && action.sa_sigaction != libc::SIG_DFL) {
                    action.sa_sigaction = libc::SIG_DFL;
                    action.sa_flags = 0;
                    libc::sigaction(signal, &action, std::ptr::null_mut());
                }
            }
            if libc::setpgid(0, 0) != 0 {
                fail(args);
            }
            // The pipes' ends are all ≥ 3 (see `pipe`), so no dup2 overwrites another.
            for (target, &fd) in args.stdio.iter().enumerate() {
                if libc::dup2(fd, target as c_int) < 0 {
                    fail(args);
                }
            }
            if libc::chdir(args.dir) != 0 {
                fail(args);
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            libc::execve(args.program, args.argv, args.envp);
            fail(args)
        }
    }

    /// Every signal blocked on this thread, until dropped.
    struct BlockedSignals(libc::sigset_t);

    impl BlockedSignals {
        fn new() -> io::Result<BlockedSignals> {
            // SAFETY: sigset_t is plain data; the calls fill and apply it on this thread.
            unsafe {
                let mut all: libc::sigset_t = std::mem::zeroed();
                let mut previous: libc::sigset_t = std::mem::zeroed();
                libc::sigfillset(&mut all);
                let failed = libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
                if failed != 0 {
                    return Err(io::Error::from_raw_os_error(failed));
                }
                Ok(BlockedSignals(previous))
            }
        }
    }

    impl Drop for BlockedSignals {
        fn drop(&mut self) {
            // SAFETY: restores the mask saved by `new`, on the same thread.
            unsafe {
                libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut());
            }
        }
    }

    /// A pipe as (read end, write end), both close-on-exec and both ≥ 3, so that the
    /// child's `dup2` onto 0, 1 and 2 never overwrites one it still needs (a server
    /// started with a closed stdin would otherwise get fd 0 for a pipe).
    fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0 as c_int; 2];
        // SAFETY: pipe2 fills the two descriptors, which we then own.
        let (read, write) = unsafe {
            if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return Err(io::Error::last_os_error());
            }
            (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
        };
        Ok((above_stdio(read)?, above_stdio(write)?))
    }

    fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
        if fd.as_raw_fd() > 2 {
            return Ok(fd);
        }
        // SAFETY: duplicates a descriptor we own; the new one is ours too.
        unsafe {
            let moved = libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3);
            if moved < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(OwnedFd::from_raw_fd(moved))
        }
    }

    fn null_terminated<'a>(strings: impl Iterator<Item = &'a CString>) -> Vec<*const libc::c_char> {
        strings
            .map(|string| string.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    }
}

/// Elsewhere: std's `Command` (which uses `posix_spawn` where it can), with the same
/// program, arguments, directory and environment.
#[cfg(not(target_os = "linux"))]
pub fn start(launch: &Launch, run_env: &RunEnv) -> io::Result<Program> {
    use std::ffi::OsStr;
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;

    let os = |string: &CString| OsStr::from_bytes(string.as_bytes()).to_owned();
    let mut command = std::process::Command::new(os(&launch.program));
    command
        .args(launch.argv.iter().skip(1).map(os))
        .current_dir(os(&launch.dir))
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let entries = launch
        .env
        .iter()
        .filter(|(_, replaced)| run_env.keeps(*replaced))
        .map(|(entry, _)| entry)
        .chain(&run_env.entries);
    for entry in entries {
        let bytes = entry.as_bytes();
        if let Some(split) = bytes.iter().position(|&byte| byte == b'=') {
            command.env(
                OsStr::from_bytes(&bytes[..split]),
                OsStr::from_bytes(&bytes[split + 1..]),
            );
        }
    }
    let mut child = command.spawn()?;
    Ok(Program {
        pid: child.id() as libc::pid_t,
        stdin: child.stdin.take().map(OwnedFd::from),
        stdout: child.stdout.take().map(OwnedFd::from),
        stderr: child.stderr.take().map(OwnedFd::from),
    })
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::io::Read;

    use super::*;

    fn output(program: &mut Program) -> String {
        drop(program.stdin.take());
        let mut text = String::new();
        if let Some(stdout) = program.stdout.take() {
            File::from(stdout)
                .read_to_string(&mut text)
                .expect("stdout read");
        }
        text
    }

    #[test]
    fn the_program_gets_its_arguments_directory_and_exactly_its_environment() {
        let env = BTreeMap::from([
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
            ("MCP_TASK_ID".to_owned(), "from the tool".to_owned()),
            ("MCP_TASKD_RUN".to_owned(), "from the tool".to_owned()),
            ("TRACEPARENT".to_owned(), "from the tool".to_owned()),
            ("TRACESTATE".to_owned(), "from the tool".to_owned()),
        ]);
        let script = r#"printf '%s|%s|' "$1" "$(pwd)"; env | sort | tr '\n' ' '"#;
        let args = [
            "-c".to_owned(),
            script.to_owned(),
            "sh".to_owned(),
            "one arg".to_owned(),
        ];
        let launch = Launch::new(
            Path::new("/bin/sh"),
            &args,
            Path::new("/tmp"),
            &env,
            "MCP_TASKD_RUN",
        )
        .expect("no NUL");

        let inline = RunEnv::new(("MCP_TASKD_RUN", "7.1"), None, None).expect("no NUL");
        let mut program = start(&launch, &inline).expect("started");
        let text = output(&mut program);
        assert!(program.wait().expect("reaped").success());
        assert!(text.starts_with("one arg|/tmp|"), "{text}");
        assert!(text.contains("MCP_TASK_ID=from the tool "), "{text}");
        assert!(text.contains("MCP_TASKD_RUN=7.1 "), "{text}");
        assert!(!text.contains("MCP_TASKD_RUN=from the tool"), "{text}");

        assert!(text.contains("TRACEPARENT=from the tool "), "{text}");

        let parent = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";
        let traced = TraceContext::parse(parent, None).expect("valid");
        let task =
            RunEnv::new(("MCP_TASKD_RUN", "7.2"), Some(("t-1", 3)), Some(&traced)).expect("no NUL");
        let mut program = start(&launch, &task).expect("started");
        let text = output(&mut program);
        assert!(program.wait().expect("reaped").success());
        assert!(text.contains("MCP_TASK_ID=t-1 "), "{text}");
        assert!(text.contains("MCP_TASK_ATTEMPT=3 "), "{text}");
        assert!(text.contains(&format!("TRACEPARENT={parent} ")), "{text}");
        // The tool's TRACESTATE belongs to no trace of this run: it goes too.
        assert!(!text.contains("TRACESTATE"), "{text}");
        assert!(!text.contains("from the tool"), "{text}");
    }

    #[test]
    fn a_program_that_cannot_be_executed_is_an_error() {
        let env = BTreeMap::new();
        let launch = Launch::new(
            Path::new("/nonexistent/program"),
            &[],
            Path::new("/"),
            &env,
            "M",
        )
        .expect("no NUL");
        let run_env = RunEnv::new(("M", "1"), None, None).expect("no NUL");
        let error = start(&launch, &run_env).err().expect("not started");
        assert_eq!(error.kind(), io::ErrorKind::NotFound);

        let missing_dir = Launch::new(
            Path::new("/bin/true"),
            &[],
            Path::new("/nonexistent"),
            &env,
            "M",
        )
        .expect("no NUL");
        assert!(start(&missing_dir, &run_env).is_err());
    }
}
