//! Built-in tools, resources and prompts, registered through the same [`Registry`] and
//! [`Catalog`] as anything else. Three sets exist (named in [`BuiltinSet`]):
//!
//! - `demo`: what `mcp-taskd serve` shows with no config;
//! - `conformance`: the fixtures the official MCP conformance suite calls
//!   (`../shared/conformance/fixtures.md` §2);
//! - `testing`: fault-injection tools (panics, tools that ignore cancellation) used by
//!   the test suite to exercise retries, leases and fencing through the real binary.
//!
//! May depend on: `taskd-protocol`, `taskd-notifications` (list changes),
//! `taskd-tools`. Must never know: tasks or their store (a built-in task tool runs on a
//! worker like any other), transports, the configuration file.

mod conformance;
mod demo;
mod testing;

use std::sync::Arc;

use serde_json::{json, Value};

use taskd_notifications::Hub;
use taskd_tools::catalog::Catalog;
use taskd_tools::{Outcome, RegistrationError, Registry};

/// Registers the named sets, in order.
pub fn register(
    sets: &[BuiltinSet],
    tools: &mut Registry,
    catalog: &mut Catalog,
    hub: &Arc<Hub>,
) -> Result<(), RegistrationError> {
    for set in sets {
        match set {
            BuiltinSet::Conformance => conformance::register(tools, catalog, hub)?,
            BuiltinSet::Demo => demo::register(tools, catalog)?,
            BuiltinSet::Testing => testing::register(tools, hub)?,
        }
    }
    Ok(())
}

/// A 1x1 PNG, used by image fixtures.
pub const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/// An `elicitation/create` input request (form mode) for one required property.
pub(crate) fn elicit(message: &str, property: &str, kind: &str) -> Value {
    json!({
        "method": "elicitation/create",
        "params": {
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": { property: { "type": kind } },
                "required": [property],
            },
        },
    })
}

/// Asks the client for input: `requests` as an MRTR `InputRequests` map, plus the tool's
/// state for the next round.
pub(crate) fn ask(requests: &[(&str, Value)], state: Option<Value>) -> Outcome {
    Outcome::InputRequired {
        requests: requests
            .iter()
            .map(|(key, request)| ((*key).to_owned(), request.clone()))
            .collect(),
        state,
    }
}

/// A built-in tool set; [`BuiltinSet::name`] is the one list of the names a
/// configuration may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinSet {
    /// Example tools, what `mcp-taskd serve` shows with no config.
    Demo,
    /// The official conformance suite's fixtures.
    Conformance,
    /// Fault-injection tools for the test suite.
    Testing,
}

impl BuiltinSet {
    pub const ALL: [BuiltinSet; 3] = [
        BuiltinSet::Demo,
        BuiltinSet::Conformance,
        BuiltinSet::Testing,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BuiltinSet::Demo => "demo",
            BuiltinSet::Conformance => "conformance",
            BuiltinSet::Testing => "testing",
        }
    }

    /// The set a configuration names `name`.
    pub fn named(name: &str) -> Option<BuiltinSet> {
        BuiltinSet::ALL.into_iter().find(|set| set.name() == name)
    }
}
