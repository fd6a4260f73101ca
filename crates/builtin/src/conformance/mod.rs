//! The fixtures of the official MCP conformance suite (fixtures.md §2), as ordinary
//! built-in registrations. Names and texts follow the suite's reference server.
//!
//! The tools live one file per fixture group: [`content`] (content types, errors,
//! progress, logging, list changes), [`mrtr`] (input requests), [`tasks`] (the Tasks
//! extension) and [`legacy`] (what only the 2025 session scenarios call); resources and
//! prompts are here.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{ask, elicit, PNG_1X1};
use taskd_notifications::Hub;
use taskd_tools::catalog::{
    Catalog, Prompt, PromptArgument, PromptCall, Resource, ResourceTemplate,
};
use taskd_tools::{Invocation, Outcome, RegistrationError, Registry, ToolSpec};

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
) -> Result<(), RegistrationError> {
    tools.register(ToolSpec::new(name, description, schema), Arc::new(run))
}

mod content;
mod legacy;
mod mrtr;
mod tasks;

use content::{register_content_tools, register_stateless_tools};
use legacy::register_legacy_tools;
use mrtr::register_mrtr_tools;
use tasks::register_task_tools;

pub fn register(
    tools: &mut Registry,
    catalog: &mut Catalog,
    hub: &Arc<Hub>,
) -> Result<(), RegistrationError> {
    register_content_tools(tools)?;
    register_stateless_tools(tools, hub)?;
    register_mrtr_tools(tools)?;
    register_task_tools(tools)?;
    register_legacy_tools(tools)?;
    register_resources(catalog);
    register_prompts(catalog);
    Ok(())
}

fn register_resources(catalog: &mut Catalog) {
    catalog.resources.push(Resource {
        uri: "test://static-text".into(),
        name: "static-text".into(),
        description: Some("A static text resource".into()),
        mime_type: Some("text/plain".into()),
        read: Arc::new(|uri, _, _| {
            Ok(vec![json!({"uri": uri, "mimeType": "text/plain",
                "text": "This is the content of the static text resource."})])
        }),
    });
    catalog.resources.push(Resource {
        uri: "test://static-binary".into(),
        name: "static-binary".into(),
        description: Some("A static binary resource".into()),
        mime_type: Some("image/png".into()),
        read: Arc::new(|uri, _, _| {
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
        read: Arc::new(|uri, _, _| {
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
        read: Arc::new(|uri, vars, _| {
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
