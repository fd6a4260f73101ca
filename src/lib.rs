//! mcp-taskd: one binary that serves MCP tools over stateless Streamable HTTP
//! (protocol revision 2026-07-28) and turns long-running tool calls into durable tasks
//! (the `io.modelcontextprotocol/tasks` extension).
//!
//! Data flow, one module per stage:
//!
//! ```text
//! transport   HTTP: limits, Host/Origin, auth, MCP headers vs body, JSON / SSE out
//!   └─ protocol   JSON-RPC envelope, _meta, one handler per method, MRTR state
//!        ├─ tools, catalog, builtin   what is served
//!        ├─ tasks                     the task engine, one folder:
//!        │    ├─ service              TaskService: create, get, update, cancel
//!        │    ├─ model, backend       records; TaskStore, the interface to storage
//!        │    ├─ sqlite               the SQLite store (schema.sql), writer, sql/
//!        │    ├─ workers              claim jobs (lease + fencing token), run tools
//!        │    └─ upkeep               outbox relay, janitor, start-up recovery
//!        └─ notifications             subscriptions/listen streams
//! metrics     counters and gauges for GET /metrics (bounded labels only)
//! ops         operators: admin socket, `tasks`/`stats`/`backup`/`restore` commands
//! auth, config, clock, later, registration (what a configuration offers),
//! server (assembly and lifecycle)
//! ```

pub mod auth;
pub mod builtin;
pub mod catalog;
pub mod clock;
pub mod config;
#[cfg(test)]
mod fuzzing;
pub mod handlers;
pub mod later;
pub mod legacy;
pub mod liveness;
pub mod metrics;
pub mod notifications;
pub mod ops;
pub mod protocol;
pub mod registration;
pub mod server;
pub mod tasks;
pub mod tools;
pub mod transport;
