// Over 600 lines: the table's eviction, quota and durability rules are one lock's.
//! The table of legacy sessions: one per `initialize`, in memory only, bounded by a
//! maximum count, a share per identity and an idle expiry.
//!
//! No identity can lock the others out (issue 29): an `initialize` beyond its
//! identity's share ends that identity's least recently used session, and one that
//! finds the table full ends the least recently used idle session (no open stream, no
//! request in flight) before it would refuse anyone.
//!
//! A session carries what the legacy wire negotiates once (version, client capabilities,
//! log level, resource subscriptions) plus the bookkeeping of its streams: in-flight
//! requests that `notifications/cancelled` can stop, server-to-client requests awaiting
//! an answer, the standalone GET stream's recent events for `Last-Event-ID` replay, and
//! the tasks whose status changes that stream announces.
//! It is never an identity: it records who opened it only so that nobody else can use
//! it, and tasks stay bound to the authenticated identity.
//!
//! Durability (issue 28). A session opened over HTTP is also written to the task store
//! (`SessionRecord`): when `initialize` succeeds, when the client changes its log level
//! or subscriptions, and otherwise at most once a [`RECORD_EVERY`] (its last use, and
//! the tasks it follows), never a write per request. A server that is asked for a
//! session it does not hold (it restarted; on PostgreSQL, another node opened it) reads
//! it back and serves it as the one that opened it would, to the same identity only:
//! an unknown or foreign id gets the same 404 either way. What is not written down, and
//! so not restored: requests in flight and server-to-client requests awaiting an answer
//! (a task's input request is asked again by the next `tasks/result`), and the GET
//! stream's kept events (a restored session's stream starts with the current status of
//! each task it follows instead). A `kill -9` loses at most the last
//! [`RECORD_EVERY`] of use and followed tasks; a graceful stop records every session.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use serde_json::Value;

use crate::config::SessionLimits;
pub use crate::metrics::Ended;
use taskd_auth::{Authenticator, Credential};
use taskd_base::clock::now_ms;
use taskd_engine::model::SessionRecord;
use taskd_engine::TaskStore;
use taskd_notifications::Hub;
use taskd_protocol::Identity;
use taskd_protocol::{ClientCapabilities, LogLevel};

/// How often a session's use (and the tasks it follows) is written to the store at
/// most, when nothing else made it write.
pub const RECORD_EVERY: Duration = Duration::from_secs(60);

/// The most tasks one session follows for `notifications/tasks/status`; past it, the
/// oldest is forgotten (the notification is optional: a client polls `tasks/get`).
pub const MAX_FOLLOWED_TASKS: usize = 1024;

/// One event of the standalone GET stream.
#[derive(Debug, Clone)]
pub struct StreamEvent {
    pub id: u64,
    pub message: Value,
}

pub struct Session {
    pub id: String,
    pub identity: Identity,
    /// What `initialize` authenticated with: the session ends when a reload revokes it.
    pub credential: Credential,
    /// The negotiated protocol revision.
    pub version: &'static str,
    pub capabilities: ClientCapabilities,
    /// `initialize`'s `clientInfo` (null if it sent none), kept with the session.
    pub client_info: Value,
    /// Where the session's followed tasks are registered, so the hub's relay hears them.
    hub: Arc<Hub>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    log_level: Option<LogLevel>,
    subscriptions: HashSet<String>,
    /// Requests being served, by the JSON text of their id: set to stop them.
    in_flight: HashMap<String, Arc<AtomicBool>>,
    /// Server-to-client requests awaiting the client's answer, by our request id.
    awaiting: HashMap<u64, Sender<Value>>,
    next_request_id: u64,
    /// Recent events of the GET stream (oldest first) and where new ones go.
    events: VecDeque<StreamEvent>,
    next_event_id: u64,
    live: Option<Sender<StreamEvent>>,
    /// Tasks whose status changes the GET stream announces, oldest first, each with
    /// the status the client last saw; each is followed once in the hub.
    followed: VecDeque<(String, String)>,
    closed: bool,
    /// When the store last got this session's state (`None`: not stored, e.g. stdio).
    recorded: Option<Instant>,
    /// Read back from the store: its first GET stream gets the kept events (the current
    /// status of each followed task) whatever its `Last-Event-ID`.
    restored: bool,
}

impl Session {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every mutation is a single insert or remove: a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn log_level(&self) -> Option<LogLevel> {
        self.lock().log_level
    }

    pub fn set_log_level(&self, level: LogLevel) {
        self.lock().log_level = Some(level);
    }

    pub fn subscribe(&self, uri: &str) {
        self.lock().subscriptions.insert(uri.to_owned());
    }

    pub fn unsubscribe(&self, uri: &str) {
        self.lock().subscriptions.remove(uri);
    }

    pub fn is_subscribed(&self, uri: &str) -> bool {
        self.lock().subscriptions.contains(uri)
    }

    /// Registers a request being served; the flag turns true when the client cancels it.
    pub fn start_request(&self, id: &Value) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        self.lock()
            .in_flight
            .insert(id.to_string(), Arc::clone(&flag));
        flag
    }

    pub fn end_request(&self, id: &Value) {
        self.lock().in_flight.remove(&id.to_string());
    }

    /// `notifications/cancelled`: stops the named request if it is still running.
    pub fn cancel_request(&self, id: &Value) {
        if let Some(flag) = self.lock().in_flight.get(&id.to_string()) {
            flag.store(true, Ordering::Release);
        }
    }

    /// A fresh id for a server-to-client request, and where its answer will arrive.
    pub fn await_answer(&self, answer: Sender<Value>) -> u64 {
        let mut state = self.lock();
        state.next_request_id += 1;
        let id = state.next_request_id;
        state.awaiting.insert(id, answer);
        id
    }

    pub fn forget_answer(&self, id: u64) {
        self.lock().awaiting.remove(&id);
    }

    /// Routes a client's JSON-RPC response to the request waiting for it; `false` when
    /// nothing waits for that id.
    pub fn deliver_answer(&self, id: &Value, message: Value) -> bool {
        let Some(id) = id.as_u64() else {
            return false;
        };
        match self.lock().awaiting.remove(&id) {
            Some(waiter) => waiter.send(message).is_ok(),
            None => false,
        }
    }

    /// Queues a message on the standalone GET stream (kept for replay even when no
    /// stream is open).
    pub fn push_event(&self, message: Value, keep: usize) {
        let mut state = self.lock();
        state.next_event_id += 1;
        let event = StreamEvent {
            id: state.next_event_id,
            message,
        };
        if let Some(live) = &state.live {
            if live.try_send(event.clone()).is_err() {
                state.live = None;
            }
        }
        state.events.push_back(event);
        while state.events.len() > keep {
            state.events.pop_front();
        }
    }

    /// Attaches a new GET stream (replacing any earlier one, which then ends) and returns
    /// the kept events after `last_event_id` to replay first.
    pub fn attach_stream(
        &self,
        live: Sender<StreamEvent>,
        last_event_id: Option<u64>,
    ) -> Vec<StreamEvent> {
        let mut state = self.lock();
        state.live = Some(live);
        if std::mem::take(&mut state.restored) {
            return state.events.iter().cloned().collect();
        }
        match last_event_id {
            Some(last) => state
                .events
                .iter()
                .filter(|event| event.id > last)
                .cloned()
                .collect(),
            None => Vec::new(),
        }
    }

    /// Follows a non-terminal task the client has seen in `status`, forgetting the
    /// oldest one past [`MAX_FOLLOWED_TASKS`].
    pub fn follow_task(&self, task_id: &str, status: &str) {
        // The hub is called under the session's lock so that `close` cannot slip in
        // between and leave a follow behind; the hub never calls back into a session.
        let mut state = self.lock();
        if state.closed || state.followed.iter().any(|(id, _)| id == task_id) {
            return;
        }
        state
            .followed
            .push_back((task_id.to_owned(), status.to_owned()));
        self.hub.relay_follow_task(task_id);
        if state.followed.len() > MAX_FOLLOWED_TASKS {
            if let Some((forgotten, _)) = state.followed.pop_front() {
                self.hub.relay_unfollow_task(&forgotten);
            }
        }
    }

    pub fn follows_task(&self, task_id: &str) -> bool {
        self.lock().followed.iter().any(|(id, _)| id == task_id)
    }

    /// Records a followed task's `status`; whether it differs from the one the client
    /// last saw (and so is worth announcing). A terminal status ends the following.
    pub fn note_task_status(&self, task_id: &str, status: &str, terminal: bool) -> bool {
        let mut state = self.lock();
        let Some(at) = state.followed.iter().position(|(id, _)| id == task_id) else {
            return false;
        };
        let changed = state.followed[at].1 != status;
        if terminal {
            state.followed.remove(at);
            self.hub.relay_unfollow_task(task_id);
        } else {
            state.followed[at].1 = status.to_owned();
        }
        changed
    }

    pub fn forget_task(&self, task_id: &str) {
        let mut state = self.lock();
        if let Some(at) = state.followed.iter().position(|(id, _)| id == task_id) {
            state.followed.remove(at);
            self.hub.relay_unfollow_task(task_id);
        }
    }

    /// The session as the store keeps it, last used now.
    fn record(&self) -> SessionRecord {
        let state = self.lock();
        let list = |items: Vec<&String>| serde_json::json!(items).to_string();
        SessionRecord {
            id: self.id.clone(),
            owner: self.identity.key(),
            version: self.version.to_owned(),
            capabilities: Value::Object(self.capabilities.0.clone()).to_string(),
            client_info: self.client_info.to_string(),
            log_level: state.log_level.map(|level| level.as_str().to_owned()),
            subscriptions: list(state.subscriptions.iter().collect()),
            followed: list(state.followed.iter().map(|(id, _)| id).collect()),
            last_used: now_ms(),
        }
    }

    /// Whether the store's copy is [`RECORD_EVERY`] old (marking it recorded now), for
    /// a stored session.
    fn record_due(&self) -> bool {
        let mut state = self.lock();
        match state.recorded {
            Some(at) if at.elapsed() >= RECORD_EVERY => {
                state.recorded = Some(Instant::now());
                true
            }
            _ => false,
        }
    }

    /// The task ids it follows (for a restored session's first stream).
    pub fn followed_tasks(&self) -> Vec<String> {
        let state = self.lock();
        state.followed.iter().map(|(id, _)| id.clone()).collect()
    }

    /// Ends its GET stream, if one is open (gracefully: the stream sees its channel
    /// close), and nothing else: the session lives on, and so does its event log.
    fn detach_stream(&self) {
        self.lock().live = None;
    }

    /// Nothing in flight and no open stream: ending it interrupts nobody.
    fn is_idle(&self) -> bool {
        let state = self.lock();
        state.live.is_none() && state.in_flight.is_empty() && state.awaiting.is_empty()
    }

    /// Ends the session's streams and wakes its waiting calls.
    fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        for (task_id, _) in state.followed.drain(..) {
            self.hub.relay_unfollow_task(&task_id);
        }
        state.live = None;
        state.awaiting.clear();
        for flag in state.in_flight.values() {
            flag.store(true, Ordering::Release);
        }
    }
}

/// Why a session could not be used.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Unknown, ended, expired, or opened by someone else: 404.
    NotFound,
    /// The server-wide maximum is reached and every session is busy: 503.
    Full,
}

/// What `initialize` negotiated, as the session keeps it.
pub struct Negotiated {
    pub version: &'static str,
    pub capabilities: ClientCapabilities,
    /// `clientInfo` (null if the client sent none).
    pub client_info: Value,
}

/// A session just opened, and what was ended to make room for it.
pub struct Opened {
    pub session: Arc<Session>,
    pub ended: Option<Ended>,
}

pub struct Sessions {
    limits: SessionLimits,
    hub: Arc<Hub>,
    table: Mutex<HashMap<String, Entry>>,
    /// Where sessions opened over HTTP are written (see the module's doc); `None` keeps
    /// them in memory only.
    store: Option<Arc<dyn TaskStore>>,
    /// Set by [`Sessions::end_streams`] (the server is stopping): a GET stream opened
    /// from then on ends after its replay.
    streams_ended: AtomicBool,
}

struct Entry {
    session: Arc<Session>,
    last_used: Instant,
}

impl Sessions {
    pub fn new(
        limits: SessionLimits,
        hub: Arc<Hub>,
        store: Option<Arc<dyn TaskStore>>,
    ) -> Sessions {
        Sessions {
            limits,
            hub,
            table: Mutex::new(HashMap::new()),
            store,
            streams_ended: AtomicBool::new(false),
        }
    }

    /// Writes `session` to the store, if it is a stored one; with `sweep`, the store
    /// also drops sessions idle for longer than the timeout. A store that cannot take it
    /// costs the session its durability, not its use: logged, not refused.
    fn record(&self, session: &Session, sweep: bool) {
        let Some(store) = &self.store else {
            return;
        };
        if session.lock().recorded.is_none() {
            return;
        }
        let idle_since = sweep.then(|| now_ms() - self.idle_limit().as_millis() as i64);
        if let Err(error) = store.save_session(session.record(), idle_since) {
            log::warn!("could not record a legacy session in the store: {error}");
        }
    }

    /// Deletes the stored copies of sessions that ended.
    fn forget(&self, ended: &[String]) {
        let Some(store) = &self.store else {
            return;
        };
        for id in ended {
            if let Err(error) = store.delete_session(id) {
                log::warn!("could not delete an ended legacy session from the store: {error}");
            }
        }
    }

    /// Records `session` now: its log level or subscriptions changed.
    pub fn record_change(&self, session: &Session) {
        if let Some(at) = session.lock().recorded.as_mut() {
            *at = Instant::now();
        }
        self.record(session, false);
    }

    /// Records every stored session's state (a graceful stop): a restart then loses
    /// none of their use or followed tasks.
    pub fn record_all(&self) {
        for session in self.all() {
            self.record(&session, false);
        }
    }

    /// A graceful stop: every open GET stream ends now, with the end of its response,
    /// and every one opened later ends after its replay. The sessions stay (in the
    /// table, and in the store for the next process): their clients open their GET
    /// stream again there, which then replays what they missed.
    pub fn end_streams(&self) {
        // Before the sessions are listed: a stream attached after this store finds it
        // set (see [`Sessions::streams_ended`]); one attached before is detached below.
        self.streams_ended.store(true, Ordering::SeqCst);
        for session in self.all() {
            session.detach_stream();
        }
    }

    /// Whether [`Sessions::end_streams`] ran: a GET stream replays and ends.
    pub fn streams_ended(&self) -> bool {
        self.streams_ended.load(Ordering::SeqCst)
    }

    pub fn limits(&self) -> &SessionLimits {
        &self.limits
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn idle_limit(&self) -> Duration {
        Duration::from_millis(self.limits.idle_timeout_ms)
    }

    /// Opens a session for `identity`, which may have `share` open at once. Beyond its
    /// share, its own least recently used session ends; when the table is full, expired
    /// sessions go first, then the least recently used idle one.
    pub fn open(
        &self,
        identity: &Identity,
        share: usize,
        credential: Credential,
        negotiated: Negotiated,
        durable: bool,
    ) -> Result<Opened, Refused> {
        let Negotiated {
            version,
            capabilities,
            client_info,
        } = negotiated;
        let mut table = self.lock();
        let mut ended = None;
        let mut gone_ids = Vec::new();
        // One pass over the table (bounded by `max_sessions`): this identity's count
        // and its least recently used session.
        let mut own = 0;
        let mut own_oldest: Option<(&String, Instant)> = None;
        for (id, entry) in table.iter() {
            if entry.session.identity == *identity {
                own += 1;
                if own_oldest.is_none_or(|(_, used)| entry.last_used < used) {
                    own_oldest = Some((id, entry.last_used));
                }
            }
        }
        if own >= share.max(1) {
            let oldest = own_oldest.map(|(id, _)| id.clone());
            if let Some(gone) = oldest.and_then(|id| table.remove(&id)) {
                gone.session.close();
                gone_ids.push(gone.session.id.clone());
                ended = Some(Ended::OwnOldest);
            }
        }
        if table.len() >= self.limits.max_sessions {
            let idle = self.idle_limit();
            table.retain(|id, entry| {
                let keep = entry.last_used.elapsed() < idle;
                if !keep {
                    entry.session.close();
                    gone_ids.push(id.clone());
                }
                keep
            });
        }
        if table.len() >= self.limits.max_sessions {
            let oldest_idle = table
                .iter()
                .filter(|(_, entry)| entry.session.is_idle())
                .min_by_key(|(_, entry)| entry.last_used)
                .map(|(id, _)| id.clone());
            let Some(gone) = oldest_idle.and_then(|id| table.remove(&id)) else {
                drop(table);
                self.forget(&gone_ids);
                return Err(Refused::Full);
            };
            gone.session.close();
            gone_ids.push(gone.session.id.clone());
            ended = ended.or(Some(Ended::Idle));
        }
        let state = State {
            recorded: (durable && self.store.is_some()).then(Instant::now),
            ..State::default()
        };
        let session = Arc::new(Session {
            id: uuid::Uuid::new_v4().to_string(),
            identity: identity.clone(),
            credential,
            version,
            capabilities,
            client_info,
            hub: Arc::clone(&self.hub),
            state: Mutex::new(state),
        });
        table.insert(
            session.id.clone(),
            Entry {
                session: Arc::clone(&session),
                last_used: Instant::now(),
            },
        );
        drop(table);
        self.forget(&gone_ids);
        self.record(&session, true);
        Ok(Opened { session, ended })
    }

    /// Reads session `id` back from the store (this server does not hold it: it
    /// restarted, or another node opened it) for `identity`, which presents it with
    /// `credential`. Unknown, idle past the timeout, unreadable, or another identity's:
    /// [`Refused::NotFound`], as for a session never opened.
    pub fn restore(
        &self,
        id: &str,
        identity: &Identity,
        credential: Credential,
    ) -> Result<Arc<Session>, Refused> {
        let Some(store) = &self.store else {
            return Err(Refused::NotFound);
        };
        let used_since = now_ms() - self.idle_limit().as_millis() as i64;
        let record = match store.load_session(id, used_since) {
            Ok(Some(record)) => record,
            Ok(None) => return Err(Refused::NotFound),
            Err(error) => {
                log::warn!("could not read a legacy session from the store: {error}");
                return Err(Refused::NotFound);
            }
        };
        // The same answer as an unknown id: nothing tells a prober the id exists.
        if record.owner != identity.key() {
            return Err(Refused::NotFound);
        }
        let Some(version) = crate::legacy::era::LEGACY_VERSIONS
            .iter()
            .copied()
            .find(|known| *known == record.version)
        else {
            return Err(Refused::NotFound);
        };
        let capabilities = match serde_json::from_str(&record.capabilities) {
            Ok(Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        let strings = |json: &str| -> Vec<String> {
            serde_json::from_str::<Vec<String>>(json).unwrap_or_default()
        };
        let state = State {
            log_level: record.log_level.as_deref().and_then(LogLevel::parse),
            subscriptions: strings(&record.subscriptions).into_iter().collect(),
            // Ids after every id the previous server gave out (those count up from 1),
            // so that a `Last-Event-ID` from before the restart replays what is new.
            next_event_id: u64::try_from(now_ms()).unwrap_or(0),
            recorded: Some(Instant::now()),
            restored: true,
            ..State::default()
        };
        let session = Arc::new(Session {
            id: record.id,
            identity: identity.clone(),
            credential,
            version,
            capabilities: ClientCapabilities(capabilities),
            client_info: serde_json::from_str(&record.client_info).unwrap_or(Value::Null),
            hub: Arc::clone(&self.hub),
            state: Mutex::new(state),
        });
        let mut table = self.lock();
        if let Some(entry) = table.get(id) {
            // Another request restored it meanwhile: one session, whichever came first.
            return Ok(Arc::clone(&entry.session));
        }
        table.insert(
            session.id.clone(),
            Entry {
                session: Arc::clone(&session),
                last_used: Instant::now(),
            },
        );
        drop(table);
        // Status "" is no status: each followed task is announced on the first stream.
        for task_id in strings(&record.followed) {
            session.follow_task(&task_id, "");
        }
        Ok(session)
    }

    /// The caller's live session `id`, marked as used now.
    pub fn get(&self, id: &str, identity: &Identity) -> Result<Arc<Session>, Refused> {
        let mut table = self.lock();
        let idle = self.idle_limit();
        let Some(entry) = table.get_mut(id) else {
            return Err(Refused::NotFound);
        };
        if entry.last_used.elapsed() >= idle {
            if let Some(expired) = table.remove(id) {
                expired.session.close();
            }
            drop(table);
            self.forget(&[id.to_owned()]);
            return Err(Refused::NotFound);
        }
        if entry.session.identity != *identity {
            return Err(Refused::NotFound);
        }
        entry.last_used = Instant::now();
        let session = Arc::clone(&entry.session);
        drop(table);
        if session.record_due() {
            self.record(&session, false);
        }
        Ok(session)
    }

    /// Keeps a session with an open stream from expiring while the stream is quiet.
    pub fn touch(&self, id: &str) {
        let session = self.lock().get_mut(id).map(|entry| {
            entry.last_used = Instant::now();
            Arc::clone(&entry.session)
        });
        if let Some(session) = session.filter(|session| session.record_due()) {
            self.record(&session, false);
        }
    }

    /// `DELETE`: ends the caller's session.
    pub fn end(&self, id: &str, identity: &Identity) -> Result<(), Refused> {
        let mut table = self.lock();
        match table.get(id) {
            Some(entry) if entry.session.identity == *identity => {
                if let Some(ended) = table.remove(id) {
                    ended.session.close();
                }
                drop(table);
                self.forget(&[id.to_owned()]);
                Ok(())
            }
            _ => Err(Refused::NotFound),
        }
    }

    /// Ends every session whose credential `auth` no longer grants its identity (a
    /// reload revoked its token): its streams end and its next request gets 404.
    /// Returns how many ended.
    pub fn revoke(&self, auth: &Authenticator) -> usize {
        let mut table = self.lock();
        let mut revoked = Vec::new();
        table.retain(|id, entry| {
            let session = &entry.session;
            let keep = auth.still_grants(&session.credential, &session.identity);
            if !keep {
                session.close();
                revoked.push(id.clone());
            }
            keep
        });
        drop(table);
        self.forget(&revoked);
        revoked.len()
    }

    /// Whether `id` still names a session (streams end once theirs is gone).
    pub fn is_open(&self, id: &str) -> bool {
        self.lock().contains_key(id)
    }

    /// Every live session (for fan-out of server-wide notifications).
    pub fn all(&self) -> Vec<Arc<Session>> {
        self.lock()
            .values()
            .map(|entry| Arc::clone(&entry.session))
            .collect()
    }
}

#[cfg(test)]
mod tests;
