//! How a command tool's program is started on Linux: `posix_spawn` of this binary in
//! its launcher mode, which arms the parent-death signal and then `exec`s the program
//! in the same process (same pid, process group, pipes, environment and working
//! directory).
//!
//! Why not start the program directly: it must die with the server even on `kill -9`
//! (`PR_SET_PDEATHSIG`), which only the new process can ask for, between its start and
//! its `exec`. A `pre_exec` hook does that, but makes std `fork` the whole server
//! instead of `posix_spawn` (`clone(CLONE_VM | CLONE_VFORK)`), and after a fork every
//! page any server thread writes takes a copy-on-write fault on both cores: about 8 ms
//! of server CPU a run, which held command tools near 100 runs a second
//! (benches/README.md, "Command tools"). The launcher costs the new process one more
//! `exec` instead (about a millisecond of its own CPU), and the server ~0.1 ms.
//!
//! `/proc/self/exe` names the launcher, so a binary replaced on disk by an upgrade
//! while the server runs still starts programs (the path names the running image).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// The first argument that puts `mcp-taskd` in launcher mode (not a subcommand: it is
/// handled before the command line is parsed, and is nobody's to type).
pub const LAUNCHER_ARG: &str = "__launch-program";

/// Exit status of a launcher that could not start its program (as a shell's).
const NOT_STARTED: i32 = 127;

/// A command that starts `program` through the launcher, for the server whose pid is
/// `server`; the caller adds the program's arguments and everything else.
pub fn command(program: &Path, server: u32) -> Command {
    let mut command = Command::new("/proc/self/exe");
    command
        .arg(LAUNCHER_ARG)
        .arg(server.to_string())
        .arg("--")
        .arg(program);
    command
}

/// If this process was started as a launcher, becomes the program (never returns);
/// otherwise returns at once.
pub fn run_if_launcher() {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(LAUNCHER_ARG.as_ref()) {
        return;
    }
    let rest: Vec<OsString> = args.collect();
    std::process::exit(launch(&rest));
}

/// Arms the parent-death signal and execs the program; returns only on failure, with
/// the exit status to end with.
fn launch(args: &[OsString]) -> i32 {
    let [server, separator, program, program_args @ ..] = args else {
        eprintln!("mcp-taskd {LAUNCHER_ARG}: usage: SERVER_PID -- PROGRAM [ARG…]");
        return NOT_STARTED;
    };
    let server: Option<libc::pid_t> = server.to_str().and_then(|pid| pid.parse().ok());
    let (Some(server), true) = (server, separator == "--") else {
        eprintln!("mcp-taskd {LAUNCHER_ARG}: usage: SERVER_PID -- PROGRAM [ARG…]");
        return NOT_STARTED;
    };
    // SAFETY: plain system calls with integer arguments.
    let armed = unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        ) == 0
    };
    if !armed {
        eprintln!(
            "mcp-taskd: could not arm the parent-death signal: {}",
            std::io::Error::last_os_error()
        );
        return NOT_STARTED;
    }
    // The server may have died before the signal was armed: then nobody waits for us.
    // SAFETY: getppid cannot fail.
    if unsafe { libc::getppid() } != server {
        return NOT_STARTED;
    }
    // The environment, working directory, process group and descriptors are already
    // the program's: the server set them on the launcher.
    let error = Command::new(program).args(program_args).exec();
    eprintln!(
        "mcp-taskd: could not start {}: {error}",
        Path::new(program).display()
    );
    NOT_STARTED
}
