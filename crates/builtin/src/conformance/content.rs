//! Content and stateless fixtures (fixtures.md §2.1 to §2.4): every content type,
//! errors, progress, logging and list-change hooks.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{no_args, tool, WAV};
use crate::PNG_1X1;
use taskd_notifications::{Hub, ListKind};
use taskd_protocol::LogLevel;
use taskd_tools::{
    error_result, text_result, Invocation, Outcome, RegistrationError, Registry, ToolSpec,
};

pub(super) fn register_content_tools(tools: &mut Registry) -> Result<(), RegistrationError> {
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

pub(super) fn register_stateless_tools(
    tools: &mut Registry,
    hub: &Arc<Hub>,
) -> Result<(), RegistrationError> {
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
