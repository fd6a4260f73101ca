//! mcp-taskd patch: per-connection time bounds, server-wide byte budgets and the
//! listener's health (see PATCHES.md, patches 7–9).
//!
//! Upstream bounded nothing: a slow sender or a client that never read its answer held
//! a request thread for as long as it liked, and every request or answer buffered in
//! memory was unbounded in number. Here every connection gets a total deadline for its
//! request, every answer a write deadline that scales with its size, and bytes buffered
//! for requests and unsent answers come out of server-wide budgets.

use std::io::{Error as IoError, ErrorKind, Result as IoResult, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of a request body or an answer below which no budget is consulted: the number
/// of connections is capped, so these are bounded already (cap × this), and small
/// requests keep working while large ones exhaust a budget.
pub(crate) const UNBUDGETED_BYTES: usize = 64 * 1024;

/// Longest request head (request line and headers) accepted.
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The limits a [`crate::Server`] enforces; see [`crate::Server::with_bounds`].
#[derive(Debug, Clone)]
pub struct Bounds {
    /// Connections open at once; beyond it a connection gets a `503` and is closed by
    /// the accept thread itself.
    pub max_connections: usize,
    /// How long a connection may wait for the first byte of its next request.
    pub idle_timeout: Duration,
    /// How long a request may take to arrive whole (head and body), from its first byte.
    pub request_timeout: Duration,
    /// Largest request body read; a longer one is handed over unread (`body_length`
    /// tells how long it claimed to be) and its connection closed after the answer.
    pub max_body_bytes: usize,
    /// Bytes of request bodies buffered at once, server-wide.
    pub max_buffered_request_bytes: usize,
    /// Part of an answer's write deadline that does not depend on its size.
    pub write_timeout: Duration,
    /// Slowest reading accepted: an answer of `n` bytes must be taken within
    /// `write_timeout + n / min_write_bytes_per_sec`.
    pub min_write_bytes_per_sec: u64,
    /// Bytes of answers waiting to be written, server-wide.
    pub max_unsent_answer_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max_connections: 400,
            idle_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(10),
            max_body_bytes: 4 * 1024 * 1024,
            max_buffered_request_bytes: 64 * 1024 * 1024,
            write_timeout: Duration::from_secs(10),
            min_write_bytes_per_sec: 256 * 1024,
            max_unsent_answer_bytes: 64 * 1024 * 1024,
        }
    }
}

impl Bounds {
    /// How long an answer of `bytes` bytes may take to be written.
    pub(crate) fn write_deadline(&self, bytes: usize) -> Duration {
        let rate = self.min_write_bytes_per_sec.max(1);
        self.write_timeout + Duration::from_millis(bytes as u64 * 1000 / rate)
    }
}

/// A server-wide count of bytes held, with an upper bound.
pub(crate) struct Budget {
    limit: usize,
    used: AtomicUsize,
}

impl Budget {
    pub(crate) fn new(limit: usize) -> Arc<Budget> {
        Arc::new(Budget {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// An empty reservation, to grow as bytes arrive.
    pub(crate) fn reservation(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: Arc::clone(self),
            bytes: 0,
        }
    }
}

/// Bytes taken from a [`Budget`], given back on drop.
pub(crate) struct Reservation {
    budget: Arc<Budget>,
    bytes: usize,
}

impl Reservation {
    /// Makes the reservation cover `total` bytes, the first [`UNBUDGETED_BYTES`] free.
    pub(crate) fn cover(&mut self, total: usize) -> IoResult<()> {
        let wanted = total.saturating_sub(UNBUDGETED_BYTES);
        if wanted <= self.bytes {
            return Ok(());
        }
        let extra = wanted - self.bytes;
        let budget = &self.budget;
        budget
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used + extra <= budget.limit).then_some(used + extra)
            })
            .map_err(|_| IoError::new(ErrorKind::OutOfMemory, "server-wide byte budget spent"))?;
        self.bytes = wanted;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// A `Vec` that grows only as far as its reservation allows.
pub(crate) struct BudgetedBuffer {
    pub(crate) bytes: Vec<u8>,
    pub(crate) reservation: Reservation,
}

impl Write for BudgetedBuffer {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        self.reservation.cover(self.bytes.len() + buf.len())?;
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> IoResult<()> {
        Ok(())
    }
}

/// Whether the listener can take connections, for health checks.
#[derive(Default)]
pub struct ListenerHealth {
    open: AtomicUsize,
    max: AtomicUsize,
    /// The last `accept()` failure and when it happened.
    last_failure: Mutex<Option<(Instant, String)>>,
}

/// An accept failure this recent still makes the listener unhealthy.
const FAILURE_MEMORY: Duration = Duration::from_secs(2);

impl ListenerHealth {
    pub(crate) fn new(max_connections: usize) -> Arc<ListenerHealth> {
        let health = ListenerHealth::default();
        health.max.store(max_connections, Ordering::Relaxed);
        Arc::new(health)
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Why new connections cannot be accepted right now, if they cannot.
    pub fn trouble(&self) -> Option<String> {
        if self.open_connections() >= self.max.load(Ordering::Relaxed) {
            return Some("connection limit reached".into());
        }
        let last = self.last_failure.lock().ok()?;
        match &*last {
            Some((when, why)) if when.elapsed() < FAILURE_MEMORY => {
                Some(format!("cannot accept connections: {why}"))
            }
            _ => None,
        }
    }

    pub(crate) fn at_capacity(&self) -> bool {
        self.open_connections() >= self.max.load(Ordering::Relaxed)
    }

    pub(crate) fn record_failure(&self, why: String) {
        if let Ok(mut last) = self.last_failure.lock() {
            *last = Some((Instant::now(), why));
        }
    }

    /// Counts a connection as open until the returned slot (shared by both halves of
    /// the socket) is dropped.
    pub(crate) fn open_slot(self: &Arc<Self>) -> Arc<ConnectionSlot> {
        self.open.fetch_add(1, Ordering::AcqRel);
        Arc::new(ConnectionSlot {
            health: Arc::clone(self),
        })
    }
}

pub(crate) struct ConnectionSlot {
    health: Arc<ListenerHealth>,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.health.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Deadlines shared by both halves of one connection (0 = none set).
pub(crate) struct StreamDeadlines {
    origin: Instant,
    read: AtomicU64,
    write: AtomicU64,
}

impl StreamDeadlines {
    pub(crate) fn new() -> Arc<StreamDeadlines> {
        Arc::new(StreamDeadlines {
            origin: Instant::now(),
            read: AtomicU64::new(0),
            write: AtomicU64::new(0),
        })
    }

    fn encode(&self, within: Option<Duration>) -> u64 {
        within.map_or(0, |within| {
            (self.origin.elapsed() + within).as_millis() as u64 + 1
        })
    }

    /// Every read from now on must end within `within` (`None`: no overall deadline).
    pub(crate) fn set_read(&self, within: Option<Duration>) {
        self.read.store(self.encode(within), Ordering::Release);
    }

    /// Every write from now on must end within `within` (`None`: no overall deadline).
    pub(crate) fn set_write(&self, within: Option<Duration>) {
        self.write.store(self.encode(within), Ordering::Release);
    }

    fn remaining(&self, cell: &AtomicU64) -> Option<IoResult<Duration>> {
        let at = cell.load(Ordering::Acquire);
        if at == 0 {
            return None;
        }
        let left = Duration::from_millis(at - 1).checked_sub(self.origin.elapsed());
        Some(match left {
            Some(left) if left >= Duration::from_millis(1) => Ok(left),
            _ => Err(IoError::new(ErrorKind::TimedOut, "deadline passed")),
        })
    }

    pub(crate) fn read_remaining(&self) -> Option<IoResult<Duration>> {
        self.remaining(&self.read)
    }

    pub(crate) fn write_remaining(&self) -> Option<IoResult<Duration>> {
        self.remaining(&self.write)
    }
}

/// Logs at most one line per interval, counting what it held back.
pub(crate) struct RateLimitedLog {
    interval: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimitedLog {
    pub(crate) fn new(interval: Duration) -> RateLimitedLog {
        RateLimitedLog {
            interval,
            last: None,
            suppressed: 0,
        }
    }

    pub(crate) fn error(&mut self, message: &str) {
        if self.last.is_some_and(|last| last.elapsed() < self.interval) {
            self.suppressed += 1;
            return;
        }
        if self.suppressed > 0 {
            log::error!("{message} ({} similar errors not logged)", self.suppressed);
        } else {
            log::error!("{message}");
        }
        self.last = Some(Instant::now());
        self.suppressed = 0;
    }
}
