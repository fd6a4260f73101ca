//! The settings this crate reads, as the configuration file writes them: `[telemetry]`
//! and `[log]` (the file format in `taskd-server` composes them).

use serde::Deserialize;

/// `[telemetry]`: OpenTelemetry traces over OTLP/HTTP (`crates/telemetry/src/`, docs/tracing.md).
/// Read at start-up only (a reload does not change it).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL (e.g. `http://127.0.0.1:4318`); spans go to
    /// `<otlp_endpoint>/v1/traces`. Unset: `OTEL_EXPORTER_OTLP_ENDPOINT` (or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) if set, else telemetry is off.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the spans (default `OTEL_SERVICE_NAME`, else `mcp-taskd`).
    pub service_name: Option<String>,
    /// Longest a finished span waits before its batch is sent.
    pub batch_delay_ms: u64,
    /// Most spans a second handed to the exporter (bursts of up to a second's worth);
    /// the rest are dropped at once and counted. Bounds what encoding and sending spans
    /// may take of the CPU at saturation. `0`: no bound.
    pub max_spans_per_second: u64,
    /// How often the metrics go to `<otlp_endpoint>/v1/metrics` (unset:
    /// `OTEL_METRIC_EXPORT_INTERVAL`, else 60 000).
    pub metrics_interval_ms: Option<u64>,
    /// A link from the dashboard's task page to a trace viewer: `{trace_id}` is replaced
    /// with the task's trace id (e.g. `http://jaeger:16686/trace/{trace_id}`).
    pub trace_url: Option<String>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            service_name: None,
            batch_delay_ms: 1000,
            max_spans_per_second: 5000,
            metrics_interval_ms: None,
            trace_url: None,
        }
    }
}

/// `[log]`: how the server's log lines look on stderr.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub format: LogFormat,
}

/// `text` (default: one line of text, as env_logger writes it) or `json` (one JSON
/// object a line, for journald and Loki).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}
