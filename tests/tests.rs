//! The integration suite: one test binary, one module per area.
//!
//! Every test drives the real `mcp-taskd` binary, started by the harness in [`common`]
//! on an ephemeral loopback port with a temporary data dir, and speaks raw HTTP/1.1 to
//! it, so a test controls every byte and observes only what a client could.
//!
//! Areas:
//! - [`smoke`]: the first things a person does (health, discovery, a tool call);
//! - [`transport`]: every error path of the transport and protocol layers;
//! - [`robustness`]: hostile and broken input, and HTTP framing after a refusal;
//! - [`bridge`]: task tools for clients that do not declare the Tasks extension;
//! - [`demo_tools`]: the demo tools of the embedded default configuration;
//! - [`command_tools`]: command tools running the programs under `tests/scripts/`;
//! - [`reaping`]: descendants of command tools that leave their process group;
//! - [`durable_tasks`]: crashes, restarts, leases, fencing, isolation, expiry;
//! - [`fair_workers`]: a tool at its `max_concurrency` never starves the others;
//! - [`fair_share`]: one identity neither locks out nor starves the others (turns,
//!   priorities);
//! - [`flow_control`]: concurrency keys, rate limits and paused tools;
//! - [`task_input`]: tasks that ask for input, and `tasks/update`;
//! - [`task_output`]: what a task's tool prints, kept with the task and read back;
//! - [`notifications`]: `subscriptions/listen` streams and task notifications;
//! - [`operator`]: the operator commands (`tasks`, `stats`, `backup`, `restore`);
//! - [`bulk_actions`]: `tasks cancel|rerun` by filter: counted, confirmed, batched, linked;
//! - [`history`]: retention by outcome: summaries of finished tasks past their TTL;
//! - [`hardening`]: hostile connections (floods, trickles, unread answers) and recovery;
//! - [`storage`]: a full disk, a damaged database, a read-only or vanished data dir;
//! - [`stdio`]: `mcp-taskd stdio` over stdin/stdout, and its `--connect` relay;
//! - [`legacy`]: the 2025 session era (initialize, sessions, GET streams) beside 2026;
//! - [`listen_streams`]: listen streams under load, hang-ups and stalled readers;
//! - [`fuzz`]: generated requests (proptest) through the whole HTTP request path;
//! - [`litestream`]: Litestream mode, replicated under load and restored (real binary);
//! - [`oauth`]: `[auth.oauth]`: discovery, JWT access tokens, bad tokens, key-set
//!   cooldown and outages, scopes and step-up, tasks that belong to the person;
//! - [`dashboard`]: the dashboard's API: admin-only access, CSRF, actions, paging, the
//!   live tail of a task's output;
//! - [`dashboard_actions`]: the dashboard's pauses, bulk actions, rerun links and
//!   history summaries;
//! - [`metrics`]: `GET /metrics` counts through tasks' lives, restarts and `kill -9`;
//! - [`reload`]: SIGHUP and `mcp-taskd reload`: tokens, tools, limits, refused files
//!   and restart-only keys, applied while serving;
//! - [`schedules`]: `[[schedules]]`: one task per slot across kills and two nodes,
//!   `missed` and `overlap`;
//! - [`tasks_start`]: `mcp-taskd tasks start`: `--wait` and its exit status, `--at` and
//!   `--key` across restarts;
//! - [`restarts`]: a passed listener (socket activation): restarts no client sees;
//! - [`systemd_notify`]: readiness, status and the watchdog under `Type=notify`;
//! - [`tracing`]: OpenTelemetry spans of a task's life, received by a real OTLP decoder;
//! - [`upstreams`]: `[[upstreams]]`: a stdio MCP server's tools served as ours, as tasks;
//! - [`cluster`]: PostgreSQL: the harness's throwaway cluster, several nodes on one
//!   database;
//! - [`layout`]: the workspace's crates depend on each other as docs/code-map.md says.
//!
//! One binary compiles the harness once and links once. Cargo does not discover test
//! files here (`autotests = false`): a new area is a module declared below.
//!
//! Run one area or one test with a filter: `cargo test --test tests transport::`.

mod common;

mod bridge;
mod bulk_actions;
mod cluster;
mod command_tools;
mod dashboard;
mod dashboard_actions;
mod demo_tools;
mod durable_tasks;
mod fair_share;
mod fair_workers;
mod flow_control;
mod fuzz;
mod hardening;
mod history;
mod layout;
mod legacy;
mod listen_streams;
mod litestream;
mod metrics;
mod notifications;
mod oauth;
mod operator;
mod postgres;
mod reaping;
mod reload;
mod restarts;
mod robustness;
mod schedules;
mod smoke;
mod stdio;
mod storage;
mod systemd_notify;
mod task_input;
mod task_output;
mod tasks_start;
mod tracing;
mod transport;
mod upstreams;
mod webhooks;
