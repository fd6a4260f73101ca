//! Telemetry: OpenTelemetry traces of requests and of every task's life, exported as
//! OTLP/HTTP protobuf, and the spans' vocabulary. It owns the tracer (one per process,
//! started with the engine, flushed at its end), the span names and attributes, and the
//! way out ([`export`]); the stages call the small functions here at the points a span
//! starts or ends.
//!
//! **Off by default, and then a branch.** Telemetry is on when `telemetry.otlp_endpoint`
//! is set, or `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is in
//! the environment. Off, every function here returns at its first line (one load of a
//! `OnceLock` that was never set) and [`Span`] is an empty `Option`.
//!
//! **One trace per task.** A task's creation span is stored with the task (its
//! `trace_context`, see [`taskd_protocol::TraceContext`]); the queue wait, each
//! attempt, `input_required` periods and cancellation are its children, in whatever
//! process and after whatever restart they happen. A tool run is a child of its
//! attempt, and a command tool's program a child of the run, with `TRACEPARENT` naming
//! it, so the program's own spans nest there too. Every span of a task carries its id.
//!
//! **Nothing sensitive.** Attributes are names the configuration chose (tools), ids
//! (tasks, JSON-RPC requests, a hash of a session id), numbers, statuses and error
//! codes. Never arguments, results, input, status messages, tokens or identities.
//!
//! Restart-only: the tracer is built once at start-up (configuration reload does not
//! change it).
//!
//! May depend on: `taskd-protocol` (trace context), `taskd-base`. Must never know: tasks,
//! stores, tools, the server's metrics (the OTLP metrics export is handed the page's
//! renderer as a closure). Everything above reports into it; it calls nothing above.

mod config;
pub mod export;
pub mod logs;
pub mod metrics;

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;

pub use config::{LogConfig, LogFormat, TelemetryConfig};
use export::{BoundedBatch, BudgetSampler, CountingExporter, ExportCounts, SpanBudget, UreqClient};
use taskd_protocol::TraceContext;

/// The attribute naming a task on every span of its life: the `taskId` of the Tasks
/// extension (SEP-2663), which the OpenTelemetry conventions for MCP do not name yet.
pub const TASK_ID: &str = "mcp.task.id";
/// An attempt's number, 1-based (`mcp_taskd.*`: this server's own attributes).
pub const ATTEMPT: &str = "mcp_taskd.attempt";
/// Attempts before this one (0 on the first): the retry number.
pub const RETRY_COUNT: &str = "mcp_taskd.retry_count";
/// How an attempt ended: a terminal status, `input_required`, `retry` or `released`.
pub const OUTCOME: &str = "mcp_taskd.outcome";

/// How long one export may take (connect, send, answer) before its spans are dropped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Spans waiting for export at most; beyond, new ones are dropped and counted.
const QUEUE_CAPACITY: usize = 8192;

/// The running telemetry of this process.
struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    counts: Arc<ExportCounts>,
    /// Where and how often the metrics go ([`start_metrics`]), unless turned off.
    metrics: Option<(String, Duration)>,
    /// The spans' resource, for the metrics to name the same service.
    resource: opentelemetry_sdk::Resource,
}

static TELEMETRY: OnceLock<Telemetry> = OnceLock::new();

/// Where telemetry goes, once the configuration and the environment are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// The full URL spans are posted to (`<endpoint>/v1/traces`).
    pub traces: String,
    /// The full URL the metrics are posted to (`<endpoint>/v1/metrics`); `None` with
    /// `OTEL_METRICS_EXPORTER=none`, or when only a traces URL was named.
    pub metrics: Option<String>,
}

impl Endpoints {
    /// The endpoints `config` and `env` (the process environment's lookup) name; `None`
    /// when telemetry is off. `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is a full URL, used as
    /// it is; otherwise `/v1/traces` is added to `telemetry.otlp_endpoint`, else to
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (the OTLP specification's rules). The metrics go
    /// to `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, else to the base URL's `/v1/metrics`,
    /// unless `OTEL_METRICS_EXPORTER` is `none`.
    pub fn resolve(
        config: &TelemetryConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Option<Endpoints> {
        let set = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        let base = config
            .otlp_endpoint
            .clone()
            .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT"));
        let traces = set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| base.as_deref().map(|base| signal_url(base, "v1/traces")))?;
        let metrics = set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
            .or_else(|| base.as_deref().map(|base| signal_url(base, "v1/metrics")))
            .filter(|_| {
                set("OTEL_METRICS_EXPORTER").is_none_or(|exporter| exporter.trim() != "none")
            });
        Some(Endpoints { traces, metrics })
    }
}

/// `<base>/<path>`, with exactly one slash between them.
fn signal_url(base: &str, path: &str) -> String {
    format!("{}/{path}", base.trim().trim_end_matches('/'))
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("telemetry: the OTLP exporter: {0}")]
    Exporter(String),
}

/// Starts telemetry if the configuration or the environment asks for it; returns the
/// traces URL when it did. Call once, before any request is served.
pub fn start(config: &TelemetryConfig) -> Result<Option<String>, TelemetryError> {
    let Some(endpoints) = Endpoints::resolve(config, |name| std::env::var(name).ok()) else {
        return Ok(None);
    };
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_http_client(UreqClient::new(EXPORT_TIMEOUT))
        .with_endpoint(endpoints.traces.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|error| TelemetryError::Exporter(error.to_string()))?;
    let counts = Arc::new(ExportCounts::default());
    let batch = BatchSpanProcessor::builder(CountingExporter::new(exporter, Arc::clone(&counts)))
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(QUEUE_CAPACITY)
                .with_scheduled_delay(Duration::from_millis(config.batch_delay_ms))
                .build(),
        )
        .build();
    // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are read by the resource builder;
    // the configured name, when there is one, wins.
    let mut resource = Resource::builder();
    match &config.service_name {
        Some(name) => resource = resource.with_service_name(name.clone()),
        None if std::env::var_os("OTEL_SERVICE_NAME").is_none() => {
            resource = resource.with_service_name("mcp-taskd")
        }
        None => {}
    }
    let resource = resource
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let spans_resource = resource.clone();
    // The sampler is OTEL_TRACES_SAMPLER's (default: parentbased_always_on), asking the
    // export budget first where a request begins.
    let budget = SpanBudget::per_second(config.max_spans_per_second).map(Arc::new);
    let mut provider = SdkTracerProvider::builder()
        .with_span_processor(BoundedBatch::new(
            batch,
            QUEUE_CAPACITY,
            budget.clone(),
            Arc::clone(&counts),
        ))
        .with_resource(spans_resource);
    if let Some(budget) = budget {
        let configured = opentelemetry_sdk::trace::Config::default().sampler;
        provider =
            provider.with_sampler(BudgetSampler::new(configured, budget, Arc::clone(&counts)));
    }
    let provider = provider.build();
    let tracer = provider.tracer("mcp-taskd");
    let interval = metrics_interval(config, |name| std::env::var(name).ok());
    let telemetry = Telemetry {
        provider,
        tracer,
        counts,
        metrics: endpoints.metrics.map(|url| (url, interval)),
        resource,
    };
    if TELEMETRY.set(telemetry).is_err() {
        log::warn!("telemetry was started twice; the first start stands");
    }
    Ok(Some(endpoints.traces))
}

/// How often the metrics are exported: `telemetry.metrics_interval_ms`, else
/// `OTEL_METRIC_EXPORT_INTERVAL` (milliseconds), else a minute (the specification's
/// default), never more often than every 100 ms.
fn metrics_interval(config: &TelemetryConfig, env: impl Fn(&str) -> Option<String>) -> Duration {
    let ms = config
        .metrics_interval_ms
        .or_else(|| env("OTEL_METRIC_EXPORT_INTERVAL")?.trim().parse().ok())
        .unwrap_or(60_000);
    Duration::from_millis(ms.max(100))
}

/// Starts exporting the metrics page (`render` writes it) when telemetry is on and
/// the metrics are not turned off; stop it before [`shutdown`].
pub fn start_metrics(
    render: impl Fn() -> String + Send + 'static,
) -> Option<metrics::MetricsExport> {
    let telemetry = TELEMETRY.get()?;
    let (url, interval) = telemetry.metrics.clone()?;
    let resource = metrics::resource(&telemetry.resource);
    match metrics::MetricsExport::start(url.clone(), interval, resource, render) {
        Ok(export) => {
            log::info!(
                "telemetry: metrics go to {url} every {} ms",
                interval.as_millis()
            );
            Some(export)
        }
        Err(error) => {
            log::warn!("telemetry: cannot start the metrics export: {error}");
            None
        }
    }
}

/// Exports what is queued (within a few seconds) and stops the exporter: the end of
/// a graceful shutdown.
pub fn shutdown() {
    if let Some(telemetry) = TELEMETRY.get() {
        if let Err(error) = telemetry
            .provider
            .shutdown_with_timeout(Duration::from_secs(5))
        {
            log::debug!("telemetry shutdown: {error}");
        }
    }
}

/// Whether telemetry is on.
pub fn enabled() -> bool {
    TELEMETRY.get().is_some()
}

/// What became of the finished spans; `None` when telemetry is off.
pub fn export_counts() -> Option<SpanCounts> {
    let counts = &TELEMETRY.get()?.counts;
    Some(SpanCounts {
        exported: counts.exported.load(Ordering::Relaxed),
        over_budget: counts.dropped_over_budget.load(Ordering::Relaxed),
        traces_over_budget: counts.traces_over_budget.load(Ordering::Relaxed),
        queue_full: counts.dropped_queue_full.load(Ordering::Relaxed),
        export_failed: counts.dropped_export_failed.load(Ordering::Relaxed),
    })
}

/// Spans exported, and dropped by reason, since start.
pub struct SpanCounts {
    pub exported: u64,
    /// Beyond `telemetry.max_spans_per_second`, at their end.
    pub over_budget: u64,
    /// Requests not traced at all: the budget had no room for a trace when they began.
    pub traces_over_budget: u64,
    /// The export queue was full.
    pub queue_full: u64,
    /// The collector did not take them.
    pub export_failed: u64,
}

/// A span of ours, or nothing when telemetry is off (every method is then a no-op).
#[derive(Debug, Default)]
pub struct Span(Option<opentelemetry_sdk::trace::Span>);

/// What a new span hangs under.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A request from a client (`SERVER`).
    Server,
    /// Work of the server's own (`INTERNAL`).
    Internal,
}

impl Span {
    /// A span under `parent` (a new trace without one), started at `start` (now without
    /// one); `describe` gives its name and attributes, and runs only when telemetry is
    /// on (off, a span costs no allocation).
    pub fn start<N: Into<Cow<'static, str>>>(
        kind: Kind,
        parent: Option<&TraceContext>,
        start: Option<SystemTime>,
        describe: impl FnOnce() -> (N, Vec<KeyValue>),
    ) -> Span {
        let Some(telemetry) = TELEMETRY.get() else {
            return Span(None);
        };
        let (name, attributes) = describe();
        let kind = match kind {
            Kind::Server => SpanKind::Server,
            Kind::Internal => SpanKind::Internal,
        };
        let mut builder = telemetry
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes);
        if let Some(start) = start {
            builder = builder.with_start_time(start);
        }
        let parent = parent.map_or_else(Context::new, remote_parent);
        Span(Some(telemetry.tracer.build_with_context(builder, &parent)))
    }

    /// Whether this span is recorded (telemetry on; the sampler took it).
    pub fn is_recording(&self) -> bool {
        use opentelemetry::trace::Span as _;
        self.0.as_ref().is_some_and(|span| span.is_recording())
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        use opentelemetry::trace::Span as _;
        if let Some(span) = &mut self.0 {
            span.set_attribute(KeyValue::new(key, value));
        }
    }

    /// An event at this moment (no attributes beyond `attributes`).
    pub fn event(&mut self, name: &'static str, attributes: Vec<KeyValue>) {
        use opentelemetry::trace::Span as _;
        if let Some(span) = &mut self.0 {
            span.add_event(name, attributes);
        }
    }

    /// Marks the span failed: `error.type` (a JSON-RPC code, `tool_error`, …) and the
    /// status description (a message this server wrote, never a tool's output).
    pub fn fail(&mut self, error_type: impl Into<opentelemetry::Value>, message: String) {
        use opentelemetry::trace::Span as _;
        if let Some(span) = &mut self.0 {
            span.set_attribute(KeyValue::new("error.type", error_type));
            span.set_status(Status::error(message));
        }
    }

    /// The W3C context naming this span as parent (with its trace's `tracestate`), for
    /// what continues elsewhere: a stored task, a program's `TRACEPARENT`.
    pub fn context(&self) -> Option<TraceContext> {
        use opentelemetry::trace::Span as _;
        let context = self.0.as_ref()?.span_context();
        let state = context.trace_state().header();
        TraceContext::from_ids(
            context.trace_id().to_bytes(),
            context.span_id().to_bytes(),
            context.is_sampled(),
            Some(state.as_str()).filter(|state| !state.is_empty()),
        )
    }

    /// Ends the span now.
    pub fn end(self) {
        use opentelemetry::trace::Span as _;
        if let Some(mut span) = self.0 {
            span.end();
        }
    }

    /// Ends the span at `at` (a period that ended before it was recorded).
    pub fn end_at(self, at: SystemTime) {
        use opentelemetry::trace::Span as _;
        if let Some(mut span) = self.0 {
            span.end_with_timestamp(at);
        }
    }
}

/// The OpenTelemetry context of a remote parent.
fn remote_parent(parent: &TraceContext) -> Context {
    let trace_id = TraceId::from_hex(parent.trace_id()).unwrap_or(TraceId::INVALID);
    let span_id = SpanId::from_hex(parent.span_id()).unwrap_or(SpanId::INVALID);
    let flags = if parent.sampled() {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    let state = parent
        .tracestate()
        .and_then(|state| state.parse::<TraceState>().ok())
        .unwrap_or_default();
    Context::new().with_remote_span_context(SpanContext::new(trace_id, span_id, flags, true, state))
}

/// A time `ms` Unix milliseconds (the store's times) as a `SystemTime`.
pub fn unix_ms(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(endpoint: Option<&str>) -> TelemetryConfig {
        TelemetryConfig {
            otlp_endpoint: endpoint.map(str::to_owned),
            ..TelemetryConfig::default()
        }
    }

    #[test]
    fn telemetry_is_on_when_an_endpoint_is_configured_or_in_the_environment() {
        let none = |_: &str| None;
        assert_eq!(Endpoints::resolve(&config(None), none), None);
        let from_config = Endpoints::resolve(&config(Some("http://collector:4318/")), none);
        assert_eq!(
            from_config.unwrap().traces,
            "http://collector:4318/v1/traces"
        );
        let env = |name: &str| {
            (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://env:4318".to_owned())
        };
        assert_eq!(
            Endpoints::resolve(&config(None), env).unwrap().traces,
            "http://env:4318/v1/traces"
        );
        // The configuration wins over the general variable.
        assert_eq!(
            Endpoints::resolve(&config(Some("http://conf:4318")), env)
                .unwrap()
                .traces,
            "http://conf:4318/v1/traces"
        );
        // The traces variable is a full URL, and wins over both.
        let traces = |name: &str| {
            (name == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .then(|| "http://traces:9999/custom".to_owned())
        };
        assert_eq!(
            Endpoints::resolve(&config(Some("http://conf:4318")), traces)
                .unwrap()
                .traces,
            "http://traces:9999/custom"
        );
        let blank = |_: &str| Some("  ".to_owned());
        assert_eq!(Endpoints::resolve(&config(None), blank), None);
    }

    #[test]
    fn metrics_go_beside_the_traces_unless_turned_off() {
        let conf = config(Some("http://conf:4318/"));
        let metrics = |env: &dyn Fn(&str) -> Option<String>| {
            Endpoints::resolve(&conf, env).and_then(|endpoints| endpoints.metrics)
        };
        assert_eq!(
            metrics(&|_| None).as_deref(),
            Some("http://conf:4318/v1/metrics")
        );
        assert_eq!(
            metrics(&|name| {
                (name == "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").then(|| "http://m:1/x".into())
            })
            .as_deref(),
            Some("http://m:1/x")
        );
        assert_eq!(
            metrics(&|name| (name == "OTEL_METRICS_EXPORTER").then(|| "none".into())),
            None
        );
        let interval = |ms: Option<u64>, env: Option<&str>| {
            let conf = TelemetryConfig {
                metrics_interval_ms: ms,
                ..TelemetryConfig::default()
            };
            metrics_interval(&conf, |name| {
                (name == "OTEL_METRIC_EXPORT_INTERVAL").then(|| env.unwrap_or("x").to_owned())
            })
        };
        assert_eq!(interval(None, Some("x")), Duration::from_secs(60));
        assert_eq!(interval(None, Some("5000")), Duration::from_secs(5));
        assert_eq!(
            interval(Some(200), Some("5000")),
            Duration::from_millis(200)
        );
        assert_eq!(interval(Some(1), None), Duration::from_millis(100));
    }

    #[test]
    fn spans_are_nothing_while_telemetry_is_off() {
        let parent = TraceContext::parse(
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",
            None,
        );
        let mut span = Span::start(Kind::Internal, parent.as_ref(), None, || ("x", Vec::new()));
        span.set(TASK_ID, "t");
        assert!(!span.is_recording());
        assert_eq!(span.context(), None);
        span.end();
    }
}
