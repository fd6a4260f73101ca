//! One upstream's sessions, kept as its `session` scope says: started lazily, restarted
//! with backoff after a crash, behind a circuit breaker that turns a crash loop into a
//! clear tool error instead of a restart storm. Also the upstream's tool list, found
//! by `tools/list` and kept in the data dir so that a restart serves the same tools at
//! once (and runs their queued tasks) before the upstream has started.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::config::{SessionScope, Upstream};
use super::session::{lock, Notice, Session};

/// Crashes or failed starts in a row that open the circuit.
const BREAKER_FAILURES: u32 = 5;
/// How long an open circuit refuses calls before one start is tried again.
const BREAKER_OPEN: Duration = Duration::from_secs(30);
/// Longest pause between two starts after failures (1 s, doubling).
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A `per_identity` session unused this long is closed.
const IDLE_SESSION: Duration = Duration::from_secs(10 * 60);
/// Most `per_identity` sessions at once; beyond, the least recently used is closed.
const MAX_IDENTITY_SESSIONS: usize = 64;
/// How long `tools/list` may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a health check's `ping` may take.
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the upstream cannot take a call now: a sentence for the caller's tool error.
#[derive(Debug)]
pub struct Unavailable(pub String);

/// The state `/healthz` and the dashboard show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// No session has been needed yet, or the last one closed normally.
    Idle,
    Up,
    /// Restarting after a crash, with backoff.
    Restarting,
    /// Too many crashes in a row: calls get a tool error until the circuit closes.
    CircuitOpen,
}

impl Health {
    pub const ALL: [Health; 4] = [
        Health::Idle,
        Health::Up,
        Health::Restarting,
        Health::CircuitOpen,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Health::Idle => "idle",
            Health::Up => "up",
            Health::Restarting => "restarting",
            Health::CircuitOpen => "circuit_open",
        }
    }
}

#[derive(Default)]
struct Breaker {
    /// Crashes and failed starts since the last success.
    failures: u32,
    /// No start before this.
    next_start: Option<Instant>,
    /// Calls are refused until this.
    open_until: Option<Instant>,
    last_failure: Option<String>,
}

/// Counters for `/metrics` and `/healthz`.
#[derive(Default)]
pub struct Counters {
    pub starts: AtomicU64,
    pub restarts: AtomicU64,
    pub calls: AtomicU64,
    pub errors: AtomicU64,
    /// How long the upstream took to answer calls, from sending to the answer (or, for
    /// a call it served as a task, to the task's result). Calls that waited for a
    /// caller's answer are left out: that wait is a person's, not the upstream's.
    pub latency: taskd_base::histogram::Histogram,
}

/// A session handed to one call. A `per_call` session closes when its use ends.
pub struct SessionUse {
    pub session: Arc<Session>,
    close_after: bool,
}

impl Drop for SessionUse {
    fn drop(&mut self) {
        if self.close_after {
            let session = Arc::clone(&self.session);
            // Closing waits for the program to exit: not on the caller's thread.
            let _ = std::thread::Builder::new()
                .name("upstream-close".into())
                .spawn(move || session.close("its call ended"));
        }
    }
}

pub struct Supervisor {
    pub upstream: Arc<Upstream>,
    shared: Mutex<Option<Arc<Session>>>,
    by_identity: Mutex<HashMap<String, (Arc<Session>, Instant)>>,
    /// One start at a time, so that concurrent first calls share one session.
    starting: Mutex<()>,
    breaker: Mutex<Breaker>,
    /// What the upstream lists, as last found (or cached).
    listed: Mutex<Listed>,
    cache: PathBuf,
    in_flight: (Mutex<usize>, Condvar),
    pub counters: Counters,
    /// Told when the tool list changes.
    changed: Arc<dyn Fn() + Send + Sync>,
    /// Itself, for the sessions' notices.
    this: Weak<Supervisor>,
}

impl Supervisor {
    pub fn new(
        upstream: Arc<Upstream>,
        cache_dir: &std::path::Path,
        changed: Arc<dyn Fn() + Send + Sync>,
    ) -> Arc<Supervisor> {
        let cache = cache_dir.join(format!("{}.tools.json", upstream.name));
        let listed = std::fs::read(&cache)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Listed>(&bytes).ok())
            .unwrap_or_default();
        Arc::new_cyclic(|this| Supervisor {
            upstream,
            shared: Mutex::default(),
            by_identity: Mutex::default(),
            starting: Mutex::default(),
            breaker: Mutex::default(),
            listed: Mutex::new(listed),
            cache,
            in_flight: (Mutex::new(0), Condvar::new()),
            counters: Counters::default(),
            changed,
            this: this.clone(),
        })
    }

    /// The upstream's tools as last listed.
    pub fn tools(&self) -> Vec<Value> {
        lock(&self.listed).tools.clone()
    }

    /// Everything the upstream lists, as last listed.
    pub fn listed(&self) -> Listed {
        lock(&self.listed).clone()
    }

    pub fn health(&self) -> (Health, Option<String>) {
        let breaker = lock(&self.breaker);
        let now = Instant::now();
        let health = if breaker.open_until.is_some_and(|until| until > now) {
            Health::CircuitOpen
        } else if breaker.failures > 0 {
            Health::Restarting
        } else if lock(&self.shared).as_ref().is_some_and(|s| !s.is_closed())
            || !lock(&self.by_identity).is_empty()
        {
            Health::Up
        } else {
            Health::Idle
        };
        (health, breaker.last_failure.clone())
    }

    /// Waits for a free place among the upstream's `max_concurrency` calls, up to
    /// `deadline`; the place is held until the returned guard drops.
    pub fn enter(self: &Arc<Self>, deadline: Instant) -> Option<InFlight> {
        let (count, freed) = &self.in_flight;
        let mut count = lock(count);
        if let Some(limit) = self.upstream.max_concurrency {
            while *count >= limit {
                let left = deadline.checked_duration_since(Instant::now())?;
                count = freed
                    .wait_timeout(count, left)
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .0;
            }
        }
        *count += 1;
        Some(InFlight(Arc::clone(self)))
    }

    /// A session for a call of `caller` (an identity key), as the scope says.
    pub fn session_for(&self, caller: &str) -> Result<SessionUse, Unavailable> {
        match self.upstream.session {
            SessionScope::Shared => {
                let _one = lock(&self.starting);
                if let Some(session) = lock(&self.shared).as_ref().filter(|s| !s.is_closed()) {
                    return Ok(self.kept(session));
                }
                let session = self.start()?;
                *lock(&self.shared) = Some(Arc::clone(&session));
                Ok(self.kept(&session))
            }
            SessionScope::PerIdentity => {
                let _one = lock(&self.starting);
                let mut sessions = lock(&self.by_identity);
                close_idle(&mut sessions);
                if let Some((session, used)) = sessions.get_mut(caller) {
                    *used = Instant::now();
                    return Ok(self.kept(session));
                }
                if sessions.len() >= MAX_IDENTITY_SESSIONS {
                    // The least recently used with no call in flight, if there is one.
                    let oldest = sessions
                        .iter()
                        .min_by_key(|(_, (session, used))| (session.busy(), *used))
                        .map(|(key, _)| key.clone());
                    if let Some((session, _)) = oldest.and_then(|key| sessions.remove(&key)) {
                        close_later(
                            session,
                            "more per-identity sessions were needed at once than the 64 \
                             allowed, and this was the least recently used",
                        );
                    }
                }
                drop(sessions);
                let session = self.start()?;
                lock(&self.by_identity)
                    .insert(caller.to_owned(), (Arc::clone(&session), Instant::now()));
                Ok(self.kept(&session))
            }
            SessionScope::PerCall => Ok(SessionUse {
                session: self.start()?,
                close_after: true,
            }),
        }
    }

    fn kept(&self, session: &Arc<Session>) -> SessionUse {
        SessionUse {
            session: Arc::clone(session),
            close_after: false,
        }
    }

    /// Starts a session, honouring the backoff and the circuit breaker.
    fn start(&self) -> Result<Arc<Session>, Unavailable> {
        let wait = {
            let breaker = lock(&self.breaker);
            let now = Instant::now();
            if let Some(until) = breaker.open_until.filter(|until| *until > now) {
                return Err(Unavailable(format!(
                    "the upstream MCP server \"{}\" failed {} times in a row (last: {}); \
                     mcp-taskd tries it again in {} s",
                    self.upstream.name,
                    breaker.failures,
                    breaker.last_failure.as_deref().unwrap_or("unknown"),
                    until.duration_since(now).as_secs().max(1)
                )));
            }
            breaker
                .next_start
                .and_then(|at| at.checked_duration_since(now))
        };
        if let Some(wait) = wait {
            std::thread::sleep(wait);
        }
        let this = self.this.clone();
        let notices = Arc::new(move |notice: Notice| {
            if let Some(supervisor) = this.upgrade() {
                supervisor.notice(notice);
            }
        });
        self.counters.starts.fetch_add(1, Ordering::Relaxed);
        match Session::start(&self.upstream, notices) {
            Ok(session) => {
                log::info!("upstream {}: started", self.upstream.name);
                Ok(session)
            }
            Err(error) => {
                let why = error.to_string();
                self.failed(&why);
                Err(Unavailable(format!(
                    "the upstream MCP server \"{}\" could not be started: {why}",
                    self.upstream.name
                )))
            }
        }
    }

    /// A crash or a failed start: the next start waits, and enough in a row open the
    /// circuit.
    fn failed(&self, why: &str) {
        let mut breaker = lock(&self.breaker);
        breaker.failures += 1;
        breaker.last_failure = Some(why.to_owned());
        let exponent = (breaker.failures - 1).min(10);
        let backoff = (Duration::from_secs(1) * (1 << exponent)).min(MAX_BACKOFF);
        let now = Instant::now();
        breaker.next_start = Some(now + backoff);
        if breaker.failures >= BREAKER_FAILURES {
            breaker.open_until = Some(now + BREAKER_OPEN);
            log::error!(
                "upstream {}: {} failures in a row (last: {why}); its calls fail for {} s",
                self.upstream.name,
                breaker.failures,
                BREAKER_OPEN.as_secs()
            );
        } else {
            log::warn!(
                "upstream {}: {why}; next start in {} ms",
                self.upstream.name,
                backoff.as_millis()
            );
        }
    }

    /// A call or a listing went through: the upstream works.
    pub fn succeeded(&self) {
        let mut breaker = lock(&self.breaker);
        if breaker.failures > 0 {
            *breaker = Breaker::default();
        }
    }

    fn notice(&self, notice: Notice) {
        match notice {
            Notice::ListsChanged => {
                if let Some(this) = self.this.upgrade() {
                    let _ = std::thread::Builder::new()
                        .name("upstream-list".into())
                        .spawn(move || this.discover());
                }
            }
            Notice::Closed {
                expected: false,
                ending,
            } => {
                self.counters.restarts.fetch_add(1, Ordering::Relaxed);
                self.failed(&format!("it {ending}"));
            }
            Notice::Closed { expected: true, .. } => {}
        }
    }

    /// Lists the upstream's tools, resources and prompts (starting a session if need
    /// be) and, when a list changed, keeps them and says so.
    pub fn discover(&self) {
        // The shared session lists for everyone; other scopes list in a session of
        // their own, closed once listed (not kept as some identity's).
        let session = match self.upstream.session {
            SessionScope::Shared => self.session_for(""),
            SessionScope::PerIdentity | SessionScope::PerCall => {
                self.start().map(|session| SessionUse {
                    session,
                    close_after: true,
                })
            }
        };
        let listed = session.and_then(|use_| {
            list_all(&use_.session).map_err(|why| Unavailable(format!("listing failed: {why}")))
        });
        let listed = match listed {
            Ok(listed) => listed,
            Err(Unavailable(why)) => {
                log::warn!("upstream {}: {why}", self.upstream.name);
                return;
            }
        };
        self.succeeded();
        let mut known = lock(&self.listed);
        if *known == listed {
            return;
        }
        *known = listed;
        let text = serde_json::to_string(&*known).unwrap_or_default();
        drop(known);
        if let Err(error) = write_atomically(&self.cache, text.as_bytes()) {
            log::warn!(
                "upstream {}: could not keep its lists in {}: {error}",
                self.upstream.name,
                self.cache.display()
            );
        }
        log::info!("upstream {}: its lists changed", self.upstream.name);
        (self.changed)();
    }

    /// Health check of the kept sessions: a `ping` each (`server/discover` for a
    /// stateless upstream, which has no `ping`); one that does not answer is closed (the
    /// next call starts another). Idle `per_identity` sessions close.
    pub fn check(&self) {
        let shared = lock(&self.shared).clone();
        if let Some(session) = shared.filter(|s| !s.is_closed()) {
            let method = if session.is_modern() {
                "server/discover"
            } else {
                "ping"
            };
            if let Err(error) = session.ask(method, json!({}), PING_TIMEOUT) {
                log::warn!("upstream {}: health check: {error}", self.upstream.name);
                session.close("it did not answer a health check within 10 s");
            }
        }
        close_idle(&mut lock(&self.by_identity));
    }

    /// Closes every session (the server is stopping).
    pub fn stop(&self) {
        if let Some(session) = lock(&self.shared).take() {
            session.close("mcp-taskd is stopping");
        }
        for (_, (session, _)) in lock(&self.by_identity).drain() {
            session.close("mcp-taskd is stopping");
        }
    }
}

/// A place among the upstream's calls in flight.
pub struct InFlight(Arc<Supervisor>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let (count, freed) = &self.0.in_flight;
        *lock(count) -= 1;
        freed.notify_one();
    }
}

/// Drops (and closes) the `per_identity` sessions that ended, or sat idle too long
/// with no call in flight (a call may last longer than the idle time).
fn close_idle(sessions: &mut HashMap<String, (Arc<Session>, Instant)>) {
    sessions.retain(|_, (session, used)| {
        let keep = !session.is_closed() && (used.elapsed() < IDLE_SESSION || session.busy());
        if !keep {
            close_later(Arc::clone(session), "it sat idle for 10 minutes");
        }
        keep
    });
}

fn close_later(session: Arc<Session>, why: &'static str) {
    let _ = std::thread::Builder::new()
        .name("upstream-close".into())
        .spawn(move || session.close(why));
}

/// What an upstream lists: its tools, and its resources, resource templates and
/// prompts when it declares them. Kept in the data dir as JSON.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Listed {
    pub tools: Vec<Value>,
    #[serde(default)]
    pub resources: Vec<Value>,
    #[serde(default)]
    pub templates: Vec<Value>,
    #[serde(default)]
    pub prompts: Vec<Value>,
}

/// Every list the upstream's capabilities promise, every page of each.
fn list_all(session: &Session) -> Result<Listed, super::session::SessionError> {
    let capabilities = lock(&session.initialized)
        .get("capabilities")
        .cloned()
        .unwrap_or_default();
    let declares = |name: &str| capabilities.get(name).is_some_and(Value::is_object);
    let mut listed = Listed {
        tools: list_pages(session, "tools/list", "tools")?,
        ..Listed::default()
    };
    if declares("resources") {
        listed.resources = list_pages(session, "resources/list", "resources")?;
        listed.templates = list_pages(session, "resources/templates/list", "resourceTemplates")?;
    }
    if declares("prompts") {
        listed.prompts = list_pages(session, "prompts/list", "prompts")?;
    }
    Ok(listed)
}

/// Every page of one list.
fn list_pages(
    session: &Session,
    method: &'static str,
    key: &str,
) -> Result<Vec<Value>, super::session::SessionError> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    // A server that keeps handing out cursors must not keep us here forever.
    for _ in 0..1000 {
        let params = match &cursor {
            Some(cursor) => json!({ "cursor": cursor }),
            None => json!({}),
        };
        let page = session.ask(method, params, LIST_TIMEOUT)?;
        if let Some(listed) = page.get(key).and_then(Value::as_array) {
            items.extend(listed.iter().cloned());
        }
        cursor = page
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    Ok(items)
}

fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let temporary = path.with_extension("json.tmp");
    std::fs::write(&temporary, bytes)?;
    std::fs::rename(&temporary, path)
}
