//! Operational metrics, served as Prometheus text on `GET /metrics` (and, with
//! telemetry on, the same page translated to OTLP: [`taskd_telemetry::metrics`]).
//!
//! Labels are bounded by construction: a method label is one of the methods the server
//! implements (anything else counts as `other`), statuses and states are the fixed sets
//! of the schema, a tool label is a tool name from the configuration. Never a task id, a
//! principal, a tool argument or any other content.
//!
//! Task and job counts, and the per-tool totals of tasks created, completed, failed and
//! cancelled, are read from the rows the store's triggers keep (schema.sql, migration 4):
//! a scrape reads a few rows whatever the number of tasks, and the figures are exact and
//! as durable as the tasks themselves (restarts and crashes included). The histograms of
//! queue wait and attempt duration are this process's observations since it started (a
//! restart resets them, which Prometheus' `rate` and `histogram_quantile` expect).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use taskd_base::histogram::{label_value, Histogram};

use taskd_engine::shares::Quota;
use taskd_engine::upkeep::UpkeepCounters;
use taskd_engine::workers::AttemptObserver;
use taskd_engine::{QuotaCounter, Stats, TaskService};
use taskd_notifications::Hub;
use taskd_protocol::METHODS;

mod webhooks;

/// The HTTP statuses a request can be refused with before it reaches a handler; any
/// other status is counted under the last entry.
const REJECTIONS: [u16; 10] = [202, 400, 401, 403, 404, 405, 413, 429, 503, 500];

/// Why opening a legacy session ended another one (the sessions table decides, the
/// metrics count it).
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The identity was at its share: its own least recently used session ended.
    OwnOldest,
    /// The table was full: the least recently used idle session ended.
    Idle,
}

/// How many identities' refusals [`Metrics`] keeps apart (a bounded map: an attacker
/// with many tokens cannot grow it).
const REFUSING_IDENTITIES: usize = 1024;

/// Counters updated on the request path, by the janitor and by the workers.
pub struct Metrics {
    /// Per method (in [`METHODS`] order, then `other`): answered with a result, with an error.
    requests: Vec<[AtomicU64; 2]>,
    /// Requests refused before reaching a handler, by HTTP status (index in [`REJECTIONS`]).
    rejected: [AtomicU64; REJECTIONS.len()],
    reclaimed: AtomicU64,
    /// Attempt outcomes the store refused (the attempt's lease had been taken over).
    discarded: AtomicU64,
    expired: AtomicU64,
    /// Legacy sessions ended to make room: the identity's own oldest (its quota), the
    /// table's least recently used idle one; and `initialize`s refused (none was idle).
    quota_refusals: [AtomicU64; Quota::ALL.len()],
    /// The same refusals by identity (its `auth::Identity::key`), for `mcp-taskd stats`
    /// over the admin socket only: never served on `/metrics`, whose labels name no
    /// identity. At most [`REFUSING_IDENTITIES`] are kept; past them, a new identity's
    /// refusals count in the totals only.
    refusals_by_identity: Mutex<HashMap<String, [u64; Quota::ALL.len()]>>,
    sessions_ended_idle: AtomicU64,
    sessions_refused: AtomicU64,
    /// Per served tool: how long claimed jobs had waited, how long attempts ran. Tools
    /// come from the configuration only (at start-up, and added by reloads; a removed
    /// tool keeps its series, counters never go back), so a tool label is always one
    /// the operator configured.
    tools: ArcSwap<BTreeMap<String, Arc<ToolHistograms>>>,
    /// Webhook deliveries, by webhook.
    webhooks: webhooks::WebhookMetrics,
}

#[derive(Default)]
struct ToolHistograms {
    queue_wait: Histogram,
    attempt_duration: Histogram,
}

impl Metrics {
    /// Metrics for a server serving `tools` (their names label the per-tool series).
    pub fn new<'a>(tools: impl IntoIterator<Item = &'a str>) -> Metrics {
        Metrics {
            requests: (0..=METHODS.len()).map(|_| Default::default()).collect(),
            rejected: Default::default(),
            reclaimed: AtomicU64::new(0),
            discarded: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            quota_refusals: Default::default(),
            refusals_by_identity: Mutex::default(),
            sessions_ended_idle: AtomicU64::new(0),
            sessions_refused: AtomicU64::new(0),
            tools: ArcSwap::from_pointee(
                tools
                    .into_iter()
                    .map(|tool| (tool.to_owned(), Arc::default()))
                    .collect(),
            ),
            webhooks: Default::default(),
        }
    }

    /// Starts series for the tools among `tools` that have none yet (a reload added
    /// them). Reloads are serialized, so no update is lost between load and store.
    pub fn add_tools<'a>(&self, tools: impl IntoIterator<Item = &'a str>) {
        let mut map = BTreeMap::clone(&self.tools.load());
        let before = map.len();
        for tool in tools {
            map.entry(tool.to_owned()).or_default();
        }
        if map.len() != before {
            self.tools.store(Arc::new(map));
        }
    }
}

/// What the metrics page shows besides the counters, read at scrape time.
pub struct Snapshot {
    pub stats: Option<Stats>,
    pub running_attempts: usize,
    pub open_subscriptions: usize,
    pub wal_bytes: Option<u64>,
}

impl Snapshot {
    /// What `tasks` and `hub` hold now.
    pub fn now(tasks: &TaskService, hub: &Hub) -> Snapshot {
        Snapshot {
            stats: tasks.stats().ok(),
            running_attempts: tasks.running_attempts(),
            open_subscriptions: hub.open_subscriptions(),
            wal_bytes: tasks.wal_bytes(),
        }
    }
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

    /// An `initialize` of the identity keyed `owner` opened a session, having ended
    /// `ended` to make room.
    pub fn record_session_ended(&self, ended: Option<Ended>, owner: &str) {
        match ended {
            Some(Ended::OwnOldest) => self.record_quota_refusal(Quota::Sessions, owner),
            Some(Ended::Idle) => {
                self.sessions_ended_idle.fetch_add(1, Ordering::Relaxed);
            }
            None => {}
        }
    }

    /// A request of the identity keyed `owner` went beyond its `quota`.
    pub fn record_quota_refusal(&self, quota: Quota, owner: &str) {
        self.quota_refusals[quota as usize].fetch_add(1, Ordering::Relaxed);
        // Only counters: a poisoned lock still holds consistent ones.
        let mut by_identity = self
            .refusals_by_identity
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(counts) = by_identity.get_mut(owner) {
            counts[quota as usize] += 1;
        } else if by_identity.len() < REFUSING_IDENTITIES {
            let mut counts = [0; Quota::ALL.len()];
            counts[quota as usize] = 1;
            by_identity.insert(owner.to_owned(), counts);
        }
    }

    /// Refusals since start-up by identity key, each as (quota name, count) for every
    /// quota (`mcp-taskd stats`).
    pub fn refusals_by_identity(&self) -> Vec<(String, Vec<(&'static str, u64)>)> {
        let by_identity = self
            .refusals_by_identity
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut rows: Vec<_> = by_identity
            .iter()
            .map(|(owner, counts)| {
                let named = Quota::ALL
                    .iter()
                    .map(|quota| (quota.name(), counts[*quota as usize]))
                    .collect();
                (owner.clone(), named)
            })
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    }

    /// An `initialize` found the session table full of busy sessions.
    pub fn record_sessions_full(&self) {
        self.sessions_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add_reclaimed(&self, count: usize) {
        self.reclaimed.fetch_add(count as u64, Ordering::Relaxed);
    }

    pub fn add_expired(&self, count: usize) {
        self.expired.fetch_add(count as u64, Ordering::Relaxed);
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
            "mcp_taskd_attempt_outcomes_discarded_total",
            "Attempt outcomes the store refused because the attempt's lease had been taken over (fencing: a node cut off or paused that finished late).",
            self.discarded.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "mcp_taskd_tasks_expired_total",
            "Tasks deleted after their TTL.",
            self.expired.load(Ordering::Relaxed),
        );
        let _ = writeln!(out, "# HELP mcp_taskd_quota_refusals_total Requests beyond an identity's quota: sessions = an initialize that ended the identity's own least recently used legacy session; live_tasks and task_rate = task creations refused with 429; inline_waits = a bridged call answered with its task handle at once because the identity had as many calls waiting as it may; dashboard_logins = a dashboard login that ended the identity's oldest.");
        let _ = writeln!(out, "# TYPE mcp_taskd_quota_refusals_total counter");
        for quota in Quota::ALL {
            let _ = writeln!(
                out,
                "mcp_taskd_quota_refusals_total{{quota=\"{}\"}} {}",
                quota.name(),
                self.quota_refusals[quota as usize].load(Ordering::Relaxed)
            );
        }
        counter(
            &mut out,
            "mcp_taskd_sessions_idle_ended_total",
            "Idle legacy sessions ended to make room in a full session table.",
            self.sessions_ended_idle.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "mcp_taskd_sessions_refused_total",
            "initialize refused with 503: the session table was full and no session was idle.",
            self.sessions_refused.load(Ordering::Relaxed),
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
            let _ = writeln!(
                out,
                "# HELP mcp_taskd_tasks_created_total Tasks created, by tool, since the database was created.\n\
                 # TYPE mcp_taskd_tasks_created_total counter"
            );
            for totals in &stats.totals {
                let tool = label_value(&totals.tool);
                let _ = writeln!(
                    out,
                    "mcp_taskd_tasks_created_total{{tool=\"{tool}\"}} {}",
                    totals.created
                );
            }
            let _ = writeln!(
                out,
                "# HELP mcp_taskd_tasks_ended_total Tasks that reached a terminal status, by tool and status, since the database was created.\n\
                 # TYPE mcp_taskd_tasks_ended_total counter"
            );
            for totals in &stats.totals {
                let tool = label_value(&totals.tool);
                for (status, count) in [
                    ("completed", totals.completed),
                    ("failed", totals.failed),
                    ("cancelled", totals.cancelled),
                ] {
                    let _ = writeln!(
                        out,
                        "mcp_taskd_tasks_ended_total{{tool=\"{tool}\",status=\"{status}\"}} {count}"
                    );
                }
            }
        }
        if let Some(spans) = taskd_telemetry::export_counts() {
            counter(
                &mut out,
                "mcp_taskd_spans_exported_total",
                "Spans the OTLP collector accepted.",
                spans.exported,
            );
            let _ = writeln!(
                out,
                "# HELP mcp_taskd_spans_dropped_total Spans dropped: beyond telemetry.max_spans_per_second, the export queue was full, or the collector did not take them.\n\
                 # TYPE mcp_taskd_spans_dropped_total counter\n\
                 mcp_taskd_spans_dropped_total{{reason=\"over_budget\"}} {}\n\
                 mcp_taskd_spans_dropped_total{{reason=\"queue_full\"}} {}\n\
                 mcp_taskd_spans_dropped_total{{reason=\"export_failed\"}} {}",
                spans.over_budget, spans.queue_full, spans.export_failed
            );
            counter(
                &mut out,
                "mcp_taskd_traces_over_budget_total",
                "Requests not traced at all (nor their tasks): telemetry.max_spans_per_second had no room for a trace when they began.",
                spans.traces_over_budget,
            );
        }
        for (name, help, histogram) in [
            (
                "mcp_taskd_queue_wait_seconds",
                "How long a job waited, ready, before a worker claimed it, by tool.",
                (|tool: &ToolHistograms| &tool.queue_wait) as fn(&ToolHistograms) -> &Histogram,
            ),
            (
                "mcp_taskd_attempt_duration_seconds",
                "How long task attempts ran, by tool.",
                |tool: &ToolHistograms| &tool.attempt_duration,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            for (tool, histograms) in self.tools.load().iter() {
                histogram(histograms).render(&mut out, name, "tool", &label_value(tool));
            }
        }
        self.webhooks.render(&mut out);
        out
    }
}

impl QuotaCounter for Metrics {
    fn quota_refused(&self, quota: Quota, owner: &str) {
        self.record_quota_refusal(quota, owner);
    }
}

impl AttemptObserver for Metrics {
    fn attempt_started(&self, tool: &str, queue_wait: Duration) {
        if let Some(histograms) = self.tools.load().get(tool) {
            histograms.queue_wait.observe(queue_wait);
        }
    }

    fn attempt_ended(&self, tool: &str, duration: Duration) {
        if let Some(histograms) = self.tools.load().get(tool) {
            histograms.attempt_duration.observe(duration);
        }
    }

    fn outcome_discarded(&self, _tool: &str) {
        self.discarded.fetch_add(1, Ordering::Relaxed);
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
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;

    #[test]
    fn unknown_methods_share_one_label() {
        let metrics = Metrics::new([]);
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
        let page = Metrics::new([]).render(&Snapshot {
            stats: Some(Stats {
                tasks: Vec::new(),
                jobs: Vec::new(),
                totals: Vec::new(),
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
    fn histograms_are_cumulative_per_configured_tool() {
        let metrics = Metrics::new(["echo"]);
        metrics.attempt_started("echo", Duration::from_millis(3));
        metrics.attempt_started("echo", Duration::from_secs(2));
        metrics.attempt_started("not-configured", Duration::from_secs(2));
        metrics.attempt_ended("echo", Duration::from_secs(7200));
        let page = metrics.render(&Snapshot {
            stats: None,
            running_attempts: 0,
            open_subscriptions: 0,
            wal_bytes: None,
        });
        for line in [
            "mcp_taskd_queue_wait_seconds_bucket{tool=\"echo\",le=\"0.005\"} 1",
            "mcp_taskd_queue_wait_seconds_bucket{tool=\"echo\",le=\"1\"} 1",
            "mcp_taskd_queue_wait_seconds_bucket{tool=\"echo\",le=\"2.5\"} 2",
            "mcp_taskd_queue_wait_seconds_bucket{tool=\"echo\",le=\"+Inf\"} 2",
            "mcp_taskd_queue_wait_seconds_sum{tool=\"echo\"} 2.003",
            "mcp_taskd_queue_wait_seconds_count{tool=\"echo\"} 2",
            "mcp_taskd_attempt_duration_seconds_bucket{tool=\"echo\",le=\"3600\"} 0",
            "mcp_taskd_attempt_duration_seconds_bucket{tool=\"echo\",le=\"+Inf\"} 1",
        ] {
            assert!(page.contains(&format!("\n{line}\n")), "{line} in {page}");
        }
        assert!(
            !page.contains("not-configured"),
            "labels stay configured tools"
        );
    }

    /// The OTLP translation of this page (telemetry on) loses no family.
    #[test]
    fn the_whole_page_translates() {
        let metrics = Metrics::new(["echo"]);
        metrics.record_request("tools/call", true);
        let page = metrics.render(&Snapshot {
            stats: None,
            running_attempts: 2,
            open_subscriptions: 0,
            wal_bytes: Some(4096),
        });
        let families = page
            .lines()
            .filter(|line| line.starts_with("# TYPE"))
            .count();
        let translated = taskd_telemetry::metrics::translate(&page, 0, 1);
        assert_eq!(translated.len(), families);
        for metric in &translated {
            let points = match &metric.data {
                Some(Data::Sum(sum)) => sum.data_points.len(),
                Some(Data::Gauge(gauge)) => gauge.data_points.len(),
                Some(Data::Histogram(histogram)) => histogram.data_points.len(),
                other => panic!("{other:?}"),
            };
            assert!(points > 0, "{} has no points", metric.name);
        }
        let wal = translated
            .iter()
            .find(|metric| metric.name == "mcp_taskd_wal_bytes")
            .expect("the WAL gauge");
        assert_eq!(wal.unit, "By");
    }
}
