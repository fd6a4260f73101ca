//! The way out: OTLP/HTTP protobuf through ureq (the one HTTP client of the project),
//! and the bounds and counts around the SDK's batch span processor.
//!
//! Export never slows a request: a finished span goes into a bounded queue (one atomic
//! add and a channel send on the request's thread) and the batch processor's own
//! thread encodes and posts it. A span that finds the queue full is dropped and
//! counted; so is every span of a batch the collector did not take (refused, down,
//! too slow: the export timeout bounds each try). Nothing is retried or queued beyond
//! the bound, so a dead collector costs memory for one queue, no more.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::trace::{Link, SpanKind, TraceContextExt, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SamplingDecision, SamplingResult, ShouldSample, SpanData, SpanExporter,
    SpanProcessor,
};
use opentelemetry_sdk::Resource;

/// Largest collector answer read (an OTLP answer is a few bytes; a partial-success one
/// names counts and a message).
const MAX_ANSWER_BYTES: u64 = 64 * 1024;

/// Spans finished, exported and dropped since start (the `/metrics` page shows them).
#[derive(Debug, Default)]
pub struct ExportCounts {
    /// Spans handed to the collector and accepted.
    pub exported: AtomicU64,
    /// Spans dropped at their end, beyond the export budget ([`SpanBudget`]).
    pub dropped_over_budget: AtomicU64,
    /// Requests whose trace was not recorded at all: the budget had no room for one
    /// when the request began ([`BudgetSampler`]).
    pub traces_over_budget: AtomicU64,
    /// Spans dropped because the queue was full (the collector is slower than the
    /// spans come, or gone and every try waits for its timeout).
    pub dropped_queue_full: AtomicU64,
    /// Spans of batches the collector did not accept.
    pub dropped_export_failed: AtomicU64,
    /// Spans in the queue or being exported right now.
    queued: AtomicU64,
}

/// OTLP's HTTP client: blocking ureq calls on the batch processor's own thread (the
/// SDK runs an export's future to completion there), never on a request's thread.
#[derive(Debug, Clone)]
pub struct UreqClient {
    agent: ureq::Agent,
}

impl UreqClient {
    /// A client whose every call (connect, send, read) ends within `timeout`.
    pub fn new(timeout: Duration) -> UreqClient {
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::PlatformVerifier)
            .build();
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .tls_config(tls)
            .build()
            .into();
        UreqClient { agent }
    }

    /// Posts `body` to `url` as OTLP protobuf; the status code, or why there is none.
    pub fn post_protobuf(&self, url: &str, body: Vec<u8>) -> Result<u16, ureq::Error> {
        let response = self
            .agent
            .post(url)
            .header("Content-Type", "application/x-protobuf")
            .send(&body[..])?;
        Ok(response.status().as_u16())
    }
}

#[async_trait::async_trait]
impl HttpClient for UreqClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let request = Request::from_parts(parts, body.to_vec());
        let response = self.agent.run(request)?;
        let (parts, mut body) = response.into_parts();
        let bytes = body.with_config().limit(MAX_ANSWER_BYTES).read_to_vec()?;
        Ok(Response::from_parts(parts, Bytes::from(bytes)))
    }
}

/// The SDK's batch span processor behind our own bounds: a span beyond the export
/// budget, or beyond `capacity` queued, is dropped here and counted (the SDK counts its
/// own drops but shows them to no one). The bound is the SDK queue's size, so the SDK
/// never drops one itself.
#[derive(Debug)]
pub struct BoundedBatch {
    inner: BatchSpanProcessor,
    capacity: u64,
    budget: Option<Arc<SpanBudget>>,
    counts: Arc<ExportCounts>,
}

impl BoundedBatch {
    pub fn new(
        inner: BatchSpanProcessor,
        capacity: usize,
        budget: Option<Arc<SpanBudget>>,
        counts: Arc<ExportCounts>,
    ) -> Self {
        BoundedBatch {
            inner,
            capacity: capacity as u64,
            budget,
            counts,
        }
    }
}

/// How many spans a second may go to the exporter: a rate with a burst of one second's
/// worth, kept lock-free as the time the next span is due (the generic cell rate
/// algorithm), since every request's thread asks.
///
/// Why: encoding and sending a span costs about as much CPU as building it. Below the
/// budget every span goes out; at saturation the exporter's share of the CPU stays
/// bounded, and the spans beyond it are dropped before any of that work, counted, so
/// that tracing costs the requests a bounded fraction (measured in docs/benchmarks/telemetry.md).
/// Most are never built: [`BudgetSampler`] leaves a request's whole trace unrecorded
/// when the budget has no room for it; the rest (traces already under way) are dropped
/// at their end.
#[derive(Debug)]
pub struct SpanBudget {
    started: Instant,
    /// Nanoseconds after `started` at which the budget is back to full.
    full_at: AtomicU64,
    interval_ns: u64,
    burst_ns: u64,
}

impl SpanBudget {
    /// `None` for `0` (no bound).
    pub fn per_second(spans: u64) -> Option<SpanBudget> {
        (spans > 0).then(|| SpanBudget {
            started: Instant::now(),
            full_at: AtomicU64::new(0),
            interval_ns: (1_000_000_000 / spans).max(1),
            burst_ns: 1_000_000_000,
        })
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether `spans` spans would be admitted now (at most a second's worth are ever
    /// asked for); takes nothing.
    fn has_room(&self, spans: u64) -> bool {
        let now = self.now_ns();
        let spans = spans.min(self.burst_ns / self.interval_ns).max(1);
        let full_at = self.full_at.load(Ordering::Relaxed).max(now);
        full_at + spans * self.interval_ns - now <= self.burst_ns
    }

    /// Takes one span's room; `false` when there is none now.
    fn admit(&self) -> bool {
        let now = self.now_ns();
        let mut full_at = self.full_at.load(Ordering::Relaxed);
        loop {
            let next = full_at.max(now) + self.interval_ns;
            if next - now > self.burst_ns {
                return false;
            }
            match self.full_at.compare_exchange_weak(
                full_at,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => full_at = seen,
            }
        }
    }
}

/// The spans a request's trace is given room for before it starts: a task created and
/// run at once makes five (the request, its creation, the queue wait, the attempt, the
/// tool's run), with a margin for a retry or an input round.
const TRACE_ROOM: u64 = 8;

/// The configured sampler (`OTEL_TRACES_SAMPLER`, by default `parentbased_always_on`),
/// with the export budget asked first where a request begins: a request's span
/// (`SERVER`) is not recorded when the budget has no room for a whole trace
/// ([`TRACE_ROOM`] spans), and counted. Its descendants then follow their parent's
/// decision, down to the task's last attempt (the task stores the unsampled context),
/// so a busy server records whole traces, fewer of them, rather than building every
/// span and dropping most at their end, which cost a fifth of the task creations at
/// saturation (docs/benchmarks/telemetry.md).
#[derive(Debug, Clone)]
pub struct BudgetSampler {
    inner: Box<dyn ShouldSample>,
    budget: Arc<SpanBudget>,
    counts: Arc<ExportCounts>,
}

impl BudgetSampler {
    pub fn new(
        inner: Box<dyn ShouldSample>,
        budget: Arc<SpanBudget>,
        counts: Arc<ExportCounts>,
    ) -> Self {
        BudgetSampler {
            inner,
            budget,
            counts,
        }
    }
}

impl ShouldSample for BudgetSampler {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        if *span_kind == SpanKind::Server && !self.budget.has_room(TRACE_ROOM) {
            self.counts
                .traces_over_budget
                .fetch_add(1, Ordering::Relaxed);
            return SamplingResult {
                decision: SamplingDecision::Drop,
                attributes: Vec::new(),
                trace_state: parent_context
                    .map(|parent| parent.span().span_context().trace_state().clone())
                    .unwrap_or_default(),
            };
        }
        self.inner
            .should_sample(parent_context, trace_id, name, span_kind, attributes, links)
    }
}

impl SpanProcessor for BoundedBatch {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.budget.as_ref().is_some_and(|budget| !budget.admit()) {
            self.counts
                .dropped_over_budget
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        let queued = self.counts.queued.fetch_add(1, Ordering::AcqRel);
        if queued >= self.capacity {
            self.counts.queued.fetch_sub(1, Ordering::AcqRel);
            self.counts
                .dropped_queue_full
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, counting what each batch did (and freeing its room in the
/// queue, taken by [`BoundedBatch`]).
///
/// It also yields the CPU to the server's own threads: the first batch lowers the
/// priority of the thread that exports (the batch processor's own, which encodes and
/// sends every batch) to [`EXPORT_NICENESS`]. On a box the requests keep busy, the
/// export then takes what they leave, and a full queue drops spans (counted) rather
/// than the server serving fewer requests; on an idle box nothing changes.
pub struct CountingExporter<E> {
    inner: E,
    counts: Arc<ExportCounts>,
    lowered: std::sync::Once,
}

/// The niceness of the exporting thread (0 is the server's; 19 the lowest).
#[cfg(target_os = "linux")]
const EXPORT_NICENESS: libc::c_int = 10;

impl<E> CountingExporter<E> {
    pub fn new(inner: E, counts: Arc<ExportCounts>) -> Self {
        CountingExporter {
            inner,
            counts,
            lowered: std::sync::Once::new(),
        }
    }
}

/// Lowers the calling thread's priority (Linux: niceness is per thread). Elsewhere
/// niceness is the whole process's, so the exporter keeps the server's priority.
pub(super) fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on the calling thread's own id.
        let lowered = unsafe {
            let thread = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, thread, EXPORT_NICENESS)
        };
        if lowered != 0 {
            log::debug!(
                "telemetry: could not lower the exporter's priority: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

impl<E> fmt::Debug for CountingExporter<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CountingExporter")
    }
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.lowered.call_once(lower_this_threads_priority);
        let spans = batch.len() as u64;
        let result = self.inner.export(batch).await;
        self.counts.queued.fetch_sub(spans, Ordering::AcqRel);
        let counter = match result {
            Ok(()) => &self.counts.exported,
            Err(_) => &self.counts.dropped_export_failed,
        };
        counter.fetch_add(spans, Ordering::Relaxed);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::SpanBudget;

    #[test]
    fn a_budget_admits_a_seconds_worth_at_once_then_its_rate() {
        assert!(SpanBudget::per_second(0).is_none(), "0 is no bound");
        let budget = SpanBudget::per_second(100).expect("a budget");
        let admitted = (0..1000).filter(|_| budget.admit()).count();
        // The burst (a second's worth), plus what the rate adds while the loop runs.
        assert!((100..=110).contains(&admitted), "{admitted}");
        std::thread::sleep(std::time::Duration::from_millis(100));
        let later = (0..1000).filter(|_| budget.admit()).count();
        assert!((9..=30).contains(&later), "{later}");
    }

    #[test]
    fn room_is_asked_without_taking_it() {
        let budget = SpanBudget::per_second(100).expect("a budget");
        assert!(budget.has_room(8));
        assert!(budget.has_room(1_000), "asks for a second's worth at most");
        let taken = (0..95).filter(|_| budget.admit()).count();
        assert_eq!(taken, 95, "asking took nothing");
        assert!(budget.has_room(4));
        assert!(!budget.has_room(8));
        while budget.admit() {}
        assert!(!budget.has_room(1));
    }
}
