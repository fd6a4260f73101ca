//! mcp-taskd: one binary that serves MCP tools over Streamable HTTP (and stdio) — stateless
//! 2026-07-28 with the Tasks extension (`io.modelcontextprotocol/tasks`), and the 2025
//! `initialize`-session era on the same endpoint — and turns long-running tool calls
//! into durable tasks.
//!
//! Data flow, one module per stage (folders are stages; `protocol` is the ground floor
//! every other module may use, and it uses none of them):
//!
//! ```text
//! transport   HTTP: connection limits, Host/Origin, auth, MCP headers vs body, era
//!   │         selection, JSON / SSE out, listen streams
//!   ├─ legacy       2025 sessions: initialize, GET streams, server-to-client requests,
//!   │               2025-11-25 tasks — answered through the same handlers
//!   └─ handlers     the dispatcher: one handler per method, MRTR request state
//!        ├─ tools, catalog, builtin   what is served (command tools in tools/command)
//!        ├─ upstreams                 stdio MCP servers' tools served as ours, as tasks
//!        ├─ tasks                     the task engine, one folder:
//!        │    ├─ service              TaskService: create, get, update, cancel
//!        │    ├─ model, backend       records; TaskStore, the interface to storage
//!        │    ├─ sqlite               the SQLite store (schema.sql), writer, sql/
//!        │    ├─ workers              claim jobs (lease + fencing token), run tools
//!        │    └─ upkeep               outbox relay, janitor, start-up recovery
//!        └─ notifications             the hub behind listen streams
//! protocol    vocabulary: errors and codes, envelope and _meta, capabilities, log
//!             levels, input-request kinds, task statuses
//! metrics     counters and gauges for GET /metrics (bounded labels only)
//! telemetry   OpenTelemetry spans of requests and of each task's life, OTLP export
//!             (off unless an endpoint is configured); the JSON log format
//! liveness    heartbeats of the long-lived loops (read by the systemd watchdog)
//! dashboard   the operator web page and its JSON API (admin-role tokens), on the
//!             MCP listener; uses ops' operations
//! live        the live configuration: settings in force, swapped whole by a reload
//! ops         operating it: systemd notify, admin socket, reload,
//!             tasks/stats/backup/restore
//! stdio       `mcp-taskd stdio`: one host over stdin/stdout, served here (both eras)
//!             or relayed to a running server (`--connect`)
//! auth        static tokens and OAuth access tokens (auth/oauth: RFC 9728 metadata,
//!             JWT and introspected tokens, the provider's key set) -> identity, scopes
//! config, clock, later, registration (what a configuration offers),
//! shares (each identity's weight, priority and quotas),
//! server (assembly and lifecycle: the engine every transport shares)
//! ```

pub mod auth;
pub mod builtin;
pub mod catalog;
pub mod clock;
pub mod config;
pub mod dashboard;
#[cfg(test)]
mod fuzzing;
pub mod handlers;
pub mod later;
pub mod legacy;
pub mod live;
pub mod liveness;
pub mod metrics;
pub mod notifications;
pub mod ops;
pub mod protocol;
pub mod registration;
pub mod server;
pub mod shares;
pub mod stdio;
pub mod tasks;
pub mod telemetry;
pub mod tools;
pub mod transport;
pub mod upstreams;
