//! Starting a program: its C strings, built once per tool ([`Launch`]) and per run
//! ([`RunEnv`]), and the start itself, one of two ways:
//!
//! - `linux.rs` (Linux): `clone(CLONE_VM | CLONE_VFORK)` as glibc's `posix_spawn` does,
//!   on a stack each thread keeps for the next run (why, and what it saves, there);
//! - `posix.rs` (every other system, and Linux built with `--features portable`, which
//!   is how CI runs it): the system's `posix_spawn`.
//!
//! Either way the program starts as `posix_spawn` starts it: no `fork` of the server,
//! nothing of ours runs in the new process before its `exec`, no signal handler of the
//! server runs in it; it starts in a process group of its own, with every signal
//! unblocked, SIGPIPE (which std ignores in the server) back to its default (other
//! ignored signals stay ignored), its pipes on 0, 1 and 2, in the tool's directory,
//! with exactly the environment built here.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use taskd_protocol::TraceContext;

#[cfg(all(target_os = "linux", not(feature = "portable")))]
mod linux;
#[cfg(all(target_os = "linux", not(feature = "portable")))]
use linux as imp;
#[cfg(any(not(target_os = "linux"), feature = "portable"))]
mod posix;
#[cfg(any(not(target_os = "linux"), feature = "portable"))]
use posix as imp;

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
pub fn start(launch: &Launch, run_env: &RunEnv) -> io::Result<Program> {
    imp::start(launch, run_env)
}

/// The variables a program gets: the tool's, less those the run's replace, then the
/// run's.
fn environment<'a>(launch: &'a Launch, run_env: &'a RunEnv) -> impl Iterator<Item = &'a CString> {
    launch
        .env
        .iter()
        .filter(|(_, replaced)| run_env.keeps(*replaced))
        .map(|(entry, _)| entry)
        .chain(&run_env.entries)
}

/// `strings` as the NULL-terminated array of pointers `execve` and `posix_spawn` take
/// (valid while the strings live).
fn null_terminated<'a>(strings: impl Iterator<Item = &'a CString>) -> Vec<*const libc::c_char> {
    strings
        .map(|string| string.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// A descriptor moved above 0, 1 and 2 if it is one of them, so that the child's `dup2`
/// onto 0, 1 and 2 never overwrites one it still needs (a server started with a closed
/// stdin would otherwise get fd 0 for a pipe).
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
