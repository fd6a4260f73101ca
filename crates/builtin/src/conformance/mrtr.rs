//! Multi-round-trip fixtures (fixtures.md §2.5): tools that ask the client for input
//! through `inputRequests` and finish on the retry.

use serde_json::json;

use super::{
    accepted_bool, accepted_string, listed_roots, no_args, roots_request, sample, sampled_text,
    tool,
};
use crate::{ask, elicit};
use taskd_tools::{error_result, text_result, Outcome, RegistrationError, Registry};

pub(super) fn register_mrtr_tools(tools: &mut Registry) -> Result<(), RegistrationError> {
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
