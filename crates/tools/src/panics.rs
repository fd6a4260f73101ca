//! Tool panics: caught where a tool runs, and logged as one line instead of a backtrace.
//!
//! A panicking tool is the tool's fault, not the server's: the call (or attempt) fails
//! and the server goes on. The default panic hook would print the panic's message (which
//! may quote the tool's arguments) and, with `RUST_BACKTRACE` set, a backtrace: pages of
//! log that look like a server crash. [`install_hook`] keeps the default hook for every
//! other panic (a server bug wants its backtrace) and, for a panic inside [`run_tool`],
//! only notes where it happened; the caller logs one line naming the tool and that place.

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    /// Whether this thread is inside [`run_tool`].
    static IN_TOOL: Cell<bool> = const { Cell::new(false) };
    /// Where the last tool panic on this thread happened (`file:line`).
    static PANICKED_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Replaces the panic hook: panics inside [`run_tool`] are recorded, not printed;
/// every other panic goes to the hook that was installed before (the default one).
pub fn install_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if IN_TOOL.with(Cell::get) {
            let place = info.location().map_or_else(
                || "an unknown place".to_owned(),
                |at| format!("{}:{}", at.file(), at.line()),
            );
            PANICKED_AT.with(|last| *last.borrow_mut() = Some(place));
        } else {
            previous(info);
        }
    }));
}

/// A tool's code panicked: where (`file:line`), never the message, which may quote
/// arguments. Its `Display` is the place, for the caller's one log line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{place}")]
pub struct ToolPanic {
    pub place: String,
}

/// Runs tool code, catching a panic.
pub fn run_tool<R>(run: impl FnOnce() -> R) -> Result<R, ToolPanic> {
    let was_inside = IN_TOOL.with(|inside| inside.replace(true));
    let outcome = catch_unwind(AssertUnwindSafe(run));
    IN_TOOL.with(|inside| inside.set(was_inside));
    outcome.map_err(|_| ToolPanic {
        place: PANICKED_AT
            .with(|last| last.borrow_mut().take())
            .unwrap_or_else(|| "an unknown place".to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_panic_is_caught_and_located() {
        install_hook();
        let caught = run_tool(|| -> u32 { panic!("secret argument") });
        let place = caught.unwrap_err().place;
        assert!(place.contains("src/panics.rs:"), "{place}");
        assert_eq!(run_tool(|| 7), Ok(7));
    }
}
