//! `mcp-taskd stdio`: this process serves one host over stdin/stdout, on the same
//! engine as `serve` (store, workers, upkeep, admin socket), so its tasks are durable
//! exactly as over HTTP and the next launch on the data dir resumes them.
//!
//! Both eras, chosen per message as the stdio binding's backward-compatibility section
//! describes: a message whose `_meta` carries the modern protocol version is served
//! statelessly (2026-07-28); an `initialize` without it opens the connection's legacy
//! session ([`crate::legacy::WireSession`]), which then serves the messages that lack
//! modern `_meta`. Each request runs on its own thread, so a long inline call never
//! holds up `ping` or `tasks/get`; answers are written whole, one line each.
//!
//! Identity: the host is whoever launched the process. Its tasks are bound to the
//! configured endpoint's anonymous identity, the one an unauthenticated HTTP client
//! has when no tokens are configured — so `serve` on the same data dir, without
//! tokens, shows the same tasks to HTTP clients.
//!
//! End of stdin, SIGTERM, SIGINT or SIGHUP stop it like `serve`'s SIGTERM: running
//! attempts get their grace period, then go back to the queue uncounted.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{error_message, read_line, request_id, Line, StdioError, StdoutWire};
use crate::config::Config;
use crate::handlers::{Emitter, Listen, Reply, Request, Service};
use crate::legacy::{era, Legacy, WireSession};
use crate::metrics::Metrics;
use crate::server::{Engine, ServeError};
use crate::transport::listen::{acknowledgement, final_answer, render_frame};
use crate::transport::nesting::nesting_exceeds;
use crate::transport::Wire;
use taskd_notifications::Delivery;
use taskd_protocol::envelope::META_PROTOCOL_VERSION;
use taskd_protocol::Identity;
use taskd_protocol::{Envelope, RequestMeta, RpcError, METHODS, SUPPORTED_VERSIONS};
use taskd_sqlite::OpenError;

/// How long a stop waits for requests still being answered.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// How often a listen stream checks whether it was cancelled.
const LISTEN_POLL: Duration = Duration::from_millis(250);

/// Serves stdin/stdout until end of input or a termination signal.
pub fn serve(config: Config) -> Result<(), StdioError> {
    let mut engine = Engine::start(&config).map_err(|error| match error {
        ServeError::Store(OpenError::InUse { data_dir }) => StdioError::InUse {
            data_dir,
            url: connect_hint(&config),
        },
        other => StdioError::Start(other),
    })?;
    let legacy = Legacy::start(
        Arc::clone(&engine.service),
        Arc::clone(&engine.hub),
        config.sessions.clone(),
        Arc::clone(&engine.metrics),
    );
    let identity = Identity::anonymous(&config.server.endpoint);
    let connection = Arc::new(Connection {
        service: Arc::clone(&engine.service),
        legacy,
        metrics: Arc::clone(&engine.metrics),
        identity,
        wire: Arc::new(StdoutWire::new()),
        session: Mutex::new(None),
        modern: Mutex::new(HashMap::new()),
        busy: Arc::new(AtomicUsize::new(0)),
        max_json_depth: config.limits.max_json_depth,
        listen_lifetime: Duration::from_millis(config.notifications.max_stream_lifetime_ms),
    });
    log::info!("serving over stdio");

    let (stop, stopped) = crossbeam_channel::bounded::<&'static str>(2);
    let reading = Arc::clone(&connection);
    let end_of_input = stop.clone();
    let limit = config.limits.max_body_bytes;
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let outcome = reading.read_all(limit);
            if let Err(error) = outcome {
                log::warn!("reading stdin: {error}");
            }
            let _ = end_of_input.send("end of input");
        })
        .map_err(StdioError::Threads)?;
    let signals = {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
            .map_err(StdioError::Threads)?
    };
    let handle = signals.handle();
    let mut signals = signals;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                let _ = stop.send("signal");
            }
        })
        .map_err(StdioError::Threads)?;

    let why = stopped.recv().unwrap_or("signal");
    log::info!("shutting down ({why})");
    handle.close();
    engine.stop_admitting();
    engine.hub.close_all();
    connection.drain(DRAIN_LIMIT);
    drop(connection);
    engine.finish();
    Ok(())
}

/// The URL a `--connect` would use for the server this configuration describes.
fn connect_hint(config: &Config) -> String {
    let mut address = config.server.listen;
    if address.ip().is_unspecified() {
        address = SocketAddr::from(([127, 0, 0, 1], address.port()));
    }
    format!("http://{address}{}", config.server.endpoint)
}

/// The one connection: what answering its messages needs.
struct Connection {
    service: Arc<Service>,
    legacy: Arc<Legacy>,
    metrics: Arc<Metrics>,
    identity: Identity,
    wire: Arc<dyn Wire>,
    /// The legacy session, once `initialize` opened it.
    session: Mutex<Option<Arc<WireSession>>>,
    /// Modern requests being answered, by the JSON text of their id: set to cancel.
    modern: Mutex<HashMap<String, Arc<AtomicBool>>>,
    /// Requests being answered (and listen streams open).
    busy: Arc<AtomicUsize>,
    max_json_depth: usize,
    listen_lifetime: Duration,
}

impl Connection {
    fn read_all(self: &Arc<Self>, limit: usize) -> std::io::Result<()> {
        let mut input = std::io::stdin().lock();
        loop {
            match read_line(&mut input, limit)? {
                Line::End => return Ok(()),
                Line::TooLong => {
                    let error = RpcError::parse_error(format!("message longer than {limit} bytes"));
                    self.wire.send(&error_message(&Value::Null, &error));
                }
                Line::Message(bytes) => self.dispatch(&bytes),
            }
        }
    }

    /// Routes one line: to the modern path, the legacy session, or `initialize`.
    fn dispatch(self: &Arc<Self>, bytes: &[u8]) {
        if nesting_exceeds(bytes, self.max_json_depth) {
            let error = RpcError::parse_error(format!(
                "JSON nesting deeper than {} levels",
                self.max_json_depth
            ));
            self.wire.send(&error_message(&Value::Null, &error));
            return;
        }
        let message: Value = match serde_json::from_slice(bytes) {
            Ok(message) => message,
            Err(error) => {
                let error = RpcError::parse_error(error);
                self.wire.send(&error_message(&Value::Null, &error));
                return;
            }
        };
        let modern = message
            .get("params")
            .and_then(|params| params.get("_meta"))
            .is_some_and(|meta| meta.get(META_PROTOCOL_VERSION).is_some());
        if modern {
            return self.modern(message);
        }
        let session = self.lock_session().clone();
        if let Some(session) = session {
            if request_id(&message).is_none() {
                // Notifications and the client's answers are quick: served in order.
                self.legacy.serve_on_wire(&session, message, &self.wire);
                return;
            }
            let connection = Arc::clone(self);
            self.spawn(move || {
                connection
                    .legacy
                    .serve_on_wire(&session, message, &connection.wire);
            });
            return;
        }
        let is_initialize = message.get("method").and_then(Value::as_str) == Some("initialize");
        if is_initialize && request_id(&message).is_some() {
            // Opened before the next line is read, so that line finds the session.
            if let Ok(envelope) = Envelope::parse(message) {
                let opened =
                    self.legacy
                        .open_on_wire(&self.identity, &envelope, Arc::clone(&self.wire));
                *self.lock_session() = opened.map(Arc::new);
            }
            return;
        }
        if let Some(id) = request_id(&message) {
            let error = RpcError::invalid_request(format!(
                "Send 2026-07-28 requests with params._meta[\"{META_PROTOCOL_VERSION}\"] \
                 (supported: {}), or initialize first (session revisions {})",
                SUPPORTED_VERSIONS.join(", "),
                era::LEGACY_VERSIONS.join(", ")
            ));
            self.wire.send(&error_message(id, &error));
        }
    }

    fn lock_session(&self) -> std::sync::MutexGuard<'_, Option<Arc<WireSession>>> {
        self.session.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_modern(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<AtomicBool>>> {
        self.modern.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `work` on its own thread, counted as busy while it runs.
    fn spawn(&self, work: impl FnOnce() + Send + 'static) {
        let busy = Arc::clone(&self.busy);
        busy.fetch_add(1, Ordering::AcqRel);
        let spawned = std::thread::Builder::new()
            .name("stdio-request".into())
            .spawn(move || {
                work();
                busy.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            log::error!("could not start a request thread");
            self.busy.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// A 2026-07-28 message: the checks the HTTP transport makes on the body (there are
    /// no headers on stdio), then the request on its own thread.
    fn modern(self: &Arc<Self>, message: Value) {
        let envelope = match Envelope::parse(message) {
            Ok(envelope) => envelope,
            Err(rejected) => {
                let (id, error) = *rejected;
                self.wire.send(&error_message(&id, &error));
                return;
            }
        };
        let Some(id) = envelope.id.clone() else {
            if envelope.method == "notifications/cancelled" {
                if let Some(cancelled) = envelope.params.get("requestId") {
                    if let Some(flag) = self.lock_modern().get(&cancelled.to_string()) {
                        flag.store(true, Ordering::Release);
                    }
                }
            }
            return;
        };
        let meta = match check(&envelope) {
            Ok(meta) => meta,
            Err(error) => {
                self.wire.send(&error_message(&id, &error));
                return;
            }
        };
        let cancelled = Arc::new(AtomicBool::new(false));
        self.lock_modern()
            .insert(id.to_string(), Arc::clone(&cancelled));
        let connection = Arc::clone(self);
        self.busy.fetch_add(1, Ordering::AcqRel);
        let spawned = std::thread::Builder::new()
            .name("stdio-request".into())
            .spawn(move || connection.answer(envelope, meta, id, cancelled));
        if spawned.is_err() {
            log::error!("could not start a request thread");
            self.busy.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Answers a modern request (the busy count is released when its answer is out).
    fn answer(
        self: Arc<Self>,
        envelope: Envelope,
        meta: RequestMeta,
        id: Value,
        cancelled: Arc<AtomicBool>,
    ) {
        let mut emitter = WireEmitter {
            wire: Arc::clone(&self.wire),
            cancelled: Arc::clone(&cancelled),
        };
        let reply = self.service.handle(
            &Request {
                identity: &self.identity,
                // The host over stdio is the local user: scopes are an HTTP notion.
                scopes: &taskd_protocol::Scopes::Unrestricted,
                envelope: &envelope,
                meta: &meta,
            },
            &mut emitter,
        );
        let method = envelope.method;
        match reply {
            Reply::Result(result) => self.finish(&method, id, Ok(result)),
            Reply::Error(error) => self.finish(&method, id, Err(error)),
            Reply::Later(later) => later.then(move |result| self.finish(&method, id, result)),
            Reply::Listen(listen) => {
                self.metrics.record_request(&method, true);
                self.listen(&listen, &cancelled);
                self.service.hub.unsubscribe(listen.subscription.key);
                self.settle(&id);
            }
        }
    }

    /// Writes a modern request's answer, unless the client cancelled it.
    fn finish(&self, method: &str, id: Value, result: Result<Value, RpcError>) {
        self.metrics.record_request(method, result.is_ok());
        let cancelled = self
            .lock_modern()
            .get(&id.to_string())
            .is_some_and(|flag| flag.load(Ordering::Acquire));
        if !cancelled {
            let message = match result {
                Ok(result) => {
                    serde_json::json!({ "jsonrpc": "2.0", "id": id, "result": result })
                }
                Err(error) => error_message(&id, &error),
            };
            self.wire.send(&message);
        }
        self.settle(&id);
    }

    fn settle(&self, id: &Value) {
        self.lock_modern().remove(&id.to_string());
        self.busy.fetch_sub(1, Ordering::AcqRel);
    }

    /// A `subscriptions/listen` stream on the shared channel: the acknowledgement, the
    /// subscription's notifications, and the final answer when the server ends it (none
    /// once the client cancelled it).
    fn listen(&self, listen: &Listen, cancelled: &AtomicBool) {
        if !self.wire.send(&acknowledgement(listen)) {
            return;
        }
        let mut finished_tasks = HashSet::new();
        let opened = Instant::now();
        loop {
            if cancelled.load(Ordering::Acquire) {
                return;
            }
            if opened.elapsed() >= self.listen_lifetime {
                break;
            }
            match listen.subscription.mailbox.wait(LISTEN_POLL) {
                Delivery::Frames(frames) => {
                    for frame in frames {
                        let rendered =
                            render_frame(listen, &self.service, frame, &mut finished_tasks);
                        if let Some(message) = rendered {
                            if !self.wire.send(&message) {
                                return;
                            }
                        }
                    }
                }
                Delivery::Idle => {}
                // Nothing revokes the local host's streams; ending is still right.
                Delivery::Close | Delivery::Revoked => break,
            }
        }
        self.wire.send(&final_answer(listen));
    }

    /// At a stop: modern inline calls are told to stop, the legacy session closes, and
    /// answers still being written get up to `limit`.
    fn drain(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.busy.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(session) = self.lock_session().take() {
            self.legacy.close_on_wire(&session);
        }
    }
}

/// Checks a modern request's `_meta`, version and method (what the HTTP transport
/// checks after its header cross-checks).
fn check(envelope: &Envelope) -> Result<RequestMeta, RpcError> {
    let meta = RequestMeta::parse(&envelope.params)?;
    if !SUPPORTED_VERSIONS.contains(&meta.protocol_version.as_str()) {
        return Err(RpcError::unsupported_version(
            &meta.protocol_version,
            SUPPORTED_VERSIONS,
        ));
    }
    if !METHODS.contains(&envelope.method.as_str()) {
        return Err(RpcError::method_not_found(&envelope.method));
    }
    Ok(meta)
}

/// A modern request's notifications (progress, log messages), written as lines.
struct WireEmitter {
    wire: Arc<dyn Wire>,
    cancelled: Arc<AtomicBool>,
}

impl Emitter for WireEmitter {
    fn notify(&mut self, method: &str, params: Value) {
        if !self.cancelled() {
            self.wire
                .send(&serde_json::json!({ "jsonrpc": "2.0", "method": method, "params": params }));
        }
    }

    fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }
}
