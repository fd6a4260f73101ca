//! A task's output as a resource (issue 47): the template
//! `mcp-taskd://tasks/{taskId}/output`, listed by `resources/templates/list` and read
//! with `resources/read` by whoever may `tasks/get` the task — a foreign, expired or
//! unknown task gets the one "Resource not found" answer, whichever it is.
//!
//! **Following it.** Each line has a position; `?after=N` reads the lines after
//! position N (at most [`LINES_PER_READ`]), and each answer's
//! `_meta["dev.mcp-taskd/output"]` names the URI to read next, whether more lines are
//! waiting there already, and whether the output is final (the task ended and every
//! line was read). `?attempt=N` keeps one attempt's lines. The answer is never cached
//! (`ttlMs` 0, private): it changes as the task runs.

use serde_json::{json, Value};

use super::{Request, Service};
use taskd_engine::output::OutputRead;
use taskd_protocol::RpcError;

/// The output's URI template.
pub const OUTPUT_TEMPLATE: &str = "mcp-taskd://tasks/{taskId}/output";
const URI_PREFIX: &str = "mcp-taskd://tasks/";
const URI_SUFFIX: &str = "/output";
/// Where an answer says how to go on reading.
const META_OUTPUT: &str = "dev.mcp-taskd/output";
/// Most lines one read answers.
pub const LINES_PER_READ: usize = 1000;

/// The template, as `resources/templates/list` shows it.
pub(super) fn output_template() -> Value {
    json!({
        "uriTemplate": OUTPUT_TEMPLATE,
        "name": "task-output",
        "title": "A task's output",
        "description": "What a task's tool printed while it ran (a command tool's stderr \
            and its stdout beyond the result, an upstream tool's status and log \
            messages), oldest first, each attempt's in turn. Append ?after=N to read the \
            lines after position N: each answer's _meta[\"dev.mcp-taskd/output\"].next is \
            the URI to read next.",
        "mimeType": "text/plain",
    })
}

/// What an output URI asks for.
#[derive(Debug, PartialEq)]
struct OutputUri<'a> {
    task_id: &'a str,
    after: i64,
    attempt: Option<i64>,
}

/// `None` when `uri` is not an output URI; an error when it is one with a bad query.
fn parse(uri: &str) -> Option<Result<OutputUri<'_>, RpcError>> {
    let rest = uri.strip_prefix(URI_PREFIX)?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let task_id = path.strip_suffix(URI_SUFFIX)?;
    if task_id.is_empty() || task_id.contains('/') {
        return None;
    }
    let mut asked = OutputUri {
        task_id,
        after: 0,
        attempt: None,
    };
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = value.parse::<i64>().ok().filter(|number| *number >= 0);
        match (key, number) {
            ("after", Some(after)) => asked.after = after,
            ("attempt", Some(attempt)) if attempt > 0 => asked.attempt = Some(attempt),
            _ => {
                return Some(Err(RpcError::invalid_params(format!(
                    "{pair}: an output URI takes after=N (a line position, 0 or more) and \
                     attempt=N (1 or more)"
                ))))
            }
        }
    }
    Some(Ok(asked))
}

/// Whether `uri` names a task's output (well-formed or not).
pub fn is_output_uri(uri: &str) -> bool {
    parse(uri).is_some()
}

/// The answer to a legacy `resources/subscribe` of an output URI: the output changes
/// too often for an update per line, and is followed by reading on.
pub fn not_subscribable(uri: &str) -> RpcError {
    RpcError::invalid_params(
        "a task's output cannot be subscribed to: read it again from the URI its last \
         answer names in _meta[\"dev.mcp-taskd/output\"].next",
    )
    .with_data(json!({ "uri": uri }))
}

/// The URI that reads the lines after `after`.
fn next_uri(asked: &OutputUri<'_>, after: i64) -> String {
    let mut uri = format!("{URI_PREFIX}{}{URI_SUFFIX}?after={after}", asked.task_id);
    if let Some(attempt) = asked.attempt {
        uri.push_str(&format!("&attempt={attempt}"));
    }
    uri
}

impl Service {
    /// `resources/read` of an output URI; `None` when `uri` is not one.
    pub(super) fn read_output(
        &self,
        request: &Request<'_>,
        uri: &str,
    ) -> Option<Result<Value, RpcError>> {
        let asked = match parse(uri)? {
            Ok(asked) => asked,
            Err(error) => return Some(Err(error)),
        };
        let read = OutputRead {
            after: asked.after,
            attempt: asked.attempt,
            limit: LINES_PER_READ,
            newest: false,
        };
        let (status, page) =
            match self
                .tasks
                .output(request.identity, request.scopes, asked.task_id, read)
            {
                Ok(found) => found,
                Err(error) if error == RpcError::task_not_found() => {
                    return Some(Err(not_found(uri)))
                }
                Err(error) => return Some(Err(error)),
            };
        let more = page.lines.len() == LINES_PER_READ;
        let meta = json!({
            "next": next_uri(&asked, page.next),
            "after": page.next,
            "more": more,
            "dropped": page.dropped,
            "taskStatus": status.as_str(),
            "final": status.is_terminal() && !more,
        });
        Some(Ok(json!({
            "contents": [{
                "uri": uri,
                "mimeType": "text/plain",
                "text": page.text(),
                "_meta": { META_OUTPUT: meta },
            }],
            "resultType": "complete",
            "ttlMs": 0,
            "cacheScope": "private",
        })))
    }
}

/// The answer for an output URI of a task the caller cannot see: the catalog's own.
fn not_found(uri: &str) -> RpcError {
    RpcError::invalid_params("Resource not found").with_data(json!({ "uri": uri }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_uris_are_told_apart_and_their_queries_checked() {
        let asked = |uri| parse(uri).map(|parsed| parsed.map_err(|error| error.message));
        assert_eq!(
            asked("mcp-taskd://tasks/abc/output"),
            Some(Ok(OutputUri {
                task_id: "abc",
                after: 0,
                attempt: None
            }))
        );
        assert_eq!(
            asked("mcp-taskd://tasks/abc/output?after=12&attempt=2"),
            Some(Ok(OutputUri {
                task_id: "abc",
                after: 12,
                attempt: Some(2)
            }))
        );
        assert!(matches!(
            asked("mcp-taskd://tasks/abc/output?after=-1"),
            Some(Err(_))
        ));
        assert!(matches!(
            asked("mcp-taskd://tasks/abc/output?attempt=0"),
            Some(Err(_))
        ));
        assert!(matches!(
            asked("mcp-taskd://tasks/abc/output?from=3"),
            Some(Err(_))
        ));
        assert_eq!(asked("mcp-taskd://tasks//output"), None);
        assert_eq!(asked("mcp-taskd://tasks/a/b/output"), None);
        assert_eq!(asked("mcp-taskd://tasks/abc"), None);
        assert_eq!(asked("file:///etc/passwd"), None);
        let asked = OutputUri {
            task_id: "t",
            after: 0,
            attempt: Some(3),
        };
        assert_eq!(
            next_uri(&asked, 40),
            "mcp-taskd://tasks/t/output?after=40&attempt=3"
        );
    }
}
