// Over 600 lines: one page's routes and API; sessions, throttle, history are apart.
//! The operator dashboard: a web page served on the MCP listener under
//! `[dashboard] path`, its JSON API, and who may use them.
//!
//! Owns the routes under that path, the dashboard's access rules and sessions
//! ([`session`], with failed logins throttled per address by [`throttle`]), and the
//! per-minute chart history ([`history`]). It answers with the
//! same operations as `mcp-taskd tasks …` and `stats` ([`crate::ops::admin::Admin`]);
//! the transport hands it requests after its Host/Origin check and before anything
//! MCP-specific.
//!
//! # Access
//!
//! Only admins: a bearer token with the `admin` role, or a browser session opened by
//! showing one to the login form, or by signing in at `[auth.oauth]`'s provider with an
//! account whose ID token carries the admin role; with no tokens configured (loopback only, unless
//! overridden), everyone. An admin sees everything, arguments, results and output included:
//! that is what "the viewer's role allows" means here, since no other role reaches the
//! dashboard at all. Actions (cancel, re-run) are POSTs; from a browser (a cookie, or
//! the tokenless mode) they need the `X-CSRF-Token` the API hands out and an `Origin`
//! header (whose value the transport has already checked), and the cookie is
//! `SameSite=Strict`.
//!
//! # Routes (below the path)
//!
//! `GET /` the page (the bare path redirects there), `/app.js`, `/style.css`; `POST /login` (`{"token": …}`),
//! `GET /sign-in` (to the provider, with `[auth.oauth] client_id`) and `/sign-in/callback`
//! (back from it: `auth::oauth::sign_in`), `POST /logout`; `GET /api/session`, `/api/overview`, `/api/tasks?status&tool&
//! principal&since&before&limit` (keyset: `before` is the `next` of the previous
//! page; a page examines a bounded number of tasks, and one cut short by that bound
//! says `partial`; tasks past their TTL are listed by their history summaries, marked
//! `history`), `/api/tasks/{id}` (a task, or its history summary),
//! `/api/tasks/{id}/output?after&limit` (the task page's live tail: [`output`]),
//! `/api/schedules` (the schedules in force, as `mcp-taskd schedules list --json` lists
//! them); `POST /api/tasks/{id}/cancel`, `/api/tasks/{id}/rerun`;
//! `GET /api/webhooks?state&webhook`, `POST /api/webhooks/{name}/retry` ([`webhooks`]);
//! the tools and their pauses, and actions on every task a filter matches ([`actions`]):
//! `GET /api/tools`, `POST /api/tools/{name}/pause|resume`, `GET /api/tasks/count`,
//! `POST /api/tasks/bulk`.

pub mod actions;
pub mod history;
pub mod output;
pub mod session;
pub mod throttle;
pub mod webhooks;

use std::io::{Cursor, Read};
use std::sync::Arc;

use serde_json::{json, Value};
use tiny_http::{Header, Method, Response, StatusCode};

use crate::live::Live;
use crate::metrics::Metrics;
use crate::ops::admin::{merged_page, row_json, Admin, Request as Op};
use history::History;
use session::{Session, Sessions, COOKIE, LIFETIME_S};
use taskd_auth::oauth::sign_in::SignInError;
use taskd_auth::oauth::OAuth;
use taskd_auth::{Access, Authenticator, Credential};
use taskd_engine::shares::Quota;
use taskd_notifications::Hub;
use taskd_protocol::Identity;
use taskd_protocol::TaskStatus;
use taskd_upstreams::Upstreams;
use throttle::LoginThrottle;

type Body = Cursor<Vec<u8>>;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// Nothing from elsewhere, no inline script or style, no framing.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; object-src 'none'; base-uri 'none'; \
                   form-action 'self'; frame-ancestors 'none'";
/// Largest login body read.
const MAX_LOGIN_BODY: u64 = 4096;
/// Rows a page of the task list may ask for.
const MAX_PAGE: usize = 200;

pub struct Dashboard {
    /// The upstream MCP servers, whose state the overview shows.
    upstreams: Arc<Upstreams>,
    path: String,
    admin: Arc<Admin>,
    hub: Arc<Hub>,
    sessions: Sessions,
    failed_logins: LoginThrottle,
    history: Arc<History>,
    /// The tools served now, for the page's filter; the identities' login shares.
    live: Arc<Live>,
    /// Where a login beyond its identity's share is counted.
    metrics: Arc<Metrics>,
}

/// Who is asking, once allowed.
enum Viewer {
    /// An admin token in `Authorization`: a script, not a browser; no CSRF to fear.
    Bearer,
    Session(Session),
    /// No tokens configured.
    Open,
}

impl Dashboard {
    /// The dashboard at `path`; `None` if no session key can be drawn.
    pub fn new(
        path: &str,
        admin: Arc<Admin>,
        hub: Arc<Hub>,
        live: Arc<Live>,
        metrics: Arc<Metrics>,
        upstreams: Arc<Upstreams>,
    ) -> Option<Dashboard> {
        let history = History::start(&admin.tasks);
        Some(Dashboard {
            live,
            metrics,
            upstreams,
            path: path.to_owned(),
            admin,
            hub,
            sessions: Sessions::new()?,
            failed_logins: LoginThrottle::default(),
            history,
        })
    }

    /// The names of the tools served now.
    fn tool_names(&self) -> Vec<String> {
        let settings = self.live.load();
        let tools = settings.tools.all();
        tools.iter().map(|tool| tool.spec.name.clone()).collect()
    }

    /// Whether `path` (without query) is the dashboard's.
    pub fn owns(&self, path: &str) -> bool {
        path.strip_prefix(self.path.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    /// Answers one request under the dashboard's path.
    pub fn serve(&self, request: &mut tiny_http::Request, auth: &Authenticator) -> Response<Body> {
        let url = request.url().to_owned();
        let (path, query) = url.split_once('?').unwrap_or((&url, ""));
        let sub = path.strip_prefix(self.path.as_str()).unwrap_or("");
        let method = request.method().clone();
        match (&method, sub) {
            // Relative asset and API URLs need the trailing slash.
            (Method::Get | Method::Head, "") => {
                let mut to = format!("{}/", self.path);
                if !query.is_empty() {
                    to = format!("{to}?{query}");
                }
                with_header(refused(308, "moved"), "Location", &to)
            }
            (Method::Get | Method::Head, "/") => asset(INDEX_HTML, "text/html; charset=utf-8"),
            (Method::Get | Method::Head, "/app.js") => {
                asset(APP_JS, "text/javascript; charset=utf-8")
            }
            (Method::Get | Method::Head, "/style.css") => {
                asset(STYLE_CSS, "text/css; charset=utf-8")
            }
            (Method::Post, "/login") => self.login(request, auth),
            (Method::Get, "/sign-in") => self.begin_sign_in(auth),
            (Method::Get, "/sign-in/callback") => self.finish_sign_in(request, query, auth),
            (Method::Post, "/logout") => {
                if header(request, "Origin").is_none() {
                    return refused(403, "cross-site request refused");
                }
                let session = cookie_value(request, COOKIE)
                    .and_then(|value| self.sessions.verify(value, now_s()));
                if let Some(session) = session {
                    self.sessions.end(&session);
                }
                with_header(
                    json_response(200, &json!({"ok": true})),
                    "Set-Cookie",
                    &self.cookie("", 0),
                )
            }
            (_, api) if api.starts_with("/api/") => {
                let viewer = match self.viewer(request, auth) {
                    Ok(viewer) => viewer,
                    Err(response) => return response,
                };
                let api = &api["/api".len()..];
                if method == Method::Post {
                    if let Err(response) = self.check_csrf(request, &viewer) {
                        return response;
                    }
                }
                self.api(request, api, query, &viewer)
            }
            _ => refused(404, "not found"),
        }
    }

    /// The `Set-Cookie` value for `value`, kept `max_age` seconds, on the dashboard only.
    fn cookie(&self, value: &str, max_age: i64) -> String {
        format!(
            "{COOKIE}={value}; Path={}; Max-Age={max_age}; HttpOnly; SameSite=Strict",
            self.path
        )
    }

    /// The `429` for an address with too many failed logins of late (token logins and
    /// sign-ins count alike), if it has them.
    fn throttled(&self, address: Option<std::net::IpAddr>) -> Option<Response<Body>> {
        let wait_s = self.failed_logins.refused(address, now_s())?;
        Some(with_header(
            refused(
                429,
                "too many failed logins from this address; try again later",
            ),
            "Retry-After",
            &wait_s.to_string(),
        ))
    }

    fn login(&self, request: &mut tiny_http::Request, auth: &Authenticator) -> Response<Body> {
        // Login CSRF: a foreign page must not log a browser into our session either.
        if header(request, "Origin").is_none() {
            return refused(403, "cross-site request refused");
        }
        let address = request.remote_addr().map(|address| address.ip());
        if let Some(response) = self.throttled(address) {
            return response;
        }
        let mut body = Vec::new();
        if request
            .as_reader()
            .take(MAX_LOGIN_BODY)
            .read_to_end(&mut body)
            .is_err()
        {
            return refused(400, "could not read the request");
        }
        let token = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|body| body.get("token").and_then(Value::as_str).map(str::to_owned));
        let Some(token) = token else {
            return refused(400, "expected {\"token\": \"…\"}");
        };
        match auth.access_of_token(&token) {
            Ok(Access::Admin) => {
                // An admin's static token (or none configured): its credential and the
                // identity it grants, in one lookup.
                let bearer = format!("Bearer {}", token.trim());
                let Ok(caller) = auth.authenticate(Some(&bearer)) else {
                    return refused(401, "unknown token");
                };
                match self.open_session(&caller.credential, &caller.identity) {
                    Ok(cookie) => with_header(
                        json_response(200, &json!({"ok": true})),
                        "Set-Cookie",
                        &cookie,
                    ),
                    Err(response) => response,
                }
            }
            Ok(Access::McpOnly) => {
                self.failed_logins.failed(address, now_s());
                refused(403, "this token has no admin role")
            }
            Err(_) => {
                self.failed_logins.failed(address, now_s());
                refused(401, "unknown token")
            }
        }
    }

    /// Opens a login for `identity`, shown `credential`: the `Set-Cookie` value of its
    /// session. One beyond the identity's share ends its oldest.
    fn open_session(
        &self,
        credential: &Credential,
        identity: &Identity,
    ) -> Result<String, Response<Body>> {
        let share = self.live.load().shares.of(identity).max_dashboard_logins;
        let owner = identity.key();
        let Some(issued) = self.sessions.issue(now_s(), credential, &owner, share) else {
            return Err(refused(500, "could not open a session"));
        };
        if issued.ended_oldest {
            self.metrics
                .record_quota_refusal(Quota::DashboardLogins, &owner);
            log::info!(
                "dashboard: a session was opened; the identity's oldest ended (dashboard.max_logins_per_identity)"
            );
        } else {
            log::info!("dashboard: a session was opened");
        }
        Ok(self.cookie(&issued.cookie, LIFETIME_S))
    }

    /// Sends the browser to the authorization server to sign in (`[auth.oauth]
    /// client_id`; `auth::oauth::sign_in`).
    fn begin_sign_in(&self, auth: &Authenticator) -> Response<Body> {
        match auth.oauth.as_ref().and_then(OAuth::begin_sign_in) {
            None => refused(404, "no sign-in is configured (auth.oauth.client_id)"),
            Some(Ok(url)) => with_header(refused(302, "sign in at the provider"), "Location", &url),
            Some(Err(error)) => refused(503, &error.to_string()),
        }
    }

    /// The provider's redirect back: a session for the person its ID token names, if
    /// they hold the admin role.
    fn finish_sign_in(
        &self,
        request: &tiny_http::Request,
        query: &str,
        auth: &Authenticator,
    ) -> Response<Body> {
        let address = request.remote_addr().map(|address| address.ip());
        if let Some(response) = self.throttled(address) {
            return response;
        }
        let pairs = query_pairs(query);
        let param = |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.as_str())
        };
        let (Some(code), Some(state)) = (param("code"), param("state")) else {
            self.failed_logins.failed(address, now_s());
            // The provider's own refusal (`error`, RFC 6749 §4.1.2.1) names a code
            // from a fixed list; its description is not shown.
            let why = match param("error") {
                Some("access_denied") => "the sign-in was cancelled or denied at the provider",
                Some(_) => "the provider refused the sign-in",
                None => "expected code and state",
            };
            return refused(400, why);
        };
        let Some(signed_in) = auth
            .oauth
            .as_ref()
            .and_then(|oauth| oauth.finish_sign_in(code, state))
        else {
            return refused(404, "no sign-in is configured (auth.oauth.client_id)");
        };
        match signed_in {
            Ok(person) if person.admin => {
                match self.open_session(&Credential::SignIn, &person.identity) {
                    Ok(cookie) => {
                        let home = format!("{}/", self.path);
                        let response = with_header(refused(303, "signed in"), "Location", &home);
                        with_header(response, "Set-Cookie", &cookie)
                    }
                    Err(response) => response,
                }
            }
            Ok(_) => {
                self.failed_logins.failed(address, now_s());
                refused(403, "this account has no admin role")
            }
            Err(SignInError::Refused(why)) => {
                self.failed_logins.failed(address, now_s());
                log::info!("dashboard: a sign-in was refused: {why}");
                refused(401, "the sign-in did not verify; start again")
            }
            Err(SignInError::Unavailable) => refused(
                503,
                "the authorization server could not complete the sign-in",
            ),
        }
    }

    fn viewer(
        &self,
        request: &tiny_http::Request,
        auth: &Authenticator,
    ) -> Result<Viewer, Response<Body>> {
        if let Some(authorization) = header(request, "Authorization") {
            return match auth.access(Some(authorization)) {
                Ok(Access::Admin) => Ok(Viewer::Bearer),
                Ok(Access::McpOnly) => Err(refused(403, "this token has no admin role")),
                Err(_) => Err(with_header(
                    refused(401, "a valid admin token is required"),
                    "WWW-Authenticate",
                    "Bearer",
                )),
            };
        }
        let session =
            cookie_value(request, COOKIE).and_then(|value| self.sessions.verify(value, now_s()));
        match session {
            // A login lasts while its token is an admin's: a reload may revoke it.
            Some(session)
                if self
                    .sessions
                    .opened_with(&session, &auth.admin_credentials()) =>
            {
                Ok(Viewer::Session(session))
            }
            _ if !auth.has_tokens() => Ok(Viewer::Open),
            // The page offers the provider's sign-in beside the token form when there
            // is one.
            _ if auth.oauth.as_ref().is_some_and(OAuth::offers_sign_in) => Err(json_response(
                401,
                &json!({"error": "log in with an admin token or sign in", "signIn": "sign-in"}),
            )),
            _ => Err(refused(401, "log in with an admin token")),
        }
    }

    fn csrf_of(&self, viewer: &Viewer) -> Option<String> {
        match viewer {
            Viewer::Bearer => None,
            Viewer::Session(session) => Some(self.sessions.csrf(session)),
            Viewer::Open => Some(self.sessions.open_csrf()),
        }
    }

    fn check_csrf(
        &self,
        request: &tiny_http::Request,
        viewer: &Viewer,
    ) -> Result<(), Response<Body>> {
        let Some(expected) = self.csrf_of(viewer) else {
            return Ok(());
        };
        let origin_present = header(request, "Origin").is_some();
        if origin_present && Sessions::csrf_matches(&expected, header(request, "X-CSRF-Token")) {
            Ok(())
        } else {
            Err(refused(403, "cross-site request refused"))
        }
    }

    fn api(
        &self,
        request: &mut tiny_http::Request,
        api: &str,
        query: &str,
        viewer: &Viewer,
    ) -> Response<Body> {
        let segments: Vec<&str> = api.trim_start_matches('/').split('/').collect();
        let method = request.method().clone();
        match (&method, segments.as_slice()) {
            (Method::Get, ["session"]) => json_response(
                200,
                &json!({
                    "csrf": self.csrf_of(viewer),
                    "tools": self.tool_names(),
                    "statuses": TaskStatus::ALL.map(TaskStatus::as_str),
                    "traceUrl": self.live.load().config.telemetry.trace_url,
                }),
            ),
            (Method::Get, ["overview"]) => self.overview(),
            (Method::Get, ["identities"]) => self.identities(),
            (Method::Get, ["tasks"]) => self.list(query),
            (Method::Get, ["tasks", "count"]) => actions::count(&self.admin, query),
            (Method::Post, ["tasks", "bulk"]) => actions::bulk(&self.admin, request),
            (Method::Get, ["tools"]) => actions::tools(&self.admin),
            (Method::Post, ["tools", name, "pause"]) => actions::pause(&self.admin, name, request),
            (Method::Post, ["tools", name, "resume"]) => actions::resume(&self.admin, name),
            (Method::Get, ["tasks", id]) => self.operate(Op::Show {
                id: (*id).to_owned(),
                payload: true,
            }),
            (Method::Get, ["tasks", id, "output"]) => output::respond(&self.admin, id, query),
            (Method::Get, ["schedules"]) => self.operate(Op::Schedules),
            (Method::Post, ["tasks", id, "cancel"]) => self.cancel(id),
            (Method::Post, ["tasks", id, "rerun"]) => self.rerun(id),
            (Method::Get, ["webhooks"]) => webhooks::list(&self.admin, query),
            (Method::Post, ["webhooks", name, "retry"]) => webhooks::retry(&self.admin, name),
            (Method::Get | Method::Post, _) => refused(404, "not found"),
            _ => with_header(refused(405, "method not allowed"), "Allow", "GET, POST"),
        }
    }

    /// Each identity's queued, running and waiting tasks and its quota refusals since
    /// start-up, as `mcp-taskd stats` lists them (the most unfinished first): for admins
    /// only, like everything here.
    fn identities(&self) -> Response<Body> {
        match self.admin.handle(Op::Stats, &mut |_, _| {}) {
            Ok(stats) => json_response(200, &json!({"identities": stats["identities"]})),
            Err(_) => refused(503, "the task store cannot be read"),
        }
    }

    fn operate(&self, op: Op) -> Response<Body> {
        match self.admin.handle(op, &mut |_, _| {}) {
            Ok(value) => json_response(200, &value),
            Err(message) if message.starts_with("no task") => refused(404, "no such task"),
            Err(message) => refused(500, &message),
        }
    }

    /// The tool of task `id` (or of its history summary), for the action's log line (a
    /// configured tool's name).
    fn tool_of(&self, id: &str) -> Option<String> {
        let store = &self.admin.store;
        match store.task_detail(id).ok().flatten() {
            Some(task) => Some(task.summary.tool),
            None => store
                .history_record(id)
                .ok()
                .flatten()
                .map(|kept| kept.summary.tool),
        }
    }

    fn cancel(&self, id: &str) -> Response<Body> {
        let tool = self.tool_of(id);
        let response = self.operate(Op::Cancel {
            ids: vec![id.to_owned()],
        });
        if let Some(tool) = tool {
            log::info!("dashboard: cancelled a task of tool {tool}");
        }
        response
    }

    fn rerun(&self, id: &str) -> Response<Body> {
        let Some(tool) = self.tool_of(id) else {
            return refused(404, "no such task");
        };
        match self
            .admin
            .handle(Op::Rerun { id: id.to_owned() }, &mut |_, _| {})
        {
            Ok(created) => {
                log::info!("dashboard: re-ran a task of tool {tool} as a new task");
                json_response(200, &created)
            }
            Err(message) if message.starts_with("no such task") => refused(404, "no such task"),
            Err(message) if message.contains("task store") => refused(503, &message),
            // Only a summary without arguments is left, or the tool is gone.
            Err(message) => refused(409, &message),
        }
    }

    fn list(&self, query: &str) -> Response<Body> {
        let actions::Listing {
            filter,
            before,
            limit,
            ..
        } = match actions::listing(query, MAX_PAGE) {
            Ok(listing) => listing,
            Err(response) => return response,
        };
        // One bounded page of tasks and history summaries (`merged_page`), one row
        // more than asked: that row tells whether another page follows. A page the
        // bound cut short says so (`partial`) and carries where to continue.
        let page = match merged_page(
            self.admin.store.as_ref(),
            &filter,
            before.as_deref(),
            limit + 1,
            true,
        ) {
            Ok(page) => page,
            Err(error) => return refused(500, &error.to_string()),
        };
        let mut rows = page.tasks;
        let more = rows.len() > limit;
        rows.truncate(limit);
        let partial = page.resume.is_some();
        let next = if more {
            rows.last().map(|row| row.id.clone())
        } else {
            page.resume
        };
        let rows: Vec<Value> = rows.iter().map(row_json).collect();
        json_response(
            200,
            &json!({"tasks": rows, "next": next, "partial": partial}),
        )
    }

    fn overview(&self) -> Response<Body> {
        let tasks = &self.admin.tasks;
        let stats = match tasks.stats() {
            Ok(stats) => stats,
            Err(_) => return refused(503, "the task store cannot be read"),
        };
        let mut by_status: serde_json::Map<String, Value> = TaskStatus::ALL
            .iter()
            .map(|status| (status.as_str().to_owned(), json!(0)))
            .collect();
        for (status, count) in &stats.tasks {
            by_status.insert(status.clone(), json!(count));
        }
        let jobs: serde_json::Map<String, Value> = stats
            .jobs
            .iter()
            .map(|(state, count)| (state.clone(), json!(count)))
            .collect();
        let queued = stats
            .jobs
            .iter()
            .find(|(state, _)| state == "queued")
            .map_or(0, |(_, count)| *count);
        json_response(
            200,
            &json!({
                "now": taskd_base::clock::rfc3339(taskd_base::clock::now_ms()),
                "tasksByStatus": by_status,
                "jobs": jobs,
                "queueDepth": queued,
                "oldestReadyAgeSeconds": stats.oldest_ready_age_ms as f64 / 1000.0,
                "workers": {"threads": self.admin.worker_threads, "busy": tasks.running_attempts()},
                "openSubscriptions": self.hub.open_subscriptions(),
                "walBytes": tasks.wal_bytes(),
                "perMinute": self.history.to_json(taskd_base::clock::now_ms(), &self.tool_names()),
                "upstreams": self.upstreams.health(),
            }),
        )
    }
}

fn now_s() -> i64 {
    taskd_base::clock::now_ms() / 1000
}

fn header<'r>(request: &'r tiny_http::Request, name: &'static str) -> Option<&'r str> {
    request
        .headers()
        .iter()
        .find(|h| h.field.equiv(name))
        .map(|h| h.value.as_str())
}

fn cookie_value<'r>(request: &'r tiny_http::Request, name: &'static str) -> Option<&'r str> {
    request
        .headers()
        .iter()
        .filter(|h| h.field.equiv("Cookie"))
        .flat_map(|h| h.value.as_str().split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// `a=b&c=d` decoded (`+` and `%XX`); undecodable pairs are skipped.
fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            Some((percent_decode(name)?, percent_decode(value)?))
        })
        .collect()
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

fn headers(content_type: &str) -> Vec<Header> {
    [
        ("Content-Type", content_type),
        ("Cache-Control", "no-store"),
        ("Content-Security-Policy", CSP),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Frame-Options", "DENY"),
    ]
    .iter()
    .filter_map(|(name, value)| Header::from_bytes(name.as_bytes(), value.as_bytes()).ok())
    .collect()
}

fn respond(status: u16, content_type: &str, bytes: Vec<u8>) -> Response<Body> {
    let length = bytes.len();
    Response::new(
        StatusCode(status),
        headers(content_type),
        Cursor::new(bytes),
        Some(length),
        None,
    )
}

fn asset(text: &str, content_type: &str) -> Response<Body> {
    respond(200, content_type, text.as_bytes().to_vec())
}

fn json_response(status: u16, body: &Value) -> Response<Body> {
    respond(status, "application/json", body.to_string().into_bytes())
}

fn refused(status: u16, message: &str) -> Response<Body> {
    json_response(status, &json!({ "error": message }))
}

fn with_header(mut response: Response<Body>, name: &str, value: &str) -> Response<Body> {
    if let Ok(header) = Header::from_bytes(name.as_bytes(), value.as_bytes()) {
        response.add_header(header);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode() {
        assert_eq!(
            query_pairs("tool=a%20b&principal=x+y&bad=%zz"),
            vec![
                ("tool".into(), "a b".into()),
                ("principal".into(), "x y".into())
            ]
        );
    }
}
