//! A task's output, on its way from a running attempt to the store (issue 47): the
//! rules of `[output]` (the cap, the redaction), and the buffer that turns the lines a
//! run writes into a few batched writes.
//!
//! **What is kept, and what it costs.** Lines are redacted first, then held in memory
//! and written in one fenced store write at most every [`FLUSH_EVERY`] (and at the
//! attempt's end, before its outcome is committed): a tool that prints a line a
//! millisecond costs four writes a second, not a thousand. The buffer keeps at most the
//! task's cap (the newest lines; the others are counted as dropped), and so does the
//! store: a tool that prints 100 MB as fast as it can leaves at most its cap behind, and
//! writes at most its cap per flush. The output survives a restart or a `kill -9` up to
//! the last flush, is in every backup, and goes with its task.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use regex::Regex;
use serde_json::Value;

use crate::config::OutputConfig;
use taskd_base::clock::now_ms;
use taskd_protocol::LogLevel;
/// The streams a line comes from; the stores read it from here.
pub use taskd_tools::OutputStream;

/// A line of a task's output, as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputLine {
    /// The attempt that wrote it (1-based).
    pub attempt: i64,
    /// When it was written (Unix ms).
    pub at_ms: i64,
    pub stream: OutputStream,
    pub text: String,
}

/// Which lines of a task's output to read.
#[derive(Debug, Clone, Copy)]
pub struct OutputRead {
    /// Lines after this position (0: from the first kept).
    pub after: i64,
    /// Only this attempt's lines.
    pub attempt: Option<i64>,
    /// At most this many lines.
    pub limit: usize,
    /// The newest `limit` lines (after `after`) rather than the oldest.
    pub newest: bool,
}

/// Lines of a task's output, oldest first, each with its position.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutputPage {
    pub lines: Vec<(i64, OutputLine)>,
    /// Lines dropped since the task began, to keep its output within its cap.
    pub dropped: i64,
    /// The position to read after next: the last line's, or the one asked for.
    pub next: i64,
}

impl OutputRead {
    /// The newest lines, enough for [`OutputPage::tail`].
    pub fn tail() -> OutputRead {
        OutputRead {
            after: 0,
            attempt: None,
            limit: 64,
            newest: true,
        }
    }
}

impl OutputPage {
    /// The page `read` asks for, from the stored batches: each its first line's
    /// position, its attempt and its lines as [`OutputBatch::encode`] wrote them, given
    /// in the order `read` walks them (newest first when `read.newest`), from the batch
    /// holding the line after `read.after`. Stops taking batches once the page is full.
    pub fn assemble<E>(
        read: &OutputRead,
        dropped: i64,
        batches: impl IntoIterator<Item = Result<(i64, i64, String), E>>,
    ) -> Result<OutputPage, E> {
        let mut lines: Vec<(i64, OutputLine)> = Vec::new();
        for batch in batches {
            if lines.len() >= read.limit {
                break;
            }
            let (seq, attempt, body) = batch?;
            let numbered = OutputBatch::decode(attempt, &body)
                .into_iter()
                .enumerate()
                .map(|(index, line)| (seq + index as i64, line))
                .filter(|(position, _)| *position > read.after);
            let room = read.limit - lines.len();
            if read.newest {
                let mut numbered: Vec<_> = numbered.collect();
                let start = numbered.len().saturating_sub(room);
                lines.extend(numbered.drain(start..).rev());
            } else {
                lines.extend(numbered.take(room));
            }
        }
        if read.newest {
            lines.reverse();
        }
        let next = lines.last().map_or(read.after, |(position, _)| *position);
        Ok(OutputPage {
            lines,
            dropped,
            next,
        })
    }

    /// The page as text: its lines, and a line naming the attempt where a later
    /// attempt's lines begin (a retry prints its output again from the start).
    pub fn text(&self) -> String {
        let mut text = String::new();
        let mut attempt = None;
        for (_, line) in &self.lines {
            if attempt.is_some_and(|previous| previous != line.attempt) {
                text.push_str(&format!("--- attempt {} ---\n", line.attempt));
            }
            attempt = Some(line.attempt);
            text.push_str(&line.text);
            text.push('\n');
        }
        text
    }

    /// The newest lines of the page (status lines left out: the task's status message
    /// shows the newest) that fit in [`TAIL_BYTES`], oldest first; a newest line longer
    /// than that is cut to its end.
    pub fn tail(&self) -> Vec<&str> {
        let mut tail = Vec::new();
        let mut bytes = 0;
        for (_, line) in self.lines.iter().rev() {
            if line.stream == OutputStream::Status {
                continue;
            }
            let text = line.text.as_str();
            if bytes + text.len() + 1 > TAIL_BYTES {
                if tail.is_empty() {
                    let mut start = text.len() - TAIL_BYTES;
                    while !text.is_char_boundary(start) {
                        start += 1;
                    }
                    tail.push(&text[start..]);
                }
                break;
            }
            bytes += text.len() + 1;
            tail.push(text);
        }
        tail.reverse();
        tail
    }
}

/// Bytes of the last lines a failure message shows ([`OutputTail`]), and
/// `task_status` of a running task.
pub const TAIL_BYTES: usize = 2048;

/// The last lines a run wrote (its program's stdout and stderr, its log messages; not
/// its status messages), at most [`TAIL_BYTES`]: what says why a run failed.
#[derive(Debug, Default)]
pub struct OutputTail {
    lines: VecDeque<String>,
    bytes: usize,
}

impl OutputTail {
    pub fn push(&mut self, stream: OutputStream, line: &str) {
        if stream == OutputStream::Status {
            return;
        }
        self.bytes += line.len() + 1;
        self.lines.push_back(line.to_owned());
        while self.bytes > TAIL_BYTES {
            let Some(oldest) = self.lines.pop_front() else {
                break;
            };
            self.bytes -= oldest.len() + 1;
        }
    }

    /// `reason`, followed by the tail when there is one.
    pub fn explain(&self, reason: &str) -> String {
        explain(reason, self.lines.iter().map(String::as_str))
    }
}

/// A log message as output lines, each led by its level (tasks carry no log stream,
/// SEP-2663: a tool's log messages are kept as output).
pub fn log_lines(level: LogLevel, data: &Value) -> Vec<String> {
    let text = match data {
        Value::String(text) => Cow::Borrowed(text.as_str()),
        other => Cow::Owned(other.to_string()),
    };
    text.lines()
        .map(|line| format!("{}: {line}", level.as_str()))
        .collect()
}

/// What precedes the end of a run's output in a failure message.
pub const TAIL_HEADING: &str = "The end of its output:";

/// `reason`, followed by `lines` (the end of a run's output) when there are any.
pub fn explain<'a>(reason: &str, lines: impl Iterator<Item = &'a str>) -> String {
    let tail: Vec<&str> = lines.collect();
    if tail.is_empty() {
        reason.to_owned()
    } else {
        format!("{reason}. {TAIL_HEADING}\n{}", tail.join("\n"))
    }
}

/// Longest time a line waits in memory before it is written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// What replaces a redacted match.
const REDACTED: &str = "[redacted]";

/// `[output]`, compiled.
#[derive(Debug)]
pub struct OutputRules {
    /// Bytes of a task's output kept when its tool sets no cap of its own.
    pub max_bytes_per_task: u64,
    /// Every `redact` pattern, as one alternation.
    redact: Option<Regex>,
}

impl OutputRules {
    /// Compiles `config`; the error names the pattern that does not compile.
    pub fn new(config: &OutputConfig) -> Result<OutputRules, RedactError> {
        for pattern in &config.redact {
            Regex::new(pattern).map_err(|error| RedactError {
                pattern: pattern.clone(),
                why: error.to_string(),
            })?;
        }
        let redact = if config.redact.is_empty() {
            None
        } else {
            let alternation = config
                .redact
                .iter()
                .map(|pattern| format!("(?:{pattern})"))
                .collect::<Vec<_>>()
                .join("|");
            Some(Regex::new(&alternation).map_err(|error| RedactError {
                pattern: alternation.clone(),
                why: error.to_string(),
            })?)
        };
        Ok(OutputRules {
            max_bytes_per_task: config.max_bytes_per_task,
            redact,
        })
    }

    /// `line` with every match of a `redact` pattern replaced.
    pub fn redact<'a>(&self, line: &'a str) -> Cow<'a, str> {
        match &self.redact {
            Some(regex) => regex.replace_all(line, REDACTED),
            None => Cow::Borrowed(line),
        }
    }
}

impl Default for OutputRules {
    fn default() -> Self {
        OutputRules {
            max_bytes_per_task: OutputConfig::default().max_bytes_per_task,
            redact: None,
        }
    }
}

/// An `output.redact` pattern that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("output.redact: {pattern:?} is not a regular expression: {why}")]
pub struct RedactError {
    pub pattern: String,
    pub why: String,
}

/// The lines of one attempt not written yet: at most `cap` bytes, the newest.
pub(crate) struct OutputBuffer {
    attempt: i64,
    cap: u64,
    lines: VecDeque<OutputLine>,
    bytes: u64,
    /// Lines dropped here, before any write, to keep within the cap.
    pub(crate) dropped: u64,
    last_flush: Instant,
}

impl OutputBuffer {
    pub(crate) fn new(attempt: i64, cap: u64) -> OutputBuffer {
        OutputBuffer {
            attempt,
            cap,
            lines: VecDeque::new(),
            bytes: 0,
            dropped: 0,
            last_flush: Instant::now(),
        }
    }

    /// Whether anything is kept at all (a cap of 0 keeps nothing).
    pub(crate) fn keeps(&self) -> bool {
        self.cap > 0
    }

    pub(crate) fn push(&mut self, stream: OutputStream, text: String) {
        if !self.keeps() {
            return;
        }
        self.bytes += text.len() as u64;
        self.lines.push_back(OutputLine {
            attempt: self.attempt,
            at_ms: now_ms(),
            stream,
            text,
        });
        while self.bytes > self.cap {
            let Some(oldest) = self.lines.pop_front() else {
                break;
            };
            self.bytes -= oldest.text.len() as u64;
            self.dropped += 1;
        }
    }

    /// Whether a write is due: lines wait at most [`FLUSH_EVERY`].
    pub(crate) fn due(&self) -> bool {
        !self.lines.is_empty() && self.last_flush.elapsed() >= FLUSH_EVERY
    }

    /// What to write now (the buffer starts over); `None` when there is nothing.
    pub(crate) fn take(&mut self) -> Option<OutputBatch> {
        self.last_flush = Instant::now();
        self.bytes = 0;
        let batch = OutputBatch {
            attempt: self.attempt,
            lines: self.lines.drain(..).collect(),
            dropped: std::mem::take(&mut self.dropped),
            cap: self.cap,
        };
        (!batch.lines.is_empty() || batch.dropped > 0).then_some(batch)
    }
}

/// Lines of one attempt written together (a store keeps them as one row: see
/// [`OutputBatch::encode`]), with the lines dropped before them and the task's cap.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputBatch {
    pub attempt: i64,
    pub lines: Vec<OutputLine>,
    /// Lines the attempt dropped since its last batch, to keep within the cap.
    pub dropped: u64,
    /// Bytes of the task's output kept at most.
    pub cap: u64,
}

impl OutputBatch {
    /// How many of the oldest lines to leave out so that the rest fit in `room`
    /// bytes, and the bytes of the rest.
    pub fn newest_within(&self, room: u64) -> (usize, u64) {
        let mut bytes: u64 = self.lines.iter().map(OutputLine::bytes).sum();
        let mut first = 0;
        while bytes > room && first < self.lines.len() {
            bytes -= self.lines[first].bytes();
            first += 1;
        }
        (first, bytes)
    }

    /// `lines` as a store keeps a batch: a JSON array of `[at_ms, stream, text]`
    /// (one row per batch, not per line: a task that prints ten lines costs one
    /// insert, measured in docs/benchmarks/output.md).
    pub fn encode(lines: &[OutputLine]) -> String {
        let rows: Vec<Value> = lines
            .iter()
            .map(|line| serde_json::json!([line.at_ms, line.stream.as_str(), line.text]))
            .collect();
        Value::Array(rows).to_string()
    }

    /// The lines of a stored batch of `attempt` ([`OutputBatch::encode`]); a line the
    /// store does not read back is left out.
    pub fn decode(attempt: i64, stored: &str) -> Vec<OutputLine> {
        let Ok(Value::Array(rows)) = serde_json::from_str::<Value>(stored) else {
            return Vec::new();
        };
        rows.iter()
            .filter_map(|row| {
                Some(OutputLine {
                    attempt,
                    at_ms: row.get(0)?.as_i64()?,
                    stream: OutputStream::parse(row.get(1)?.as_str()?)?,
                    text: row.get(2)?.as_str()?.to_owned(),
                })
            })
            .collect()
    }
}

impl OutputLine {
    /// Bytes the line counts for against the cap.
    pub fn bytes(&self) -> u64 {
        self.text.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_replaces_every_match_of_every_pattern() {
        let rules = OutputRules::new(&OutputConfig {
            max_bytes_per_task: 10,
            redact: vec![
                r"(?i)bearer [a-z0-9._-]+".into(),
                r"ghp_[A-Za-z0-9]{8,}".into(),
            ],
        })
        .expect("patterns compile");
        assert_eq!(
            rules.redact("auth: Bearer abc.DEF-1 then ghp_abcdefgh12 and ghp_short"),
            "auth: [redacted] then [redacted] and ghp_short"
        );
        assert_eq!(rules.redact("nothing here"), "nothing here");
        let error = OutputRules::new(&OutputConfig {
            max_bytes_per_task: 10,
            redact: vec!["(unclosed".into()],
        })
        .expect_err("a bad pattern is refused");
        assert!(error.to_string().contains("(unclosed"), "{error}");
    }

    #[test]
    fn the_buffer_keeps_the_newest_lines_within_its_cap_and_counts_the_rest() {
        let mut buffer = OutputBuffer::new(2, 10);
        for text in ["aaaa", "bbbb", "cccc"] {
            buffer.push(OutputStream::Stderr, text.into());
        }
        let batch = buffer.take().expect("a batch");
        let texts: Vec<&str> = batch.lines.iter().map(|line| line.text.as_str()).collect();
        assert_eq!(texts, ["bbbb", "cccc"]);
        assert_eq!(batch.dropped, 1);
        assert_eq!(batch.attempt, 2);
        assert!(batch.lines.iter().all(|line| line.attempt == 2));
        assert_eq!(buffer.take(), None, "nothing more, the drop counted once");

        let mut none = OutputBuffer::new(1, 0);
        none.push(OutputStream::Stdout, "x".into());
        assert!(!none.keeps() && none.take().is_none());
    }

    #[test]
    fn a_batch_reads_back_as_it_was_written_and_keeps_its_newest_lines_within_room() {
        let line = |text: &str, stream| OutputLine {
            attempt: 3,
            at_ms: 1_700_000_000_123,
            stream,
            text: text.into(),
        };
        let batch = OutputBatch {
            attempt: 3,
            lines: vec![
                line("compiling \"a\"", OutputStream::Stderr),
                line("ok", OutputStream::Stdout),
                line("é 🙂", OutputStream::Log),
            ],
            dropped: 0,
            cap: 100,
        };
        let stored = OutputBatch::encode(&batch.lines);
        assert_eq!(OutputBatch::decode(3, &stored), batch.lines);
        assert_eq!(OutputBatch::decode(3, "not json"), Vec::new());
        let all: u64 = batch.lines.iter().map(OutputLine::bytes).sum();
        assert_eq!(batch.newest_within(all), (0, all));
        assert_eq!(batch.newest_within(9), (1, 9));
        assert_eq!(batch.newest_within(8), (2, "é 🙂".len() as u64));
        assert_eq!(batch.newest_within(0), (3, 0));
    }
}
