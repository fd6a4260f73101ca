//! `Type=notify` as systemd sees it: the test plays the service manager, listening on
//! the datagram socket it names in `NOTIFY_SOCKET`, with a short `WATCHDOG_USEC`.

use std::io::Write;
use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use crate::common::{Server, CONFORMANCE};

/// Watchdog period handed to the server: it pings every quarter and calls a loop stuck
/// after half of it.
const WATCHDOG_USEC: &str = "1000000";

struct Manager {
    socket: UnixDatagram,
    _dir: tempfile::TempDir,
}

impl Manager {
    fn start(config: &str) -> (Manager, Server) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
        let env = [
            ("NOTIFY_SOCKET", path.as_os_str()),
            ("WATCHDOG_USEC", WATCHDOG_USEC.as_ref()),
        ];
        let server = Server::start_in_with_env(&dir.path().join("server"), config, &env);
        (Manager { socket, _dir: dir }, server)
    }

    /// The next notification within `limit`, as its `KEY=value` lines.
    fn next(&self, limit: Duration) -> Option<Vec<String>> {
        self.socket.set_read_timeout(Some(limit)).ok()?;
        let mut buffer = [0u8; 4096];
        let length = self.socket.recv(&mut buffer).ok()?;
        let text = String::from_utf8_lossy(&buffer[..length]).into_owned();
        Some(text.lines().map(str::to_owned).collect())
    }

    /// Reads notifications until one has a line starting with `prefix`; returns it.
    fn wait_for(&self, prefix: &str, limit: Duration) -> Option<Vec<String>> {
        let deadline = Instant::now() + limit;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let message = self.next(left)?;
            if message.iter().any(|line| line.starts_with(prefix)) {
                return Some(message);
            }
        }
        None
    }
}

fn line_with<'a>(message: &'a [String], prefix: &str) -> Option<&'a str> {
    message
        .iter()
        .find_map(|line| line.strip_prefix(prefix))
        .map(|rest| rest.trim())
}

#[test]
fn ready_status_watchdog_and_stopping_reach_the_service_manager() {
    let (manager, mut server) = Manager::start(CONFORMANCE);
    let ready = manager
        .next(Duration::from_secs(10))
        .expect("a first notification");
    assert!(ready.iter().any(|line| line == "READY=1"), "{ready:?}");
    assert_eq!(
        line_with(&ready, "STATUS="),
        Some(format!("serving on {}; 0 running attempt(s), 0 queued", server.addr).as_str())
    );
    let ping = manager
        .wait_for("WATCHDOG=1", Duration::from_secs(10))
        .expect("watchdog pings while idle");
    assert!(line_with(&ping, "STATUS=").is_some_and(|s| s.starts_with("serving on")));

    assert!(server.terminate(Duration::from_secs(20)), "server exits");
    let stopping = manager
        .wait_for("STOPPING=1", Duration::from_secs(5))
        .expect("STOPPING=1 once the drain starts");
    assert!(line_with(&stopping, "STATUS=").is_some_and(|s| s.starts_with("draining")));
}

/// A SIGTERM that arrives the moment the server says it is ready starts the drain: the
/// signal handlers are in place before `READY=1` (they once came after it, and a stop
/// sent in between ended the process on the spot, without a drain).
#[test]
fn a_stop_right_after_ready_drains_rather_than_kills() {
    let (manager, mut server) = Manager::start(CONFORMANCE);
    manager
        .wait_for("READY=1", Duration::from_secs(10))
        .expect("READY=1");
    assert!(server.terminate(Duration::from_secs(20)), "server exits");
    manager
        .wait_for("STOPPING=1", Duration::from_secs(5))
        .expect("STOPPING=1: the stop went through the drain");
}

/// A client that never sends its body holds only its own connection: the body is read
/// before any handler runs (tiny_http patch 9), so the watchdog keeps being fed and
/// other connections keep being answered. (That the pings stop when every connection
/// thread *is* stuck in a handler is pinned by the `liveness` unit tests: no client
/// can bring it about any more.)
#[test]
fn a_client_that_never_sends_its_body_stalls_no_request_thread() {
    let (manager, server) = Manager::start(CONFORMANCE);
    manager
        .wait_for("WATCHDOG=1", Duration::from_secs(10))
        .expect("pings while healthy");

    // Before the connection bounds, this held a request thread in the body read.
    let mut stuck = TcpStream::connect(server.addr).expect("connect");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{",
        server.addr
    );
    stuck.write_all(head.as_bytes()).expect("send headers");
    // Four times the stall limit: pings go on, and no stall is reported.
    let mut pings = 0;
    let quiet_until = Instant::now() + Duration::from_secs(2);
    while let Some(left) = quiet_until.checked_duration_since(Instant::now()) {
        if let Some(message) = manager.next(left) {
            assert!(
                !message
                    .iter()
                    .any(|line| line.starts_with("STATUS=stalled")),
                "{message:?}"
            );
            pings += usize::from(message.iter().any(|line| line == "WATCHDOG=1"));
        }
    }
    assert!(
        pings >= 2,
        "pings went on while the body was missing ({pings})"
    );
    assert_eq!(
        server.get("/healthz").status,
        200,
        "other connections are answered"
    );
    drop(stuck);
}

#[test]
fn an_inline_tool_run_is_not_taken_for_a_stuck_request_thread() {
    let (manager, server) = Manager::start(CONFORMANCE);
    manager
        .wait_for("WATCHDOG=1", Duration::from_secs(10))
        .expect("pings while healthy");
    // The only connection thread busy runs a 2 s inline call: four times the stall limit.
    let call = std::thread::scope(|scope| {
        let call = scope.spawn(|| {
            server.call_tool(
                "slow_compute",
                serde_json::json!({"seconds": 2}),
                serde_json::json!({}),
            )
        });
        let mut pings = 0;
        while !call.is_finished() {
            if let Some(message) = manager.next(Duration::from_millis(100)) {
                assert!(
                    !message
                        .iter()
                        .any(|line| line.starts_with("STATUS=stalled")),
                    "{message:?}"
                );
                pings += usize::from(message.iter().any(|line| line == "WATCHDOG=1"));
            }
        }
        assert!(pings >= 2, "pings went on during the call ({pings})");
        call.join().expect("the call")
    });
    assert_eq!(call.status, 200);
    assert_eq!(call.result()["resultType"], "complete");
}

/// `systemctl reload` under `Type=notify`: the server says `RELOADING=1` (with the
/// `MONOTONIC_USEC=` newer systemd requires) when a reload starts, and `READY=1` when it
/// is over, whether the file was applied or refused.
#[test]
fn a_reload_is_bracketed_by_reloading_and_ready() {
    let (manager, server) = Manager::start(CONFORMANCE);
    manager
        .wait_for("READY=1", Duration::from_secs(10))
        .expect("READY=1");
    for (config, status) in [
        ("[builtin]\nsets = [\"demo\"]\n", "reloaded"),
        ("[limits]\npage_size = \"many\"\n", "reload refused"),
    ] {
        server.rewrite_config(config);
        server.signal("HUP");
        let reloading = manager
            .wait_for("RELOADING=1", Duration::from_secs(10))
            .expect("RELOADING=1");
        let usec = line_with(&reloading, "MONOTONIC_USEC=").expect("MONOTONIC_USEC=");
        assert!(usec.parse::<u64>().is_ok_and(|usec| usec > 0), "{usec}");
        let ready = manager
            .wait_for("READY=1", Duration::from_secs(10))
            .expect("READY=1 after the reload");
        let said = line_with(&ready, "STATUS=").unwrap_or_default();
        assert!(said.starts_with(status), "{said}");
    }
}
