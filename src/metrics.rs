//! Operational metrics, served as Prometheus text on `GET /metrics`.
//!
//! Labels are bounded by construction: a method label is one of the methods the server
//! implements (anything else counts as `other`), statuses and states are the fixed sets
//! of the schema. Never a task id, a principal, a tool argument or any other content.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::protocol::METHODS;
use crate::tasks::upkeep::UpkeepCounters;
use crate::tasks::Stats;

/// The HTTP statuses a request can be refused with before it reaches a handler; any
/// other status is counted under the last entry.
const REJECTIONS: [u16; 10] = [202, 400, 401, 403, 404, 405, 413, 429, 503, 500];

/// How long the page reuses its task and job counts. Counting tasks by status reads the
/// whole `tasks` table (~80 ms of CPU at 429k tasks on the 2-core VM), and the page
/// answers anyone who can reach the listener: this bounds what scrapes can cost.
const COUNTS_MAX_AGE: Duration = Duration::from_secs(1);

/// Counters updated on the request path and by the janitor.
pub struct Metrics {
    /// Per method (in [`METHODS`] order, then `other`): answered with a result, with an error.
    requests: Vec<[AtomicU64; 2]>,
    /// Requests refused before reaching a handler, by HTTP status (index in [`REJECTIONS`]).
    rejected: [AtomicU64; REJECTIONS.len()],
    reclaimed: AtomicU64,
    expired: AtomicU64,
    /// Task and job counts, shared by the scrapes of one [`COUNTS_MAX_AGE`].
    counts: Recent<Stats>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: (0..=METHODS.len()).map(|_| Default::default()).collect(),
            rejected: Default::default(),
            reclaimed: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            counts: Recent::new(COUNTS_MAX_AGE),
        }
    }
}

/// A value computed at most once per `max_age`: callers within that time, and callers
/// that wait while another computes it, share one result. A failure is not kept.
struct Recent<T> {
    max_age: Duration,
    value: Mutex<Option<(Instant, T)>>,
}

impl<T: Clone> Recent<T> {
    fn new(max_age: Duration) -> Recent<T> {
        Recent {
            max_age,
            value: Mutex::new(None),
        }
    }

    fn get<E>(&self, compute: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        // The lock is held while computing, so concurrent callers wait for one result
        // instead of each computing their own. A poisoned lock holds a whole value or none.
        let mut value = self.value.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, recent)) = value.as_ref() {
            if at.elapsed() < self.max_age {
                return Ok(recent.clone());
            }
        }
        let fresh = compute()?;
        *value = Some((Instant::now(), fresh.clone()));
        Ok(fresh)
    }
}

/// What the metrics page shows besides the counters, read at scrape time.
pub struct Snapshot {
    pub stats: Option<Stats>,
    pub running_attempts: usize,
    pub open_subscriptions: usize,
    pub wal_bytes: Option<u64>,
}

impl Metrics {
    pub fn record_request(&self, method: &str, ok: bool) {
        let index = METHODS
            .iter()
            .position(|known| *known == method)
            .unwrap_or(METHODS.len());
        self.requests[index][usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
    }

    /// A request answered before any handler ran (notifications' 202 included).
    pub fn record_rejection(&self, status: u16) {
        let index = REJECTIONS
            .iter()
            .position(|known| *known == status)
            .unwrap_or(REJECTIONS.len() - 1);
        self.rejected[index].fetch_add(1, Ordering::Relaxed);
    }

    pub fn add_reclaimed(&self, count: usize) {
        self.reclaimed.fetch_add(count as u64, Ordering::Relaxed);
    }

    pub fn add_expired(&self, count: usize) {
        self.expired.fetch_add(count as u64, Ordering::Relaxed);
    }

    /// The task and job counts for the page: `count` runs at most once per
    /// [`COUNTS_MAX_AGE`], so the figures are up to that old.
    pub fn task_counts<E>(&self, count: impl FnOnce() -> Result<Stats, E>) -> Result<Stats, E> {
        self.counts.get(count)
    }

    /// The Prometheus text exposition.
    pub fn render(&self, snapshot: &Snapshot) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP mcp_taskd_requests_total MCP requests answered, by method and outcome."
        );
        let _ = writeln!(out, "# TYPE mcp_taskd_requests_total counter");
        let names = METHODS.iter().copied().chain(["other"]);
        for (name, counts) in names.zip(&self.requests) {
            for (outcome, count) in ["result", "error"].iter().zip(counts) {
                let _ = writeln!(
                    out,
                    "mcp_taskd_requests_total{{method=\"{name}\",outcome=\"{outcome}\"}} {}",
                    count.load(Ordering::Relaxed)
                );
            }
        }
        let _ = writeln!(out, "# HELP mcp_taskd_requests_answered_early_total Requests answered before a handler ran, by HTTP status.");
        let _ = writeln!(
            out,
            "# TYPE mcp_taskd_requests_answered_early_total counter"
        );
        for (status, count) in REJECTIONS.iter().zip(&self.rejected) {
            let _ = writeln!(
                out,
                "mcp_taskd_requests_answered_early_total{{status=\"{status}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        let counter = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        };
        let gauge = |out: &mut String, name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        };
        counter(
            &mut out,
            "mcp_taskd_leases_reclaimed_total",
            "Jobs whose lease expired and were retried or failed by the janitor.",
            self.reclaimed.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "mcp_taskd_tasks_expired_total",
            "Tasks deleted after their TTL.",
            self.expired.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "mcp_taskd_attempts_running",
            "Task attempts running in this process.",
            snapshot.running_attempts as u64,
        );
        gauge(
            &mut out,
            "mcp_taskd_subscriptions_open",
            "Open subscriptions/listen streams.",
            snapshot.open_subscriptions as u64,
        );
        if let Some(bytes) = snapshot.wal_bytes {
            gauge(
                &mut out,
                "mcp_taskd_wal_bytes",
                "Size of the SQLite write-ahead log.",
                bytes,
            );
        }
        if let Some(stats) = &snapshot.stats {
            let _ = writeln!(
                out,
                "# HELP mcp_taskd_tasks Stored tasks, by status.\n# TYPE mcp_taskd_tasks gauge"
            );
            for (status, count) in &stats.tasks {
                let _ = writeln!(out, "mcp_taskd_tasks{{status=\"{status}\"}} {count}");
            }
            let _ = writeln!(
                out,
                "# HELP mcp_taskd_jobs Dispatch records, by state.\n# TYPE mcp_taskd_jobs gauge"
            );
            for (state, count) in &stats.jobs {
                let _ = writeln!(out, "mcp_taskd_jobs{{state=\"{state}\"}} {count}");
            }
            // Prometheus base units: seconds, as a float with the store's millisecond grain.
            let _ = writeln!(
                out,
                "# HELP mcp_taskd_oldest_ready_job_age_seconds How long the oldest job ready to run has waited.\n\
                 # TYPE mcp_taskd_oldest_ready_job_age_seconds gauge\n\
                 mcp_taskd_oldest_ready_job_age_seconds {:.3}",
                stats.oldest_ready_age_ms as f64 / 1000.0
            );
            gauge(
                &mut out,
                "mcp_taskd_outbox_rows",
                "Outbox rows not yet pruned.",
                stats.outbox_rows,
            );
        }
        out
    }
}

impl UpkeepCounters for Metrics {
    fn reclaimed(&self, count: usize) {
        self.add_reclaimed(count);
    }

    fn expired(&self, count: usize) {
        self.add_expired(count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_methods_share_one_label() {
        let metrics = Metrics::default();
        metrics.record_request("tools/call", true);
        metrics.record_request("anything/at-all", false);
        let page = metrics.render(&Snapshot {
            stats: None,
            running_attempts: 0,
            open_subscriptions: 0,
            wal_bytes: None,
        });
        assert!(
            page.contains("mcp_taskd_requests_total{method=\"tools/call\",outcome=\"result\"} 1")
        );
        assert!(page.contains("mcp_taskd_requests_total{method=\"other\",outcome=\"error\"} 1"));
        assert!(!page.contains("anything/at-all"));
    }

    #[test]
    fn ages_are_in_seconds() {
        let page = Metrics::default().render(&Snapshot {
            stats: Some(Stats {
                tasks: Vec::new(),
                jobs: Vec::new(),
                oldest_ready_age_ms: 1_500,
                outbox_rows: 0,
            }),
            running_attempts: 0,
            open_subscriptions: 0,
            wal_bytes: None,
        });
        assert!(
            page.contains("\nmcp_taskd_oldest_ready_job_age_seconds 1.500\n"),
            "{page}"
        );
        assert!(!page.contains("_ms"), "no abbreviated units: {page}");
    }

    #[test]
    fn a_recent_value_is_computed_once_per_max_age_and_failures_are_not_kept() {
        let computed = std::cell::Cell::new(0);
        let count = || -> Result<u32, ()> {
            computed.set(computed.get() + 1);
            Ok(computed.get())
        };
        let hourly = Recent::new(Duration::from_secs(3600));
        assert_eq!(hourly.get(count), Ok(1));
        assert_eq!(hourly.get(count), Ok(1), "reused within the max age");
        assert_eq!(computed.get(), 1);

        let always = Recent::new(Duration::ZERO);
        assert_eq!(always.get(count), Ok(2));
        assert_eq!(
            always.get(count),
            Ok(3),
            "recomputed once the max age passed"
        );

        let failing = Recent::<u32>::new(Duration::from_secs(3600));
        assert_eq!(failing.get(|| Err("down")), Err("down"));
        assert_eq!(failing.get(count), Ok(4), "a failure is not reused");
        assert_eq!(failing.get(count), Ok(4));
    }
}
