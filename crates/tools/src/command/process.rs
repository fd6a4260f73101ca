// Over 600 lines: one run's poll(2) loop, whose states must be read together.
//! Process supervision: starting the program (no shell, its own process group, no
//! `fork` of the server: see `spawn`), feeding and draining its pipes, stopping the
//! whole group, and having the reaper kill what left the group before the program is
//! reaped.
//!
//! One run is supervised by the thread that runs it, with one `poll(2)` loop over the
//! program's stdin, stdout and stderr and, where the system has one (a pidfd on Linux,
//! see `exit`), a descriptor that becomes readable when the program exits. No helper threads: three a run (stdin writer, stdout and stderr
//! readers) meant three thread starts and the wake-ups between them and the
//! supervising thread, which slept and looked. Together with starting programs without
//! the launcher, the server's CPU per no-op run fell from ~1.4 ms to ~0.9 ms
//! (docs/benchmarks/command-tools.md, "No launcher, a run guard"). No timer either: the loop wakes for
//! output, for the exit, or after [`POLL`] to look at the run's timeout and at
//! cancellation (which the host only shows as a flag).
//!
//! The program dies with the server, even on `kill -9`, through the run guard
//! (`guard`), so nothing of ours runs in the new process before its `exec`, and it can
//! start the way `posix_spawn` starts a program rather than `fork` the server.
//!
//! Everything here is the same on every system; what differs (starting, hearing of the
//! exit, what the reaper and the guard can find) is in `spawn`, `exit`, `reaper` and
//! `guard`, each with a portable implementation.

use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::output::{forward, interpret, is_final_message, parse_progress, Progress};
use super::reaper::{self, Run};
use super::spawn::{self, Program, RunEnv};
use super::CommandTool;
use super::{exit, guard};
use crate::{Invocation, Outcome, OutputStream, MAX_OUTPUT_LINE};
use opentelemetry::KeyValue;
use taskd_protocol::TraceContext;
use taskd_telemetry::{Kind, Span, TASK_ID};

/// Time between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long to wait for the output pipes to close after the program's group is gone.
const PIPE_GRACE: Duration = Duration::from_secs(2);
/// Longest wait in the supervision loop before the timeout and cancellation are looked
/// at again (and, without an exit descriptor, whether the program exited).
const POLL: Duration = Duration::from_millis(20);
/// Without an exit descriptor, the first pause between two looks at the program; each pause
/// doubles up to [`POLL`] (see [`Checks`]).
const FIRST_POLL: Duration = Duration::from_millis(1);
/// Bytes read from a pipe at once: a buffer on the stack, not the heap (a 64 KiB heap
/// buffer per run made glibc's `free` consolidate its arena every run).
const CHUNK: usize = 16 * 1024;
/// Reads from one pipe in one turn of the loop, at most: a program that writes without
/// pause must not keep the loop from looking at the rest.
const READS_PER_TURN: usize = 16;

impl CommandTool {
    /// Starts the program: no shell, its own process group, a clean environment (plus
    /// the run's marker, which its descendants inherit), no `fork` of the server.
    fn spawn(
        &self,
        run: &Run,
        task: Option<(&str, i64)>,
        trace: Option<&TraceContext>,
    ) -> std::io::Result<Program> {
        let launch = self.launch.as_ref().map_err(|error| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, error.clone())
        })?;
        let run_env = RunEnv::new((reaper::MARKER, run.marker()), task, trace)?;
        let program = reaper::spawn(|| {
            let program = spawn::start(launch, &run_env)?;
            let pid = program.pid;
            Ok((program, pid))
        })?;
        guard::cover(program.pid);
        Ok(program)
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
        let trace = call.host.trace();
        // The program's span, from its start to its exit; its TRACEPARENT names it.
        let mut span = self.program_span(trace.as_ref(), task.map(|(id, _)| id));
        let trace = span.context().or(trace);
        let mut run = Run::start();
        let mut child = match self.spawn(&run, task, trace.as_ref()) {
            Ok(child) => child,
            Err(error) => {
                span.fail("start_failed", "the program could not be started".into());
                span.end();
                return Outcome::Retry(format!(
                    "could not start {}: {error}",
                    self.program.display()
                ));
            }
        };
        let pid = child.pid;
        span.set("process.pid", i64::from(pid));
        span.event("process.started", Vec::new());
        run.watch_pipes(&child);
        let mut pump = match Pump::new(&mut child, payload, self.max_output) {
            Ok(pump) => pump,
            Err(error) => {
                kill_group(pid, libc::SIGKILL);
                let _ = reap_program(&mut child, run);
                return Outcome::Retry(format!("could not supervise the program: {error}"));
            }
        };

        let started = Instant::now();
        let mut checks = Checks::new();
        let ended = loop {
            let left = self.timeout().saturating_sub(started.elapsed());
            let pause = if pump.sees_exit() {
                POLL
            } else {
                checks.next_pause()
            };
            pump.turn(pause.min(left));
            for progress in pump.progress.drain(..) {
                forward(call.host, &progress);
            }
            for (stream, line) in pump.lines.drain(..) {
                call.host.output(stream, &line);
            }
            if pump.stdout.overflowed {
                break Ended::Overflow;
            }
            if pump.exited(pid) {
                break Ended::Exited;
            }
            // The host first: a task attempt's deadline (which it enforces) falls no
            // later than this run's own timeout, and names the failure better.
            if call.host.cancelled() {
                break Ended::Stopped;
            }
            if started.elapsed() >= self.timeout() {
                break Ended::TimedOut;
            }
        };
        if ended == Ended::Exited {
            // Whatever the program left running in its group goes with it.
            kill_group(pid, libc::SIGKILL);
        } else {
            run.record_descendants(pid);
            terminate_group(pid, &mut pump);
        }
        // Descendants that left the group are killed before the output is collected:
        // they may hold stdout open.
        let status = reap_program(&mut child, run);
        if let Ok(status) = &status {
            use std::os::unix::process::ExitStatusExt;
            if let Some(code) = status.code() {
                span.set("process.exit.code", i64::from(code));
            }
            if let Some(signal) = status.signal() {
                span.set("process.exit.signal", i64::from(signal));
            }
        }
        if ended != Ended::Exited {
            span.set("mcp_taskd.stopped", ended.reason());
        }
        span.end();

        pump.close_stdin();
        let deadline = Instant::now() + PIPE_GRACE;
        while pump.reading() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            pump.turn(left);
        }
        // A last line without its line end is output too.
        pump.stdout.finish(&mut pump.lines);
        pump.stderr.finish(&mut pump.lines);
        for (stream, line) in pump.lines.drain(..) {
            call.host.output(stream, &line);
        }
        match (ended, status, pump.stdout.closed) {
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
            (Ended::Exited, Ok(_), false) => Outcome::Retry(
                "the program exited but its stdout stayed open (a process outside its \
                 process group holds it)"
                    .into(),
            ),
            (Ended::Exited, Ok(status), true) => {
                for progress in pump.progress.drain(..) {
                    forward(call.host, &progress);
                }
                interpret(status, &pump.stdout.bytes)
            }
        }
    }

    /// The span of one run of the program, under `parent` (the tool run's span).
    fn program_span(&self, parent: Option<&TraceContext>, task_id: Option<&str>) -> Span {
        Span::start(Kind::Internal, parent, None, || {
            let name = self
                .program
                .file_name()
                .map_or_else(|| "program".into(), |name| name.to_string_lossy());
            let mut attributes = vec![KeyValue::new(
                "process.executable.name",
                name.clone().into_owned(),
            )];
            if let Some(task_id) = task_id {
                attributes.push(KeyValue::new(TASK_ID, task_id.to_owned()));
            }
            (format!("exec {name}"), attributes)
        })
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

impl Ended {
    /// Why supervision stopped the program, as its span says.
    fn reason(self) -> &'static str {
        match self {
            Ended::Exited => "exited",
            Ended::Stopped => "stopped",
            Ended::TimedOut => "timed_out",
            Ended::Overflow => "output_overflow",
        }
    }
}

/// What the program wrote to stdout: at most the limit, scanned for progress lines as
/// they complete (the other lines, but for the final message, are its output). Past
/// the limit the rest is discarded.
struct StdoutScan {
    bytes: Vec<u8>,
    limit: usize,
    line_start: usize,
    overflowed: bool,
    /// EOF was read: no process holds the pipe any more.
    closed: bool,
}

impl StdoutScan {
    fn new(limit: usize) -> StdoutScan {
        StdoutScan {
            bytes: Vec::new(),
            limit,
            line_start: 0,
            overflowed: false,
            closed: false,
        }
    }

    /// Takes one read's bytes; the progress lines they complete go to `progress`, the
    /// other lines to `lines`.
    fn push(
        &mut self,
        chunk: &[u8],
        progress: &mut Vec<Progress>,
        lines: &mut Vec<(OutputStream, String)>,
    ) {
        if self.overflowed {
            return;
        }
        if self.bytes.len() + chunk.len() > self.limit {
            self.overflowed = true;
            return;
        }
        let fresh = self.bytes.len();
        self.bytes.extend_from_slice(chunk);
        // Only the new bytes are searched: a long line costs one pass, not one per read.
        let mut from = fresh;
        while let Some(offset) = self.bytes[from..].iter().position(|&b| b == b'\n') {
            let end = from + offset;
            let line = &self.bytes[self.line_start..end];
            if let Some(line) = parse_progress(line) {
                progress.push(line);
            } else if !is_final_message(line) {
                output_lines(OutputStream::Stdout, line, lines);
            }
            self.line_start = end + 1;
            from = self.line_start;
        }
    }

    /// The last line, when the program ended without a line end after it.
    fn finish(&mut self, lines: &mut Vec<(OutputStream, String)>) {
        let line = &self.bytes[self.line_start.min(self.bytes.len())..];
        if !line.is_empty() && parse_progress(line).is_none() && !is_final_message(line) {
            output_lines(OutputStream::Stdout, line, lines);
        }
        self.line_start = self.bytes.len();
    }
}

/// `line` (without its line end) as output lines of `stream`: text (bytes that are not
/// UTF-8 replaced), cut every [`MAX_OUTPUT_LINE`] bytes; a trailing `\r` dropped.
fn output_lines(stream: OutputStream, line: &[u8], lines: &mut Vec<(OutputStream, String)>) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    for piece in line.chunks(MAX_OUTPUT_LINE) {
        lines.push((stream, String::from_utf8_lossy(piece).into_owned()));
    }
}

/// Stderr, cut into output lines (it is not logged: the task keeps it, redacted,
/// where only its owner reads it).
#[derive(Default)]
struct StderrLines {
    /// The start of a line whose end has not come yet (at most [`MAX_OUTPUT_LINE`]).
    partial: Vec<u8>,
}

impl StderrLines {
    fn push(&mut self, chunk: &[u8], lines: &mut Vec<(OutputStream, String)>) {
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            if self.partial.is_empty() {
                output_lines(OutputStream::Stderr, &rest[..end], lines);
            } else {
                self.partial.extend_from_slice(&rest[..end]);
                output_lines(OutputStream::Stderr, &self.partial, lines);
                self.partial.clear();
            }
            rest = &rest[end + 1..];
        }
        self.partial.extend_from_slice(rest);
        // A line that never ends is output a piece at a time.
        while self.partial.len() >= MAX_OUTPUT_LINE {
            let piece: Vec<u8> = self.partial.drain(..MAX_OUTPUT_LINE).collect();
            output_lines(OutputStream::Stderr, &piece, lines);
        }
    }

    /// The last line, when stderr ended without a line end after it.
    fn finish(&mut self, lines: &mut Vec<(OutputStream, String)>) {
        if !self.partial.is_empty() {
            output_lines(OutputStream::Stderr, &self.partial, lines);
            self.partial.clear();
        }
    }
}

/// The program's pipes, its exit descriptor, and what came out of them.
struct Pump {
    stdin: Option<OwnedFd>,
    payload: Vec<u8>,
    written: usize,
    stdout_pipe: Option<OwnedFd>,
    stderr_pipe: Option<OwnedFd>,
    /// Readable once the program has exited, where the system has one (see `exit`).
    exit_fd: Option<OwnedFd>,
    exit_fired: bool,
    stdout: StdoutScan,
    stderr: StderrLines,
    /// Progress lines read and not yet forwarded.
    progress: Vec<Progress>,
    /// Output lines read and not yet handed to the host.
    lines: Vec<(OutputStream, String)>,
}

/// Which of the pump's descriptors a `pollfd` stands for.
#[derive(Clone, Copy)]
enum Slot {
    Stdin,
    Stdout,
    Stderr,
    Exit,
}

impl Pump {
    /// Takes the child's pipes (non-blocking from here on) and writes what of the
    /// payload fits at once: usually all of it, and stdin is closed.
    fn new(child: &mut Program, payload: Vec<u8>, limit: usize) -> std::io::Result<Pump> {
        let missing = || std::io::Error::other("a pipe to the program is missing");
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stderr = child.stderr.take().ok_or_else(missing)?;
        for fd in [&stdin, &stdout, &stderr] {
            // SAFETY: plain system call on a descriptor we own. A pipe has no other
            // status flag worth keeping.
            if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        let mut pump = Pump {
            stdin: Some(stdin),
            payload,
            written: 0,
            stdout_pipe: Some(stdout),
            stderr_pipe: Some(stderr),
            exit_fd: exit::descriptor(child.pid),
            exit_fired: false,
            stdout: StdoutScan::new(limit),
            stderr: StderrLines::default(),
            progress: Vec::new(),
            lines: Vec::new(),
        };
        pump.feed();
        Ok(pump)
    }

    /// Whether the loop hears of the program's exit by itself (a descriptor), rather than by
    /// looking.
    fn sees_exit(&self) -> bool {
        self.exit_fd.is_some()
    }

    /// Whether the program has exited (it is not reaped: its pid stays taken).
    fn exited(&self, pid: libc::pid_t) -> bool {
        if self.exit_fd.is_some() {
            self.exit_fired
        } else {
            exit::has_exited(pid)
        }
    }

    /// Whether stdout or stderr may still bring something.
    fn reading(&self) -> bool {
        self.stdout_pipe.is_some() || self.stderr_pipe.is_some()
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits up to `wait` for any of the pipes or the exit, and serves what is ready.
    fn turn(&mut self, wait: Duration) {
        let mut fds = [libc::pollfd {
            fd: -1,
            events: 0,
            revents: 0,
        }; 4];
        let mut slots = [Slot::Exit; 4];
        let mut count = 0;
        let mut watch = |fd: &OwnedFd, events: libc::c_short, slot: Slot| {
            fds[count] = libc::pollfd {
                fd: fd.as_raw_fd(),
                events,
                revents: 0,
            };
            slots[count] = slot;
            count += 1;
        };
        if let Some(fd) = &self.stdin {
            watch(fd, libc::POLLOUT, Slot::Stdin);
        }
        if let Some(fd) = &self.stdout_pipe {
            watch(fd, libc::POLLIN, Slot::Stdout);
        }
        if let Some(fd) = &self.stderr_pipe {
            watch(fd, libc::POLLIN, Slot::Stderr);
        }
        if let (Some(fd), false) = (&self.exit_fd, self.exit_fired) {
            watch(fd, libc::POLLIN, Slot::Exit);
        }
        if count == 0 {
            std::thread::sleep(wait);
            return;
        }
        // Rounded up: a wait of a few µs must not become a busy loop of zero timeouts.
        let millis = wait.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` holds `count` initialised entries that outlive the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), count as libc::nfds_t, millis) };
        if ready <= 0 {
            // A timeout, or EINTR: the caller looks at the clock and comes back.
            return;
        }
        for (pollfd, slot) in fds[..count].iter().zip(slots) {
            if pollfd.revents == 0 {
                continue;
            }
            match slot {
                Slot::Stdin => self.feed(),
                Slot::Stdout => self.drain_stdout(),
                Slot::Stderr => self.drain_stderr(),
                Slot::Exit => self.exit_fired = true,
            }
        }
    }

    /// Writes what of the payload the pipe takes; closes stdin once all is written or
    /// the program stopped reading (a closed pipe is not an error: it may not need it).
    fn feed(&mut self) {
        let Some(fd) = &self.stdin else {
            return;
        };
        while self.written < self.payload.len() {
            let rest = &self.payload[self.written..];
            // SAFETY: writes from a buffer we own, of the length given.
            let wrote = unsafe { libc::write(fd.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
            if wrote > 0 {
                self.written += wrote as usize;
                continue;
            }
            let error = std::io::Error::last_os_error();
            match error.kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock => return,
                _ => break,
            }
        }
        self.stdin = None;
    }

    fn drain_stdout(&mut self) {
        let Pump {
            stdout_pipe,
            stdout,
            progress,
            lines,
            ..
        } = self;
        if read_ready(stdout_pipe, |bytes| stdout.push(bytes, progress, lines)) {
            stdout.closed = true;
        }
    }

    fn drain_stderr(&mut self) {
        let Pump {
            stderr_pipe,
            stderr,
            lines,
            ..
        } = self;
        read_ready(stderr_pipe, |bytes| stderr.push(bytes, lines));
    }
}

/// Reads what a ready pipe holds (up to [`READS_PER_TURN`] reads) into `take`; at EOF
/// (or a failed read) closes it and returns `true`.
fn read_ready(pipe: &mut Option<OwnedFd>, mut take: impl FnMut(&[u8])) -> bool {
    let Some(fd) = pipe else {
        return false;
    };
    let mut chunk = std::mem::MaybeUninit::<[u8; CHUNK]>::uninit();
    for _ in 0..READS_PER_TURN {
        // SAFETY: reads into a buffer we own, of the length given.
        let read = unsafe { libc::read(fd.as_raw_fd(), chunk.as_mut_ptr().cast(), CHUNK) };
        if read > 0 {
            // SAFETY: `read` initialised the first `read` bytes (at most CHUNK).
            let bytes =
                unsafe { std::slice::from_raw_parts(chunk.as_ptr().cast::<u8>(), read as usize) };
            take(bytes);
            continue;
        }
        if read < 0 {
            match std::io::Error::last_os_error().kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock => return false,
                _ => {}
            }
        }
        *pipe = None;
        return true;
    }
    false
}

/// Without an exit descriptor, pauses between looks at a program that usually exits within
/// milliseconds: [`FIRST_POLL`], doubling up to [`POLL`]. Output wakes the loop sooner.
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

/// Kills what the run left behind outside its process group, then reaps the program.
/// In this order: while the program is unreaped its pid, which names its group, stays
/// taken.
fn reap_program(child: &mut Program, run: Run) -> std::io::Result<std::process::ExitStatus> {
    let pid = child.pid;
    reaper::sweep(run, pid, || exit::has_exited(pid));
    guard::release(pid);
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
/// itself is gone, for anything it left behind), draining its pipes meanwhile (a
/// program that writes on its way out must not block on a full pipe). Progress read
/// here is dropped: the run is over. The child is not reaped here.
fn terminate_group(pgid: libc::pid_t, pump: &mut Pump) {
    kill_group(pgid, libc::SIGTERM);
    let deadline = Instant::now() + KILL_GRACE;
    while !pump.exited(pgid) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        pump.turn(left.min(POLL));
        pump.progress.clear();
    }
    kill_group(pgid, libc::SIGKILL);
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    /// Feeds everything `pipe` hands out to a scan, read by read, as the pump does.
    pub(super) fn scan(mut pipe: impl Read, limit: usize) -> (StdoutScan, Vec<Progress>) {
        let (scan, progress, _) = scan_lines(&mut pipe, limit);
        (scan, progress)
    }

    /// [`scan`], with the output lines it found too (the last one included).
    fn scan_lines(
        mut pipe: impl Read,
        limit: usize,
    ) -> (StdoutScan, Vec<Progress>, Vec<(OutputStream, String)>) {
        let mut scan = StdoutScan::new(limit);
        let (mut progress, mut lines) = (Vec::new(), Vec::new());
        let mut chunk = [0u8; 1024];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) | Err(_) => {
                    scan.finish(&mut lines);
                    return (scan, progress, lines);
                }
                Ok(read) => scan.push(&chunk[..read], &mut progress, &mut lines),
            }
        }
    }

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
        let (whole, progress) = scan(Trickle(out), 1000);
        assert_eq!(whole.bytes, out);
        assert!(!whole.overflowed);
        let seen: Vec<f64> = progress.iter().map(|line| line.progress).collect();
        assert_eq!(seen, vec![1.0, 2.0]);

        let (bounded, _) = scan(Trickle(out), 10);
        assert!(bounded.bytes.len() <= 10);
        assert!(bounded.overflowed);
    }

    #[test]
    fn output_is_every_line_but_the_protocols_across_reads() {
        let out = b"compiling\r\n{\"progress\": 1}\nlinking\n{\"result\": {\"content\": []}}\ntail";
        let (_, progress, lines) = scan_lines(Trickle(out), 1000);
        assert_eq!(progress.len(), 1);
        let texts: Vec<&str> = lines.iter().map(|(_, line)| line.as_str()).collect();
        assert_eq!(texts, ["compiling", "linking", "tail"]);
        assert!(lines
            .iter()
            .all(|(stream, _)| *stream == OutputStream::Stdout));

        let mut stderr = StderrLines::default();
        let mut lines = Vec::new();
        for piece in [&b"warn"[..], b"ing: x\nsecond", b" line\n", b"unterminated"] {
            stderr.push(piece, &mut lines);
        }
        stderr.finish(&mut lines);
        let texts: Vec<&str> = lines.iter().map(|(_, line)| line.as_str()).collect();
        assert_eq!(texts, ["warning: x", "second line", "unterminated"]);

        // A line that never ends comes in pieces of at most MAX_OUTPUT_LINE bytes.
        let mut lines = Vec::new();
        StderrLines::default().push(&vec![b'y'; 2 * MAX_OUTPUT_LINE + 1], &mut lines);
        assert_eq!(lines.len(), 2);
        assert!(lines.iter().all(|(_, line)| line.len() == MAX_OUTPUT_LINE));
    }
}

/// Generated stdout read in generated slices (see [`taskd_testkit`]): the progress
/// reported while reading must not depend on where reads split lines.
#[cfg(test)]
mod fuzz {
    use std::io::Read;

    use proptest::prelude::*;

    use super::tests::scan;
    use super::*;
    use taskd_testkit::{any_string, config};

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
            let (captured, progress) = scan(Slices { data: &out, sizes, next: 0 }, limit);
            if out.len() <= limit {
                prop_assert!(!captured.overflowed);
                prop_assert_eq!(&captured.bytes, &out);
                let complete = out.iter().rposition(|&b| b == b'\n').map_or(&out[..0], |end| &out[..end]);
                let expected: Vec<f64> = if out.contains(&b'\n') {
                    complete.split(|&b| b == b'\n').filter_map(parse_progress).map(|p| p.progress).collect()
                } else {
                    Vec::new()
                };
                let seen: Vec<f64> = progress.iter().map(|line| line.progress).collect();
                prop_assert_eq!(seen, expected);
            } else {
                prop_assert!(captured.bytes.len() <= limit);
                prop_assert!(captured.overflowed);
            }
        }
    }
}
