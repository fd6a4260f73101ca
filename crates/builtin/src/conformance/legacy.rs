//! The fixtures only the legacy (session) scenarios call (fixtures-2025-11-25.md §2.2):
//! their server-to-client requests are MRTR input requests, which the legacy path sends
//! on the call's stream and a 2026 client answers by retrying.

use std::time::Duration;

use serde_json::{json, Value};

use super::{no_args, sample, sampled_text, tool};
use crate::ask;
use taskd_protocol::LogLevel;
use taskd_tools::{text_result, Invocation, Outcome, RegistrationError, Registry};

pub(super) fn register_legacy_tools(tools: &mut Registry) -> Result<(), RegistrationError> {
    tool(
        tools,
        "test_tool_with_logging",
        "Logs three messages at info level while it runs",
        no_args(),
        |call| {
            for (step, text) in [
                "Tool execution started",
                "Tool processing data",
                "Tool execution completed",
            ]
            .into_iter()
            .enumerate()
            {
                if step > 0 {
                    call.host.sleep(Duration::from_millis(50));
                }
                call.host.log(LogLevel::Info, json!(text));
            }
            Outcome::Complete(text_result("Tool with logging executed successfully"))
        },
    )?;
    tool(
        tools,
        "test_sampling",
        "Asks the client's model to answer a prompt",
        json!({"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}),
        |call| match sampled_text(call.input_responses, "completion") {
            Some(text) => Outcome::Complete(text_result(format!("LLM response: {text}"))),
            None => ask(
                &[(
                    "completion",
                    sample(call.str_arg("prompt").unwrap_or_default()),
                )],
                None,
            ),
        },
    )?;
    tool(
        tools,
        "test_elicitation",
        "Asks the user for a username and an email address",
        json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}),
        |call| {
            let schema = json!({"type": "object", "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"}},
                "required": ["username", "email"]});
            elicitation_round(call, "Please provide your information", schema)
        },
    )?;
    tool(
        tools,
        "test_elicitation_sep1034_defaults",
        "Asks for a form whose fields all have defaults (SEP-1034)",
        no_args(),
        |call| {
            let schema = json!({"type": "object", "properties": {
                "name": {"type": "string", "description": "User name", "default": "John Doe"},
                "age": {"type": "integer", "description": "User age", "default": 30},
                "score": {"type": "number", "description": "User score", "default": 95.5},
                "status": {"type": "string", "description": "User status",
                    "enum": ["active", "inactive", "pending"], "default": "active"},
                "verified": {"type": "boolean", "description": "Verification status", "default": true}},
                "required": []});
            elicitation_round(
                call,
                "Please review and update the form fields with defaults",
                schema,
            )
        },
    )?;
    tool(
        tools,
        "test_elicitation_sep1330_enums",
        "Asks for every enum shape SEP-1330 defines",
        no_args(),
        |call| {
            let schema = json!({"type": "object", "properties": {
                "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                "titledSingle": {"type": "string", "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"}]},
                "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                    "enumNames": ["Option One", "Option Two", "Option Three"]},
                "untitledMulti": {"type": "array", "minItems": 1, "maxItems": 3,
                    "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                "titledMulti": {"type": "array", "minItems": 1, "maxItems": 3,
                    "items": {"anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"}]}}}});
            elicitation_round(call, "Please select options from the enum fields", schema)
        },
    )?;
    Ok(())
}

/// Asks one form elicitation (the `message` argument overrides `default_message`), then
/// reports the user's answer, whatever its action.
fn elicitation_round(call: &mut Invocation<'_>, default_message: &str, schema: Value) -> Outcome {
    if let Some(answer) = call.input_responses.get("form") {
        let action = answer["action"].as_str().unwrap_or("unknown");
        let content = answer.get("content").cloned().unwrap_or(Value::Null);
        return Outcome::Complete(text_result(format!(
            "User response: action={action}, content={content}"
        )));
    }
    let message = call.str_arg("message").unwrap_or(default_message);
    let request = json!({"method": "elicitation/create",
        "params": {"message": message, "requestedSchema": schema}});
    ask(&[("form", request)], None)
}
