//! Why a session ended, as whoever saw it end recorded it (its reader, its wire, or
//! mcp-taskd closing it): a call cut off by the end says exactly that, instead of a
//! guess.

use std::fmt;
use std::process::ExitStatus;

/// Longest message read from an upstream (a stdout line, an HTTP body or SSE event): a
/// larger one is not read.
pub const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// How an upstream that answered too much is described (after its name).
pub fn too_large() -> String {
    format!(
        "answered too much: a message larger than {} MiB, mcp-taskd's limit for one message",
        MAX_MESSAGE >> 20
    )
}

/// How a session ended. Shown after the upstream's name ("the upstream MCP server
/// \"x\" exited with status 3").
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// The program exited by itself: its status.
    Exited(ExitStatus),
    /// The program closed its stdout without exiting (it was then stopped).
    OutputClosed,
    /// The program stopped reading its stdin (a write to it failed).
    InputClosed,
    /// It sent a message larger than [`MAX_MESSAGE`]: the stream cannot go on.
    TooLarge,
    /// Its stdout could not be read.
    ReadFailed(String),
    /// An HTTP upstream forgot the session (`404`).
    SessionGone,
    /// mcp-taskd closed the session, for this reason.
    Closed(&'static str),
}

impl fmt::Display for Ending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ending::Exited(status) => f.write_str(&exit_status(*status)),
            Ending::OutputClosed => f.write_str("closed its stdout without exiting"),
            Ending::InputClosed => f.write_str("stopped reading its stdin"),
            Ending::TooLarge => write!(f, "{}, which ended its session", too_large()),
            Ending::ReadFailed(why) => write!(f, "could not be read: {why}"),
            Ending::SessionGone => f.write_str("forgot the session (HTTP 404)"),
            Ending::Closed(why) => write!(f, "had its session closed by mcp-taskd ({why})"),
        }
    }
}

/// An exited program's status, as a phrase ("exited with status 3", "was killed by
/// signal 9 (SIGKILL)").
fn exit_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    match status.signal() {
        Some(signal) => match signal_name(signal) {
            Some(name) => format!("was killed by signal {signal} ({name})"),
            None => format!("was killed by signal {signal}"),
        },
        None => "exited".into(),
    }
}

/// The usual name of the signals a crashed or killed program ends by (their numbers are
/// the same on Linux and macOS).
fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn each_ending_says_what_happened() {
        assert_eq!(
            Ending::Exited(ExitStatus::from_raw(3 << 8)).to_string(),
            "exited with status 3"
        );
        assert_eq!(
            Ending::Exited(ExitStatus::from_raw(9)).to_string(),
            "was killed by signal 9 (SIGKILL)"
        );
        assert_eq!(
            Ending::Exited(ExitStatus::from_raw(64)).to_string(),
            "was killed by signal 64"
        );
        assert_eq!(
            Ending::TooLarge.to_string(),
            "answered too much: a message larger than 64 MiB, mcp-taskd's limit for one \
             message, which ended its session"
        );
    }
}
