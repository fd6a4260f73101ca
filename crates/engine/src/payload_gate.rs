//! Bounds the task payloads (results, errors, input requests) being read and turned
//! into answers at once, server-wide.
//!
//! Reading a 12 MB result and building its answer costs several copies of it and
//! holds a read connection; seventy such `tasks/get` at once used to take every
//! request thread and grow the process by gigabytes. Large payloads now need room in a
//! byte budget first; without it the caller gets a quick 503 to retry, instead of
//! queueing on a request thread.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::model::TaskRow;
use taskd_protocol::error::{code, RpcError};

/// Payloads up to this size are never held back: the request thread count bounds them.
pub const UNGATED_BYTES: usize = 1024 * 1024;

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

/// What [`crate::TaskStore::find_authorized_admitted`] found.
pub enum Admitted<'a> {
    /// No such task for the caller (unknown, expired or foreign).
    Unknown,
    /// The gate had no room for its payloads; nothing was read.
    Refused(RpcError),
    /// The task, with the room its payloads take until the permit is dropped (once
    /// the answer is built).
    Read(TaskRow, PayloadPermit<'a>),
}

impl<'a> Admitted<'a> {
    /// The outcome for a task whose payloads measure `bytes` (`None`: no such task):
    /// `read` loads it only once the gate has made room.
    pub fn after_sizing<E>(
        gate: &'a PayloadGate,
        bytes: Option<usize>,
        read: impl FnOnce() -> Result<Option<TaskRow>, E>,
    ) -> Result<Admitted<'a>, E> {
        let Some(bytes) = bytes else {
            return Ok(Admitted::Unknown);
        };
        let permit = match gate.admit(bytes) {
            Ok(permit) => permit,
            Err(busy) => return Ok(Admitted::Refused(busy)),
        };
        Ok(match read()? {
            Some(task) => Admitted::Read(task, permit),
            None => Admitted::Unknown,
        })
    }
}

impl Drop for PayloadPermit<'_> {
    fn drop(&mut self) {
        self.gate.in_flight.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::{Admitted, PayloadGate, UNGATED_BYTES};
    use crate::model::TaskRow;
    use taskd_protocol::TaskStatus;

    #[test]
    fn a_task_is_read_only_when_the_gate_has_room_for_it() {
        let gate = PayloadGate::new(3 * UNGATED_BYTES);
        let unread = || -> Result<Option<TaskRow>, ()> { panic!("read without room") };
        assert!(matches!(
            Admitted::after_sizing(&gate, None, unread),
            Ok(Admitted::Unknown)
        ));
        assert!(matches!(
            Admitted::after_sizing(&gate, Some(4 * UNGATED_BYTES), unread),
            Ok(Admitted::Refused(busy)) if busy.http_status == 503
        ));
        let gone = Admitted::after_sizing(&gate, Some(2 * UNGATED_BYTES), || Ok::<_, ()>(None));
        assert!(matches!(gone, Ok(Admitted::Unknown)));
        // A task that vanished between the two reads gives its room back at once.
        assert!(gate.admit(3 * UNGATED_BYTES).is_ok());

        let row = TaskRow {
            id: "task".into(),
            tool: "noop".into(),
            status: TaskStatus::Completed,
            status_message: None,
            created_at: 0,
            updated_at: 0,
            ttl_ms: None,
            poll_interval_ms: 1000,
            result: None,
            error: None,
            input_requests: None,
            version: 1,
            trace: None,
            waiting: None,
        };
        let read =
            Admitted::after_sizing(&gate, Some(2 * UNGATED_BYTES), || Ok::<_, ()>(Some(row)));
        let Ok(Admitted::Read(task, permit)) = read else {
            panic!("a task with room is read");
        };
        assert_eq!(task.id, "task");
        assert!(
            gate.admit(2 * UNGATED_BYTES).is_err(),
            "the read task's payloads keep their room"
        );
        drop(permit);
        assert!(gate.admit(2 * UNGATED_BYTES).is_ok());
    }

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
