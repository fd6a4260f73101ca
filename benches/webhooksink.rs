//! A fast webhook receiver for `benches/webhooks.sh`: answers every POST `204` at once
//! (no verification: the tests verify signatures with the reference library; this one
//! only counts) and records, for each delivery, how long after its event it arrived
//! (its arrival minus the body's `timestamp`, the task change's time: one box, one
//! clock).
//!
//! ```text
//! webhooksink PORT [THREADS]
//! ```
//!
//! `GET /stats` answers `{"count", "distinct", "p50_ms", "p99_ms", "max_ms",
//! "last_arrival_ms"}` (distinct: by `webhook-id`); `POST /reset` forgets everything.
//! Built by `cargo bench --no-run --bench webhooksink`; not part of `cargo test`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

#[derive(Default)]
struct Seen {
    lags_ms: Vec<f64>,
    ids: HashSet<String>,
    last_arrival_ms: f64,
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let port: u16 = args.first().and_then(|p| p.parse().ok()).unwrap_or(0);
    let threads: usize = args.get(1).and_then(|t| t.parse().ok()).unwrap_or(4);
    let server = Arc::new(tiny_http::Server::http(("127.0.0.1", port)).expect("bind"));
    println!("listening on {}", server.server_addr());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (server, seen) = (Arc::clone(&server), Arc::clone(&seen));
            std::thread::spawn(move || {
                for mut request in server.incoming_requests() {
                    let arrived = now_ms();
                    let mut body = Vec::new();
                    let _ = request.as_reader().read_to_end(&mut body);
                    let path = request.url().to_owned();
                    let answer = if path == "/stats" {
                        let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                        let mut lags = seen.lags_ms.clone();
                        lags.sort_by(f64::total_cmp);
                        let stats = json!({
                            "count": lags.len(),
                            "distinct": seen.ids.len(),
                            "p50_ms": quantile(&lags, 0.5),
                            "p99_ms": quantile(&lags, 0.99),
                            "max_ms": lags.last().copied().unwrap_or(0.0),
                            "last_arrival_ms": seen.last_arrival_ms,
                        });
                        tiny_http::Response::from_string(stats.to_string()).with_status_code(200)
                    } else if path == "/reset" {
                        *seen.lock().unwrap_or_else(|p| p.into_inner()) = Seen::default();
                        tiny_http::Response::from_string("").with_status_code(204)
                    } else {
                        let event: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let at = event["timestamp"]
                            .as_str()
                            .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok())
                            .map(|t| (t.unix_timestamp_nanos() / 1_000) as f64 / 1000.0);
                        let id = request
                            .headers()
                            .iter()
                            .find(|h| h.field.equiv("webhook-id"))
                            .map(|h| h.value.as_str().to_owned())
                            .unwrap_or_default();
                        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                        if let Some(at) = at {
                            seen.lags_ms.push(arrived - at);
                        }
                        seen.ids.insert(id);
                        seen.last_arrival_ms = arrived;
                        tiny_http::Response::from_string("").with_status_code(204)
                    };
                    let _ = request.respond(answer);
                }
            })
        })
        .collect();
    for worker in workers {
        let _ = worker.join();
    }
}
