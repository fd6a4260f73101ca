//! Linux: the start itself is `clone(CLONE_VM | CLONE_VFORK)`, as glibc's `posix_spawn`
//! does, on a stack each thread keeps for the next run.
//!
//! Why not `std::process::Command` (which calls `posix_spawn`): per run std builds the
//! environment, the arguments and the working directory as fresh C strings and
//! `posix_spawn`'s attributes and file actions, glibc asks for the descriptor limit
//! twice per `dup2` action, and glibc maps a new stack for the child and unmaps it
//! once the child has `exec`ed — an unmap of a multi-threaded process's memory, so a
//! TLB shoot-down on the other core, every run. Measured side by side with
//! `noop_raw` runs as in `benches/spawn.sh` (docs/benchmarks/command-tools.md): the
//! worker threads' CPU per no-op run fell from 161–183 µs to 113–133 µs. (The portable
//! start, `posix.rs`, keeps the C strings built once and leaves the rest to the
//! system's `posix_spawn`.)
//!
//! What the child does is what `posix_spawn` does for std: between `clone` and
//! `execve` it runs on its own stack in the server's memory while the spawning thread
//! is suspended, making system calls only (no allocation, no locks). Every signal is
//! blocked around the `clone`, so no server signal handler can run in the child; the
//! child resets handled signals and SIGPIPE (which std ignores) to their default,
//! moves into its own process group, puts the pipes on 0, 1 and 2, changes directory,
//! unblocks every signal and `exec`s.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;
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
    let envp = null_terminated(environment(launch, run_env));
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

/// A pipe as (read end, write end), both close-on-exec and both ≥ 3 (see
/// [`above_stdio`]).
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
