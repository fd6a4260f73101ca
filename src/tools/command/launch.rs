//! Starting a program the way `posix_spawn` does (`clone` with `CLONE_VM | CLONE_VFORK`:
//! the child borrows the server's memory until it execs), plus what `posix_spawn` cannot
//! do: `PR_SET_PDEATHSIG`.
//!
//! Why not `std::process::Command`: it needs a `pre_exec` hook to set the parent-death
//! signal, and with a hook it `fork`s. A `fork` of the server write-protects every page
//! of its address space, and every page a server thread writes afterwards costs a
//! copy-on-write fault and a TLB shoot-down across the cores: measured at about 9 ms
//! of server CPU per run (`benches/spawn.sh`, benches/README.md), where this path costs
//! about as much as `posix_spawn`.
//!
//! The child runs on its own small stack in the server's memory while the spawning
//! thread is suspended, so between `clone` and `execve` it makes system calls only: no
//! allocation, no locks. Every signal is blocked around the `clone`, so no server signal
//! handler can run in the child; the child resets handled signals to their default and
//! unblocks everything (SIGPIPE included, as std does) just before `execve`.

use std::ffi::{c_int, c_void, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

/// Stack of the child between `clone` and `execve`: a handful of system calls deep.
const CHILD_STACK: usize = 64 * 1024;

/// Everything `execve` needs, as C strings.
pub(super) struct Launch {
    program: CString,
    argv: Vec<CString>,
    env: Vec<CString>,
    dir: CString,
}

impl Launch {
    /// `program` with `args`, in `dir`, with exactly `env`. Fails on a NUL byte.
    pub(super) fn new<'a>(
        program: &Path,
        args: &[String],
        dir: &Path,
        env: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> io::Result<Launch> {
        let c = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the command")
            })
        };
        let program = c(program.as_os_str().as_bytes())?;
        let mut argv = vec![program.clone()];
        for arg in args {
            argv.push(c(arg.as_bytes())?);
        }
        let env = env
            .into_iter()
            .map(|(key, value)| c(format!("{key}={value}").as_bytes()))
            .collect::<io::Result<_>>()?;
        Ok(Launch {
            program,
            argv,
            env,
            dir: c(dir.as_os_str().as_bytes())?,
        })
    }
}

/// A started program: its pid (also its process group) and the server's ends of its
/// pipes. It must be reaped (`waitpid`) by whoever holds it.
pub(super) struct Started {
    pub(super) pid: libc::pid_t,
    pub(super) stdin: File,
    pub(super) stdout: File,
    pub(super) stderr: File,
}

/// What the child reads, and where it leaves the `errno` of a failed step.
struct ChildArgs {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    dir: *const libc::c_char,
    /// Descriptors (all ≥ 3) that become its stdin, stdout and stderr.
    stdio: [c_int; 3],
    /// The server's pid: the child checks it still has its parent once the
    /// parent-death signal is set.
    server: libc::pid_t,
    error: AtomicI32,
}

/// Starts the program in its own process group, with its stdin, stdout and stderr on
/// new pipes and `SIGKILL` as its parent-death signal (bound to the calling thread).
pub(super) fn start(launch: &Launch) -> io::Result<Started> {
    let (stdin_child, stdin) = pipe()?;
    let (stdout, stdout_child) = pipe()?;
    let (stderr, stderr_child) = pipe()?;
    let argv = null_terminated(&launch.argv);
    let envp = null_terminated(&launch.env);
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
        server: std::process::id() as libc::pid_t,
        error: AtomicI32::new(0),
    };
    // Uninitialised: a stack needs no zeroing.
    let mut stack: Vec<std::mem::MaybeUninit<u8>> = Vec::with_capacity(CHILD_STACK);
    // SAFETY: the stack is ours and outlives the child's use of it (CLONE_VFORK returns
    // only once the child has exec'd or exited); 16-byte alignment as the ABI wants.
    let top = unsafe {
        let end = stack.as_mut_ptr().add(CHILD_STACK) as usize;
        (end & !15) as *mut c_void
    };
    let pid = {
        let _blocked = BlockedSignals::new()?;
        // SAFETY: `child_main` makes only system calls on its own stack; `args`, `argv`
        // and `envp` stay alive until the call returns, which CLONE_VFORK delays until
        // the child has exec'd or exited.
        unsafe {
            libc::clone(
                child_main,
                top,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                &args as *const ChildArgs as *mut c_void,
            )
        }
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    // The child has exec'd or exited: its ends of the pipes are its own now.
    drop((stdin_child, stdout_child, stderr_child));
    let error = args.error.load(Ordering::Acquire);
    if error != 0 {
        let mut status = 0;
        // SAFETY: plain system call on our own child, which has exited (or is about to).
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(io::Error::from_raw_os_error(error));
    }
    Ok(Started {
        pid,
        stdin: File::from(stdin),
        stdout: File::from(stdout),
        stderr: File::from(stderr),
    })
}

extern "C" fn child_main(raw: *mut c_void) -> c_int {
    // SAFETY: `raw` is the `ChildArgs` the suspended parent keeps alive; every call
    // below is a system call wrapper on our own stack.
    unsafe {
        let args = &*(raw as *const ChildArgs);
        let fail = |args: &ChildArgs| -> ! {
            let errno = *libc::__errno_location();
            args.error.store(errno.max(1), Ordering::Release);
            libc::_exit(127)
        };
        // Default dispositions for every handled signal (exec would reset them, but a
        // signal delivered before the exec would run the server's handler here).
        for signal in 1..libc::SIGRTMAX() {
            let mut action: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut action) != 0 {
                continue;
            }
            let handled =
                action.sa_sigaction != libc::SIG_DFL && action.sa_sigaction != libc::SIG_IGN;
            if handled || signal == libc::SIGPIPE {
                action.sa_sigaction = libc::SIG_DFL;
                action.sa_flags = 0;
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
        // Die with the server (or, precisely, with the spawning thread).
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        ) != 0
        {
            fail(args);
        }
        // The server may have died before the line above took effect.
        if libc::getppid() != args.server {
            *libc::__errno_location() = libc::ESRCH;
            fail(args);
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
        // SAFETY: restores the mask saved by `new` on the same thread.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut());
        }
    }
}

/// A pipe as (read end, write end), both close-on-exec and both ≥ 3, so that the
/// child's `dup2` onto 0, 1 and 2 never overwrites one it still needs (a server started
/// with a closed stdin would otherwise get fd 0 for a pipe).
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

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}
