//! A discarding OTLP/HTTP collector for `benches/telemetry.sh`.
//!
//! ```text
//! otlpsink [SECONDS]
//! ```
//!
//! Listens on an ephemeral 127.0.0.1 port (printed as the first line of stdout), reads
//! each POST body whole and answers `200` with an empty protobuf body (an
//! `ExportTraceServiceResponse` with no partial success is zero bytes), keeping nothing.
//! Ends after SECONDS (default 3600). On exit it prints one JSON line with the requests
//! and body bytes it took.
//!
//! Why not the Python receiver of the tracing tests: on a 2-core box the collector shares
//! the CPU with the server it measures, and a Python HTTP server parsing tens of
//! thousands of spans a second takes a large part of it, so "telemetry on" measured the
//! collector. This sink costs a read and a write per batch. Built by
//! `cargo bench --no-run --bench otlpsink`; not part of `cargo test`.

use std::time::{Duration, Instant};

fn main() {
    let lifetime = std::env::args()
        .nth(1)
        .and_then(|seconds| seconds.parse::<u64>().ok())
        .map_or(Duration::from_secs(3600), Duration::from_secs);
    let server = match tiny_http::Server::http("127.0.0.1:0") {
        Ok(server) => server,
        Err(error) => {
            eprintln!("otlpsink: cannot listen: {error}");
            std::process::exit(1);
        }
    };
    let port = server.server_addr().to_ip().map_or(0, |addr| addr.port());
    println!("{port}");
    let deadline = Instant::now() + lifetime;
    let (mut requests, mut bytes) = (0u64, 0u64);
    let mut body = Vec::with_capacity(1 << 20);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(Some(mut request)) = server.recv_timeout(left) else {
            continue;
        };
        body.clear();
        if request.as_reader().read_to_end(&mut body).is_ok() {
            requests += 1;
            bytes += body.len() as u64;
        }
        let header = tiny_http::Header::from_bytes("Content-Type", "application/x-protobuf");
        let mut response = tiny_http::Response::empty(200);
        if let Ok(header) = header {
            response.add_header(header);
        }
        let _ = request.respond(response);
    }
    println!("{{\"requests\":{requests},\"bytes\":{bytes}}}");
}
