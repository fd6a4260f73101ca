//! What a bridged client is told about a task it cannot follow as a task: the tool's
//! own result once completed, a tool error once failed or cancelled, otherwise a
//! *handle* (a `CallToolResult` saying what the task is doing, the end of its output,
//! and which tool to call next), and the `outputSchema` that admits one.

use serde_json::{json, Value};

use super::{TASK_CANCEL, TASK_STATUS, TASK_WAIT};
use taskd_engine::output::{explain, TAIL_HEADING};
use taskd_protocol::TaskStatus;
use taskd_tools::error_result;

/// The object schema of a task handle (`structuredContent` of an unfinished call).
/// `nextStep` says, in words, which tool to call next with which `taskId`: hosts that
/// hand their model the structured content instead of the text (Claude Code, Codex CLI)
/// would otherwise hide it (docs/hosts.md).
fn handle_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "taskId": { "type": "string" },
            "status": { "type": "string", "enum": TaskStatus::ALL.map(TaskStatus::as_str) },
            "statusMessage": { "type": "string" },
            "pollAfterMs": { "type": "integer", "minimum": 0 },
            "nextStep": { "type": "string" },
            "latestOutput": { "type": "array", "items": { "type": "string" } },
        },
        "required": ["taskId", "status", "statusMessage", "pollAfterMs", "nextStep"],
    })
}

/// `outputSchema` as a bridged client sees it: the tool's own, or a task handle. The
/// tool's own definitions (`$defs`, `definitions`) move up to the wrapper's root, where
/// its `"$ref": "#/$defs/…"` still find them (Pydantic-made schemas, such as
/// mcp-server-time's, refer to them so).
pub(super) fn admitting_handle(schema: &Value) -> Value {
    let mut own = schema.clone();
    let mut wrapper = json!({ "type": "object" });
    if let Some(own) = own.as_object_mut() {
        for key in ["$defs", "definitions"] {
            if let Some(definitions) = own.remove(key) {
                wrapper[key] = definitions;
            }
        }
    }
    wrapper["anyOf"] = json!([own, handle_schema()]);
    wrapper
}

/// A task as a bridged client is told about it: the tool's own result once completed,
/// a tool error once failed or cancelled, otherwise a handle. `can_ask`: `task_wait`
/// can put the task's questions to this client. `output`: the end of the task's output
/// (shown while it runs, and with a failure that does not show it already).
pub(super) fn render(
    task: &Value,
    task_id: &str,
    tool: Option<&str>,
    can_ask: bool,
    output: &[String],
) -> Value {
    let status = task["status"].as_str().unwrap_or_default();
    let subject = match tool {
        Some(tool) => format!("{tool} (task {task_id})"),
        None => format!("Task {task_id}"),
    };
    match TaskStatus::parse(status) {
        Some(TaskStatus::Completed) => {
            let mut result = task["result"].clone();
            if let Some(fields) = result.as_object_mut() {
                fields.remove("resultType");
            }
            result
        }
        Some(TaskStatus::Failed) => {
            let message = task["error"]["message"]
                .as_str()
                .unwrap_or("no reason given");
            if message.contains(TAIL_HEADING) {
                error_result(format!("{subject} failed: {message}"))
            } else {
                let lines = output.iter().map(String::as_str);
                error_result(explain(&format!("{subject} failed: {message}"), lines))
            }
        }
        Some(TaskStatus::Cancelled) => {
            error_result(format!("{subject} was cancelled before it finished."))
        }
        _ => handle(task, task_id, &subject, can_ask, output),
    }
}

/// The `CallToolResult` of an unfinished task: what it is doing, the end of its output,
/// and what to call next.
fn handle(task: &Value, task_id: &str, subject: &str, can_ask: bool, output: &[String]) -> Value {
    let status = task["status"].as_str().unwrap_or("working");
    let poll_after_ms = task["pollIntervalMs"].as_u64().unwrap_or(1000);
    let mut status_message = task["statusMessage"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (text, next) = if status == TaskStatus::InputRequired.as_str() {
        let questions: Vec<String> = task["inputRequests"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(_, request)| question(request))
            .collect();
        // The question goes into the status message and the next step too, not only the
        // text: hosts that hand their model the structured content (`claude -p`, Codex)
        // drop the text, and the model could not tell the user what is being asked.
        let asked = in_words(&questions);
        if status_message.is_empty() {
            status_message = match &asked {
                Some(asked) => format!("Waiting for a person to answer {asked}"),
                None => "Waiting for a person to answer".into(),
            };
        }
        let asked = asked.unwrap_or_else(|| "its question".into());
        let next = if can_ask {
            format!(
                "Call {TASK_WAIT} with {{\"taskId\": \"{task_id}\"}}: it puts the question \
                 ({asked}) to the person through this client, then waits for the task. Only \
                 the person can answer it, not you."
            )
        } else {
            format!(
                "Only a person can answer {asked}, from an MCP client that supports such \
                 questions (elicitation) or tasks; it cannot be answered from this \
                 conversation. Once answered, the task continues; call {TASK_STATUS} with \
                 {{\"taskId\": \"{task_id}\"}} to follow it, or {TASK_CANCEL} to stop it."
            )
        };
        let text = format!(
            "{subject} is waiting for a person. {}{next}",
            output_block(output)
        );
        (text, next)
    } else {
        if status_message.is_empty() {
            status_message = "Working".into();
        }
        let next = format!(
            "To get its result, call {TASK_WAIT} with {{\"taskId\": \"{task_id}\"}}; \
             {TASK_STATUS} checks without waiting, and {TASK_CANCEL} stops it."
        );
        let text = format!(
            "{subject} is still running in the background ({status_message}). {}Nothing \
             is lost if you do something else meanwhile. {next}",
            output_block(output)
        );
        (text, next)
    };
    handle_json(
        text,
        next,
        task_id,
        status,
        &status_message,
        poll_after_ms,
        output,
    )
}

/// The end of a task's output as a handle's text shows it, or nothing.
fn output_block(output: &[String]) -> String {
    if output.is_empty() {
        return String::new();
    }
    format!("The end of its output so far:\n{}\n", output.join("\n"))
}

/// A handle as both a host that shows the text and one that shows the structured
/// content hand it to the model: each says what to call next.
fn handle_json(
    text: String,
    next_step: String,
    task_id: &str,
    status: &str,
    status_message: &str,
    poll_after_ms: u64,
    output: &[String],
) -> Value {
    let mut answer = json!({
        "content": [{ "type": "text", "text": text }],
        "structuredContent": {
            "taskId": task_id,
            "status": status,
            "statusMessage": status_message,
            "pollAfterMs": poll_after_ms,
            "nextStep": next_step,
        },
    });
    if !output.is_empty() {
        answer["structuredContent"]["latestOutput"] = json!(output);
    }
    answer
}

/// A task's questions in one phrase (`"A"`, `"A" and "B"`, `"A", "B" and "C"`), or
/// `None` when it names none.
fn in_words(questions: &[String]) -> Option<String> {
    match questions {
        [] => None,
        [only] => Some(only.clone()),
        [first @ .., last] => Some(format!("{} and {last}", first.join(", "))),
    }
}

/// One input request in words.
fn question(request: &Value) -> String {
    let params = &request["params"];
    match request["method"].as_str().unwrap_or_default() {
        "elicitation/create" => {
            format!("\"{}\"", params["message"].as_str().unwrap_or("a question"))
        }
        "sampling/createMessage" => "a request to generate text with the client's model".into(),
        "roots/list" => "a request for the client's root directories".into(),
        other => format!("a {other} request"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_validates_against_the_admitting_schema_and_the_tool_result_too() {
        let tool =
            json!({"type":"object","properties":{"topic":{"type":"string"}},"required":["topic"]});
        let schema = admitting_handle(&tool);
        let validator = jsonschema::validator_for(&schema).expect("schema compiles");
        let task = json!({"status":"working","statusMessage":"Writing","pollIntervalMs":500});
        let answer = handle(&task, "t1", "generate_report (task t1)", false, &[]);
        assert!(validator.is_valid(&answer["structuredContent"]));
        assert!(validator.is_valid(&json!({"topic": "x"})));
        assert!(!validator.is_valid(&json!({"other": 1})));
    }

    #[test]
    fn a_tool_schema_with_its_own_definitions_keeps_them_within_reach_of_its_refs() {
        // mcp-server-time's outputSchema, as Pydantic writes it.
        let tool = json!({
            "type": "object",
            "$defs": {"TimeResult": {"type": "object",
                "properties": {"datetime": {"type": "string"}}, "required": ["datetime"]}},
            "properties": {"source": {"$ref": "#/$defs/TimeResult"}},
            "required": ["source"],
        });
        let schema = admitting_handle(&tool);
        let validator = jsonschema::validator_for(&schema).expect("schema compiles");
        assert!(validator.is_valid(&json!({"source": {"datetime": "now"}})));
        assert!(!validator.is_valid(&json!({"source": {"other": 1}})));
        let task = json!({"status":"working","statusMessage":"Working","pollIntervalMs":500});
        let answer = handle(&task, "t1", "convert_time (task t1)", false, &[]);
        assert!(validator.is_valid(&answer["structuredContent"]));
    }

    #[test]
    fn the_structured_content_of_a_handle_names_the_next_tool_and_the_task() {
        // Hosts that hand their model the structured content (not the text) still tell
        // it what to call next.
        let working = json!({"status":"working","statusMessage":"Writing","pollIntervalMs":500});
        let waiting = json!({"status":"input_required","inputRequests":{
            "approve": {"method":"elicitation/create","params":{"message":"Deploy?"}}}});
        for (task, can_ask, tool) in [
            (&working, false, TASK_WAIT),
            (&waiting, true, TASK_WAIT),
            (&waiting, false, TASK_STATUS),
        ] {
            let answer = handle(task, "t42", "deploy (task t42)", can_ask, &[]);
            let next = answer["structuredContent"]["nextStep"]
                .as_str()
                .expect("a next step");
            assert!(next.contains(tool), "{next}");
            assert!(next.contains("{\"taskId\": \"t42\"}"), "{next}");
            let text = answer["content"][0]["text"].as_str().expect("the text");
            assert!(text.ends_with(next), "the text says the same: {text}");
        }
    }

    #[test]
    fn a_handle_waiting_for_a_person_names_the_question_in_its_structured_content() {
        // `claude -p` and Codex hand their model the structured content only: it must
        // say what the person is asked, as the text does.
        let asked = "Deploy billing@2.4.1 to production?";
        let waiting = json!({"status":"input_required","inputRequests":{
            "approve": {"method":"elicitation/create","params":{"message": asked}}}});
        let schema = jsonschema::validator_for(&handle_schema()).expect("schema");
        for can_ask in [false, true] {
            let answer = handle(&waiting, "t9", "deploy (task t9)", can_ask, &[]);
            let structured = &answer["structuredContent"];
            assert!(schema.is_valid(structured), "{structured}");
            assert_eq!(
                structured["statusMessage"],
                format!("Waiting for a person to answer \"{asked}\""),
            );
            let next = structured["nextStep"].as_str().expect("a next step");
            assert!(next.contains(&format!("\"{asked}\"")), "{next}");
            let text = answer["content"][0]["text"].as_str().expect("the text");
            assert!(text.ends_with(next), "{text}");
            assert_eq!(text.matches(asked).count(), 1, "said once: {text}");
        }
        // A task's own status message stays; the next step still names every question.
        let two = json!({"status":"input_required","statusMessage":"Awaiting approval",
            "inputRequests":{
                "a": {"method":"elicitation/create","params":{"message":"Deploy?"}},
                "b": {"method":"elicitation/create","params":{"message":"Migrate?"}}}});
        let answer = handle(&two, "t9", "deploy (task t9)", false, &[]);
        let structured = &answer["structuredContent"];
        assert_eq!(structured["statusMessage"], "Awaiting approval");
        let next = structured["nextStep"].as_str().expect("a next step");
        assert!(
            next.starts_with("Only a person can answer \"Deploy?\" and \"Migrate?\", "),
            "{next}"
        );
        // One that names no question still says what to do.
        let bare = json!({"status":"input_required"});
        let answer = handle(&bare, "t9", "deploy (task t9)", false, &[]);
        let structured = &answer["structuredContent"];
        assert_eq!(
            structured["statusMessage"],
            "Waiting for a person to answer"
        );
        assert!(schema.is_valid(structured), "{structured}");
    }

    #[test]
    fn a_running_task_shows_the_end_of_its_output_and_a_failure_shows_it_once() {
        let working = json!({"status":"working","statusMessage":"Linking","pollIntervalMs":500});
        let output = vec!["compiling a".to_owned(), "warning: unused b".to_owned()];
        let answer = handle(&working, "t7", "build (task t7)", false, &output);
        let text = answer["content"][0]["text"].as_str().expect("the text");
        assert!(text.contains("compiling a\nwarning: unused b\n"), "{text}");
        assert_eq!(answer["structuredContent"]["latestOutput"], json!(output));
        let schema = jsonschema::validator_for(&handle_schema()).expect("schema");
        assert!(schema.is_valid(&answer["structuredContent"]));

        let failed =
            |message: &str| json!({"status":"failed","error":{"code":-32603,"message":message}});
        let plain = render(&failed("exited 2"), "t7", None, false, &output);
        let text = plain["content"][0]["text"].as_str().expect("the text");
        assert!(text.ends_with(&format!("{TAIL_HEADING}\ncompiling a\nwarning: unused b")));
        let told = format!("exited 2. {TAIL_HEADING}\nwarning: unused b");
        let told = render(&failed(&told), "t7", None, false, &output);
        let text = told["content"][0]["text"].as_str().expect("the text");
        assert_eq!(text.matches(TAIL_HEADING).count(), 1, "{text}");
    }
}
