//! What comes back from an upstream: reading a stdio server's output line by line (and
//! its stderr), and routing each message (a response to its waiting call, a
//! notification to the run it belongs to or to the session's notices, a request of the
//! upstream to the call that can answer it), and recording why the stream ended.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use crossbeam_channel::Sender;
use serde_json::{json, Value};

use super::{lock, Ending, Event, Notice, Session, EXIT_WAIT, MAX_MESSAGE, MAX_QUEUED};
use taskd_protocol::LogLevel;
use taskd_tools::{OutputStream, MAX_OUTPUT_LINE};

/// Longest stderr line read at once (a longer one is read in parts).
const MAX_STDERR_LINE: u64 = 64 * 1024;

impl Session {
    /// The reader thread: routes every message until the upstream's stdout closes (or
    /// it sends a message too large to read), then records why the session ended.
    pub(super) fn read(self: Arc<Self>, stdout: File) {
        let mut lines = BufReader::new(stdout);
        let mut line = Vec::new();
        let cause = loop {
            line.clear();
            match (&mut lines)
                .take(MAX_MESSAGE as u64 + 1)
                .read_until(b'\n', &mut line)
            {
                Ok(0) => break None,
                Err(error) => break Some(Ending::ReadFailed(error.to_string())),
                Ok(_) if line.len() > MAX_MESSAGE => {
                    log::warn!(
                        "upstream {} sent a message over {} MiB",
                        self.upstream,
                        MAX_MESSAGE >> 20
                    );
                    break Some(Ending::TooLarge);
                }
                Ok(_) => {}
            }
            let Ok(message) = serde_json::from_slice::<Value>(&line) else {
                // Servers that print to stdout what belongs on stderr: not a message,
                // output.
                if !line.iter().all(u8::is_ascii_whitespace)
                    && !self.pass_output(OutputStream::Stdout, &line)
                {
                    log::debug!("upstream {} wrote a line that is not JSON", self.upstream);
                }
                continue;
            };
            self.route(message);
        };
        self.closed.store(true, Ordering::Release);
        if self.closing.load(Ordering::Acquire) {
            // Closed on purpose: why is recorded, and the closer reaps the program.
            self.ended(true);
            return;
        }
        match cause {
            // The program is still running: the calls hear why now, not once it is
            // stopped.
            Some(cause) => {
                self.record(cause);
                self.ended(false);
                self.stop_program();
            }
            // Its stdout closed: it exited (its status says how), or it is stopped.
            None => {
                let exited = self.exits_within(EXIT_WAIT);
                // Its last words on stderr reach the calls before their end does.
                let stderr_read = lock(&self.stderr_read).take();
                if let Some(read) = stderr_read {
                    let _ = read.recv_timeout(EXIT_WAIT);
                }
                let status = self.stop_program();
                self.record(match status {
                    Some(status) if exited => Ending::Exited(status),
                    _ => Ending::OutputClosed,
                });
                self.ended(false);
            }
        }
    }

    /// Hands a line of the program's output to the calls in flight on a session of one
    /// caller's; `false` when nobody took it (a shared session's output is nobody's).
    pub(super) fn pass_output(&self, stream: OutputStream, line: &[u8]) -> bool {
        if !self.private {
            return false;
        }
        let calls: Vec<Sender<Event>> = lock(&self.calls).values().cloned().collect();
        if calls.is_empty() {
            return false;
        }
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches(['\r', '\n']);
        for part in pieces(text, MAX_OUTPUT_LINE) {
            for events in &calls {
                if events.len() < MAX_QUEUED {
                    let _ = events.send(Event::Output(stream, part.to_owned()));
                }
            }
        }
        true
    }

    /// A log message of the upstream's (`notifications/message`): to the call it is
    /// about (see the module's routing rules), else dropped. `via`: the request whose
    /// answer carried it. A shared session's message that names no call is the one call
    /// in flight's, as a request of the upstream's is; with several, nobody's.
    fn route_log(&self, message: &Value, via: Option<u64>) {
        let params = message.get("params").cloned().unwrap_or_default();
        let level = params
            .get("level")
            .and_then(Value::as_str)
            .and_then(LogLevel::parse)
            .unwrap_or(LogLevel::Info);
        let data = params.get("data").cloned().unwrap_or(Value::Null);
        let followed = related_task(message).and_then(|task| lock(&self.tasks).get(task).cloned());
        let targets: Vec<Sender<Event>> = if let Some(token) = followed {
            lock(&self.calls).get(&token).cloned().into_iter().collect()
        } else if let Some(id) = via {
            lock(&self.pending).get(&id).cloned().into_iter().collect()
        } else {
            let calls = lock(&self.calls);
            if self.private || calls.len() == 1 {
                calls.values().cloned().collect()
            } else {
                Vec::new()
            }
        };
        for events in targets {
            if events.len() < MAX_QUEUED {
                let _ = events.send(Event::Log {
                    level,
                    data: data.clone(),
                });
            }
        }
    }

    pub(super) fn route(&self, message: Value) {
        self.route_via(message, None);
    }

    /// Routes a message of the upstream's; `via`: the request whose answer (an HTTP
    /// upstream's POST) carried it.
    pub(super) fn route_via(&self, message: Value, via: Option<u64>) {
        let method = message.get("method").and_then(Value::as_str);
        let id = message.get("id").filter(|id| !id.is_null());
        match (method, id) {
            (None, Some(id)) => {
                let Some(events) = id.as_u64().and_then(|id| lock(&self.pending).remove(&id))
                else {
                    return;
                };
                let response = match message.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                };
                let _ = events.send(Event::Response(response));
            }
            (Some("ping"), Some(id)) => self.answer(id, Ok(json!({}))),
            (Some(method), Some(id)) => {
                let calls = lock(&self.calls);
                let followed = related_task(&message)
                    .and_then(|task| lock(&self.tasks).get(task).cloned())
                    .and_then(|token| calls.get(&token));
                let mut open = calls.values();
                let only = match followed {
                    Some(events) => (Some(events), None),
                    None => (open.next(), open.next()),
                };
                match only {
                    (Some(events), None) => {
                        let _ = events.send(Event::Request {
                            id: id.clone(),
                            method: method.to_owned(),
                            params: message.get("params").cloned().unwrap_or(json!({})),
                        });
                    }
                    (None, _) => {
                        drop(calls);
                        let refusal = "mcp-taskd answers requests only during a tool call";
                        self.answer(id, Err((-32601, refusal.into())));
                    }
                    (Some(_), Some(_)) => {
                        drop(calls);
                        let refusal = "several calls are in flight on this session: mcp-taskd \
                                       cannot tell whose caller to ask (use session = \"per_call\")";
                        self.answer(id, Err((-32603, refusal.into())));
                    }
                }
            }
            (Some("notifications/progress"), None) => {
                let params = message.get("params").cloned().unwrap_or_default();
                let token = match params.get("progressToken") {
                    Some(Value::String(token)) => token.clone(),
                    Some(other) => other.to_string(),
                    None => return,
                };
                if let Some(events) = lock(&self.calls).get(&token) {
                    let _ = events.send(Event::Progress {
                        progress: params
                            .get("progress")
                            .and_then(Value::as_f64)
                            .unwrap_or(0.0),
                        total: params.get("total").and_then(Value::as_f64),
                        message: params
                            .get("message")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                    });
                }
            }
            (Some("notifications/message"), None) => self.route_log(&message, via),
            (
                Some(
                    "notifications/tools/list_changed"
                    | "notifications/prompts/list_changed"
                    | "notifications/resources/list_changed",
                ),
                None,
            ) => (self.notices)(Notice::ListsChanged),
            _ => {}
        }
    }
}

/// The stderr thread: each line goes to the calls of a session of one caller's, or to
/// the log at debug level (cut to 512 characters) when it is nobody's. `read` is dropped
/// at the end of stderr.
pub(super) fn pass_stderr(session: &Weak<Session>, stderr: File, read: Sender<()>) {
    let mut lines = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut lines)
            .take(MAX_STDERR_LINE)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let Some(session) = session.upgrade() else {
                    break;
                };
                if !session.pass_output(OutputStream::Stderr, &line) {
                    let text = String::from_utf8_lossy(&line);
                    let text: String = text.trim_end().chars().take(512).collect();
                    log::debug!("upstream {} stderr: {text}", session.upstream);
                }
            }
        }
    }
    drop(read);
}

/// `text` in parts of at most `limit` bytes, cut at character boundaries.
fn pieces(mut text: &str, limit: usize) -> Vec<&str> {
    let mut parts = Vec::new();
    while text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        parts.push(&text[..end]);
        text = &text[end..];
    }
    parts.push(text);
    parts
}

/// The upstream task a message of the upstream is about, named in its `_meta`.
fn related_task(message: &Value) -> Option<&str> {
    message
        .get("params")?
        .get("_meta")?
        .get("io.modelcontextprotocol/related-task")?
        .get("taskId")?
        .as_str()
}
