//! The input requests a tool may make of the client (MRTR `InputRequests`, SEP-2322),
//! and what counts as an answer to each. The one place their methods are spelled.

use serde_json::Value;

/// The three server-to-client requests a tool can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    Elicitation,
    Sampling,
    Roots,
}

impl InputKind {
    pub const ALL: [InputKind; 3] = [
        InputKind::Elicitation,
        InputKind::Sampling,
        InputKind::Roots,
    ];

    /// The request's JSON-RPC method.
    pub fn method(self) -> &'static str {
        match self {
            InputKind::Elicitation => "elicitation/create",
            InputKind::Sampling => "sampling/createMessage",
            InputKind::Roots => "roots/list",
        }
    }

    pub fn from_method(method: &str) -> Option<InputKind> {
        InputKind::ALL
            .into_iter()
            .find(|kind| kind.method() == method)
    }

    /// The kind of an `InputRequests` entry (`{"method": …, "params": {…}}`), when it is
    /// well formed: a known method and object params.
    pub fn of(request: &Value) -> Option<InputKind> {
        let kind = InputKind::from_method(request.get("method")?.as_str()?)?;
        request
            .get("params")
            .is_some_and(Value::is_object)
            .then_some(kind)
    }

    /// Whether `response` has the shape of an answer to this kind of request.
    pub fn is_answered_by(self, response: &Value) -> bool {
        let Some(response) = response.as_object() else {
            return false;
        };
        match self {
            InputKind::Elicitation => match response.get("action").and_then(Value::as_str) {
                Some("accept") => response.get("content").is_none_or(Value::is_object),
                Some("decline" | "cancel") => true,
                _ => false,
            },
            InputKind::Sampling => {
                response.get("role").is_some_and(Value::is_string)
                    && response.get("content").is_some()
            }
            InputKind::Roots => response.get("roots").is_some_and(Value::is_array),
        }
    }
}

/// Whether `response` is the kind of answer the input request `request` asked for.
pub fn response_matches(request: &Value, response: &Value) -> bool {
    request
        .get("method")
        .and_then(Value::as_str)
        .and_then(InputKind::from_method)
        .is_some_and(|kind| kind.is_answered_by(response))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn updates_accept_only_outstanding_keys_of_the_right_kind() {
        let request = json!({"method": "elicitation/create", "params": {}});
        assert!(response_matches(
            &request,
            &json!({"action": "accept", "content": {"a": 1}})
        ));
        assert!(response_matches(&request, &json!({"action": "decline"})));
        assert!(!response_matches(&request, &json!({"roots": []})));
        assert!(!response_matches(&request, &json!(12345)));
        let roots = json!({"method": "roots/list", "params": {}});
        assert!(response_matches(&roots, &json!({"roots": []})));
        assert!(!response_matches(&roots, &json!({"action": "accept"})));
    }

    #[test]
    fn only_known_methods_with_object_params_are_input_requests() {
        assert_eq!(
            InputKind::of(&json!({"method": "sampling/createMessage", "params": {}})),
            Some(InputKind::Sampling)
        );
        assert_eq!(InputKind::of(&json!({"method": "roots/list"})), None);
        assert_eq!(
            InputKind::of(&json!({"method": "tools/call", "params": {}})),
            None
        );
    }
}
