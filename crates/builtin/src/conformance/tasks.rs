//! The Tasks extension fixtures (fixtures.md §2.6 and §4).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{accepted_bool, accepted_string, no_args, tool};
use crate::{ask, elicit};
use taskd_protocol::{code, RpcError};
use taskd_tools::{
    error_result, text_result, Admission, Invocation, Outcome, RegistrationError, Registry,
    TaskPolicy, Tool, ToolSpec,
};

pub(super) fn register_task_tools(tools: &mut Registry) -> Result<(), RegistrationError> {
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
            let seconds = call.f64_arg("seconds").unwrap_or(0.0);
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
