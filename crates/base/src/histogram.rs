//! Prometheus histograms of durations, lock-free, and the text format's label escaping:
//! what the server's `/metrics` page and each upstream's latency are written with.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the queue-wait and attempt-duration buckets: from the few
/// milliseconds an in-process tool takes to the hour a command tool may run.
const DURATION_BUCKETS: [f64; 16] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// A Prometheus histogram over [`DURATION_BUCKETS`], lock-free.
pub struct Histogram {
    /// Observations per bucket (not cumulative; the last one is `+Inf`).
    buckets: [AtomicU64; DURATION_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: Default::default(),
            sum_micros: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    pub fn observe(&self, value: Duration) {
        let seconds = value.as_secs_f64();
        let index = DURATION_BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(DURATION_BUCKETS.len());
        self.buckets[index].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(value.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// The `_bucket`, `_sum` and `_count` lines of one series, labelled `key="value"`
    /// (`value` already escaped, [`label_value`]).
    pub fn render(&self, out: &mut String, name: &str, key: &str, value: &str) {
        let mut cumulative = 0;
        for (index, count) in self.buckets.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            let bound = DURATION_BUCKETS
                .get(index)
                .map_or_else(|| "+Inf".to_owned(), |bound| bound.to_string());
            let _ = writeln!(
                out,
                "{name}_bucket{{{key}=\"{value}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{{{key}=\"{value}\"}} {sum}");
        let _ = writeln!(out, "{name}_count{{{key}=\"{value}\"}} {cumulative}");
    }

    /// How many observations there are.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The upper bound (seconds) of the bucket holding the `q` quantile, as Prometheus'
    /// `histogram_quantile` would bound it: `None` without observations, infinity when
    /// it lies past the last bound.
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0) as u64;
        let mut cumulative = 0;
        for (index, count) in self.buckets.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            if cumulative >= rank {
                return Some(
                    DURATION_BUCKETS
                        .get(index)
                        .copied()
                        .unwrap_or(f64::INFINITY),
                );
            }
        }
        Some(f64::INFINITY)
    }
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
/// (Tool names come from the configuration; this keeps the page parseable whatever
/// they contain.)
pub fn label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quantile_is_bounded_by_its_bucket() {
        let latency = Histogram::default();
        assert_eq!(latency.quantile_bound(0.5), None);
        for millis in [3, 4, 40, 2000] {
            latency.observe(Duration::from_millis(millis));
        }
        assert_eq!(latency.count(), 4);
        assert_eq!(latency.quantile_bound(0.5), Some(0.005));
        assert_eq!(latency.quantile_bound(0.75), Some(0.05));
        assert_eq!(latency.quantile_bound(0.99), Some(2.5));
        latency.observe(Duration::from_secs(7200));
        assert_eq!(latency.quantile_bound(1.0), Some(f64::INFINITY));
    }
}
