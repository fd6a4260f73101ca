//! What comes back from an upstream: reading a stdio server's output line by line, and
//! routing each message (a response to its waiting call, a notification to the run it
//! belongs to or to the session's notices, a request of the upstream to the call that
//! can answer it).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Value};

use super::{lock, Event, Notice, Session, MAX_LINE};

impl Session {
    /// The reader thread: routes every message until the upstream's stdout closes.
    pub(super) fn read(self: Arc<Self>, stdout: File) {
        let mut lines = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut lines)
                .take(MAX_LINE as u64 + 1)
                .read_until(b'\n', &mut line)
            {
                Ok(0) | Err(_) => break,
                Ok(_) if line.len() > MAX_LINE => {
                    log::warn!("upstream {} sent a message over 64 MiB", self.upstream);
                    break;
                }
                Ok(_) => {}
            }
            let Ok(message) = serde_json::from_slice::<Value>(&line) else {
                // Servers that print to stdout what belongs on stderr: not a message.
                if !line.iter().all(u8::is_ascii_whitespace) {
                    log::debug!("upstream {} wrote a line that is not JSON", self.upstream);
                }
                continue;
            };
            self.route(message);
        }
        self.closed.store(true, Ordering::Release);
        let expected = self.closing.load(Ordering::Acquire);
        if !expected {
            // Stops what is left of the program and reaps it.
            self.close();
        }
        self.ended(expected);
    }

    pub(super) fn route(&self, message: Value) {
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

/// The upstream task a message of the upstream is about, named in its `_meta`.
fn related_task(message: &Value) -> Option<&str> {
    message
        .get("params")?
        .get("_meta")?
        .get("io.modelcontextprotocol/related-task")?
        .get("taskId")?
        .as_str()
}
