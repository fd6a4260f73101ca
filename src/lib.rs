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
//!        └─ notifications             subscriptions/listen streams
//! auth, config, server (assembly and lifecycle)
//! ```

pub mod auth;
pub mod builtin;
pub mod catalog;
pub mod config;
pub mod notifications;
pub mod protocol;
pub mod server;
pub mod tools;
pub mod transport;
