//! The portable start: the system's `posix_spawn`, with the attributes and file actions
//! that make it start the program as `linux.rs` does. Used on macOS and every system
//! but Linux, and on Linux when built with `--features portable` (CI runs the command
//! tool tests that way, so this file runs there too).
//!
//! - `POSIX_SPAWN_SETPGROUP` with group 0: a process group of its own;
//! - `POSIX_SPAWN_SETSIGMASK`, empty: every signal unblocked (the server blocks
//!   SIGCHLD in all its threads, see `block_child_exit_signal`);
//! - `POSIX_SPAWN_SETSIGDEF` with SIGPIPE: back to its default, which std ignores in the
//!   server. Handled signals go back to their default with the `exec` (and glibc resets
//!   them before it, macOS's `posix_spawn` is one system call); other ignored signals
//!   stay ignored;
//! - file actions: the pipes on 0, 1 and 2, then `chdir` to the tool's directory
//!   (`posix_spawn_file_actions_addchdir_np`: glibc 2.29, macOS 10.15);
//! - macOS: `POSIX_SPAWN_CLOEXEC_DEFAULT` too, so the program inherits 0, 1 and 2 and
//!   nothing else even if another thread has just made a descriptor that is not yet
//!   close-on-exec (macOS has no `pipe2`, so std makes a pipe and then marks it).
//!
//! A program that cannot be started (no such file, not executable, no such directory)
//! is an error of `posix_spawn` itself, and no child is left behind: glibc reaps its
//! child that failed to `exec` before it returns, and macOS creates none.

use std::mem::MaybeUninit;

use super::*;

pub fn start(launch: &Launch, run_env: &RunEnv) -> io::Result<Program> {
    let (stdin_child, stdin) = pipe()?;
    let (stdout, stdout_child) = pipe()?;
    let (stderr, stderr_child) = pipe()?;
    let argv = null_terminated(launch.argv.iter());
    let envp = null_terminated(environment(launch, run_env));

    let mut actions = FileActions::new()?;
    for (target, fd) in [&stdin_child, &stdout_child, &stderr_child]
        .into_iter()
        .enumerate()
    {
        // The pipes' ends are all ≥ 3 (see `pipe`), so no dup2 overwrites another.
        actions.dup2(fd.as_raw_fd(), target as libc::c_int)?;
    }
    actions.chdir(&launch.dir)?;
    let attributes = Attributes::new()?;

    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is valid for the call: the C strings and arrays of
    // `launch`, `argv` and `envp`, and the initialised actions and attributes.
    let failed = unsafe {
        libc::posix_spawn(
            &mut pid,
            launch.program.as_ptr(),
            actions.as_ptr(),
            attributes.as_ptr(),
            argv.as_ptr() as *const *mut libc::c_char,
            envp.as_ptr() as *const *mut libc::c_char,
        )
    };
    if failed != 0 {
        return Err(io::Error::from_raw_os_error(failed));
    }
    // The program has its own copies of its ends of the pipes.
    drop((stdin_child, stdout_child, stderr_child));
    Ok(Program {
        pid,
        stdin: Some(stdin),
        stdout: Some(stdout),
        stderr: Some(stderr),
    })
}

/// A pipe as (read end, write end), both close-on-exec and both ≥ 3 (see
/// [`above_stdio`]).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = std::io::pipe()?;
    Ok((above_stdio(read.into())?, above_stdio(write.into())?))
}

/// `posix_spawn_file_actions_t`, destroyed when dropped.
struct FileActions(MaybeUninit<libc::posix_spawn_file_actions_t>);

impl FileActions {
    fn new() -> io::Result<Box<FileActions>> {
        // Boxed: POSIX leaves the object's contents to the C library, so once
        // initialised it stays where it is.
        let mut actions = Box::new(FileActions(MaybeUninit::uninit()));
        // SAFETY: initialises the struct in place.
        check(unsafe { libc::posix_spawn_file_actions_init(actions.0.as_mut_ptr()) })?;
        Ok(actions)
    }

    fn dup2(&mut self, fd: libc::c_int, target: libc::c_int) -> io::Result<()> {
        // SAFETY: the struct was initialised by `new`.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(self.0.as_mut_ptr(), fd, target) })
    }

    fn chdir(&mut self, dir: &CString) -> io::Result<()> {
        // SAFETY: the struct was initialised by `new`; the action copies the path.
        check(unsafe {
            libc::posix_spawn_file_actions_addchdir_np(self.0.as_mut_ptr(), dir.as_ptr())
        })
    }

    fn as_ptr(&self) -> *const libc::posix_spawn_file_actions_t {
        self.0.as_ptr()
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised by `new`, destroyed once.
        unsafe {
            libc::posix_spawn_file_actions_destroy(self.0.as_mut_ptr());
        }
    }
}

/// `posix_spawnattr_t` set up as the module doc says, destroyed when dropped.
struct Attributes(MaybeUninit<libc::posix_spawnattr_t>);

impl Attributes {
    fn new() -> io::Result<Box<Attributes>> {
        let mut attributes = Box::new(Attributes(MaybeUninit::uninit()));
        let raw = attributes.0.as_mut_ptr();
        // SAFETY: initialises the struct in place; every later call sets a field of the
        // initialised struct from sets we own (the calls copy them).
        unsafe {
            check(libc::posix_spawnattr_init(raw))?;
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            let mut pipe: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut pipe);
            libc::sigaddset(&mut pipe, libc::SIGPIPE);
            check(libc::posix_spawnattr_setsigmask(raw, &none))?;
            check(libc::posix_spawnattr_setsigdefault(raw, &pipe))?;
            check(libc::posix_spawnattr_setpgroup(raw, 0))?;
            check(libc::posix_spawnattr_setflags(raw, spawn_flags()))?;
        }
        Ok(attributes)
    }

    fn as_ptr(&self) -> *const libc::posix_spawnattr_t {
        self.0.as_ptr()
    }
}

impl Drop for Attributes {
    fn drop(&mut self) {
        // SAFETY: initialised by `new`, destroyed once.
        unsafe {
            libc::posix_spawnattr_destroy(self.0.as_mut_ptr());
        }
    }
}

/// The attribute flags (`int` constants, a `short` attribute).
fn spawn_flags() -> libc::c_short {
    let flags =
        libc::POSIX_SPAWN_SETPGROUP | libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
    #[cfg(target_vendor = "apple")]
    let flags = flags | libc::POSIX_SPAWN_CLOEXEC_DEFAULT;
    flags as libc::c_short
}

/// A `posix_spawn*` result as an error.
fn check(result: libc::c_int) -> io::Result<()> {
    match result {
        0 => Ok(()),
        error => Err(io::Error::from_raw_os_error(error)),
    }
}
