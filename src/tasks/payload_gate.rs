//! Bounds the task payloads (results, errors, input requests) being read and turned
//! into answers at once, server-wide.
//!
//! Reading a 12 MB result and building its answer costs several copies of it and
//! holds a read connection; seventy such `tasks/get` at once used to take every
//! request thread and grow the process by gigabytes. Large payloads now need room in a
//! byte budget first; without it the caller gets a quick 503 to retry, instead of
//! queueing on a request thread.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::protocol::error::{code, RpcError};

/// Payloads up to this size are never held back: the request thread count bounds them.
const UNGATED_BYTES: usize = 1024 * 1024;

pub struct PayloadGate {
    limit: usize,
    in_flight: AtomicUsize,
}

/// Room taken in the gate, given back on drop.
pub struct PayloadPermit<'a> {
    gate: &'a PayloadGate,
    bytes: usize,
}

impl PayloadGate {
    pub fn new(limit: usize) -> PayloadGate {
        PayloadGate {
            limit,
            in_flight: AtomicUsize::new(0),
        }
    }

    /// Room for a payload of `bytes`, or a 503 when payloads in flight fill the budget.
    pub fn admit(&self, bytes: usize) -> Result<PayloadPermit<'_>, RpcError> {
        if bytes <= UNGATED_BYTES {
            return Ok(PayloadPermit {
                gate: self,
                bytes: 0,
            });
        }
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used + bytes <= self.limit).then_some(used + bytes)
            })
            .map_err(|_| {
                RpcError::new(
                    code::INTERNAL_ERROR,
                    "Server busy: too many large task payloads are being read; retry shortly",
                )
                .with_status(503)
            })?;
        Ok(PayloadPermit { gate: self, bytes })
    }
}

impl Drop for PayloadPermit<'_> {
    fn drop(&mut self) {
        self.gate.in_flight.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::{PayloadGate, UNGATED_BYTES};

    #[test]
    fn large_payloads_share_the_budget_and_small_ones_pass() {
        let gate = PayloadGate::new(3 * UNGATED_BYTES);
        let first = gate.admit(2 * UNGATED_BYTES).expect("room");
        assert_eq!(
            gate.admit(2 * UNGATED_BYTES).err().map(|e| e.http_status),
            Some(503)
        );
        assert!(gate.admit(100).is_ok());
        drop(first);
        assert!(gate.admit(2 * UNGATED_BYTES).is_ok());
    }
}
