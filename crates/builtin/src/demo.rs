//! The demo set served by the embedded default configuration.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use taskd_tools::catalog::{Catalog, Prompt, PromptArgument, Resource};
use taskd_tools::{
    text_result, ExecutionPolicy, Invocation, Outcome, RegistrationError, Registry, TaskPolicy,
    ToolSpec,
};

pub fn register(tools: &mut Registry, catalog: &mut Catalog) -> Result<(), RegistrationError> {
    register_tools(tools)?;
    register_catalog(catalog);
    Ok(())
}

fn register_tools(tools: &mut Registry) -> Result<(), RegistrationError> {
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
    tools.register(
        ToolSpec::new(
            "generate_report",
            "Writes a short report on a topic, one section at a time (a few seconds). \
             A task when the client supports tasks: progress shows in the task's statusMessage, \
             and tasks/cancel stops it between sections.",
            json!({"type":"object","properties":{
                "topic":{"type":"string","description":"What the report is about"},
                "sections":{"type":"integer","minimum":1,"maximum":10,"default":4,"description":"How many sections"}},
                "required":["topic"],"additionalProperties":false}),
        )
        .task_policy(TaskPolicy::Optional)
        .output_schema(json!({"type":"object","properties":{
            "topic":{"type":"string"},
            "sections":{"type":"array","items":{"type":"string"}}},
            "required":["topic","sections"]}))
        .execution(ExecutionPolicy {
            timeout: Duration::from_secs(60),
            ..ExecutionPolicy::default()
        }),
        Arc::new(generate_report),
    )?;
    tools.register(
        ToolSpec::new(
            "approve_deployment",
            "Deploys a service version after a person approves it: the task asks for approval \
             (input_required, an elicitation form), then rolls out or stands down.",
            json!({"type":"object","properties":{
                "service":{"type":"string","description":"Service to deploy"},
                "version":{"type":"string","description":"Version to roll out"}},
                "required":["service","version"],"additionalProperties":false}),
        )
        .task_policy(TaskPolicy::Required)
        .requires(json!({"elicitation": {}})),
        Arc::new(approve_deployment),
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
    Ok(())
}

/// `generate_report`: a section every 600 ms, with progress; cancellable between steps.
fn generate_report(call: &mut Invocation<'_>) -> Outcome {
    let topic = call.str_arg("topic").unwrap_or_default().to_owned();
    let count = call
        .arguments
        .get("sections")
        .and_then(|n| n.as_u64())
        .unwrap_or(4)
        .clamp(1, 10);
    let headings = [
        "Background",
        "Findings",
        "Risks",
        "Options",
        "Recommendation",
    ];
    let mut sections = Vec::new();
    for index in 0..count {
        let heading = headings[index as usize % headings.len()];
        call.host.progress(
            index as f64,
            Some(count as f64),
            Some(&format!(
                "Writing section {} of {count}: {heading}",
                index + 1
            )),
        );
        if !call.host.sleep(Duration::from_millis(600)) {
            return Outcome::Cancelled;
        }
        sections.push(format!("{}. {heading} on {topic}", index + 1));
    }
    call.host
        .progress(count as f64, Some(count as f64), Some("Report complete"));
    let text = format!("Report: {topic}\n{}", sections.join("\n"));
    Outcome::Complete(json!({
        "content": [{ "type": "text", "text": text }],
        "structuredContent": { "topic": topic, "sections": sections },
    }))
}

/// `approve_deployment`: first round asks for approval; the next one acts on it.
fn approve_deployment(call: &mut Invocation<'_>) -> Outcome {
    let target = format!(
        "{}@{}",
        call.str_arg("service").unwrap_or_default(),
        call.str_arg("version").unwrap_or_default()
    );
    let Some(answer) = call.input_responses.get("approval") else {
        let request = json!({
            "method": "elicitation/create",
            "params": {
                "message": format!("Deploy {target} to production?"),
                "requestedSchema": {
                    "type": "object",
                    "properties": {
                        "approve": { "type": "boolean", "title": "Approve the deployment" },
                        "note": { "type": "string", "title": "Note for the change log" },
                    },
                    "required": ["approve"],
                },
            },
        });
        return Outcome::InputRequired {
            requests: [("approval".to_owned(), request)].into_iter().collect(),
            state: None,
        };
    };
    let approved = answer.get("action").and_then(|a| a.as_str()) == Some("accept")
        && call
            .accepted_elicitation("approval")
            .and_then(|content| content.get("approve"))
            .and_then(|approve| approve.as_bool())
            == Some(true);
    if !approved {
        return Outcome::Complete(text_result(format!(
            "Deployment of {target} was not approved; nothing changed."
        )));
    }
    for (step, message) in ["Draining traffic", "Rolling out", "Verifying health"]
        .iter()
        .enumerate()
    {
        call.host.progress(step as f64, Some(3.0), Some(message));
        if !call.host.sleep(Duration::from_millis(400)) {
            return Outcome::Cancelled;
        }
    }
    Outcome::Complete(text_result(format!("Deployed {target}.")))
}

fn register_catalog(catalog: &mut Catalog) {
    catalog.resources.push(Resource {
        uri: "mcp-taskd://about".into(),
        name: "about".into(),
        description: Some("What this server is".into()),
        mime_type: Some("text/plain".into()),
        read: Arc::new(|uri, _, _| {
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
}
