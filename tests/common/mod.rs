//! Test harness: starts the real `mcp-taskd` binary on an ephemeral loopback port with a
//! temporary data dir, and speaks raw HTTP/1.1 to it (so tests control every byte).
//!
//! One file per job: the process ([`server`]), `mcp-taskd stdio` with piped stdin and
//! stdout ([`stdio`]), the raw HTTP client ([`http`]), JSON-RPC
//! request builders ([`rpc`]), task helpers ([`tasks`]), listen streams ([`listen`]) and
//! throwaway PostgreSQL clusters ([`postgres`]: the second backend the suite runs on).

mod http;
pub mod idp;
mod listen;
pub mod postgres;
mod rpc;
mod server;
pub mod stdio;
pub mod tasks;

use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use http::HttpResponse;
pub use listen::Listen;
pub use rpc::{assert_mrtr_round_trip, tasks_caps, Rpc};
pub use server::Server;

pub const VERSION: &str = "2026-07-28";

pub const CONFORMANCE: &str = "[builtin]\nsets = [\"conformance\"]\n";

/// Both built-in sets: the conformance fixtures first (so `tools[0]` stays
/// `test_simple_text`), then the demo `echo` tool, `summarize` prompt and `about` resource.
pub const ALL_SETS: &str = "[builtin]\nsets = [\"conformance\", \"demo\"]\n";

/// A command that runs the `mcp-taskd` under test: the one cargo built for this suite,
/// or `MCP_TASKD_TEST_BINARY` when set (`.ci/arm64.sh` points the suite at a
/// cross-built binary, which the kernel runs under qemu-user through binfmt_misc).
pub fn binary() -> Command {
    match std::env::var_os("MCP_TASKD_TEST_BINARY") {
        Some(path) => Command::new(path),
        None => Command::new(env!("CARGO_BIN_EXE_mcp-taskd")),
    }
}

/// The path [`binary`] runs.
pub fn binary_path() -> std::path::PathBuf {
    std::env::var_os("MCP_TASKD_TEST_BINARY")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_mcp-taskd").into())
}

/// Polls `check` until it returns `Some` or `limit` passes.
pub fn poll_until<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Held by the tests that load the whole box (connection floods, unread 12 MB answers,
/// hundreds of running tasks, notification bursts), so that no two of them run at once:
/// each measures how a well-behaved client fares during its fault, and two faults at a
/// time on two cores measure the box, not the server.
pub fn heavy() -> MutexGuard<'static, ()> {
    static HEAVY: Mutex<()> = Mutex::new(());
    HEAVY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
