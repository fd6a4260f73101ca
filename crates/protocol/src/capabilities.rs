//! [`ClientCapabilities`]: what the client declared it can do, and what a set of input
//! requests needs of it.

use serde_json::{json, Map, Value};

use super::input::InputKind;

/// The Tasks extension's identifier, under `extensions` in capabilities.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The client's declared capabilities for this one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientCapabilities(pub Map<String, Value>);

impl ClientCapabilities {
    fn declares(&self, name: &str) -> bool {
        self.0.get(name).is_some_and(Value::is_object)
    }

    pub fn sampling(&self) -> bool {
        self.declares("sampling")
    }

    pub fn roots(&self) -> bool {
        self.declares("roots")
    }

    /// Form-mode elicitation: an empty `elicitation: {}` means form mode only.
    pub fn elicitation_form(&self) -> bool {
        match self.0.get("elicitation") {
            Some(Value::Object(modes)) => modes.contains_key("form") || !modes.contains_key("url"),
            _ => false,
        }
    }

    pub fn elicitation_url(&self) -> bool {
        matches!(self.0.get("elicitation"), Some(Value::Object(modes)) if modes.contains_key("url"))
    }

    /// Whether this request declares the Tasks extension.
    pub fn tasks(&self) -> bool {
        matches!(self.0.get("extensions"), Some(Value::Object(ext)) if ext.get(TASKS_EXTENSION).is_some_and(Value::is_object))
    }
}

/// The capabilities a set of input requests needs that the client did not declare, as
/// a `requiredCapabilities` object; `None` when the client can serve them all.
pub fn missing_for_input_requests(
    requests: &Map<String, Value>,
    capabilities: &ClientCapabilities,
) -> Option<Value> {
    let mut missing = Map::new();
    for request in requests.values() {
        match request
            .get("method")
            .and_then(Value::as_str)
            .and_then(InputKind::from_method)
        {
            Some(InputKind::Elicitation) => {
                let mode = request["params"]
                    .get("mode")
                    .and_then(Value::as_str)
                    .unwrap_or("form");
                let supported = match mode {
                    "url" => capabilities.elicitation_url(),
                    _ => capabilities.elicitation_form(),
                };
                if !supported {
                    let modes = missing.entry("elicitation").or_insert_with(|| json!({}));
                    modes[if mode == "url" { "url" } else { "form" }] = json!({});
                }
            }
            Some(InputKind::Sampling) if !capabilities.sampling() => {
                missing.insert("sampling".into(), json!({}));
            }
            Some(InputKind::Roots) if !capabilities.roots() => {
                missing.insert("roots".into(), json!({}));
            }
            _ => {}
        }
    }
    (!missing.is_empty()).then_some(Value::Object(missing))
}
