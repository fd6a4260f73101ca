//! Small machinery every layer of mcp-taskd shares, none of it about MCP or tasks: the
//! wall clock and its RFC 3339 form, a value produced later on another thread, the
//! heartbeats that the systemd watchdog reads, duration histograms, and panics caught
//! quietly.
//!
//! May depend on: no crate of this workspace. Must never know: the protocol, tasks,
//! tools, configuration.

pub mod clock;
pub mod histogram;
pub mod later;
pub mod liveness;
pub mod panics;
