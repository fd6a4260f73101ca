//! Panics that are expected and handled where they happen: caught, and noted in one
//! line by the code that caught them instead of printed with a backtrace.
//!
//! Two kinds are caught so: a tool's code panicking (the tool's fault, not the
//! server's: the call fails and the server goes on) and a library that panics rather
//! than fails (the PostgreSQL client, when it cannot build a connection's runtime for
//! want of file descriptors). The default panic hook would print the message (which may
//! quote a tool's arguments) and, with `RUST_BACKTRACE` set, a backtrace: pages of log
//! that look like a crash, and symbolizing them reads the binary's debug information
//! into memory, some 100 MiB at a time, just when descriptors (and so connections) run
//! short. [`install_hook`] keeps the previous hook for every other panic (a server bug
//! wants its backtrace) and, for a panic inside [`catch_quietly`], only notes where it
//! happened.

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    /// Whether this thread is inside [`catch_quietly`].
    static QUIET: Cell<bool> = const { Cell::new(false) };
    /// Where the last quiet panic on this thread happened (`file:line`).
    static PANICKED_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Replaces the panic hook: panics inside [`catch_quietly`] are recorded, not printed;
/// every other panic goes to the hook that was installed before (the default one).
pub fn install_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if QUIET.with(Cell::get) {
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

/// A panic caught by [`catch_quietly`]: where it happened (`file:line`), never its
/// message, which may quote a tool's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Panicked {
    pub place: String,
}

/// Runs `run`, catching a panic. Printed by nothing once [`install_hook`] has run.
pub fn catch_quietly<R>(run: impl FnOnce() -> R) -> Result<R, Panicked> {
    let was_quiet = QUIET.with(|quiet| quiet.replace(true));
    let outcome = catch_unwind(AssertUnwindSafe(run));
    QUIET.with(|quiet| quiet.set(was_quiet));
    outcome.map_err(|_| Panicked {
        place: PANICKED_AT
            .with(|last| last.borrow_mut().take())
            .unwrap_or_else(|| "an unknown place".to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_panic_is_caught_and_located() {
        install_hook();
        let caught = catch_quietly(|| -> u32 { panic!("secret argument") });
        let place = caught.unwrap_err().place;
        assert!(place.contains("src/panics.rs:"), "{place}");
        assert_eq!(catch_quietly(|| 7), Ok(7));
    }
}
