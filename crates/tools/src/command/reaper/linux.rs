//! Linux: the server is a child subreaper, and `/proc` tells it about its children.
//!
//! How: the server is a child subreaper (`PR_SET_CHILD_SUBREAPER`), so a descendant
//! whose parent dies is re-parented to the server instead of init. Every run carries a
//! marker in its environment ([`super::MARKER`]), which its descendants inherit. Once the
//! program is dead (and before it is reaped), every live descendant of the run is an
//! *orphan* (a child of the server that is not a program) or a descendant of one. When
//! a run ends, [`sweep`] looks only at the server's own children:
//!
//! - a zombie that is not a program is an orphan nobody else waits for: it is reaped by
//!   its pid (never `waitpid(-1)`, which could steal a program's exit status);
//! - a live orphan is killed, with everything below it, if it belongs to the ended
//!   run: it is in the run's process group, or its environment carries the run's
//!   marker, or it was recorded as a descendant of the program before the program was
//!   stopped (pid and start time) or below another orphan killed before, or, with no
//!   marker in its environment, it holds one of the run's stdin, stdout or stderr
//!   pipes. An orphan whose marker names another run that has ended is killed too
//!   (a sweep that gave up left it behind);
//! - anything else (orphans of runs still running, and orphans nothing ties to a
//!   run) is left alone; [`sweep_all`], on a graceful shutdown, kills those too.
//!
//! Only the server's own unreaped children are ever signalled, and only the sweeper
//! reaps them, so a pid cannot be reused between looking at a process and killing it.
//! Programs are registered while they are spawned ([`spawn`]) under a gate that a sweep
//! pass takes exclusively, so a program (even one that fails to exec) is never taken
//! for an orphan.
//!
//! Limits: a descendant escapes a run's sweep if it replaced its environment (an exec
//! with a new one), closed or redirected the run's pipes, and was orphaned before the
//! run ended, or if it changed user so that its `/proc` entries cannot be read. It
//! still dies at the next graceful shutdown. After `kill -9` of the server nothing
//! here runs: the run guard (`guard`) kills what carries the server's markers.
//!
//! Cost: a run that leaves nothing behind costs one read of the server's children list
//! (`/proc/<pid>/task/<pid>/children`, a few µs). Each orphan costs a read of its
//! `stat` and `environ` (and of its descriptors if it has no marker). Kernels without
//! `CONFIG_PROC_CHILDREN` fall back to reading every `/proc/<pid>/stat` at each run's
//! end: about 10 ms at 120 processes and 100 ms at 1,000 on a loaded 2-core box.

use std::collections::{BTreeSet, HashSet};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::sync::{Mutex, MutexGuard, OnceLock, RwLock};
use std::time::{Duration, Instant};

use super::server_pid;
use crate::command::spawn::Program;

/// How long a sweep keeps killing and reaping before it leaves the rest to the next one.
const SWEEP_LIMIT: Duration = Duration::from_secs(2);
/// Time between two passes of a sweep.
const SWEEP_POLL: Duration = Duration::from_millis(5);
/// How many more passes a sweep makes for orphans whose environment it could not read
/// (an exec takes well under [`SECOND_LOOKS`] × [`SWEEP_POLL`]).
const SECOND_LOOKS: u32 = 10;

/// Programs spawned and not yet reaped by their `Child`, the markers of runs still
/// running, and orphans known to hide their environment.
struct Registry {
    programs: BTreeSet<libc::pid_t>,
    running: BTreeSet<String>,
    /// Orphans (pid, start time) whose environment stayed unreadable through a whole
    /// sweep: they get no second looks.
    unreadable: BTreeSet<(libc::pid_t, u64)>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    programs: BTreeSet::new(),
    running: BTreeSet::new(),
    unreadable: BTreeSet::new(),
});
/// Spawning holds it shared, a sweep pass exclusively: a pass never sees a child whose
/// registration is still under way.
static GATE: RwLock<()> = RwLock::new(());

fn registry() -> MutexGuard<'static, Registry> {
    // The registry holds plain sets: a panic elsewhere cannot leave it inconsistent.
    REGISTRY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Makes the server the reaper of its orphaned descendants (Linux 3.4+); without it
/// orphans go to init and sweeps find none, which the log says.
pub fn become_subreaper() {
    // SAFETY: plain system call on the calling process.
    let became = unsafe {
        libc::prctl(
            libc::PR_SET_CHILD_SUBREAPER,
            1 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        ) == 0
    };
    if !became {
        log::warn!("cannot become a child subreaper: descendants that leave a command tool's process group may outlive its run");
    }
}

/// What a run leaves for its sweep to recognise its orphans by, beyond its marker.
#[derive(Default)]
pub struct Traces {
    /// Descendants of the program seen before it was stopped.
    doomed: HashSet<(libc::pid_t, u64)>,
    /// The `pipe:[inode]` names of the program's stdin, stdout and stderr.
    pipes: Vec<String>,
}

impl Traces {
    pub fn new() -> Traces {
        Traces::default()
    }

    /// Remembers the program's pipes: an orphan that still holds one of them inherited
    /// it from the program, whatever its environment says.
    pub fn watch_pipes(&mut self, program: &Program) {
        let fds = [
            program.stdin.as_ref().map(AsRawFd::as_raw_fd),
            program.stdout.as_ref().map(AsRawFd::as_raw_fd),
            program.stderr.as_ref().map(AsRawFd::as_raw_fd),
        ];
        self.pipes = fds
            .into_iter()
            .flatten()
            .filter_map(|fd| {
                // SAFETY: `stat` is plain data; fstat fills it from a descriptor we own.
                let mut stat: libc::stat = unsafe { std::mem::zeroed() };
                (unsafe { libc::fstat(fd, &mut stat) } == 0)
                    .then(|| format!("pipe:[{}]", stat.st_ino))
            })
            .collect();
    }

    /// Records the descendants of the live program, before it is stopped: once it dies
    /// they are orphans the sweep recognises even if nothing in their environment
    /// names the run.
    pub fn record_descendants(&mut self, program: libc::pid_t) {
        record_descendants(program, &mut self.doomed);
    }
}

/// A run started: its marker counts as running until [`run_ended`].
pub fn run_started(marker: &str) {
    registry().running.insert(marker.to_owned());
}

pub fn run_ended(marker: &str) {
    registry().running.remove(marker);
}

/// Starts a program with `start`, which returns it with its pid, and registers it, so
/// that no sweep takes it for an orphan (a child that failed to `exec` is reaped by
/// `start` itself, under the same gate).
pub fn spawn<T>(start: impl FnOnce() -> std::io::Result<(T, libc::pid_t)>) -> std::io::Result<T> {
    let _gate = GATE.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    let (program, pid) = start()?;
    registry().programs.insert(pid);
    Ok(program)
}

/// Called once the program has been reaped by its `Child`.
pub fn forget(program: libc::pid_t) {
    registry().programs.remove(&program);
}

/// Waits (up to [`SWEEP_LIMIT`]) until the ended run's program has exited, then kills
/// every orphan of this run and of earlier runs, and reaps every orphan zombie.
pub fn sweep(ended: &str, traces: Traces, group: libc::pid_t, has_exited: impl Fn() -> bool) {
    let deadline = Instant::now() + SWEEP_LIMIT;
    while !has_exited() {
        if Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(SWEEP_POLL);
    }
    sweep_until_clear(
        &Doom::Run {
            group,
            marker: ended,
            pipes: &traces.pipes,
        },
        traces.doomed,
        deadline,
    );
}

/// Kills every orphan, whatever run it belongs to, and reaps them: for a server that
/// is stopping, once its runs have ended or been given up on. This also catches the
/// orphans whose marker cannot be read.
pub fn sweep_all() {
    sweep_until_clear(&Doom::All, HashSet::new(), Instant::now() + SWEEP_LIMIT);
}

/// Which live orphans a sweep kills.
enum Doom<'a> {
    /// Those of an ended run (its process group, its marker, or without a marker,
    /// holding one of its pipes) and those whose marker names a run that is no longer
    /// running.
    Run {
        group: libc::pid_t,
        marker: &'a str,
        pipes: &'a [String],
    },
    /// All of them.
    All,
}

/// Passes until one finds nothing left to kill, or until `deadline`. `doomed` holds
/// descendants already known to be doomed; each pass adds those seen below the orphans
/// it kills: once their parent dies they are ours, marker or not.
fn sweep_until_clear(doom: &Doom<'_>, mut doomed: HashSet<(libc::pid_t, u64)>, deadline: Instant) {
    let server = server_pid();
    let mut second_looks = SECOND_LOOKS;
    loop {
        let pass = sweep_pass(server, doom, &mut doomed);
        let undecided = !pass.undecided.is_empty();
        let again = pass.killed > 0 || (undecided && second_looks > 0);
        if !again || Instant::now() >= deadline {
            // Not an exec, then: later sweeps need not look twice.
            registry().unreadable.extend(pass.undecided);
            return;
        }
        if pass.killed == 0 {
            second_looks -= 1;
        }
        std::thread::sleep(SWEEP_POLL);
    }
}

/// What one pass did.
#[derive(Default)]
struct Pass {
    killed: usize,
    /// Orphans left alone because their environment could not be read, which happens
    /// for a moment while a process execs, and not known to stay unreadable.
    undecided: Vec<(libc::pid_t, u64)>,
}

/// One look at the server's children.
fn sweep_pass(
    server: libc::pid_t,
    doom: &Doom<'_>,
    doomed: &mut HashSet<(libc::pid_t, u64)>,
) -> Pass {
    let mut pass = Pass::default();
    // The common case, a run that left nothing behind, needs neither the gate nor more
    // than this one look (programs are never children of the main thread, but the
    // fallback scan lists them too). A child missing from the registry here may be a
    // program still being registered: the gate sorts that out.
    let children = children_of(server, true);
    let only_programs = {
        let registry = registry();
        children.iter().all(|pid| registry.programs.contains(pid))
    };
    if only_programs {
        return pass;
    }
    let _gate = GATE
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let children = children_of(server, true);
    let (programs, running, unreadable) = {
        let mut registry = registry();
        // Forget the unreadable orphans that are gone.
        registry
            .unreadable
            .retain(|(pid, _)| children.contains(pid));
        (
            registry.programs.clone(),
            registry.running.clone(),
            registry.unreadable.clone(),
        )
    };
    for pid in children.into_iter().filter(|pid| !programs.contains(pid)) {
        let Some(stat) = Stat::read(pid) else {
            continue;
        };
        if stat.ppid != server {
            continue;
        }
        if stat.state == 'Z' {
            reap(pid);
            continue;
        }
        let ours = doomed.contains(&(pid, stat.start))
            || match doom {
                Doom::All => true,
                Doom::Run {
                    group,
                    marker,
                    pipes,
                } => {
                    stat.pgid == *group
                        || match marker_of(pid) {
                            Environ::Marked(found) => found == *marker || !running.contains(&found),
                            Environ::Unmarked => holds_any(pid, pipes),
                            Environ::Unreadable => {
                                let holds = holds_any(pid, pipes);
                                if !holds && !unreadable.contains(&(pid, stat.start)) {
                                    pass.undecided.push((pid, stat.start));
                                }
                                holds
                            }
                        }
                }
            };
        if !ours {
            continue;
        }
        record_descendants(pid, doomed);
        // SAFETY: plain system call; `pid` is our own unreaped child, so it is this process.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        pass.killed += 1;
    }
    pass
}

/// Reaps one zombie child by its pid.
fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: plain system call on a child of ours that no one else waits for.
    unsafe {
        libc::waitpid(pid, &mut status, libc::WNOHANG);
    }
}

/// Records the identity of every descendant of `pid`.
fn record_descendants(pid: libc::pid_t, doomed: &mut HashSet<(libc::pid_t, u64)>) {
    let mut pending = children_of(pid, false);
    // Bounded: a fork bomb must not keep the sweep here.
    let mut budget = 4096;
    while let Some(next) = pending.pop() {
        if budget == 0 {
            break;
        }
        budget -= 1;
        if let Some(stat) = Stat::read(next) {
            if doomed.insert((next, stat.start)) {
                pending.extend(children_of(next, false));
            }
        }
    }
}

/// The fields of `/proc/<pid>/stat` a sweep needs.
struct Stat {
    state: char,
    ppid: libc::pid_t,
    pgid: libc::pid_t,
    /// Start time since boot, in clock ticks: with the pid, it names one process.
    start: u64,
}

impl Stat {
    fn read(pid: libc::pid_t) -> Option<Stat> {
        let bytes = read_proc(&format!("/proc/{pid}/stat"))?;
        Stat::parse(&String::from_utf8_lossy(&bytes))
    }

    fn parse(text: &str) -> Option<Stat> {
        // The command name may hold spaces and parentheses: fields start after the last ')'.
        let (_, rest) = text.rsplit_once(')')?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        Some(Stat {
            state: fields.first()?.chars().next()?,
            ppid: fields.get(1)?.parse().ok()?,
            pgid: fields.get(2)?.parse().ok()?,
            start: fields.get(19)?.parse().ok()?,
        })
    }
}

/// What a process's environment, as it was at exec, says about its run.
enum Environ {
    Marked(String),
    Unmarked,
    /// Not readable, or empty: a process in the middle of an exec shows an empty
    /// environment for a moment (as does one started with none at all).
    Unreadable,
}

/// Whether the process's environment carries a marker starting with `prefix`.
pub fn carries_marker(pid: libc::pid_t, prefix: &str) -> bool {
    matches!(marker_of(pid), Environ::Marked(found) if found.starts_with(prefix))
}

/// The process's group, if it still exists.
pub fn process_group(pid: libc::pid_t) -> Option<libc::pid_t> {
    Stat::read(pid).map(|stat| stat.pgid)
}

/// The process's start time (0 once it is gone): with its pid, it names one process.
pub fn start_time(pid: libc::pid_t) -> u64 {
    Stat::read(pid).map_or(0, |stat| stat.start)
}

fn marker_of(pid: libc::pid_t) -> Environ {
    let Some(environ) = read_proc(&format!("/proc/{pid}/environ")) else {
        return Environ::Unreadable;
    };
    if environ.is_empty() {
        return Environ::Unreadable;
    }
    let prefix = format!("{}=", super::MARKER);
    environ
        .split(|&byte| byte == 0)
        .find_map(|entry| entry.strip_prefix(prefix.as_bytes()))
        .map_or(Environ::Unmarked, |value| {
            Environ::Marked(String::from_utf8_lossy(value).into_owned())
        })
}

/// Whether one of the process's descriptors is one of `pipes`.
fn holds_any(pid: libc::pid_t, pipes: &[String]) -> bool {
    if pipes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| pipes.iter().any(|pipe| target.as_os_str() == pipe.as_str()))
    })
}

/// The children of `parent`. For the server (`main_thread_only`), orphans are
/// re-parented to its first live thread, the main thread, so that one list is enough;
/// programs live in their spawning threads' lists and are filtered out anyway. A
/// process that is gone has none.
fn children_of(parent: libc::pid_t, main_thread_only: bool) -> Vec<libc::pid_t> {
    static LISTS: OnceLock<bool> = OnceLock::new();
    // `CONFIG_PROC_CHILDREN`: one file per thread listing its children.
    if !*LISTS.get_or_init(|| std::path::Path::new("/proc/thread-self/children").exists()) {
        return scan_for_children(parent);
    }
    if main_thread_only {
        return read_pids(&format!("/proc/{parent}/task/{parent}/children")).unwrap_or_default();
    }
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| read_pids(&format!("{}/children", task.path().display())))
        .flatten()
        .collect()
}

fn read_pids(path: &str) -> Option<Vec<libc::pid_t>> {
    let bytes = read_proc(path)?;
    Some(
        String::from_utf8_lossy(&bytes)
            .split_whitespace()
            .filter_map(|pid| pid.parse().ok())
            .collect(),
    )
}

/// The contents of a `/proc` file. Not `fs::read`: it asks for the file's size first
/// (a `statx`, and a `/proc` file has none), one system call more for every run's
/// look at the server's children.
fn read_proc(path: &str) -> Option<Vec<u8>> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match file.read(&mut chunk) {
            Ok(0) => return Some(bytes),
            Ok(read) => bytes.extend_from_slice(&chunk[..read]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// Without `CONFIG_PROC_CHILDREN`: every process whose parent is `parent`.
fn scan_for_children(parent: libc::pid_t) -> Vec<libc::pid_t> {
    all_pids()
        .into_iter()
        .filter(|&pid| Stat::read(pid).is_some_and(|stat| stat.ppid == parent))
        .collect()
}

/// Every process id in `/proc` (the run guard's scan, and the fallback above).
pub fn all_pids() -> Vec<libc::pid_t> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_last_parenthesis() {
        let line = "4242 (we ird) (name) S 17 4242 17 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 \
                    987654 1000 10 18446744073709551615";
        let stat = Stat::parse(line).expect("parsed");
        assert_eq!((stat.state, stat.ppid, stat.pgid), ('S', 17, 4242));
        assert_eq!(stat.start, 987654);
        assert!(Stat::parse("4242 (truncated) S 1").is_none());
    }
}
