//! The stdio transport: one host (a desktop or IDE client) launches `mcp-taskd stdio`
//! and speaks newline-delimited JSON-RPC on its stdin and stdout.
//!
//! Two ways to serve it, one module each:
//! - [`local`]: this process is the server — the same store, workers, command tools and
//!   tasks as `serve` (it takes the data dir's lock), both protocol eras;
//! - [`relay`]: `--connect URL` copies each line to a running `serve` over HTTP and its
//!   answers back, so the host shares that server's tasks ([`http`] is its client).
//!
//! Either way stdout carries nothing but protocol messages, each written whole as one
//! line ([`StdoutWire`]); logs go to stderr.

mod http;
pub mod local;
pub mod relay;

use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::{json, Value};

use crate::server::ServeError;
use crate::transport::Wire;
use taskd_protocol::RpcError;

/// Why `stdio` could not start, or stopped with a failure. Each is one line for the
/// host's log.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    #[error(
        "data dir {} is in use by a running mcp-taskd (serve or stdio); to share its tasks, \
         relay to that server instead: mcp-taskd stdio --connect {url}",
        data_dir.display()
    )]
    InUse { data_dir: PathBuf, url: String },
    #[error(transparent)]
    Start(ServeError),
    #[error("--connect {url}: {reason}")]
    BadUrl {
        url: String,
        reason: http::EndpointError,
    },
    #[error("token file {}: {source}", path.display())]
    TokenFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot reach the mcp-taskd server at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the mcp-taskd server at {url} refused {credential} (HTTP {status})")]
    Refused {
        url: String,
        status: u16,
        credential: &'static str,
    },
    #[error("cannot start a thread or signal handler: {0}")]
    Threads(std::io::Error),
}

/// Stdout as a [`Wire`]: each message is serialized compactly (JSON escapes every
/// newline inside strings, so a message is exactly one line) and written and flushed
/// under one lock, so concurrent answers never interleave.
pub struct StdoutWire {
    /// `None` once a write failed (the host closed our stdout).
    out: Mutex<Option<std::io::Stdout>>,
}

impl StdoutWire {
    pub fn new() -> StdoutWire {
        StdoutWire {
            out: Mutex::new(Some(std::io::stdout())),
        }
    }
}

impl Default for StdoutWire {
    fn default() -> Self {
        StdoutWire::new()
    }
}

impl Wire for StdoutWire {
    fn send(&self, message: &Value) -> bool {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let Some(stdout) = out.as_mut() else {
            return false;
        };
        let mut locked = stdout.lock();
        if locked
            .write_all(&line)
            .and_then(|()| locked.flush())
            .is_err()
        {
            drop(locked);
            *out = None;
            return false;
        }
        true
    }
}

/// One line read from the host.
enum Line {
    Message(Vec<u8>),
    /// Longer than the limit; the rest of it was skipped.
    TooLong,
    End,
}

/// Reads the next line of at most `limit` bytes (without its newline, `\r` or
/// surrounding blanks), skipping blank lines.
fn read_line(input: &mut impl BufRead, limit: usize) -> std::io::Result<Line> {
    loop {
        let mut line = Vec::new();
        let read = input
            .by_ref()
            .take(limit as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if read == 0 {
            return Ok(Line::End);
        }
        if line.last() != Some(&b'\n') && line.len() > limit {
            // Skip to the end of the oversized line.
            loop {
                let mut rest = Vec::new();
                let read = input
                    .by_ref()
                    .take(64 * 1024)
                    .read_until(b'\n', &mut rest)?;
                if read == 0 || rest.last() == Some(&b'\n') {
                    return Ok(Line::TooLong);
                }
            }
        }
        let text = line.trim_ascii();
        if !text.is_empty() {
            return Ok(Line::Message(text.to_vec()));
        }
    }
}

/// A JSON-RPC error message answering `id`.
fn error_message(id: &Value, error: &RpcError) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": error.to_json() })
}

/// The request id of a message that is a request (has a method and an id).
fn request_id(message: &Value) -> Option<&Value> {
    message.get("method")?;
    message.get("id").filter(|id| !id.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &str, limit: usize) -> Vec<String> {
        let mut reader = std::io::Cursor::new(input.as_bytes().to_vec());
        let mut out = Vec::new();
        loop {
            match read_line(&mut reader, limit).unwrap() {
                Line::Message(bytes) => out.push(String::from_utf8(bytes).unwrap()),
                Line::TooLong => out.push("<too long>".into()),
                Line::End => return out,
            }
        }
    }

    #[test]
    fn lines_are_trimmed_blank_ones_skipped_and_long_ones_refused_whole() {
        let input = format!("{{\"a\":1}}\r\n\n  \n{}\n{{\"b\":2}}", "x".repeat(100));
        assert_eq!(
            lines(&input, 20),
            vec!["{\"a\":1}", "<too long>", "{\"b\":2}"]
        );
    }
}
