//! The output protocol: progress lines while a program runs, and the final message (or
//! plain text) that becomes the run's [`Outcome`] once it has exited.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use serde_json::{json, Map, Value};

use crate::{InvocationHost, Outcome};
use taskd_protocol::{InputKind, RpcError};

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
            Outcome::Complete(crate::text_result(kept.join("\n").trim_end()))
        }
        None => Outcome::Retry(format!(
            "the program exited with status {} without a final result line",
            status.code().unwrap_or(-1)
        )),
    }
}

/// Whether `line` is the final message's (a JSON object naming `result`, `error` or
/// `inputRequired`): protocol, not output.
pub(super) fn is_final_message(line: &[u8]) -> bool {
    final_message(line).is_some()
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
        assert_eq!(text, Outcome::Complete(crate::text_result("hello\nworld")));
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

/// Generated program output (see [`taskd_testkit`]): progress lines, final messages
/// (well-formed, near-valid and malformed), plain text, invalid UTF-8, blank and huge
/// lines, under any exit status. Every outcome must be one the protocol defines, with
/// the shape the rest of the server relies on.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;
    use serde_json::{json, Map, Value};

    use super::*;
    use taskd_testkit::{any_json, any_number, any_string, config, mutate_object};

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    fn progress_line() -> impl Strategy<Value = Vec<u8>> {
        (any_number(), any_number(), any_string()).prop_flat_map(|(progress, total, message)| {
            mutate_object(object(
                json!({ "progress": progress, "total": total, "message": message }),
            ))
            .prop_map(|line| Value::Object(line).to_string().into_bytes())
        })
    }

    fn final_line() -> impl Strategy<Value = Vec<u8>> {
        let result = mutate_object(object(json!({
            "content": [{ "type": "text", "text": "done" }],
            "structuredContent": { "a": 1 },
            "isError": false,
            "resultType": "complete",
        })))
        .prop_map(|result| json!({ "result": result }));
        let error = mutate_object(object(
            json!({ "code": -32602, "message": "no", "data": 1 }),
        ))
        .prop_map(|error| json!({ "error": error }));
        let request = prop_oneof![
            Just(json!({ "method": "roots/list", "params": {} })),
            Just(
                json!({ "method": "elicitation/create", "params": { "message": "ok?",
                "requestedSchema": { "type": "object", "properties": {} } } })
            ),
            any_json(3),
        ];
        let input = (any_string(), request, any_json(2))
            .prop_flat_map(|(key, request, state)| {
                mutate_object(object(
                    json!({ "requests": { key: request }, "state": state }),
                ))
            })
            .prop_map(|input| json!({ "inputRequired": input }));
        prop_oneof![result, error, input, any_json(4)]
            .prop_flat_map(|message| mutate_object(object(message)))
            .prop_map(|line| Value::Object(line).to_string().into_bytes())
    }

    fn line() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            4 => progress_line(),
            2 => final_line(),
            3 => any_string().prop_map(String::into_bytes),
            1 => prop::collection::vec(any::<u8>(), 0..64),
            1 => prop::sample::select(vec!["", " ", "\t", "\r", "{", "{}"]).prop_map(|s| s.as_bytes().to_vec()),
            1 => (MAX_PROGRESS_LINE - 40..MAX_PROGRESS_LINE + 40).prop_map(|n| {
                format!(r#"{{"progress": 1, "message": "{}"}}"#, "m".repeat(n)).into_bytes()
            }),
        ]
    }

    fn stdout() -> impl Strategy<Value = Vec<u8>> {
        (
            prop::collection::vec((line(), any::<bool>(), " {0,2}"), 0..8),
            any::<bool>(),
        )
            .prop_map(|(lines, trailing_newline)| {
                let mut out = Vec::new();
                for (index, (line, crlf, indent)) in lines.iter().enumerate() {
                    if index > 0 {
                        out.extend_from_slice(if *crlf { b"\r\n" } else { b"\n" });
                    }
                    out.extend_from_slice(indent.as_bytes());
                    out.extend_from_slice(line);
                }
                if trailing_newline {
                    out.push(b'\n');
                }
                out
            })
    }

    fn status() -> impl Strategy<Value = ExitStatus> {
        prop_oneof![
            4 => Just(ExitStatus::from_raw(0)),
            2 => (1i32..256).prop_map(|code| ExitStatus::from_raw(code << 8)),
            1 => (1i32..32).prop_map(ExitStatus::from_raw),
        ]
    }

    /// Whether `line` is, by the output protocol, a final message (well-formed or not).
    fn names_a_final_kind(line: &[u8]) -> bool {
        serde_json::from_slice::<Map<String, Value>>(line).is_ok_and(|object| {
            ["result", "error", "inputRequired"]
                .iter()
                .any(|kind| object.contains_key(*kind))
        })
    }

    proptest! {
        #![proptest_config(config(256))]

        #[test]
        fn progress_lines_follow_the_protocol(line in prop_oneof![progress_line(), line()]) {
            let object: Option<Map<String, Value>> = serde_json::from_slice(&line).ok();
            let field = |name: &str| object.as_ref().and_then(|o| o.get(name));
            let number_or_absent =
                |value: Option<&Value>| value.is_none_or(|v| v.is_null() || v.is_number());
            let expected = line.len() <= MAX_PROGRESS_LINE
                && object.as_ref().is_some_and(|o| {
                    o.keys().all(|k| ["progress", "total", "message"].contains(&k.as_str()))
                })
                && field("progress").is_some_and(Value::is_number)
                && number_or_absent(field("total"))
                && field("message").is_none_or(|m| m.is_null() || m.is_string());
            match parse_progress(&line) {
                None => prop_assert!(!expected),
                Some(progress) => {
                    prop_assert!(expected);
                    prop_assert_eq!(Some(progress.progress), field("progress").and_then(Value::as_f64));
                    let message = field("message").and_then(Value::as_str).unwrap_or("");
                    let kept = progress.message.as_deref().unwrap_or("");
                    prop_assert!(kept.len() <= MAX_MESSAGE && message.starts_with(kept));
                    prop_assert!(kept.len() == message.len() || kept.len() > MAX_MESSAGE - 4);
                }
            }
        }

        #[test]
        fn every_output_has_a_well_formed_outcome(stdout in stdout(), status in status()) {
            let last = stdout
                .split(|&b| b == b'\n')
                .rfind(|line| !line.trim_ascii().is_empty());
            let final_kind = last.is_some_and(names_a_final_kind);
            match interpret(status, &stdout) {
                Outcome::Complete(result) => {
                    prop_assert!(status.signal().is_none());
                    prop_assert!(result["content"].is_array(), "{result}");
                    prop_assert!(result.get("resultType").is_none());
                    prop_assert!(result.get("structuredContent").is_none_or(Value::is_object));
                    prop_assert!(result.get("isError").is_none_or(Value::is_boolean));
                    if !final_kind {
                        prop_assert!(status.success());
                        let text = result["content"][0]["text"].as_str().unwrap_or_default();
                        prop_assert!(text.lines().all(|line| parse_progress(line.as_bytes()).is_none()));
                        prop_assert_eq!(text.trim_end(), text);
                    }
                }
                Outcome::Error(error) => {
                    prop_assert!(final_kind && status.signal().is_none());
                    prop_assert!([400, 404, 500].contains(&error.http_status));
                }
                Outcome::InputRequired { requests, .. } => {
                    prop_assert!(final_kind && status.signal().is_none());
                    prop_assert!(!requests.is_empty());
                    prop_assert!(requests
                        .iter()
                        .all(|(key, request)| !key.is_empty() && InputKind::of(request).is_some()));
                }
                Outcome::Retry(reason) => {
                    let malformed = reason.contains("final line is malformed");
                    prop_assert!(
                        status.signal().is_some() || !status.success() || malformed,
                        "{reason}"
                    );
                    prop_assert!(!malformed || final_kind);
                    prop_assert!(reason.len() < 512, "a bounded reason: {reason}");
                }
                Outcome::Cancelled | Outcome::Failed(_) => {
                    prop_assert!(false, "never from output alone")
                }
            }
        }
    }
}
