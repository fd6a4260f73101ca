//! The completion threads: they run the continuations of
//! [`Store::write_later`](super::Store::write_later) once their batch has committed or
//! failed, so that none holds up the next batch.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crossbeam_channel::{Receiver, Sender};

use super::super::health::Problem;
use super::{BatchOutcome, Completion, Finisher};

/// Threads that run [`Store::write_later`](super::Store::write_later) continuations.
pub(super) const COMPLETION_THREADS: usize = 4;

/// Tells every write of a batch how it ended.
pub(super) fn deliver(
    completions: Vec<Completion>,
    outcome: BatchOutcome<'_>,
    continuations: &Sender<Continuations>,
) {
    let mut later = Vec::new();
    for completion in completions {
        match completion {
            Completion::Wake(finish) => finish(outcome),
            Completion::Continue(finish) => later.push(finish),
        }
    }
    if !later.is_empty() {
        // One message (one wake-up) per batch, however many it answers.
        let _ = continuations.send((later, outcome.map_err(Problem::clone)));
    }
}

/// A committed (or failed) batch's continuations, for a completion thread.
pub(super) type Continuations = (Vec<Finisher>, Result<(), Problem>);

/// A completion thread: runs continuations batch by batch until the writer is gone.
/// Several share the queue, so one continuation stuck on a slow client (at worst until
/// the socket's write timeout) holds up only the rest of its own batch.
pub(super) fn run_continuations(batches: Receiver<Continuations>) {
    for (batch, outcome) in batches {
        for finish in batch {
            if catch_unwind(AssertUnwindSafe(|| finish(outcome.as_ref().map(|_| ())))).is_err() {
                log::error!("a write's continuation panicked");
            }
        }
    }
}
