//! The task page's live tail (issue 47): `GET api/tasks/{id}/output?after=N&limit=N`,
//! the lines of a task's output after position N, as `mcp-taskd tasks logs` reads them
//! (the admin `output` operation), and where the tail stands.
//!
//! Admins see every task on the dashboard, so they see every task's output; nobody
//! else reaches the API (the dashboard's access rules, in the parent module). An
//! unknown task is `404 no such task`, as on the task page.
//!
//! The answer is `{"status", "lines": [{"position", "attempt", "at", "stream", "text"}],
//! "next", "dropped"}` (the operation's page) and:
//!
//! - `first`: the position of the oldest line still kept (`null`: none). The store keeps
//!   the newest lines within the task's cap; a page that follows the tail removes the
//!   lines before `first`, so it never holds more than the task's kept output.
//! - `more`: the page is full; more lines may wait after `next` already.
//! - `final`: the task had ended when its lines were read (its last attempt writes
//!   everything before its outcome is committed) and none wait: nothing more will come.

use serde_json::json;

use super::{percent_decode, refused, Body};
use crate::ops::admin::{Admin, Request as Op};
use taskd_engine::output::OutputRead;
use taskd_protocol::TaskStatus;
use tiny_http::Response;

/// Most lines one answer holds (and the default).
pub const MAX_LINES: usize = 1000;

/// What a request asks for.
#[derive(Debug, PartialEq)]
struct Asked {
    after: i64,
    limit: usize,
}

/// `after=N` (a position, 0 or more) and `limit=N` (1 or more, at most [`MAX_LINES`]);
/// other names are ignored, as the task list's are. A bad value is refused, never
/// read as 0.
fn parse(query: &str) -> Result<Asked, &'static str> {
    let mut asked = Asked {
        after: 0,
        limit: MAX_LINES,
    };
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(value);
        match percent_decode(name).as_deref() {
            Some("after") => {
                asked.after = value
                    .and_then(|value| value.parse::<i64>().ok())
                    .filter(|after| *after >= 0)
                    .ok_or("after: a line position, a whole number (0 or more)")?;
            }
            Some("limit") => {
                asked.limit = value
                    .and_then(|value| value.parse::<usize>().ok())
                    .filter(|limit| *limit > 0)
                    .ok_or("limit: a number of lines (1 or more)")?
                    .min(MAX_LINES);
            }
            _ => {}
        }
    }
    Ok(asked)
}

/// The answer to `GET api/tasks/{id}/output?{query}`.
pub(super) fn respond(admin: &Admin, id: &str, query: &str) -> Response<Body> {
    let asked = match parse(query) {
        Ok(asked) => asked,
        Err(why) => return refused(400, why),
    };
    let op = Op::Output {
        id: id.to_owned(),
        after: asked.after,
        attempt: None,
        limit: asked.limit,
    };
    let mut page = match admin.handle(op, &mut |_, _| {}) {
        Ok(page) => page,
        Err(message) if message.starts_with("no task") => return refused(404, "no such task"),
        Err(message) => return refused(500, &message),
    };
    // Read after the page: a line the page holds and the store dropped since is before
    // `first`, and goes from the browser too.
    let oldest = OutputRead {
        after: 0,
        attempt: None,
        limit: 1,
        newest: false,
    };
    let first = match admin.store.read_output(id, oldest) {
        Ok(oldest) => oldest.lines.first().map(|(position, _)| *position),
        Err(error) => return refused(500, &error.to_string()),
    };
    let more = page["lines"].as_array().map_or(0, Vec::len) >= asked.limit;
    let ended = page["status"]
        .as_str()
        .and_then(TaskStatus::parse)
        .is_some_and(TaskStatus::is_terminal);
    page["first"] = json!(first);
    page["more"] = json!(more);
    page["final"] = json!(ended && !more);
    super::json_response(200, &page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_and_limit_parse_and_bad_values_are_refused() {
        assert_eq!(
            parse(""),
            Ok(Asked {
                after: 0,
                limit: MAX_LINES
            })
        );
        assert_eq!(
            parse("after=12&limit=5&other=x"),
            Ok(Asked {
                after: 12,
                limit: 5
            })
        );
        assert_eq!(
            parse("limit=100000").map(|asked| asked.limit),
            Ok(MAX_LINES)
        );
        for bad in [
            "after=-1",
            "after=abc",
            "after=1.5",
            "after=",
            "after",
            "after=%zz",
            "after=99999999999999999999",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        for bad in ["limit=0", "limit=-3", "limit=x"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
