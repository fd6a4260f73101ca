//! Tool panics: caught where a tool runs ([`run_tool`]), and logged by the caller as
//! one line naming the tool and the place, instead of a backtrace
//! ([`taskd_base::panics`] says why).

pub use taskd_base::panics::install_hook;

/// A tool's code panicked: where (`file:line`), never the message, which may quote
/// arguments. Its `Display` is the place, for the caller's one log line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{place}")]
pub struct ToolPanic {
    pub place: String,
}

/// Runs tool code, catching a panic.
pub fn run_tool<R>(run: impl FnOnce() -> R) -> Result<R, ToolPanic> {
    taskd_base::panics::catch_quietly(run).map_err(|panicked| ToolPanic {
        place: panicked.place,
    })
}
