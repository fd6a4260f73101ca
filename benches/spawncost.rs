//! Microbenchmark for `benches/spawn.sh`: what starting a program and waiting for it
//! costs, by each way of starting it, in one process, one after the other.
//!
//! ```text
//! spawncost PROGRAM [N [BALLAST_MIB]]
//! ```
//!
//! Runs PROGRAM (no arguments) N times (default 2,000) per method and prints one JSON
//! line per method: wall µs per run (start to reaped) and CPU µs per run, of this
//! process (its threads, including `fork`'s page-table copy) and of its children (the
//! program itself: `exec`, the dynamic loader, its own work). BALLAST_MIB (default 0)
//! MiB of touched heap make this process as large as the server, since `fork` copies
//! the page tables of the whole address space while `posix_spawn` (`CLONE_VM` +
//! `CLONE_VFORK`) copies none.
//!
//! Methods:
//! - `fork+exec`: `fork`, `execve` in the child, `waitpid`;
//! - `posix_spawn`: glibc's `posix_spawn`, `waitpid`;
//! - `Command`: `std::process::Command` with null stdio (std uses `posix_spawn` here);
//! - `Command, pre_exec hook, 3 threads`: what a command tool's run did until
//!   2026-11-30 (clean environment, working directory, three pipes, its own process
//!   group, and a `pre_exec` hook setting `PR_SET_PDEATHSIG`, which makes std `fork`),
//!   draining stdout and stderr on two threads and writing stdin on a third;
//! - `Command piped, no hook`: what a run did until 2026-12-01: the same without the
//!   hook and the threads (std uses `posix_spawn`), pipes served on this thread;
//! - `as configured`: what a run does now (`taskd_tools::command::spawn`: our
//!   own `clone(CLONE_VM | CLONE_VFORK)` on a reused stack, C strings built once),
//!   pipes served the same way. Built with `--features portable`, the portable start
//!   instead (the system's `posix_spawn`, C strings built once).
//!
//! Not part of `cargo test`; built by `cargo bench --no-run --bench spawncost`.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use taskd_tools::command::spawn::{start, Launch, RunEnv};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(program) = args.next() else {
        eprintln!("usage: spawncost PROGRAM [N [BALLAST_MIB]]");
        std::process::exit(2);
    };
    // Absolute: the configured runs start in another working directory.
    let program = match std::fs::canonicalize(&program) {
        Ok(path) => path.to_string_lossy().into_owned(),
        Err(error) => {
            eprintln!("{program}: {error}");
            std::process::exit(2);
        }
    };
    let runs: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(2000);
    let ballast_mib: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(0);
    // Touched, so that every page is mapped (what `fork` has to copy).
    let ballast: Vec<u8> = vec![1u8; ballast_mib * 1024 * 1024];
    let program_c = CString::new(program.clone()).expect("program path without NUL");
    let env = BTreeMap::from([("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned())]);
    let launch = Launch::new(
        Path::new(&program),
        &[],
        Path::new("/"),
        &env,
        "MCP_TASKD_RUN",
    )
    .expect("program path without NUL");

    type Method<'a> = (&'a str, Box<dyn Fn() + 'a>);
    let methods: Vec<Method<'_>> = vec![
        ("fork+exec", Box::new(|| fork_exec(&program_c))),
        ("posix_spawn", Box::new(|| posix_spawn(&program_c))),
        ("Command", Box::new(|| command_plain(&program))),
        (
            "Command, pre_exec hook, 3 threads",
            Box::new(|| command_hooked(&program)),
        ),
        (
            "Command piped, no hook",
            Box::new(|| command_piped(&program)),
        ),
        ("as configured", Box::new(|| configured_start(&launch))),
    ];
    for (name, method) in &methods {
        // Warm-up: page cache, dynamic loader cache.
        for _ in 0..runs / 10 {
            method();
        }
        let (self_before, children_before) = cpu_us();
        let started = Instant::now();
        for _ in 0..runs {
            method();
        }
        let wall = started.elapsed().as_secs_f64() * 1e6 / runs as f64;
        let (self_after, children_after) = cpu_us();
        println!(
            "{{\"method\":\"{name}\",\"runs\":{runs},\"ballast_mib\":{ballast_mib},\
             \"wall_us\":{wall:.1},\"cpu_self_us\":{:.1},\"cpu_children_us\":{:.1}}}",
            (self_after - self_before) as f64 / runs as f64,
            (children_after - children_before) as f64 / runs as f64,
        );
    }
    std::hint::black_box(&ballast);
}

/// CPU time (user + system, µs) of this process and of its reaped children.
fn cpu_us() -> (i64, i64) {
    let of = |who| {
        // SAFETY: rusage is plain data that getrusage fills in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(who, &mut usage) };
        // `tv_usec` is an i64 on Linux, an i32 on macOS.
        #[allow(clippy::useless_conversion)]
        let us = |t: libc::timeval| t.tv_sec * 1_000_000 + i64::from(t.tv_usec);
        us(usage.ru_utime) + us(usage.ru_stime)
    };
    (of(libc::RUSAGE_SELF), of(libc::RUSAGE_CHILDREN))
}

fn wait(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: plain system call on our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
}

fn fork_exec(program: &CString) {
    let argv = [program.as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null()];
    // SAFETY: the child only calls execve and _exit, both async-signal-safe.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        unsafe {
            libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr());
            libc::_exit(127);
        }
    }
    wait(pid);
}

fn posix_spawn(program: &CString) {
    let argv = [program.as_ptr() as *mut libc::c_char, std::ptr::null_mut()];
    let envp = [std::ptr::null_mut()];
    let mut pid = 0;
    // SAFETY: argv and envp are NULL-terminated arrays of C strings that outlive the call.
    let failed = unsafe {
        libc::posix_spawn(
            &mut pid,
            program.as_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            argv.as_ptr(),
            envp.as_ptr(),
        )
    };
    if failed == 0 {
        wait(pid);
    }
}

fn command_plain(program: &str) {
    let _ = Command::new(program)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The environment and stdio of a command tool's run.
fn configured(program: &str) -> Command {
    let mut command = Command::new(program);
    command
        .current_dir("/")
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("MCP_TASKD_RUN", "1.1")
        .env("MCP_TASK_ID", "00000000-0000-4000-8000-000000000000")
        .env("MCP_TASK_ATTEMPT", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    command
}

fn command_hooked(program: &str) {
    let mut command = configured(program);
    // SAFETY: the hook makes one async-signal-safe system call (Linux has the signal;
    // elsewhere the hook does nothing, and still makes std `fork`).
    unsafe {
        command.pre_exec(|| {
            #[cfg(target_os = "linux")]
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            Ok(())
        });
    }
    let Ok(mut child) = command.spawn() else {
        return;
    };
    let (Some(mut stdin), Some(mut stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return;
    };
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(b"{\"arguments\":{},\"inputResponses\":{},\"state\":null}");
    });
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
    });
    let _ = child.wait();
    let _ = (feeder.join(), out.join(), err.join());
}

fn command_piped(program: &str) {
    let Ok(mut child) = configured(program).spawn() else {
        return;
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"{\"arguments\":{},\"inputResponses\":{},\"state\":null}");
    }
    let mut bytes = Vec::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_end(&mut bytes);
    }
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_end(&mut bytes);
    }
    let _ = child.wait();
}

fn configured_start(launch: &Launch) {
    let Ok(run_env) = RunEnv::new(
        ("MCP_TASKD_RUN", "1.1"),
        Some(("00000000-0000-4000-8000-000000000000", 1)),
        None,
    ) else {
        return;
    };
    let Ok(mut program) = start(launch, &run_env) else {
        return;
    };
    if let Some(stdin) = program.stdin.take() {
        let _ =
            File::from(stdin).write_all(b"{\"arguments\":{},\"inputResponses\":{},\"state\":null}");
    }
    let mut bytes = Vec::new();
    for pipe in [program.stdout.take(), program.stderr.take()]
        .into_iter()
        .flatten()
    {
        let _ = File::from(pipe).read_to_end(&mut bytes);
    }
    let _ = program.wait();
}
