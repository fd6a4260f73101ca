//! Built-in tools, resources and prompts, registered through the same [`Registry`] and
//! [`Catalog`] as anything else. Two sets exist:
//!
//! - `demo`: what `mcp-taskd serve` shows with no config;
//! - `conformance`: the fixtures the official MCP conformance suite calls
//!   (`../shared/conformance/fixtures.md` §2);
//! - `testing`: fault-injection tools (panics, tools that ignore cancellation) used by
//!   the test suite to exercise retries, leases and fencing through the real binary.

mod conformance;
mod demo;
mod testing;

use crate::catalog::Catalog;
use std::sync::Arc;

use crate::notifications::Hub;
use crate::tools::Registry;

/// Registers the named sets, in order.
pub fn register(
    sets: &[String],
    tools: &mut Registry,
    catalog: &mut Catalog,
    hub: &Arc<Hub>,
) -> Result<(), String> {
    for set in sets {
        match set.as_str() {
            "conformance" => conformance::register(tools, catalog, hub)?,
            "demo" => demo::register(tools, catalog)?,
            "testing" => testing::register(tools, hub)?,
            other => return Err(format!("unknown built-in set \"{other}\"")),
        }
    }
    Ok(())
}

/// A 1x1 PNG, used by image fixtures.
pub const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
