//! Fault-injection tools for the test suite: they misbehave on purpose, so that retries,
//! deadlines, lease expiry and fencing can be exercised through the real binary. Only
//! served when a configuration asks for the `testing` set.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{ask, elicit};
use taskd_notifications::{Hub, ListKind};
use taskd_tools::{
    text_result, ExecutionPolicy, Invocation, Outcome, RegistrationError, Registry, TaskPolicy,
    ToolSpec,
};

pub fn register(tools: &mut Registry, hub: &Arc<Hub>) -> Result<(), RegistrationError> {
    // Announces `count` tools-list changes at once: traffic to overrun a subscriber
    // that stops reading.
    let flood_hub = Arc::clone(hub);
    tools.register(
        ToolSpec::new(
            "flood_list_changed",
            "Publishes count tools/list_changed notifications",
            json!({"type": "object", "properties": {"count": {"type": "integer", "minimum": 1, "maximum": 1000000}}, "required": ["count"]}),
        ),
        Arc::new(move |call: &mut Invocation<'_>| {
            let count = call.arguments.get("count").and_then(Value::as_u64).unwrap_or(0);
            for _ in 0..count {
                flood_hub.publish_list_changed(ListKind::Tools);
            }
            Outcome::Complete(text_result(format!("published {count}")))
        }),
    )?;
    // Sleeps without ever checking for cancellation or its deadline, like a hung
    // program: only lease expiry and fencing can stop its late result from landing.
    tools.register(
        ToolSpec::new(
            "stubborn_sleep",
            "Sleeps, ignoring cancellation and deadlines, then claims success",
            json!({"type": "object", "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 60}}, "required": ["seconds"]}),
        )
        .task_policy(TaskPolicy::Required)
        .execution(ExecutionPolicy {
            max_attempts: 2,
            timeout: Duration::from_millis(500),
            backoff: Duration::from_millis(50),
            ..ExecutionPolicy::default()
        }),
        Arc::new(|call: &mut Invocation<'_>| {
            let seconds = call.f64_arg("seconds").unwrap_or(0.0);
            std::thread::sleep(Duration::from_secs_f64(seconds));
            Outcome::Complete(text_result("finished (too late, if the lease was lost)"))
        }),
    )?;
    // Panics on every attempt: retried with backoff, then failed.
    tools.register(
        ToolSpec::new(
            "always_panics",
            "Panics on every attempt",
            json!({"type": "object"}),
        )
        .task_policy(TaskPolicy::Required)
        .execution(ExecutionPolicy {
            max_attempts: 3,
            backoff: Duration::from_millis(20),
            ..ExecutionPolicy::default()
        }),
        Arc::new(|_: &mut Invocation<'_>| -> Outcome { panic!("injected fault") }),
    )?;
    // Returns structured content that breaks its own output schema.
    tools.register(
        ToolSpec::new("breaks_contract", "Returns output that violates its outputSchema", json!({"type": "object"}))
            .task_policy(TaskPolicy::Optional)
            .output_schema(json!({"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]})),
        Arc::new(|_: &mut Invocation<'_>| {
            Outcome::Complete(json!({"content": [{"type": "text", "text": "oops"}], "structuredContent": {"count": "many"}}))
        }),
    )?;
    // Asks for approval, then works for a while: a resumed run long enough to be
    // interrupted by a crash.
    tools.register(
        ToolSpec::new(
            "approval_then_work",
            "Asks for approval, then works for work_seconds",
            json!({"type": "object", "properties": {
                "prepare_seconds": {"type": "number", "minimum": 0, "maximum": 60},
                "work_seconds": {"type": "number", "minimum": 0, "maximum": 60}}}),
        )
        .task_policy(TaskPolicy::Required),
        Arc::new(|call: &mut Invocation<'_>| {
            let Some(approval) = call.input_responses.get("approval") else {
                let prepare = call.f64_arg("prepare_seconds").unwrap_or(0.0);
                if prepare > 0.0 {
                    if !call.host.sleep(Duration::from_secs_f64(prepare)) {
                        return Outcome::Cancelled;
                    }
                    call.host
                        .progress(1.0, Some(2.0), Some("prepared; asking for approval"));
                    // A second phase as long as the first, so a subscriber re-reading the
                    // task after the status message still finds it working.
                    if !call.host.sleep(Duration::from_secs_f64(prepare)) {
                        return Outcome::Cancelled;
                    }
                }
                return ask(
                    &[("approval", elicit("Approve?", "approved", "boolean"))],
                    Some(json!({"asked": 1})),
                );
            };
            let approved =
                approval["action"] == "accept" && approval["content"]["approved"] == true;
            let seconds = call.f64_arg("work_seconds").unwrap_or(0.0);
            if !call.host.sleep(Duration::from_secs_f64(seconds)) {
                return Outcome::Cancelled;
            }
            let state = call.state.cloned().unwrap_or(Value::Null);
            Outcome::Complete(text_result(format!("approved={approved} state={state}")))
        }),
    )?;
    // Needs both elicitation modes: exercises the capability check at poll time.
    tools.register(
        ToolSpec::new(
            "asks_url_and_form",
            "Asks through a URL and a form at once",
            json!({"type": "object"}),
        )
        .task_policy(TaskPolicy::Required),
        Arc::new(|call: &mut Invocation<'_>| {
            if call.input_responses.contains_key("visit")
                && call.input_responses.contains_key("fill")
            {
                return Outcome::Complete(text_result("both answered"));
            }
            let visit = json!({"method": "elicitation/create", "params": {
                "mode": "url", "message": "Sign in", "url": "https://example.com/login",
                "elicitationId": "login-1"}});
            ask(
                &[
                    ("visit", visit),
                    ("fill", elicit("Your name?", "name", "string")),
                ],
                None,
            )
        }),
    )?;
    Ok(())
}
