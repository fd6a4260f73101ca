//! The demo set served by the embedded default configuration.

use std::sync::Arc;

use serde_json::json;

use crate::catalog::{Catalog, Prompt, PromptArgument, Resource};
use crate::tools::{text_result, Invocation, Outcome, Registry, TaskPolicy, ToolSpec};

pub fn register(tools: &mut Registry, catalog: &mut Catalog) -> Result<(), String> {
    tools.register(
        ToolSpec::new(
            "echo",
            "Returns the given text unchanged.",
            json!({"type":"object","properties":{"text":{"type":"string","description":"Text to echo"}},"required":["text"],"additionalProperties":false}),
        ),
        Arc::new(|call: &mut Invocation<'_>| {
            Outcome::Complete(text_result(call.str_arg("text").unwrap_or_default()))
        }),
    )?;
    // A task tool whose attempts do nothing: what a durable task costs on its own
    // (creation, claim, completion, outbox), as benches/tasks.sh measures it.
    tools.register(
        ToolSpec::new(
            "noop_task",
            "Does nothing, as a durable task that completes at once.",
            json!({"type":"object","properties":{},"additionalProperties":false}),
        )
        .task_policy(TaskPolicy::Required),
        Arc::new(|_: &mut Invocation<'_>| Outcome::Complete(text_result("done"))),
    )?;
    catalog.resources.push(Resource {
        uri: "mcp-taskd://about".into(),
        name: "about".into(),
        description: Some("What this server is".into()),
        mime_type: Some("text/plain".into()),
        read: Arc::new(|uri, _| {
            Ok(vec![json!({
                "uri": uri,
                "mimeType": "text/plain",
                "text": "mcp-taskd: durable MCP tasks on one box. See README.md.",
            })])
        }),
    });
    catalog.prompts.push(Prompt {
        name: "summarize".into(),
        description: "Asks the model to summarize a text.".into(),
        arguments: vec![PromptArgument {
            name: "text".into(),
            description: Some("The text to summarize".into()),
            required: true,
            completions: Vec::new(),
        }],
        get: Arc::new(|call| {
            let text = call.arguments.get("text").and_then(|t| t.as_str()).unwrap_or_default();
            Outcome::Complete(json!({
                "messages": [{ "role": "user", "content": { "type": "text", "text": format!("Summarize:\n\n{text}") } }]
            }))
        }),
    });
    Ok(())
}
