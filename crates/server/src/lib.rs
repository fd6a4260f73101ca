//! The server: everything between a socket (or stdin) and the task engine, and the
//! assembly that wires the lower crates together. `serve` and `stdio` share one
//! [`server::Engine`].
//!
//! ```text
//! server, stdio      assembly and lifecycle; `mcp-taskd stdio` (served here or relayed)
//! listeners          the MCP socket: passed by systemd (socket activation) or bound
//! ops                operating it: systemd, admin socket, reload, tasks/stats/backup/restore
//! transport          HTTP: limits, Host/Origin, auth, MCP headers vs body, JSON / SSE out
//!   ├─ dashboard     the operator web page and its JSON API (ops' admin operations)
//!   └─ legacy        2025 sessions, reached through `transport::SessionEra`
//! handlers           the dispatcher: one handler per method, MRTR request state, the bridge
//! metrics            counters and gauges for GET /metrics (bounded labels only)
//! live, origins,     the live configuration: settings in force, swapped whole by a reload;
//! shares,            Host/Origin policy; each identity's share; what a configuration
//! registration       offers (tools, catalog), built
//! config             the TOML file format: the lower crates' settings, composed and checked
//! ```
//!
//! May depend on: every crate of the workspace. Nothing depends on it but the binary.
//! Lower crates reach up only through traits they own (`taskd_engine::SettingsSource`,
//! `QuotaCounter`, `AttemptObserver`, `UpkeepCounters`), implemented here.

pub mod config;
pub mod dashboard;
pub mod handlers;
pub mod legacy;
pub mod listeners;
pub mod live;
pub mod metrics;
pub mod ops;
pub mod origins;
pub mod registration;
pub mod server;
pub mod shares;
pub mod stdio;
pub mod transport;
