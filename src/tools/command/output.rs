//! The output protocol: progress lines while a program runs, and the final message (or
//! plain text) that becomes the run's [`Outcome`] once it has exited.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use serde_json::{json, Map, Value};

use crate::protocol::{InputKind, RpcError};
use crate::tools::{InvocationHost, Outcome};

/// Longest progress message kept.
const MAX_MESSAGE: usize = 1024;
/// Longer lines are never progress lines (so a large result is not parsed twice).
const MAX_PROGRESS_LINE: usize = 16 * 1024;

#[derive(Debug, PartialEq)]
pub(super) struct Progress {
    pub(super) progress: f64,
    pub(super) total: Option<f64>,
    pub(super) message: Option<String>,
}

pub(super) fn forward(host: &mut dyn InvocationHost, progress: &Progress) {
    host.progress(
        progress.progress,
        progress.total,
        progress.message.as_deref(),
    );
}

/// A progress line: an object with a numeric `progress`, optional numeric `total` and
/// string `message`, and nothing else.
pub(super) fn parse_progress(line: &[u8]) -> Option<Progress> {
    if line.len() > MAX_PROGRESS_LINE || line.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let object: Map<String, Value> = serde_json::from_slice(line).ok()?;
    if !object
        .keys()
        .all(|key| matches!(key.as_str(), "progress" | "total" | "message"))
    {
        return None;
    }
    let progress = object.get("progress")?.as_f64()?;
    let total = match object.get("total") {
        None | Some(Value::Null) => None,
        Some(total) => Some(total.as_f64()?),
    };
    let message = match object.get("message") {
        None | Some(Value::Null) => None,
        Some(message) => Some(truncate(message.as_str()?, MAX_MESSAGE).to_owned()),
    };
    Some(Progress {
        progress,
        total,
        message,
    })
}

/// At most `limit` bytes of `text`, cut at a character boundary.
pub(super) fn truncate(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Turns an exited program's status and stdout into an outcome (see the module docs).
pub(super) fn interpret(status: ExitStatus, stdout: &[u8]) -> Outcome {
    if let Some(signal) = status.signal() {
        return Outcome::Retry(format!("the program was killed by signal {signal}"));
    }
    let last = stdout
        .split(|&b| b == b'\n')
        .rfind(|line| !line.trim_ascii().is_empty());
    match last.and_then(final_message) {
        Some(Ok(outcome)) => outcome,
        Some(Err(why)) => Outcome::Retry(format!("the program's final line is malformed: {why}")),
        None if status.success() => {
            let text = String::from_utf8_lossy(stdout);
            let kept: Vec<&str> = text
                .lines()
                .filter(|line| parse_progress(line.as_bytes()).is_none())
                .collect();
            Outcome::Complete(crate::tools::text_result(kept.join("\n").trim_end()))
        }
        None => Outcome::Retry(format!(
            "the program exited with status {} without a final result line",
            status.code().unwrap_or(-1)
        )),
    }
}

/// The final message on `line`, if the line is one: `None` when it is not a JSON
/// object naming `result`, `error` or `inputRequired`; `Err` when it is one, malformed.
fn final_message(line: &[u8]) -> Option<Result<Outcome, String>> {
    if line.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let object: Map<String, Value> = serde_json::from_slice(line).ok()?;
    let kinds = ["result", "error", "inputRequired"];
    let kind = *kinds.iter().find(|kind| object.contains_key(**kind))?;
    if object.len() != 1 {
        return Some(Err(
            "a final message has exactly one member: result, error or inputRequired".into(),
        ));
    }
    let body = &object[kind];
    Some(match kind {
        "result" => final_result(body),
        "error" => final_error(body),
        _ => final_input_required(body),
    })
}

fn final_result(body: &Value) -> Result<Outcome, String> {
    let Some(result) = body.as_object() else {
        return Err("result must be an object".into());
    };
    let mut result = result.clone();
    result.remove("resultType");
    match result.get("structuredContent") {
        None | Some(Value::Object(_)) => {}
        Some(_) => return Err("result.structuredContent must be an object".into()),
    }
    match result.get("isError") {
        None | Some(Value::Bool(_)) => {}
        Some(_) => return Err("result.isError must be a boolean".into()),
    }
    match (result.get("content"), result.get("structuredContent")) {
        (Some(Value::Array(_)), _) => {}
        (Some(_), _) => return Err("result.content must be an array".into()),
        (None, Some(structured)) => {
            let text = structured.to_string();
            result.insert("content".into(), json!([{ "type": "text", "text": text }]));
        }
        (None, None) => return Err("result needs content or structuredContent".into()),
    }
    Ok(Outcome::Complete(Value::Object(result)))
}

fn final_error(body: &Value) -> Result<Outcome, String> {
    let code = body.get("code").and_then(Value::as_i64);
    let message = body.get("message").and_then(Value::as_str);
    let (Some(code), Some(message)) = (code, message) else {
        return Err("error needs an integer code and a string message".into());
    };
    let mut error = RpcError::new(code, message);
    if let Some(data) = body.get("data").filter(|data| !data.is_null()) {
        error = error.with_data(data.clone());
    }
    Ok(Outcome::Error(error))
}

fn final_input_required(body: &Value) -> Result<Outcome, String> {
    let requests = body
        .get("requests")
        .and_then(Value::as_object)
        .filter(|requests| !requests.is_empty())
        .ok_or("inputRequired.requests must be a non-empty object")?;
    for (key, request) in requests {
        if key.is_empty() || InputKind::of(request).is_none() {
            let methods: Vec<&str> = InputKind::ALL.iter().map(|kind| kind.method()).collect();
            return Err(format!(
                "inputRequired.requests[\"{}\"] must be {{\"method\": {}, \"params\": {{…}}}}",
                truncate(key, 64),
                methods.join(" | ")
            ));
        }
    }
    let state = body.get("state").filter(|state| !state.is_null()).cloned();
    Ok(Outcome::InputRequired {
        requests: requests.clone(),
        state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn progress_lines_are_recognised_strictly() {
        let line = br#"{"progress": 2, "total": 5, "message": "two"}"#;
        assert_eq!(
            parse_progress(line),
            Some(Progress {
                progress: 2.0,
                total: Some(5.0),
                message: Some("two".into())
            })
        );
        assert!(parse_progress(br#"{"progress": "2"}"#).is_none());
        assert!(parse_progress(br#"{"progress": 1, "extra": true}"#).is_none());
        assert!(parse_progress(b"progress 1").is_none());
    }

    #[test]
    fn final_line_shapes() {
        let ok = interpret(
            exit(0),
            b"{\"progress\":1}\n{\"result\":{\"content\":[]}}\n\n",
        );
        assert_eq!(ok, Outcome::Complete(json!({ "content": [] })));
        let structured = interpret(exit(3), br#"{"result":{"structuredContent":{"a":1}}}"#);
        assert_eq!(
            structured,
            Outcome::Complete(json!({
                "structuredContent": { "a": 1 },
                "content": [{ "type": "text", "text": "{\"a\":1}" }],
            }))
        );
        let error = interpret(exit(0), br#"{"error":{"code":-32602,"message":"no"}}"#);
        assert_eq!(error, Outcome::Error(RpcError::new(-32602, "no")));
        let ask = interpret(
            exit(0),
            br#"{"inputRequired":{"requests":{"k":{"method":"roots/list","params":{}}},"state":7}}"#,
        );
        assert!(matches!(ask, Outcome::InputRequired { state: Some(_), .. }));
    }

    #[test]
    fn plain_text_and_failures() {
        let text = interpret(exit(0), b"hello\n{\"progress\":1}\nworld\n");
        assert_eq!(
            text,
            Outcome::Complete(crate::tools::text_result("hello\nworld"))
        );
        assert!(matches!(interpret(exit(1), b"oops\n"), Outcome::Retry(_)));
        assert!(matches!(
            interpret(ExitStatus::from_raw(9), b""),
            Outcome::Retry(reason) if reason.contains("signal 9")
        ));
        assert!(matches!(
            interpret(exit(0), br#"{"result": 5}"#),
            Outcome::Retry(reason) if reason.contains("malformed")
        ));
        assert!(matches!(
            interpret(exit(0), br#"{"result": {"content": []}, "x": 1}"#),
            Outcome::Retry(_)
        ));
    }
}
