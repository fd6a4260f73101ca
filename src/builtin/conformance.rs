//! The fixtures of the official MCP conformance suite (fixtures.md §2), as ordinary
//! built-in registrations. Names and texts follow the suite's reference server.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::{ask, elicit, PNG_1X1};
use crate::catalog::{Catalog, Prompt, PromptArgument, PromptCall, Resource, ResourceTemplate};
use crate::notifications::{Hub, ListKind};
use crate::protocol::envelope::LogLevel;
use crate::protocol::error::{code, RpcError};
use crate::tools::{
    error_result, text_result, Admission, Invocation, Outcome, Registry, TaskPolicy, Tool, ToolSpec,
};

const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

fn no_args() -> Value {
    json!({ "type": "object", "properties": {} })
}

fn sample(question: &str) -> Value {
    json!({
        "method": "sampling/createMessage",
        "params": {
            "messages": [{ "role": "user", "content": { "type": "text", "text": question } }],
            "maxTokens": 100,
        },
    })
}

fn roots_request() -> Value {
    json!({ "method": "roots/list", "params": {} })
}

/// The accepted elicitation's `content[field]` as a string.
fn accepted_string(responses: &Map<String, Value>, key: &str, field: &str) -> Option<String> {
    let answer = responses.get(key)?.as_object()?;
    if answer.get("action")?.as_str()? != "accept" {
        return None;
    }
    answer
        .get("content")?
        .get(field)?
        .as_str()
        .map(str::to_owned)
}

fn accepted_bool(responses: &Map<String, Value>, key: &str, field: &str) -> Option<bool> {
    let answer = responses.get(key)?.as_object()?;
    (answer.get("action")?.as_str()? == "accept")
        .then(|| answer.get("content")?.get(field)?.as_bool())
        .flatten()
}

fn sampled_text(responses: &Map<String, Value>, key: &str) -> Option<String> {
    responses
        .get(key)?
        .get("content")?
        .get("text")?
        .as_str()
        .map(str::to_owned)
}

fn listed_roots(responses: &Map<String, Value>, key: &str) -> Option<usize> {
    responses.get(key)?.get("roots")?.as_array().map(Vec::len)
}

fn tool(
    tools: &mut Registry,
    name: &str,
    description: &str,
    schema: Value,
    run: impl Fn(&mut Invocation<'_>) -> Outcome + Send + Sync + 'static,
) -> Result<(), String> {
    tools.register(ToolSpec::new(name, description, schema), Arc::new(run))
}

pub fn register(tools: &mut Registry, catalog: &mut Catalog, hub: &Arc<Hub>) -> Result<(), String> {
    register_content_tools(tools)?;
    register_stateless_tools(tools, hub)?;
    register_mrtr_tools(tools)?;
    register_task_tools(tools)?;
    register_legacy_tools(tools)?;
    register_resources(catalog);
    register_prompts(catalog);
    Ok(())
}

fn register_content_tools(tools: &mut Registry) -> Result<(), String> {
    // First in the list: http-header-validation calls tools[0] with no arguments.
    tool(
        tools,
        "test_simple_text",
        "Returns a simple text response",
        no_args(),
        |_| Outcome::Complete(text_result("This is a simple text response for testing.")),
    )?;
    tool(
        tools,
        "test_image_content",
        "Returns an image",
        no_args(),
        |_| {
            Outcome::Complete(
                json!({"content": [{"type": "image", "data": PNG_1X1, "mimeType": "image/png"}]}),
            )
        },
    )?;
    tool(
        tools,
        "test_audio_content",
        "Returns an audio clip",
        no_args(),
        |_| {
            Outcome::Complete(
                json!({"content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]}),
            )
        },
    )?;
    tool(
        tools,
        "test_embedded_resource",
        "Returns an embedded resource",
        no_args(),
        |_| {
            Outcome::Complete(json!({"content": [{"type": "resource", "resource": {
            "uri": "test://embedded-resource", "mimeType": "text/plain",
            "text": "This is an embedded resource content."}}]}))
        },
    )?;
    tool(
        tools,
        "test_multiple_content_types",
        "Returns text, image and resource content",
        no_args(),
        |_| {
            Outcome::Complete(json!({"content": [
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": PNG_1X1, "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "test://mixed-content-resource",
                "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}]}))
        },
    )?;
    tool(
        tools,
        "test_error_handling",
        "Always returns a tool error",
        no_args(),
        |_| {
            Outcome::Complete(error_result(
                "This tool intentionally returns an error for testing",
            ))
        },
    )?;
    tool(
        tools,
        "test_tool_with_progress",
        "Reports progress three times, then answers",
        no_args(),
        |call| {
            for step in [0.0, 50.0, 100.0] {
                call.host.progress(step, Some(100.0), None);
                if step < 100.0 {
                    call.host.sleep(Duration::from_millis(50));
                }
            }
            Outcome::Complete(text_result("Progress complete"))
        },
    )?;
    tool(
        tools,
        "json_schema_2020_12_tool",
        "Tool with JSON Schema 2020-12 features",
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "$anchor": "addressDef",
                    "type": "object",
                    "properties": { "street": { "type": "string" }, "city": { "type": "string" } }
                }
            },
            "properties": {
                "name": { "type": "string" },
                "address": { "$ref": "#/$defs/address" },
                "contactMethod": { "type": "string", "enum": ["phone", "email"] },
                "phone": { "type": "string" },
                "email": { "type": "string" }
            },
            "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
            "if": { "properties": { "contactMethod": { "const": "phone" } }, "required": ["contactMethod"] },
            "then": { "required": ["phone"] },
            "else": { "required": ["email"] },
            "additionalProperties": false
        }),
        |call| {
            Outcome::Complete(text_result(format!(
                "Accepted contact for {}",
                call.str_arg("name").unwrap_or("someone")
            )))
        },
    )?;
    Ok(())
}

fn register_stateless_tools(tools: &mut Registry, hub: &Arc<Hub>) -> Result<(), String> {
    tools.register(
        ToolSpec::new(
            "test_missing_capability",
            "Needs the client's sampling capability",
            no_args(),
        )
        .requires(json!({ "sampling": {} })),
        Arc::new(|_: &mut Invocation<'_>| Outcome::Complete(text_result("Success"))),
    )?;
    tool(
        tools,
        "test_streaming_elicitation",
        "Streams a notification, then answers",
        no_args(),
        |call| {
            call.host.progress(1.0, Some(1.0), Some("streaming"));
            Outcome::Complete(text_result("Streaming complete"))
        },
    )?;
    tool(
        tools,
        "test_logging_tool",
        "Logs only when the request asks for a log level",
        no_args(),
        |call| {
            call.host
                .log(LogLevel::Info, json!("test_logging_tool ran"));
            Outcome::Complete(text_result("Logging complete"))
        },
    )?;
    let tools_hub = Arc::clone(hub);
    tool(
        tools,
        "test_trigger_tool_change",
        "Announces a tools list change to listeners",
        no_args(),
        move |_| {
            tools_hub.publish_list_changed(ListKind::Tools);
            Outcome::Complete(text_result("Tools list change announced"))
        },
    )?;
    let resources_hub = Arc::clone(hub);
    tool(
        tools,
        "test_trigger_resource_update",
        "Announces that test://watched-resource changed to its subscribers",
        no_args(),
        move |_| {
            resources_hub.publish_resource_updated("test://watched-resource");
            Outcome::Complete(text_result("Resource update announced"))
        },
    )?;
    let prompts_hub = Arc::clone(hub);
    tool(
        tools,
        "test_trigger_prompt_change",
        "Announces a prompts list change to listeners",
        no_args(),
        move |_| {
            prompts_hub.publish_list_changed(ListKind::Prompts);
            Outcome::Complete(text_result("Prompts list change announced"))
        },
    )?;
    tool(
        tools,
        "test_custom_header",
        "Echoes a region that is mirrored into the Mcp-Param-Region header",
        json!({"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}, "required": ["region"]}),
        |call| {
            Outcome::Complete(text_result(format!(
                "Region: {}",
                call.str_arg("region").unwrap_or_default()
            )))
        },
    )?;
    Ok(())
}

fn register_mrtr_tools(tools: &mut Registry) -> Result<(), String> {
    tool(
        tools,
        "test_input_required_result_elicitation",
        "Asks for the user's name",
        no_args(),
        |call| match accepted_string(call.input_responses, "user_name", "name") {
            Some(name) => Outcome::Complete(text_result(format!("Hello, {name}!"))),
            None => ask(
                &[("user_name", elicit("What is your name?", "name", "string"))],
                None,
            ),
        },
    )?;
    tool(
        tools,
        "test_input_required_result_sampling",
        "Asks the client's model a question",
        no_args(),
        |call| match sampled_text(call.input_responses, "sample_request") {
            Some(answer) => Outcome::Complete(text_result(format!("Sampling result: {answer}"))),
            None => ask(
                &[("sample_request", sample("What is the capital of France?"))],
                None,
            ),
        },
    )?;
    tool(
        tools,
        "test_input_required_result_list_roots",
        "Asks for the client's roots",
        no_args(),
        |call| match listed_roots(call.input_responses, "roots_request") {
            Some(count) => Outcome::Complete(text_result(format!("Received {count} roots"))),
            None => ask(&[("roots_request", roots_request())], None),
        },
    )?;
    tool(
        tools,
        "test_input_required_result_request_state",
        "Asks for confirmation, keeping request state",
        no_args(),
        |call| {
            let confirmed = accepted_bool(call.input_responses, "confirm", "ok");
            match (call.state, confirmed) {
                (Some(state), Some(ok)) if state["round"] == 1 => {
                    Outcome::Complete(text_result(format!("state-ok (confirmed: {ok})")))
                }
                _ => ask(
                    &[("confirm", elicit("Please confirm", "ok", "boolean"))],
                    Some(json!({"round": 1})),
                ),
            }
        },
    )?;
    tool(
        tools,
        "test_input_required_result_multiple_inputs",
        "Asks for several inputs at once",
        no_args(),
        |call| {
            let responses = call.input_responses;
            let name = accepted_string(responses, "user_name", "name");
            let greeting = sampled_text(responses, "greeting");
            let roots = listed_roots(responses, "client_roots");
            match (call.state, name, greeting, roots) {
                (Some(_), Some(name), Some(greeting), Some(roots)) => {
                    Outcome::Complete(text_result(format!("{greeting} {name} ({roots} roots)")))
                }
                _ => ask(
                    &[
                        ("user_name", elicit("What is your name?", "name", "string")),
                        ("greeting", sample("Write a one-word greeting.")),
                        ("client_roots", roots_request()),
                    ],
                    Some(json!({"round": 1})),
                ),
            }
        },
    )?;
    tool(
        tools,
        "test_input_required_result_multi_round",
        "Asks two questions, one per round",
        no_args(),
        |call| {
            let step = call.state.and_then(|state| state["step"].as_u64());
            match step {
                Some(1) => match accepted_string(call.input_responses, "step1", "name") {
                    Some(name) => ask(
                        &[(
                            "step2",
                            elicit("What is your favourite colour?", "color", "string"),
                        )],
                        Some(json!({"step": 2, "name": name})),
                    ),
                    None => ask(
                        &[("step1", elicit("What is your name?", "name", "string"))],
                        Some(json!({"step": 1})),
                    ),
                },
                Some(2) => {
                    let name = call
                        .state
                        .and_then(|s| s["name"].as_str())
                        .unwrap_or_default()
                        .to_owned();
                    match accepted_string(call.input_responses, "step2", "color") {
                        Some(color) => {
                            Outcome::Complete(text_result(format!("{name} likes {color}")))
                        }
                        None => ask(
                            &[(
                                "step2",
                                elicit("What is your favourite colour?", "color", "string"),
                            )],
                            Some(json!({"step": 2, "name": name})),
                        ),
                    }
                }
                _ => ask(
                    &[("step1", elicit("What is your name?", "name", "string"))],
                    Some(json!({"step": 1})),
                ),
            }
        },
    )?;
    tool(
        tools,
        "test_input_required_result_tampered_state",
        "Keeps integrity-protected request state",
        no_args(),
        |call| match (
            call.state,
            accepted_bool(call.input_responses, "confirm", "ok"),
        ) {
            (Some(_), Some(_)) => Outcome::Complete(text_result("State verified")),
            _ => ask(
                &[("confirm", elicit("Please confirm", "ok", "boolean"))],
                Some(json!({"verified": true})),
            ),
        },
    )?;
    tool(
        tools,
        "test_input_required_result_capabilities",
        "Asks only for input kinds the client declared",
        no_args(),
        |call| {
            let responses = call.input_responses;
            if let Some(name) = accepted_string(responses, "user_input", "name") {
                return Outcome::Complete(text_result(format!("Hello, {name}!")));
            }
            if let Some(text) = sampled_text(responses, "model_input") {
                return Outcome::Complete(text_result(format!("Model said: {text}")));
            }
            if let Some(count) = listed_roots(responses, "roots_input") {
                return Outcome::Complete(text_result(format!("Received {count} roots")));
            }
            let caps = call.capabilities;
            if caps.elicitation_form() {
                ask(
                    &[("user_input", elicit("What is your name?", "name", "string"))],
                    None,
                )
            } else if caps.sampling() {
                ask(
                    &[("model_input", sample("What is the capital of France?"))],
                    None,
                )
            } else if caps.roots() {
                ask(&[("roots_input", roots_request())], None)
            } else {
                Outcome::Complete(error_result(
                    "The client declared no capability this tool can use",
                ))
            }
        },
    )?;
    Ok(())
}

/// The Tasks extension fixtures (fixtures.md §2.6 and §4).
fn register_task_tools(tools: &mut Registry) -> Result<(), String> {
    tool(
        tools,
        "greet",
        "Greets someone (always inline)",
        json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
        |call| {
            Outcome::Complete(text_result(format!(
                "Hello, {}!",
                call.str_arg("name").unwrap_or_default()
            )))
        },
    )?;
    tools.register(
        ToolSpec::new(
            "slow_compute",
            "Sleeps for the given seconds, then answers (a task for clients that declare tasks)",
            json!({"type": "object", "properties": {
                "seconds": {"type": "number", "minimum": 0, "maximum": 3600},
                "label": {"type": "string"}}, "required": ["seconds"]}),
        )
        .task_policy(TaskPolicy::Optional),
        Arc::new(|call: &mut Invocation<'_>| {
            let seconds = call
                .arguments
                .get("seconds")
                .and_then(Value::as_f64)
                .unwrap_or(0.0);
            let label = call.str_arg("label").unwrap_or("computation").to_owned();
            call.host.progress(0.0, Some(seconds), Some("computing"));
            if !call.host.sleep(Duration::from_secs_f64(seconds)) {
                return Outcome::Cancelled;
            }
            Outcome::Complete(text_result(format!("{label}: done after {seconds} s")))
        }),
    )?;
    tools.register(
        ToolSpec::new(
            "failing_job",
            "Runs for a second, then reports a tool error (task only)",
            no_args(),
        )
        .task_policy(TaskPolicy::Required),
        Arc::new(|call: &mut Invocation<'_>| {
            if !call.host.sleep(Duration::from_secs(1)) {
                return Outcome::Cancelled;
            }
            Outcome::Complete(error_result("The job failed: the input data is invalid"))
        }),
    )?;
    tools.register(
        ToolSpec::new(
            "protocol_error_job",
            "Fails with a JSON-RPC error (task only)",
            no_args(),
        )
        .task_policy(TaskPolicy::Required),
        Arc::new(|_: &mut Invocation<'_>| {
            Outcome::Error(RpcError::new(
                code::INTERNAL_ERROR,
                "The job failed at the protocol level",
            ))
        }),
    )?;
    tools.register(
        ToolSpec::new(
            "confirm_delete",
            "Asks for confirmation before deleting a file (task only)",
            json!({"type": "object", "properties": {"filename": {"type": "string"}}, "required": ["filename"]}),
        )
        .task_policy(TaskPolicy::Required),
        Arc::new(|call: &mut Invocation<'_>| {
            let filename = call.str_arg("filename").unwrap_or_default().to_owned();
            match call.input_responses.get("confirm").and_then(|a| a.get("action")).and_then(Value::as_str) {
                Some("accept") if accepted_bool(call.input_responses, "confirm", "confirm") != Some(false) => {
                    Outcome::Complete(text_result(format!("Deleted {filename}")))
                }
                Some(_) => Outcome::Complete(text_result(format!("Kept {filename}"))),
                None => ask(
                    &[("confirm", elicit(&format!("Delete {filename}?"), "confirm", "boolean"))],
                    None,
                ),
            }
        }),
    )?;
    tools.register(
        ToolSpec::new(
            "multi_input",
            "Asks two questions at once (task only)",
            no_args(),
        )
        .task_policy(TaskPolicy::Required),
        Arc::new(|call: &mut Invocation<'_>| {
            let first = accepted_string(call.input_responses, "partial_1", "name");
            let second = accepted_string(call.input_responses, "partial_2", "name");
            match (first, second) {
                (Some(first), Some(second)) => {
                    Outcome::Complete(text_result(format!("Received {first} and {second}")))
                }
                _ => ask(
                    &[
                        ("partial_1", elicit("First answer?", "name", "string")),
                        ("partial_2", elicit("Second answer?", "name", "string")),
                    ],
                    None,
                ),
            }
        }),
    )?;
    tools.register(
        ToolSpec::new(
            "test_tool_with_task",
            "Asks for a name synchronously, then greets in a durable task (task only)",
            no_args(),
        )
        .task_policy(TaskPolicy::Required),
        Arc::new(GreetAfterAsking),
    )?;
    Ok(())
}

/// MRTR before task creation: the name is gathered on `tools/call` itself, and the task
/// exists only once it is known.
struct GreetAfterAsking;

impl Tool for GreetAfterAsking {
    fn admit(&self, call: &mut Invocation<'_>) -> Admission {
        match accepted_string(call.input_responses, "user_name", "name") {
            Some(_) => Admission::Proceed,
            None => Admission::Answer(ask(
                &[("user_name", elicit("What is your name?", "name", "string"))],
                None,
            )),
        }
    }

    fn run(&self, call: &mut Invocation<'_>) -> Outcome {
        match accepted_string(call.input_responses, "user_name", "name") {
            Some(name) => {
                Outcome::Complete(text_result(format!("Hello, {name}! (from a durable task)")))
            }
            None => Outcome::Error(RpcError::invalid_params(
                "the task was created without a name",
            )),
        }
    }
}

/// The fixtures only the legacy (session) scenarios call (fixtures-2025-11-25.md §2.2):
/// their server-to-client requests are MRTR input requests, which the legacy path sends
/// on the call's stream and a 2026 client answers by retrying.
fn register_legacy_tools(tools: &mut Registry) -> Result<(), String> {
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

fn register_resources(catalog: &mut Catalog) {
    catalog.resources.push(Resource {
        uri: "test://static-text".into(),
        name: "static-text".into(),
        description: Some("A static text resource".into()),
        mime_type: Some("text/plain".into()),
        read: Arc::new(|uri, _| {
            Ok(vec![json!({"uri": uri, "mimeType": "text/plain",
                "text": "This is the content of the static text resource."})])
        }),
    });
    catalog.resources.push(Resource {
        uri: "test://static-binary".into(),
        name: "static-binary".into(),
        description: Some("A static binary resource".into()),
        mime_type: Some("image/png".into()),
        read: Arc::new(|uri, _| {
            Ok(vec![
                json!({"uri": uri, "mimeType": "image/png", "blob": PNG_1X1}),
            ])
        }),
    });
    catalog.resources.push(Resource {
        uri: "test://watched-resource".into(),
        name: "watched-resource".into(),
        description: Some("A resource legacy clients subscribe to".into()),
        mime_type: Some("text/plain".into()),
        read: Arc::new(|uri, _| {
            Ok(vec![
                json!({"uri": uri, "mimeType": "text/plain", "text": "Watched resource content"}),
            ])
        }),
    });
    catalog.templates.push(ResourceTemplate {
        uri_template: "test://template/{id}/data".into(),
        name: "template".into(),
        description: Some("Data for one id".into()),
        mime_type: Some("application/json".into()),
        read: Arc::new(|uri, vars| {
            let id = vars.get("id").cloned().unwrap_or_default();
            let text =
                json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
            Ok(vec![
                json!({"uri": uri, "mimeType": "application/json", "text": text.to_string()}),
            ])
        }),
    });
}

fn user_text(text: impl Into<String>) -> Value {
    json!({"role": "user", "content": {"type": "text", "text": text.into()}})
}

fn required(name: &str, completions: &[&str]) -> PromptArgument {
    PromptArgument {
        name: name.into(),
        description: None,
        required: true,
        completions: completions.iter().map(|c| (*c).to_owned()).collect(),
    }
}

fn register_prompts(catalog: &mut Catalog) {
    let arg = |call: &PromptCall<'_>, name: &str| {
        call.arguments
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    catalog.prompts.push(Prompt {
        name: "test_simple_prompt".into(),
        description: "A simple prompt without arguments".into(),
        arguments: Vec::new(),
        get: Arc::new(|_| {
            Outcome::Complete(
                json!({"messages": [user_text("This is a simple prompt for testing.")]}),
            )
        }),
    });
    catalog.prompts.push(Prompt {
        name: "test_prompt_with_arguments".into(),
        description: "A prompt with two required arguments".into(),
        arguments: vec![
            required("arg1", &["test-value", "testValue1"]),
            required("arg2", &["testValue2"]),
        ],
        get: Arc::new(move |call| {
            Outcome::Complete(json!({"messages": [user_text(format!(
                "Prompt with arguments: arg1='{}', arg2='{}'", arg(call, "arg1"), arg(call, "arg2")
            ))]}))
        }),
    });
    catalog.prompts.push(Prompt {
        name: "test_prompt_with_embedded_resource".into(),
        description: "A prompt embedding a resource".into(),
        arguments: vec![required("resourceUri", &[])],
        get: Arc::new(move |call| {
            Outcome::Complete(json!({"messages": [
                {"role": "user", "content": {"type": "resource", "resource": {
                    "uri": arg(call, "resourceUri"), "mimeType": "text/plain",
                    "text": "Embedded resource content for testing."}}},
                user_text("Please process the embedded resource above."),
            ]}))
        }),
    });
    catalog.prompts.push(Prompt {
        name: "test_prompt_with_image".into(),
        description: "A prompt with an image".into(),
        arguments: Vec::new(),
        get: Arc::new(|_| {
            Outcome::Complete(json!({"messages": [
                {"role": "user", "content": {"type": "image", "data": PNG_1X1, "mimeType": "image/png"}},
                user_text("Please analyze the image above."),
            ]}))
        }),
    });
    catalog.prompts.push(Prompt {
        name: "test_input_required_result_prompt".into(),
        description: "A prompt that asks for context first".into(),
        arguments: Vec::new(),
        get: Arc::new(|call| {
            match accepted_string(call.input_responses, "user_context", "context") {
                Some(context) => Outcome::Complete(
                    json!({"messages": [user_text(format!("Context: {context}"))]}),
                ),
                None => ask(
                    &[(
                        "user_context",
                        elicit("What context should the prompt use?", "context", "string"),
                    )],
                    None,
                ),
            }
        }),
    });
}
