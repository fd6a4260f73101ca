//! OTLP export of the metrics: the `/metrics` page, translated, posted to
//! `<endpoint>/v1/metrics` as OTLP/HTTP protobuf every `telemetry.metrics_interval_ms`.
//!
//! **One definition of the metrics.** What is exported is exactly what a Prometheus
//! scrape reads: the page (rendered by the server's metrics, handed in as a closure) and each
//! family translated ([`translate`]), as the OpenTelemetry Collector's Prometheus
//! receiver would: a counter becomes a cumulative monotonic sum, a gauge a gauge, a
//! histogram a cumulative explicit-bucket histogram, labels become attributes. So the
//! page's guarantees hold here too: labels name no identity, argument or task.
//!
//! **Never in a request's way.** The export runs on a thread of its own (at the span
//! exporter's lowered priority, Linux), which renders the page (a few store counters)
//! and posts it; a collector that is down costs one failed post an interval, logged
//! once, with nothing queued. At a graceful stop one last export goes out, bounded by
//! [`LAST_EXPORT_TIMEOUT`].

use std::collections::BTreeMap;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{bounded, RecvTimeoutError, Sender};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;

use super::export::UreqClient;

/// How long the last export at a graceful stop may take: a stop is not held up by a
/// collector that went away.
const LAST_EXPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// The periodic export of the metrics page; stopped (with a last export) by [`stop`].
///
/// [`stop`]: MetricsExport::stop
pub struct MetricsExport {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl MetricsExport {
    /// Starts exporting what `render` returns (the Prometheus page) to `url` every
    /// `interval`, the first time one interval from now.
    pub fn start(
        url: String,
        interval: Duration,
        resource: Resource,
        render: impl Fn() -> String + Send + 'static,
    ) -> std::io::Result<MetricsExport> {
        let (stop, stopped) = bounded(1);
        let started = unix_nanos(SystemTime::now());
        let thread = std::thread::Builder::new()
            .name("metrics-export".into())
            .spawn(move || {
                super::export::lower_this_threads_priority();
                let client = UreqClient::new(super::EXPORT_TIMEOUT);
                let mut failing = false;
                let export = |client: &UreqClient, failing: &mut bool| {
                    let metrics = translate(&render(), started, unix_nanos(SystemTime::now()));
                    let body = request(&resource, metrics).encode_to_vec();
                    match client.post_protobuf(&url, body) {
                        Ok(status) if (200..300).contains(&status) => {
                            if std::mem::take(failing) {
                                log::info!("telemetry: the collector takes metrics again");
                            }
                        }
                        outcome => {
                            let why = match outcome {
                                Ok(status) => format!("it answered {status}"),
                                Err(error) => error.to_string(),
                            };
                            if !std::mem::replace(failing, true) {
                                log::warn!("telemetry: metrics not exported ({why}); trying again every interval");
                            }
                        }
                    }
                };
                // Every interval until told to stop (or the engine is gone).
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    export(&client, &mut failing);
                }
                export(&UreqClient::new(LAST_EXPORT_TIMEOUT), &mut failing);
            })?;
        Ok(MetricsExport { stop, thread })
    }

    /// Exports one last time and stops.
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// The export request: our metrics under our resource and scope.
fn request(resource: &Resource, metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource.clone()),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "mcp-taskd".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// The OTLP form of the span exporter's resource (service name, version, and what
/// `OTEL_RESOURCE_ATTRIBUTES` adds), so that metrics and spans name the same service.
pub fn resource(sdk: &opentelemetry_sdk::Resource) -> Resource {
    let attributes = sdk
        .iter()
        .map(|(key, value)| {
            let value = match value {
                opentelemetry::Value::Bool(value) => any_value::Value::BoolValue(*value),
                opentelemetry::Value::I64(value) => any_value::Value::IntValue(*value),
                opentelemetry::Value::F64(value) => any_value::Value::DoubleValue(*value),
                other => any_value::Value::StringValue(other.to_string()),
            };
            attribute(key.as_str(), value)
        })
        .collect();
    Resource {
        attributes,
        ..Default::default()
    }
}

fn attribute(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn unix_nanos(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
        })
}

/// A family's type as the page's `# TYPE` line names it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// A series' labels, as (name, value) pairs in page order.
type Labels = Vec<(String, String)>;

/// One family of the page, gathered before it becomes a [`Metric`].
struct Family {
    name: String,
    help: String,
    kind: Kind,
    /// Counters and gauges: each series' labels and value as written.
    samples: Vec<(Labels, String)>,
    /// Histograms: per series (its labels but `le`), the cumulative buckets in page
    /// order, the sum and the count.
    series: BTreeMap<Labels, HistogramSeries>,
}

#[derive(Default)]
struct HistogramSeries {
    /// (`le`, cumulative count), `+Inf` last.
    buckets: Vec<(f64, u64)>,
    sum: f64,
    count: u64,
}

/// The OTLP metrics of a Prometheus text page as the server's `/metrics` writes it
/// (`# HELP` and `# TYPE` before each family's samples); `start` is when counting
/// began, `now` when the page was read, both Unix nanoseconds. Lines it cannot read
/// are skipped: the page is ours, so there are none.
pub fn translate(page: &str, start: u64, now: u64) -> Vec<Metric> {
    let mut families: Vec<Family> = Vec::new();
    for line in page.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            families.push(Family {
                name: name.to_owned(),
                help: help.to_owned(),
                kind: Kind::Gauge,
                samples: Vec::new(),
                series: BTreeMap::new(),
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let kind = match rest.rsplit(' ').next() {
                Some("counter") => Kind::Counter,
                Some("histogram") => Kind::Histogram,
                _ => Kind::Gauge,
            };
            if let Some(family) = families.last_mut() {
                family.kind = kind;
            }
        } else if let (Some(family), Some((name, labels, value))) =
            (families.last_mut(), sample(line))
        {
            family.add(name, labels, value);
        }
    }
    families
        .into_iter()
        .map(|family| family.into_metric(start, now))
        .collect()
}

impl Family {
    fn add(&mut self, name: &str, mut labels: Labels, value: &str) {
        let Some(suffix) = name.strip_prefix(self.name.as_str()) else {
            return;
        };
        if self.kind != Kind::Histogram {
            if suffix.is_empty() {
                self.samples.push((labels, value.to_owned()));
            }
            return;
        }
        let number = parse_number(value);
        match suffix {
            "_bucket" => {
                let Some(at) = labels.iter().position(|(key, _)| key == "le") else {
                    return;
                };
                let (_, bound) = labels.remove(at);
                let series = self.series.entry(labels).or_default();
                series.buckets.push((parse_number(&bound), number as u64));
            }
            "_sum" => self.series.entry(labels).or_default().sum = number,
            "_count" => self.series.entry(labels).or_default().count = number as u64,
            _ => {}
        }
    }

    fn into_metric(self, start: u64, now: u64) -> Metric {
        let cumulative = AggregationTemporality::Cumulative as i32;
        let numbers = |samples: Vec<(Labels, String)>| {
            samples
                .into_iter()
                .map(|(labels, value)| NumberDataPoint {
                    attributes: attributes(labels),
                    start_time_unix_nano: start,
                    time_unix_nano: now,
                    value: Some(number_value(&value)),
                    ..Default::default()
                })
                .collect()
        };
        let data = match self.kind {
            Kind::Counter => Data::Sum(Sum {
                data_points: numbers(self.samples),
                aggregation_temporality: cumulative,
                is_monotonic: true,
            }),
            Kind::Gauge => Data::Gauge(Gauge {
                data_points: numbers(self.samples),
            }),
            Kind::Histogram => Data::Histogram(Histogram {
                data_points: self
                    .series
                    .into_iter()
                    .map(|(labels, series)| series.into_point(labels, start, now))
                    .collect(),
                aggregation_temporality: cumulative,
            }),
        };
        Metric {
            unit: unit(&self.name).to_owned(),
            name: self.name,
            description: self.help,
            data: Some(data),
            ..Default::default()
        }
    }
}

impl HistogramSeries {
    /// OTLP counts each bucket on its own (the page counts cumulatively) and names only
    /// the finite bounds.
    fn into_point(self, labels: Labels, start: u64, now: u64) -> HistogramDataPoint {
        let mut below = 0;
        let mut bucket_counts = Vec::with_capacity(self.buckets.len());
        let mut explicit_bounds = Vec::with_capacity(self.buckets.len());
        for (bound, cumulative) in self.buckets {
            bucket_counts.push(cumulative.saturating_sub(below));
            below = cumulative;
            if bound.is_finite() {
                explicit_bounds.push(bound);
            }
        }
        HistogramDataPoint {
            attributes: attributes(labels),
            start_time_unix_nano: start,
            time_unix_nano: now,
            count: self.count,
            sum: Some(self.sum),
            bucket_counts,
            explicit_bounds,
            ..Default::default()
        }
    }
}

fn attributes(labels: Labels) -> Vec<KeyValue> {
    labels
        .into_iter()
        .map(|(key, value)| attribute(&key, any_value::Value::StringValue(value)))
        .collect()
}

/// An integer stays one (counts); anything else is a double.
fn number_value(text: &str) -> number_data_point::Value {
    match text.parse::<i64>() {
        Ok(int) => number_data_point::Value::AsInt(int),
        Err(_) => number_data_point::Value::AsDouble(parse_number(text)),
    }
}

fn parse_number(text: &str) -> f64 {
    match text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        _ => text.parse().unwrap_or(f64::NAN),
    }
}

/// The UCUM unit the name's Prometheus suffix says.
fn unit(name: &str) -> &'static str {
    if name.ends_with("_seconds") {
        "s"
    } else if name.ends_with("_bytes") {
        "By"
    } else {
        ""
    }
}

/// A sample line: its metric name, labels (unescaped) and value.
fn sample(line: &str) -> Option<(&str, Labels, &str)> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let Some(open) = line.find('{') else {
        let (name, value) = line.split_once(' ')?;
        return Some((name, Vec::new(), value.trim()));
    };
    let name = &line[..open];
    let mut labels = Vec::new();
    let mut rest = &line[open + 1..];
    loop {
        rest = rest.trim_start_matches(',');
        if let Some(after) = rest.strip_prefix('}') {
            return Some((name, labels, after.trim()));
        }
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (at, '"') => break at,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, other) => value.push(other),
            }
        };
        labels.push((key.to_owned(), value));
        rest = &after[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "\
# HELP mcp_taskd_requests_total MCP requests answered, by method and outcome.
# TYPE mcp_taskd_requests_total counter
mcp_taskd_requests_total{method=\"tools/call\",outcome=\"result\"} 3
mcp_taskd_requests_total{method=\"other\",outcome=\"error\"} 0
# HELP mcp_taskd_oldest_ready_job_age_seconds How long.
# TYPE mcp_taskd_oldest_ready_job_age_seconds gauge
mcp_taskd_oldest_ready_job_age_seconds 1.500
# HELP mcp_taskd_queue_wait_seconds How long a job waited.
# TYPE mcp_taskd_queue_wait_seconds histogram
mcp_taskd_queue_wait_seconds_bucket{tool=\"a \\\"quoted\\\" tool\",le=\"0.005\"} 1
mcp_taskd_queue_wait_seconds_bucket{tool=\"a \\\"quoted\\\" tool\",le=\"2.5\"} 3
mcp_taskd_queue_wait_seconds_bucket{tool=\"a \\\"quoted\\\" tool\",le=\"+Inf\"} 4
mcp_taskd_queue_wait_seconds_sum{tool=\"a \\\"quoted\\\" tool\"} 9.25
mcp_taskd_queue_wait_seconds_count{tool=\"a \\\"quoted\\\" tool\"} 4
";

    fn string(value: &KeyValue) -> (&str, &str) {
        match value.value.as_ref().and_then(|value| value.value.as_ref()) {
            Some(any_value::Value::StringValue(text)) => (value.key.as_str(), text.as_str()),
            other => panic!("not a string: {other:?}"),
        }
    }

    #[test]
    fn counters_gauges_and_histograms_keep_their_meaning() {
        let metrics = translate(PAGE, 10, 20);
        assert_eq!(metrics.len(), 3);

        let Some(Data::Sum(requests)) = &metrics[0].data else {
            panic!("a counter is a sum: {:?}", metrics[0]);
        };
        assert!(requests.is_monotonic);
        assert_eq!(
            requests.aggregation_temporality,
            AggregationTemporality::Cumulative as i32
        );
        let first = &requests.data_points[0];
        assert_eq!(first.value, Some(number_data_point::Value::AsInt(3)));
        assert_eq!(
            first.attributes.iter().map(string).collect::<Vec<_>>(),
            [("method", "tools/call"), ("outcome", "result")]
        );
        assert_eq!((first.start_time_unix_nano, first.time_unix_nano), (10, 20));

        let Some(Data::Gauge(age)) = &metrics[1].data else {
            panic!("a gauge: {:?}", metrics[1]);
        };
        assert_eq!(metrics[1].unit, "s");
        assert_eq!(
            age.data_points[0].value,
            Some(number_data_point::Value::AsDouble(1.5))
        );

        let Some(Data::Histogram(wait)) = &metrics[2].data else {
            panic!("a histogram: {:?}", metrics[2]);
        };
        let point = &wait.data_points[0];
        assert_eq!(
            point.attributes.iter().map(string).collect::<Vec<_>>(),
            [("tool", "a \"quoted\" tool")]
        );
        assert_eq!(point.explicit_bounds, [0.005, 2.5]);
        assert_eq!(point.bucket_counts, [1, 2, 1], "per bucket, not cumulative");
        assert_eq!((point.count, point.sum), (4, Some(9.25)));
    }
}
