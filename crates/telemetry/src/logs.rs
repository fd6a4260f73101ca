//! The log's two formats: `text` (env_logger's line, the default) and `json`
//! (`[log] format = "json"`): one JSON object a line, for journald and Loki, with
//! `timestamp`, `level`, `target`, `message`, and `task_id`, `trace_id` and `span_id`
//! when the line is written while a task attempt or a request is being served (the
//! [`LogScope`] of this thread). The messages are the text format's: nothing sensitive
//! is logged in either. The format is read at start-up only (restart to change it).

use std::cell::RefCell;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};

use crate::LogFormat;
use taskd_protocol::TraceContext;

static JSON: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// What this thread is working on, for the JSON log's correlation fields.
    static SCOPE: RefCell<Option<Scope>> = const { RefCell::new(None) };
}

#[derive(Clone)]
struct Scope {
    task_id: Option<String>,
    trace: Option<TraceContext>,
}

/// Installs the logger (env_logger, filtered by `RUST_LOG`, else `default_level`),
/// writing `format`.
pub fn init(default_level: &str, format: LogFormat) {
    let mut builder =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_level));
    if format == LogFormat::Json {
        JSON.store(true, Ordering::Relaxed);
        builder.format(|out, record| writeln!(out, "{}", json_line(record)));
    }
    builder.init();
}

/// One log record as a JSON object.
fn json_line(record: &log::Record<'_>) -> Value {
    let mut line = Map::new();
    line.insert(
        "timestamp".into(),
        Value::from(taskd_base::clock::rfc3339(taskd_base::clock::now_ms())),
    );
    line.insert("level".into(), Value::from(record.level().as_str()));
    line.insert("target".into(), Value::from(record.target()));
    line.insert("message".into(), Value::from(record.args().to_string()));
    SCOPE.with(|scope| {
        if let Some(scope) = &*scope.borrow() {
            if let Some(task_id) = &scope.task_id {
                line.insert("task_id".into(), Value::from(task_id.as_str()));
            }
            if let Some(trace) = &scope.trace {
                line.insert("trace_id".into(), Value::from(trace.trace_id()));
                line.insert("span_id".into(), Value::from(trace.span_id()));
            }
        }
    });
    Value::Object(line)
}

/// While it lives, this thread's log lines name `task_id` and `trace` (the JSON
/// format; the text format is unchanged). Scopes nest: the outer one comes back.
pub struct LogScope {
    previous: Option<Scope>,
    active: bool,
}

impl LogScope {
    /// A scope for the lines written until it drops; nothing at all with the text
    /// format.
    pub fn enter(task_id: Option<&str>, trace: Option<&TraceContext>) -> LogScope {
        if !JSON.load(Ordering::Relaxed) {
            return LogScope {
                previous: None,
                active: false,
            };
        }
        let scope = Scope {
            task_id: task_id.map(str::to_owned),
            trace: trace.cloned(),
        };
        let previous = SCOPE.with(|current| current.replace(Some(scope)));
        LogScope {
            previous,
            active: true,
        }
    }
}

impl Drop for LogScope {
    fn drop(&mut self) {
        if self.active {
            let previous = self.previous.take();
            SCOPE.with(|current| *current.borrow_mut() = previous);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_line_carries_the_scope_it_was_written_in() {
        let args = format_args!("tool {} failed", "echo");
        let record = log::Record::builder()
            .args(args)
            .level(log::Level::Warn)
            .target("mcp_taskd::tasks")
            .build();
        let plain = json_line(&record);
        assert_eq!(plain["level"], "WARN");
        assert_eq!(plain["target"], "mcp_taskd::tasks");
        assert_eq!(plain["message"], "tool echo failed");
        assert!(plain["timestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')));
        assert!(plain.get("task_id").is_none());

        JSON.store(true, Ordering::Relaxed);
        let trace = TraceContext::parse(
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",
            None,
        );
        {
            let _scope = LogScope::enter(Some("t-1"), trace.as_ref());
            let scoped = json_line(&record);
            assert_eq!(scoped["task_id"], "t-1");
            assert_eq!(scoped["trace_id"], "0af7651916cd43dd8448eb211c80319c");
            assert_eq!(scoped["span_id"], "00f067aa0ba902b7");
        }
        assert!(
            json_line(&record).get("task_id").is_none(),
            "the scope ended"
        );
        JSON.store(false, Ordering::Relaxed);
    }
}
