// Over 600 lines: the conformance suite pins the order of the checks, kept in one place.
//! The HTTP frontend: tiny_http in, validated MCP requests out.
//!
//! Owns everything that happens before a handler runs — body limits, DNS-rebinding
//! protection, authentication, the MCP header/body cross-checks in the order the
//! conformance suite pins (fixtures.md §1.8) — and writing the answer back: compact JSON,
//! or an SSE stream when a request emits notifications before its result or opens a
//! `subscriptions/listen` stream.

mod cors;
mod era;
pub(crate) mod headers;
pub mod limits;
pub(crate) mod listen;
pub(crate) mod nesting;
mod peer;
pub(crate) mod sse;

use std::collections::HashMap;
use std::io::{Cursor, Read};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tiny_http::{Header, Method, Response, StatusCode};

use crate::handlers::{Emitter, Listen, Reply, Request, Service};
use crate::live::Live;
use crate::metrics::{Metrics, Snapshot};
use crate::ops::reload::Revoke;
pub use era::{Inbound, SessionEra, Wire};
use headers::header;
use listen::run_listen;
use nesting::nesting_exceeds;
use sse::SseWriter;
use taskd_auth::oauth::Metadata;
use taskd_auth::{Authenticator, Caller, Credential, Refusal};
use taskd_notifications::Hub;
use taskd_protocol::envelope::{Envelope, RequestMeta};
use taskd_protocol::headers::{check_param_headers, decode_header_value};
use taskd_protocol::Identity;
use taskd_protocol::{RpcError, TraceContext, METHODS, SUPPORTED_VERSIONS};

pub struct Frontend {
    pub service: Arc<Service>,
    pub hub: Arc<Hub>,
    /// Tokens, allowed hosts and origins, and limits in force (swapped by a reload).
    pub live: Arc<Live>,
    pub endpoint: String,
    /// Set when shutdown starts: `/healthz` turns 503 (requests are still answered).
    pub draining: AtomicBool,
    /// Listen streams still writing (each runs on its own thread).
    pub open_streams: Arc<AtomicUsize>,
    /// What each open listen stream was authenticated with, by its subscription key,
    /// so that a reload revoking a token ends its streams ([`Frontend::revoke`]).
    pub stream_credentials: Arc<Mutex<HashMap<u64, (Credential, Identity)>>>,
    /// Requests whose handler is running on their connection's thread.
    pub handling: AtomicUsize,
    pub metrics: Arc<Metrics>,
    /// Serves initialize-based (2025-03-26 to 2025-11-25) sessions on the same endpoint.
    pub legacy: Arc<dyn SessionEra>,
    /// Whether the listener can accept connections (`/healthz` fails when not).
    pub listener: Arc<tiny_http::ListenerHealth>,
    /// The operator web page, when `[dashboard]` enables it.
    /// The upstream MCP servers, whose state `/healthz` shows (an unwell upstream
    /// fails its own tools only, not the server's health).
    pub upstreams: Arc<taskd_upstreams::Upstreams>,
    pub dashboard: Option<Arc<crate::dashboard::Dashboard>>,
}

type Body = Cursor<Vec<u8>>;

/// A registry's lock: each mutation is one insert or remove, so a poisoned one is whole.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn base_headers(content_type: &str) -> Vec<Header> {
    [
        ("Content-Type", content_type),
        ("Cache-Control", "no-store"),
    ]
    .iter()
    .filter_map(|(name, value)| Header::from_bytes(name.as_bytes(), value.as_bytes()).ok())
    .collect()
}

fn json_response(status: u16, body: &Value) -> Response<Body> {
    let bytes = body.to_string().into_bytes();
    let length = bytes.len();
    Response::new(
        StatusCode(status),
        base_headers("application/json"),
        Cursor::new(bytes),
        Some(length),
        None,
    )
}

fn error_body(id: &Value, error: &RpcError) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": error.to_json() })
}

/// The response message carrying `result`, which is moved in, not copied.
fn result_body(id: Value, result: Value) -> Value {
    let mut message = serde_json::Map::with_capacity(3);
    message.insert("jsonrpc".into(), Value::from("2.0"));
    message.insert("id".into(), id);
    message.insert("result".into(), result);
    Value::Object(message)
}

fn error_response(id: &Value, error: &RpcError) -> Response<Body> {
    let response = json_response(error.http_status, &error_body(id, error));
    match error.retry_after_s {
        Some(seconds) => with_header(response, "Retry-After", &seconds.to_string()),
        None => response,
    }
}

/// The answer to a request whose credential was refused: 401 with a challenge that
/// names the protected-resource metadata (when OAuth is advertised) and the scopes for
/// basic use, or 503 when the authorization server could not be asked.
fn refused(auth: &Authenticator, refusal: &Refusal) -> Response<Body> {
    let error = match refusal {
        Refusal::Unavailable => {
            let error = RpcError::unavailable(
                "the authorization server could not be reached to check the token",
                5,
            );
            return error_response(&Value::Null, &error);
        }
        Refusal::Missing => None,
        Refusal::Invalid(why) => Some(("invalid_token", *why)),
    };
    let message = match error {
        Some((_, why)) => format!("Unauthorized: {why}"),
        None => "Unauthorized: a valid bearer token is required".to_owned(),
    };
    let rpc = RpcError::invalid_request(message).with_status(401);
    let challenge = match &auth.oauth {
        Some(oauth) => oauth.metadata.challenge(error, &[]),
        None => "Bearer".to_owned(),
    };
    with_header(
        error_response(&Value::Null, &rpc),
        "WWW-Authenticate",
        &challenge,
    )
}

/// The protected-resource metadata document (RFC 9728): public, cacheable, readable by
/// any origin (browser-based clients discover it too).
fn metadata_page(method: &Method, document: &str) -> Response<Body> {
    if !matches!(method, Method::Get | Method::Head) {
        return with_header(
            json_response(405, &json!({"error": "method not allowed"})),
            "Allow",
            "GET, OPTIONS",
        );
    }
    let bytes = document.as_bytes().to_vec();
    let length = bytes.len();
    let headers = [
        ("Content-Type", "application/json"),
        ("Cache-Control", "public, max-age=3600"),
        ("Access-Control-Allow-Origin", "*"),
    ]
    .iter()
    .filter_map(|(name, value)| Header::from_bytes(name.as_bytes(), value.as_bytes()).ok())
    .collect();
    Response::new(
        StatusCode(200),
        headers,
        Cursor::new(bytes),
        Some(length),
        None,
    )
}

fn with_header(mut response: Response<Body>, name: &str, value: &str) -> Response<Body> {
    if let Ok(header) = Header::from_bytes(name.as_bytes(), value.as_bytes()) {
        response.add_header(header);
    }
    response
}

/// The W3C trace context of the request's `traceparent` and `tracestate` headers.
fn header_trace(request: &tiny_http::Request) -> Option<TraceContext> {
    TraceContext::parse(
        header(request, "traceparent")?,
        header(request, "tracestate"),
    )
}

/// Puts the headers' trace context into a legacy message's `_meta` when it carries none
/// there, so that the session era reads one place for both (`_meta` wins, as in the
/// 2026 era). A message whose `params` or `_meta` is not an object is left as it is:
/// its own checks answer it.
fn adopt_header_trace(message: &mut Value, trace: &TraceContext) {
    let Some(Value::Object(params)) = message.get_mut("params") else {
        return;
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else {
        return;
    };
    if meta.contains_key("traceparent") {
        return;
    }
    meta.insert("traceparent".into(), Value::from(trace.traceparent()));
    if let Some(state) = trace.tracestate() {
        meta.insert("tracestate".into(), Value::from(state));
    }
}

/// Where the body value named by `Mcp-Name` lives, per method.
fn name_source(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// The first answer a request gets: either a direct response or a validated request.
enum Admitted {
    Respond(Response<Body>),
    /// A dashboard answer: not an MCP request, so not counted as one refused.
    Page(Response<Body>),
    Mcp(Box<AdmittedRequest>),
    /// A request of the legacy era (session, GET, DELETE, or a plain `initialize`).
    Legacy(Box<Inbound>),
}

struct AdmittedRequest {
    caller: Caller,
    /// Names the protected-resource metadata in a `403 insufficient_scope` challenge.
    challenger: Option<Arc<Metadata>>,
    envelope: Envelope,
    meta: RequestMeta,
}

impl Frontend {
    /// Answers `server`'s requests, each on the thread of the connection it came from
    /// (tiny_http patch 13): that thread reads the request, runs the handler and writes
    /// the answer, so a request wakes one thread, not three. A connection's thread is
    /// its own, so a slow client holds nothing but its own connection (patch 9 bounds
    /// its reads and writes); answers produced elsewhere (task creations answered after
    /// their commit) are written by whichever thread produces them.
    pub fn serve(self: &Arc<Self>, server: &tiny_http::Server) {
        let frontend = Arc::clone(self);
        server.serve(Arc::new(move |request| frontend.serve_one(request)));
    }

    fn serve_one(self: &Arc<Self>, request: tiny_http::Request) {
        thread_local! {
            /// This connection thread's heartbeat: registered at its first request,
            /// dropped when the thread ends.
            static HEARTBEAT: taskd_base::liveness::Heartbeat =
                taskd_base::liveness::LIVENESS.register_elastic("http");
        }
        self.handling.fetch_add(1, Ordering::AcqRel);
        HEARTBEAT.with(|heartbeat| {
            let _working = heartbeat.working();
            // Also while the server drains: a request on a connection already open is
            // answered (with `Connection: close`), and carries its id like any other.
            self.handle(request);
        });
        self.handling.fetch_sub(1, Ordering::AcqRel);
    }

    fn handle(self: &Arc<Self>, mut request: tiny_http::Request) {
        let admitted = self.admit(&mut request);
        match admitted {
            Admitted::Legacy(inbound) => Arc::clone(&self.legacy).serve(request, *inbound),
            Admitted::Page(response) => respond_draining(request, response),
            Admitted::Respond(response) => {
                self.metrics.record_rejection(response.status_code().0);
                respond_draining(request, response);
            }
            Admitted::Mcp(admitted) => {
                let AdmittedRequest {
                    caller,
                    challenger,
                    envelope,
                    meta,
                } = *admitted;
                let id = envelope.id.clone().unwrap_or(Value::Null);
                let mut sink = ResponseSink::Pending(request, challenger);
                let reply = self.service.handle(
                    &Request {
                        identity: &caller.identity,
                        scopes: &caller.scopes,
                        envelope: &envelope,
                        meta: &meta,
                    },
                    &mut sink,
                );
                match reply {
                    Reply::Result(result) => {
                        answer(&self.metrics, &envelope.method, sink, id, Ok(result))
                    }
                    Reply::Error(error) => {
                        answer(&self.metrics, &envelope.method, sink, id, Err(error))
                    }
                    // This thread goes back to serving requests; the answer is written
                    // by whichever thread produces it.
                    Reply::Later(later) => {
                        let metrics = Arc::clone(&self.metrics);
                        let method = envelope.method;
                        later.then(move |result| answer(&metrics, &method, sink, id, result));
                    }
                    Reply::Listen(listen) => {
                        self.metrics.record_request(&envelope.method, true);
                        match sink {
                            ResponseSink::Pending(request, _) => {
                                self.spawn_listen(request, listen, caller.credential)
                            }
                            // A listen handler never emits before it answers.
                            _ => self.hub.unsubscribe(listen.subscription.key),
                        }
                    }
                }
            }
        }
    }

    /// Everything before the handler, in the order fixtures.md §1.8 pins.
    fn admit(&self, request: &mut tiny_http::Request) -> Admitted {
        use Admitted::Respond;
        // One configuration for the whole request, whatever a reload does meanwhile.
        let settings = self.live.load();
        let path = request.url().split('?').next().unwrap_or("").to_owned();
        if path == "/healthz" {
            return Respond(self.health(request.method()));
        }
        if path == "/metrics" {
            return Respond(self.metrics_page(request.method()));
        }
        if let Some(document) = settings
            .auth
            .oauth
            .as_ref()
            .and_then(|oauth| oauth.metadata.document_at(&path))
        {
            // Public and readable from any origin (metadata_page says so itself).
            if *request.method() == Method::Options {
                let requested = header(request, "Access-Control-Request-Headers");
                return Admitted::Page(cors::metadata_preflight(requested));
            }
            return Admitted::Page(metadata_page(request.method(), document));
        }
        if let Some(dashboard) = self.dashboard.as_ref().filter(|d| d.owns(&path)) {
            // DNS-rebinding protection and, for the dashboard's POSTs, half of the
            // cross-site defence: a foreign Origin never reaches it.
            if !settings
                .origins
                .allows(header(request, "Host"), header(request, "Origin"))
            {
                let error = RpcError::invalid_request("Host or Origin not allowed");
                return Respond(error_response(&Value::Null, &error.with_status(403)));
            }
            return Admitted::Page(dashboard.serve(request, &settings.auth));
        }
        if path != self.endpoint {
            return Respond(json_response(404, &json!({"error": "not found"})));
        }
        // CORS: a browser page of an allowed origin may call the endpoint and read the
        // answer; a preflight is answered here (a foreign origin is refused below).
        if let Some(origin) = header(request, "Origin").map(str::to_owned) {
            if settings
                .origins
                .allows(header(request, "Host"), Some(&origin))
            {
                cors::allow(request, &origin);
                let preflight = *request.method() == Method::Options
                    && header(request, "Access-Control-Request-Method").is_some();
                if preflight {
                    let requested = header(request, "Access-Control-Request-Headers");
                    return Admitted::Page(cors::preflight(requested));
                }
            }
        }
        // GET and DELETE exist only inside legacy sessions.
        let legacy_verb = matches!(request.method(), Method::Get | Method::Delete)
            && header(request, "Mcp-Session-Id").is_some();
        if *request.method() != Method::Post && !legacy_verb {
            let error =
                RpcError::invalid_request("the MCP endpoint only accepts POST").with_status(405);
            return Respond(with_header(
                error_response(&Value::Null, &error),
                "Allow",
                "POST",
            ));
        }
        // 1. DNS-rebinding protection, before anything else.
        if !settings
            .origins
            .allows(header(request, "Host"), header(request, "Origin"))
        {
            let error = RpcError::invalid_request("Host or Origin not allowed").with_status(403);
            return Respond(error_response(&Value::Null, &error));
        }
        // Two credentials are ambiguous: refuse rather than pick one.
        let authorizations = request
            .headers()
            .iter()
            .filter(|h| h.field.equiv("Authorization"))
            .count();
        if authorizations > 1 {
            let error = RpcError::invalid_request("more than one Authorization header");
            return Respond(error_response(&Value::Null, &error.with_status(400)));
        }
        let caller = match settings.auth.authenticate(header(request, "Authorization")) {
            Ok(caller) => caller,
            Err(refusal) => return Respond(refused(&settings.auth, &refusal)),
        };
        let challenger = settings
            .auth
            .oauth
            .as_ref()
            .map(|oauth| Arc::clone(&oauth.metadata));
        if legacy_verb {
            let inbound = Inbound {
                caller,
                challenger,
                message: None,
            };
            return Admitted::Legacy(Box::new(inbound));
        }
        // 2. Body: size, nesting, JSON, JSON-RPC shape.
        let body = match read_body(request, settings.config.limits.max_body_bytes) {
            Ok(body) => body,
            Err(response) => return Respond(response),
        };
        let max_depth = settings.config.limits.max_json_depth;
        if nesting_exceeds(&body, max_depth) {
            let error =
                RpcError::parse_error(format!("JSON nesting deeper than {max_depth} levels"));
            return Respond(error_response(&Value::Null, &error));
        }
        let message: Value = match serde_json::from_slice(&body) {
            Ok(message) => message,
            Err(error) => {
                return Respond(error_response(&Value::Null, &RpcError::parse_error(error)))
            }
        };
        // Era selection: one header already at hand and one `_meta` lookup.
        if self.legacy.claims_post(
            header(request, "Mcp-Session-Id"),
            header(request, "MCP-Protocol-Version"),
            &message,
        ) {
            let mut message = message;
            if let Some(trace) = header_trace(request) {
                adopt_header_trace(&mut message, &trace);
            }
            let inbound = Inbound {
                caller,
                challenger,
                message: Some(message),
            };
            return Admitted::Legacy(Box::new(inbound));
        }
        let envelope = match Envelope::parse(message) {
            Ok(envelope) => envelope,
            Err(rejected) => return Respond(error_response(&rejected.0, &rejected.1)),
        };
        let Some(id) = envelope.id.clone() else {
            // A notification: accepted and ignored (this revision defines none over HTTP).
            return Respond(Response::new(
                StatusCode(202),
                base_headers("application/json"),
                Cursor::new(Vec::new()),
                Some(0),
                None,
            ));
        };
        match self.check_request(request, &envelope) {
            Ok(meta) => Admitted::Mcp(Box::new(AdmittedRequest {
                caller,
                challenger,
                envelope,
                meta,
            })),
            Err(error) => Respond(error_response(&id, &error)),
        }
    }

    /// Steps 3-10 of §1.8: headers against the body, `_meta`, version, method.
    fn check_request(
        &self,
        request: &tiny_http::Request,
        envelope: &Envelope,
    ) -> Result<RequestMeta, RpcError> {
        let method = envelope.method.as_str();
        let version_header = header(request, "MCP-Protocol-Version")
            .ok_or_else(|| RpcError::header_mismatch("missing MCP-Protocol-Version header"))?;
        match header(request, "Mcp-Method") {
            None => return Err(RpcError::header_mismatch("missing Mcp-Method header")),
            Some(value) if value != method => {
                return Err(RpcError::header_mismatch(
                    "Mcp-Method header does not match the body method",
                ))
            }
            Some(_) => {}
        }
        if let Some(source) = name_source(method) {
            let raw = header(request, "Mcp-Name")
                .ok_or_else(|| RpcError::header_mismatch("missing Mcp-Name header"))?;
            let decoded = decode_header_value(raw)
                .map_err(|why| RpcError::header_mismatch(format!("Mcp-Name: {why}")))?;
            // A missing or mistyped body value is the handler's -32602, not a mismatch.
            if let Some(body_value) = envelope.str_param(source) {
                if decoded != body_value {
                    return Err(RpcError::header_mismatch(format!(
                        "Mcp-Name header does not match params.{source}"
                    )));
                }
            }
        }
        let mut meta = RequestMeta::parse(&envelope.params)?;
        if meta.trace.is_none() {
            meta.trace = header_trace(request);
        }
        if meta.protocol_version != version_header {
            return Err(RpcError::header_mismatch(
                "MCP-Protocol-Version header does not match _meta protocolVersion",
            ));
        }
        if !SUPPORTED_VERSIONS.contains(&meta.protocol_version.as_str()) {
            return Err(RpcError::unsupported_version(
                &meta.protocol_version,
                SUPPORTED_VERSIONS,
            ));
        }
        if !METHODS.contains(&method) {
            return Err(RpcError::method_not_found(method));
        }
        if method == "tools/call" {
            let tools = self.service.tools();
            let tool = envelope.str_param("name").and_then(|name| tools.get(name));
            let arguments = envelope.params.get("arguments").and_then(Value::as_object);
            if let (Some(tool), Some(arguments)) = (tool, arguments) {
                check_param_headers(&tool.header_params, arguments, |name| header(request, name))
                    .map_err(RpcError::header_mismatch)?;
            }
        }
        Ok(meta)
    }

    fn metrics_page(&self, method: &Method) -> Response<Body> {
        if !matches!(method, Method::Get | Method::Head) {
            return with_header(
                json_response(405, &json!({"error": "method not allowed"})),
                "Allow",
                "GET",
            );
        }
        let mut page = self
            .metrics
            .render(&Snapshot::now(&self.service.tasks, &self.hub));
        self.upstreams.render_metrics(&mut page);
        let length = page.len();
        Response::new(
            StatusCode(200),
            base_headers("text/plain; version=0.0.4"),
            Cursor::new(page.into_bytes()),
            Some(length),
            None,
        )
    }

    fn health(&self, method: &Method) -> Response<Body> {
        if !matches!(method, Method::Get | Method::Head) {
            return with_header(
                json_response(405, &json!({"error": "method not allowed"})),
                "Allow",
                "GET",
            );
        }
        if self.draining.load(Ordering::Acquire) {
            json_response(503, &json!({"status": "draining"}))
        } else if let Some(reason) = self.listener.trouble() {
            json_response(503, &json!({"status": "unavailable", "reason": reason}))
        } else if let Some(reason) = self.service.tasks.store_problem() {
            with_header(
                json_response(503, &json!({"status": "unavailable", "reason": reason})),
                "Retry-After",
                "5",
            )
        } else if self.upstreams.is_empty() {
            json_response(200, &json!({"status": "ok"}))
        } else {
            let upstreams = self.upstreams.health();
            json_response(200, &json!({"status": "ok", "upstreams": upstreams}))
        }
    }

    /// Serves a `subscriptions/listen` stream on its own thread, so long-lived streams
    /// never occupy request threads.
    fn spawn_listen(
        self: &Arc<Self>,
        request: tiny_http::Request,
        listen: Box<Listen>,
        credential: Credential,
    ) {
        let hub = Arc::clone(&self.hub);
        let service = Arc::clone(&self.service);
        let open_streams = Arc::clone(&self.open_streams);
        let credentials = Arc::clone(&self.stream_credentials);
        let key = listen.subscription.key;
        open_streams.fetch_add(1, Ordering::AcqRel);
        self.note_stream(key, credential, &listen.identity);
        let spawned = std::thread::Builder::new()
            .name("listen".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                if let Err(error) = run_listen(request, &listen, &service) {
                    log::debug!("listen stream ended: {error}");
                }
                hub.unsubscribe(listen.subscription.key);
                lock(&credentials).remove(&listen.subscription.key);
                open_streams.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            log::error!("could not start a listen stream thread");
            self.hub.unsubscribe(key);
            lock(&self.stream_credentials).remove(&key);
            self.open_streams.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Records what stream `key` was authenticated with, then checks it against the
    /// tokens in force: a reload that swapped them after this request authenticated,
    /// but scanned the streams before this one was recorded, is caught here.
    fn note_stream(&self, key: u64, credential: Credential, identity: &Identity) {
        lock(&self.stream_credentials).insert(key, (credential, identity.clone()));
        if !self.live.load().auth.still_grants(&credential, identity) {
            self.hub.revoke(key);
        }
    }

    /// Waits (up to `limit`) for every listen stream to finish writing — after
    /// [`Hub::close_all`] each one is sending its graceful answer.
    /// Waits up to `limit` for the handlers running when the drain began to return.
    pub fn wait_for_handlers(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.handling.load(Ordering::Acquire) > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    pub fn wait_for_streams(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.open_streams.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn read_body(request: &mut tiny_http::Request, limit: usize) -> Result<Vec<u8>, Response<Body>> {
    let too_large = || {
        let error = RpcError::invalid_request(format!("request body larger than {limit} bytes"))
            .with_status(413);
        error_response(&Value::Null, &error)
    };
    if request.body_length().is_some_and(|length| length > limit) {
        return Err(too_large());
    }
    let mut body = Vec::with_capacity(request.body_length().unwrap_or(0).min(limit));
    if request
        .as_reader()
        .take(limit as u64 + 1)
        .read_to_end(&mut body)
        .is_err()
    {
        return Err(error_response(
            &Value::Null,
            &RpcError::parse_error("could not read the request body"),
        ));
    }
    if body.len() > limit {
        return Err(too_large());
    }
    Ok(body)
}

/// Answers `request` with `response`, after what is left of a chunked body: tiny_http
/// neither skips an unread chunked body nor lets us close the connection (it drops a
/// `Connection: close` response header), so the rest of such a body would be parsed as
/// the next request on this connection. (Bodies with a Content-Length are skipped by
/// tiny_http itself.)
fn respond_draining(mut request: tiny_http::Request, response: Response<Body>) {
    if request.body_length().is_none() {
        let _ = std::io::copy(request.as_reader(), &mut std::io::sink());
    }
    let _ = request.respond(response);
}

/// Counts a request's outcome and writes its final message.
fn answer(
    metrics: &Metrics,
    method: &str,
    sink: ResponseSink,
    id: Value,
    result: Result<Value, RpcError>,
) {
    metrics.record_request(method, result.is_ok());
    match result {
        Ok(result) => sink.finish(200, result_body(id, result)),
        Err(error) => sink.finish_error(&id, &error),
    }
}

/// Where a request's answer goes: a plain JSON response until the handler emits its
/// first notification, an SSE stream from then on.
enum ResponseSink {
    /// Nothing sent yet; the metadata names itself in a `403 insufficient_scope`
    /// challenge.
    Pending(tiny_http::Request, Option<Arc<Metadata>>),
    Streaming(SseWriter),
    /// The client went away mid-stream; later output is dropped.
    Broken,
}

impl ResponseSink {
    /// Sends an error as the final message (with its `Retry-After`, when nothing was
    /// streamed yet).
    fn finish_error(self, id: &Value, error: &RpcError) {
        match self {
            ResponseSink::Pending(request, metadata) => {
                let mut response = error_response(id, error);
                if let (Some(scopes), Some(metadata)) = (error.required_scopes(), metadata) {
                    let description = "the token lacks scopes this operation needs";
                    let challenge =
                        metadata.challenge(Some(("insufficient_scope", description)), &scopes);
                    response = with_header(response, "WWW-Authenticate", &challenge);
                }
                let _ = request.respond(response);
            }
            sink => sink.finish(error.http_status, error_body(id, error)),
        }
    }

    /// Sends the final message: as the whole response (with `status`) when nothing was
    /// streamed yet, else as the last event of the stream.
    fn finish(self, status: u16, message: Value) {
        match self {
            ResponseSink::Pending(request, _) => {
                let _ = request.respond(json_response(status, &message));
            }
            ResponseSink::Streaming(mut stream) => {
                if stream.send(&message).is_ok() {
                    let _ = stream.finish();
                }
            }
            ResponseSink::Broken => {}
        }
    }
}

impl Emitter for ResponseSink {
    fn notify(&mut self, method: &str, params: Value) {
        let message = json!({ "jsonrpc": "2.0", "method": method, "params": params });
        let state = std::mem::replace(self, ResponseSink::Broken);
        *self = match state {
            ResponseSink::Pending(request, _) => match SseWriter::start(request) {
                Ok(mut stream) => match stream.send(&message) {
                    Ok(()) => ResponseSink::Streaming(stream),
                    Err(_) => ResponseSink::Broken,
                },
                Err(_) => ResponseSink::Broken,
            },
            ResponseSink::Streaming(mut stream) => {
                if stream.send(&message).is_ok() {
                    ResponseSink::Streaming(stream)
                } else {
                    ResponseSink::Broken
                }
            }
            ResponseSink::Broken => ResponseSink::Broken,
        };
    }
}

impl Revoke for Frontend {
    /// Ends every listen stream, and every legacy session with its streams, whose
    /// credential `auth` no longer grants its identity (a reload revoked its token).
    /// Returns how many streams and sessions ended.
    fn revoke(&self, auth: &Authenticator) -> (usize, usize) {
        let revoked: Vec<u64> = lock(&self.stream_credentials)
            .iter()
            .filter(|(_, (credential, identity))| !auth.still_grants(credential, identity))
            .map(|(key, _)| *key)
            .collect();
        for key in &revoked {
            self.hub.revoke(*key);
        }
        (revoked.len(), self.legacy.revoke(auth))
    }
}
