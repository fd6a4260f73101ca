//! Process supervision: starting the program (no shell, its own process group,
//! PDEATHSIG), feeding and draining its pipes, stopping the whole group, and having the
//! reaper kill what left the group before the program is reaped.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use serde_json::{json, Value};

use super::output::{forward, interpret, parse_progress, truncate, Progress};
use super::reaper::{self, Run};
use super::CommandTool;
use crate::tools::{Invocation, Outcome};

/// How much of stderr is kept for the log.
const STDERR_TAIL: usize = 64 * 1024;
/// Longest stderr line logged.
const STDERR_LINE: usize = 512;
/// Time between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long to wait for the output pipes to close after the program's group is gone.
const PIPE_GRACE: Duration = Duration::from_secs(2);
/// How often the program is checked on, at most: the first checks come sooner (see
/// [`Checks`]), since most programs run for milliseconds.
const POLL: Duration = Duration::from_millis(20);
/// The first pause between two checks; each pause doubles up to [`POLL`].
const FIRST_POLL: Duration = Duration::from_micros(250);

impl CommandTool {
    /// Starts the program: no shell, its own process group, a clean environment (plus
    /// the run's marker, which its descendants inherit).
    fn spawn(&self, run: &Run, task: Option<(&str, i64)>) -> std::io::Result<Child> {
        // On Linux through the launcher, which makes the program die with the server
        // (see `launch` for why not a `pre_exec` hook).
        #[cfg(target_os = "linux")]
        let mut command = super::launch::command(&self.program, std::process::id());
        #[cfg(not(target_os = "linux"))]
        let mut command = std::process::Command::new(&self.program);
        command
            .args(&self.args)
            .current_dir(&self.working_dir)
            .env_clear()
            .envs(&self.env)
            .env(reaper::MARKER, run.marker())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some((task_id, attempt)) = task {
            command
                .env("MCP_TASK_ID", task_id)
                .env("MCP_TASK_ATTEMPT", attempt.to_string());
        }
        reaper::spawn(&mut command)
    }

    /// Runs the program once and supervises it until it ends or must be stopped.
    pub(super) fn execute(&self, call: &mut Invocation<'_>) -> Outcome {
        let input = json!({
            "arguments": call.arguments,
            "inputResponses": call.input_responses,
            "state": call.state.cloned().unwrap_or(Value::Null),
        });
        let payload = input.to_string().into_bytes();
        let task = call.host.task_attempt();
        let mut run = Run::start();
        let mut child = match self.spawn(&run, task) {
            Ok(child) => child,
            Err(error) => {
                return Outcome::Retry(format!(
                    "could not start {}: {error}",
                    self.program.display()
                ))
            }
        };
        let pid = child.id() as libc::pid_t;
        run.watch_pipes(&child);
        let (events, received) = crossbeam_channel::unbounded();
        let helpers = start_helpers(&mut child, payload, self.max_output, events);
        let (stdout, stderr) = match helpers {
            Ok(helpers) => helpers,
            Err(error) => {
                terminate_group(pid);
                let _ = reap_program(&mut child, run);
                return Outcome::Retry(format!("could not supervise the program: {error}"));
            }
        };

        let started = Instant::now();
        let mut checks = Checks::new();
        let ended = loop {
            let mut overflowed = false;
            for event in received.try_iter() {
                match event {
                    Event::Progress(progress) => forward(call.host, &progress),
                    Event::Overflow => overflowed = true,
                }
            }
            if overflowed {
                break Ended::Overflow;
            }
            if has_exited(pid) {
                break Ended::Exited;
            }
            let elapsed = started.elapsed();
            if elapsed >= self.timeout() {
                break Ended::TimedOut;
            }
            let pause = checks.next_pause();
            if !call.host.sleep(pause.min(self.timeout() - elapsed)) && call.host.cancelled() {
                break Ended::Stopped;
            }
        };
        if ended == Ended::Exited {
            // Whatever the program left running in its group goes with it.
            kill_group(pid, libc::SIGKILL);
        } else {
            run.record_descendants(pid);
            terminate_group(pid);
        }
        // Descendants that left the group are killed before the output is collected:
        // they may hold stdout open.
        let status = reap_program(&mut child, run);

        let captured = collect(stdout, PIPE_GRACE);
        let stderr_tail = collect(stderr, PIPE_GRACE);
        let outcome = match (ended, status, captured) {
            (Ended::Stopped, _, _) => Outcome::Cancelled,
            (Ended::TimedOut, _, _) => Outcome::Retry(format!(
                "the program ran past its timeout of {} ms and was killed",
                self.timeout().as_millis()
            )),
            (Ended::Overflow, _, _) => Outcome::Retry(format!(
                "the program wrote more than {} bytes to stdout and was killed",
                self.max_output
            )),
            (Ended::Exited, Err(error), _) => {
                Outcome::Retry(format!("could not read the program's exit status: {error}"))
            }
            (Ended::Exited, Ok(_), None) => Outcome::Retry(
                "the program exited but its stdout stayed open (a process outside its \
                 process group holds it)"
                    .into(),
            ),
            (Ended::Exited, Ok(status), Some(captured)) => {
                for event in received.try_iter() {
                    if let Event::Progress(progress) = event {
                        forward(call.host, &progress);
                    }
                }
                interpret(status, &captured.bytes)
            }
        };
        self.log_stderr(stderr_tail.as_deref(), &outcome);
        outcome
    }

    /// Logs the tail of stderr: at warn level when the attempt failed, debug otherwise.
    fn log_stderr(&self, tail: Option<&[u8]>, outcome: &Outcome) {
        let Some(tail) = tail.filter(|tail| !tail.is_empty()) else {
            return;
        };
        let level = match outcome {
            Outcome::Retry(_) => log::Level::Warn,
            _ => log::Level::Debug,
        };
        if !log::log_enabled!(level) {
            return;
        }
        let text = String::from_utf8_lossy(tail);
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            log::log!(
                level,
                "tool {} stderr: {}",
                self.spec.name,
                truncate(line, STDERR_LINE)
            );
        }
    }
}

/// Why supervision stopped watching the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// It exited (or died) on its own.
    Exited,
    /// The host asked the run to stop (cancellation, deadline, shutdown, lease lost).
    Stopped,
    TimedOut,
    Overflow,
}

/// What the stdout reader reports while the program runs.
enum Event {
    Progress(Progress),
    Overflow,
}

/// What the program wrote to stdout (at most the limit).
struct Captured {
    bytes: Vec<u8>,
}

type Helpers = (JoinHandle<Captured>, JoinHandle<Vec<u8>>);

/// Starts the threads that feed stdin and drain stdout and stderr.
fn start_helpers(
    child: &mut Child,
    payload: Vec<u8>,
    limit: usize,
    events: Sender<Event>,
) -> std::io::Result<Helpers> {
    let missing = || std::io::Error::other("a pipe to the program is missing");
    let mut stdin = child.stdin.take().ok_or_else(missing)?;
    let stdout = child.stdout.take().ok_or_else(missing)?;
    let stderr = child.stderr.take().ok_or_else(missing)?;
    // A program that never reads stdin must not block anything: write on a thread and
    // ignore a closed pipe.
    std::thread::Builder::new()
        .name("command-stdin".into())
        .spawn(move || {
            let _ = stdin.write_all(&payload);
        })?;
    let stdout = std::thread::Builder::new()
        .name("command-stdout".into())
        .spawn(move || read_stdout(stdout, limit, &events))?;
    let stderr = std::thread::Builder::new()
        .name("command-stderr".into())
        .spawn(move || read_stderr(stderr))?;
    Ok((stdout, stderr))
}

/// Reads stdout to EOF, keeping at most `limit` bytes and reporting progress lines as
/// they complete. Past the limit it reports the overflow once and discards the rest.
fn read_stdout(mut pipe: impl Read, limit: usize, events: &Sender<Event>) -> Captured {
    let mut bytes = Vec::new();
    let mut line_start = 0;
    let mut overflowed = false;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let read = match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if overflowed {
            continue;
        }
        if bytes.len() + read > limit {
            overflowed = true;
            let _ = events.send(Event::Overflow);
            continue;
        }
        let fresh = bytes.len();
        bytes.extend_from_slice(&chunk[..read]);
        // Only the new bytes are searched: a long line costs one pass, not one per read.
        let mut from = fresh;
        while let Some(offset) = bytes[from..].iter().position(|&b| b == b'\n') {
            let end = from + offset;
            if let Some(progress) = parse_progress(&bytes[line_start..end]) {
                let _ = events.send(Event::Progress(progress));
            }
            line_start = end + 1;
            from = line_start;
        }
    }
    Captured { bytes }
}

/// Reads stderr to EOF, keeping the last [`STDERR_TAIL`] bytes.
fn read_stderr(mut pipe: impl Read) -> Vec<u8> {
    let mut tail = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(read) => {
                tail.extend_from_slice(&chunk[..read]);
                if tail.len() > 2 * STDERR_TAIL {
                    tail.drain(..tail.len() - STDERR_TAIL);
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    if tail.len() > STDERR_TAIL {
        tail.drain(..tail.len() - STDERR_TAIL);
    }
    tail
}

/// Pauses between checks on something that usually happens within milliseconds:
/// [`FIRST_POLL`], doubling up to [`POLL`]. A no-op program is seen to exit about a
/// millisecond after it does, instead of up to [`POLL`] later (which bounded a worker
/// to 50 runs a second), for a few more wake-ups in a long run's first 20 ms.
struct Checks(Duration);

impl Checks {
    fn new() -> Checks {
        Checks(FIRST_POLL)
    }

    fn next_pause(&mut self) -> Duration {
        let pause = self.0;
        self.0 = (pause * 2).min(POLL);
        pause
    }
}

/// A helper thread's result, if it finishes within `grace`.
fn collect<T>(helper: JoinHandle<T>, grace: Duration) -> Option<T> {
    let deadline = Instant::now() + grace;
    let mut checks = Checks::new();
    while !helper.is_finished() && Instant::now() < deadline {
        std::thread::sleep(checks.next_pause());
    }
    if helper.is_finished() {
        helper.join().ok()
    } else {
        None
    }
}

/// Whether the child has exited, without reaping it: while it is unreaped its pid
/// cannot be reused, so signalling its process group stays safe.
fn has_exited(pid: libc::pid_t) -> bool {
    // SAFETY: siginfo_t is plain data; waitid writes into the struct we own.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let options = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        if libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, options) != 0 {
            // Only ECHILD is possible here: nothing left to wait for.
            return true;
        }
        info.si_pid() != 0
    }
}

/// Kills what the run left behind outside its process group, then reaps the program.
/// In this order: while the program is unreaped its pid, which names its group, stays
/// taken.
fn reap_program(child: &mut Child, run: Run) -> std::io::Result<std::process::ExitStatus> {
    let pid = child.id() as libc::pid_t;
    reaper::sweep(run, pid, || has_exited(pid));
    let status = child.wait();
    reaper::forget(pid);
    status
}

fn kill_group(pgid: libc::pid_t, signal: libc::c_int) {
    // SAFETY: plain system call; the group is the unreaped child's, so it is ours.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

/// SIGTERM to the whole group, SIGKILL after [`KILL_GRACE`] (or as soon as the program
/// itself is gone, for anything it left behind). The child is not reaped here.
fn terminate_group(pgid: libc::pid_t) {
    kill_group(pgid, libc::SIGTERM);
    let deadline = Instant::now() + KILL_GRACE;
    while !has_exited(pgid) && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    kill_group(pgid, libc::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands out a few bytes per read, so lines straddle reads.
    struct Trickle<'a>(&'a [u8]);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.len().min(buf.len()).min(3);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn stdout_is_scanned_for_progress_across_reads_and_bounded() {
        let out = b"text\n{\"progress\": 1, \"message\": \"one\"}\n{\"progress\": 2}\ntail";
        let (events, received) = crossbeam_channel::unbounded();
        let captured = read_stdout(Trickle(out), 1000, &events);
        assert_eq!(captured.bytes, out);
        let seen: Vec<f64> = received
            .try_iter()
            .map(|event| match event {
                Event::Progress(progress) => progress.progress,
                Event::Overflow => panic!("no overflow expected"),
            })
            .collect();
        assert_eq!(seen, vec![1.0, 2.0]);

        let captured = read_stdout(Trickle(out), 10, &events);
        assert!(captured.bytes.len() <= 10);
        assert!(matches!(received.try_recv(), Ok(Event::Overflow)));
        assert!(received.try_recv().is_err(), "overflow is reported once");
    }
}

/// Generated stdout read in generated slices (see [`crate::fuzzing`]): the progress
/// reported while reading must not depend on where reads split lines.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;
    use crate::fuzzing::{any_string, config};

    /// Hands out the bytes in reads of the given sizes (cycled).
    struct Slices<'a> {
        data: &'a [u8],
        sizes: Vec<usize>,
        next: usize,
    }

    impl Read for Slices<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let size = self.sizes[self.next % self.sizes.len()];
            self.next += 1;
            let n = self.data.len().min(buf.len()).min(size);
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn line() -> impl Strategy<Value = String> {
        prop_oneof![
            (any::<i32>(), any_string())
                .prop_map(|(n, m)| serde_json::json!({ "progress": n, "message": m }).to_string()),
            Just(r#"{"progress": 1, "extra": 2}"#.to_owned()),
            any_string(),
        ]
    }

    proptest! {
        #![proptest_config(config(128))]

        #[test]
        fn progress_does_not_depend_on_read_boundaries(
            lines in prop::collection::vec(line(), 0..12),
            sizes in prop::collection::vec(1usize..300, 1..6),
            limit in prop_oneof![Just(usize::MAX), 0usize..2000],
        ) {
            let out = lines.join("\n").into_bytes();
            let (events, received) = crossbeam_channel::unbounded();
            let captured = read_stdout(Slices { data: &out, sizes, next: 0 }, limit, &events);
            let events: Vec<Event> = received.try_iter().collect();
            if out.len() <= limit {
                prop_assert_eq!(&captured.bytes, &out);
                let complete = out.iter().rposition(|&b| b == b'\n').map_or(&out[..0], |end| &out[..end]);
                let expected: Vec<f64> = if out.contains(&b'\n') {
                    complete.split(|&b| b == b'\n').filter_map(parse_progress).map(|p| p.progress).collect()
                } else {
                    Vec::new()
                };
                let seen: Vec<f64> = events.iter().map(|event| match event {
                    Event::Progress(progress) => progress.progress,
                    Event::Overflow => f64::NAN,
                }).collect();
                prop_assert_eq!(seen, expected);
            } else {
                prop_assert!(captured.bytes.len() <= limit);
                let overflows = events.iter().filter(|e| matches!(e, Event::Overflow)).count();
                prop_assert_eq!(overflows, 1);
            }
        }
    }
}
