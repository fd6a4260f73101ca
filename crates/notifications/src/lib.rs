//! The in-process notification hub behind `subscriptions/listen` streams.
//!
//! Publishers (list-change hooks, and the outbox relay for task changes) call the hub; the
//! hub marks the change in the [`Mailbox`] of each open subscription whose filter asks for
//! it, and wakes that subscription's stream. A mailbox coalesces: a list that changed
//! twice is one pending item, a task hinted at a hundred times is one pending task id
//! (the stream re-reads the task anyway), a resource updated twice is one pending uri.
//! What a subscription can have pending is thus bounded by its own filter and the
//! catalog — two lists, at most `max_task_ids` tasks, the served resources — however
//! bursty the publishers, so publishing never blocks, never allocates per hint, and
//! never has to cut a subscriber off. A subscriber that stops reading is the stream's
//! business (see `transport::listen` in `taskd-server`).
//!
//! May depend on: `taskd-protocol`. Must never know: tasks, stores, tools,
//! transports. Publishers and subscribers above it hold the hub; it calls none of them.

mod config;

pub use config::NotificationLimits;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use arc_swap::ArcSwap;
use serde_json::{Map, Value};

use taskd_protocol::Identity;
use taskd_protocol::{code, RpcError};

/// What a subscription asked for and the server agreed to send.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    pub tools_list_changed: bool,
    pub prompts_list_changed: bool,
    /// Tasks whose changes the subscriber hears about (hints only: the stream re-reads
    /// each task with the subscriber's own identity before sending anything).
    pub task_ids: Vec<String>,
}

impl Filter {
    /// The `notifications` object of the acknowledgement: only what is honoured.
    pub fn to_json(&self) -> Value {
        let mut honoured = Map::new();
        if self.tools_list_changed {
            honoured.insert("toolsListChanged".into(), Value::Bool(true));
        }
        if self.prompts_list_changed {
            honoured.insert("promptsListChanged".into(), Value::Bool(true));
        }
        if !self.task_ids.is_empty() {
            honoured.insert("taskIds".into(), Value::from(self.task_ids.clone()));
        }
        Value::Object(honoured)
    }
}

/// Catalog lists whose changes can be announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Tools,
    Prompts,
}

impl ListKind {
    pub fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "notifications/tools/list_changed",
            ListKind::Prompts => "notifications/prompts/list_changed",
        }
    }
}

/// One message for a subscription's stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A catalog list changed.
    ListChanged(ListKind),
    /// The resource at this uri changed (legacy sessions' `resources/subscribe`).
    ResourceUpdated(String),
    /// A task the subscriber listens to changed; `seq` is the outbox row of its newest
    /// (committed) change, so a stream can ignore changes from before it opened.
    TaskChanged { task_id: String, seq: i64 },
}

/// What a stream's wait for its mailbox brought.
#[derive(Debug, PartialEq)]
pub enum Delivery {
    /// Everything pending, oldest first, each list or task once.
    Frames(Vec<Frame>),
    /// The server is shutting down and nothing is pending: answer the listen and close.
    Close,
    /// A reload revoked the credential the stream was opened with: end it at once,
    /// with an error, dropping whatever is pending.
    Revoked,
    /// Nothing happened within the wait.
    Idle,
}

/// A subscription's pending changes, coalesced (see the module doc).
#[derive(Debug, Default)]
struct Pending {
    /// What changed, each list or task once, in order of its first change since the
    /// stream last took them (so frames keep publish order).
    order: VecDeque<Pended>,
    tools: bool,
    prompts: bool,
    /// The outbox row of the newest change of each pending task.
    task_seq: HashMap<String, i64>,
    resources: HashSet<String>,
    closing: bool,
    revoked: bool,
}

#[derive(Debug)]
enum Pended {
    List(ListKind),
    Resource(String),
    Task(String),
}

/// Where the hub leaves a subscription's changes and its stream picks them up.
#[derive(Debug, Default)]
pub struct Mailbox {
    pending: Mutex<Pending>,
    wake: Condvar,
}

impl Mailbox {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // Every mutation is a handful of field updates that cannot panic halfway.
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn post_list(&self, kind: ListKind) {
        let mut pending = self.lock();
        let flag = match kind {
            ListKind::Tools => &mut pending.tools,
            ListKind::Prompts => &mut pending.prompts,
        };
        if !std::mem::replace(flag, true) {
            pending.order.push_back(Pended::List(kind));
        }
        self.wake.notify_one();
    }

    fn post_resource(&self, uri: &str) {
        let mut pending = self.lock();
        if pending.resources.insert(uri.to_owned()) {
            pending.order.push_back(Pended::Resource(uri.to_owned()));
        }
        self.wake.notify_one();
    }

    fn post_task(&self, task_id: &str, seq: i64) {
        let mut pending = self.lock();
        match pending.task_seq.get_mut(task_id) {
            Some(newest) => *newest = (*newest).max(seq),
            None => {
                pending.task_seq.insert(task_id.to_owned(), seq);
                pending.order.push_back(Pended::Task(task_id.to_owned()));
            }
        }
        self.wake.notify_one();
    }

    fn close(&self) {
        self.lock().closing = true;
        self.wake.notify_one();
    }

    fn revoke(&self) {
        let mut pending = self.lock();
        pending.revoked = true;
        pending.closing = true;
        self.wake.notify_one();
    }

    /// Whether the server is shutting down.
    pub fn is_closing(&self) -> bool {
        self.lock().closing
    }

    /// Takes everything pending, waiting up to `timeout` for something to arrive.
    pub fn wait(&self, timeout: Duration) -> Delivery {
        let mut pending = self.lock();
        if pending.revoked {
            return Delivery::Revoked;
        }
        if Self::is_empty(&pending) && !pending.closing {
            pending = self
                .wake
                .wait_timeout_while(pending, timeout, |pending| {
                    Self::is_empty(pending) && !pending.closing
                })
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
        if pending.revoked {
            return Delivery::Revoked;
        }
        if Self::is_empty(&pending) {
            return if pending.closing {
                Delivery::Close
            } else {
                Delivery::Idle
            };
        }
        pending.tools = false;
        pending.prompts = false;
        pending.resources.clear();
        let order = std::mem::take(&mut pending.order);
        let mut seqs = std::mem::take(&mut pending.task_seq);
        let frames = order
            .into_iter()
            .filter_map(|pended| match pended {
                Pended::List(kind) => Some(Frame::ListChanged(kind)),
                Pended::Resource(uri) => Some(Frame::ResourceUpdated(uri)),
                Pended::Task(task_id) => {
                    let seq = seqs.remove(&task_id)?;
                    Some(Frame::TaskChanged { task_id, seq })
                }
            })
            .collect();
        Delivery::Frames(frames)
    }

    fn is_empty(pending: &Pending) -> bool {
        pending.order.is_empty()
    }
}

/// The receiving half handed to a listen stream.
#[derive(Debug)]
pub struct Subscription {
    pub key: u64,
    pub mailbox: Arc<Mailbox>,
}

struct Subscriber {
    owner: Identity,
    filter: Filter,
    task_ids: HashSet<String>,
    mailbox: Arc<Mailbox>,
}

struct HubState {
    next_key: u64,
    subscribers: HashMap<u64, Subscriber>,
    /// Which subscriptions follow each task, so a task-change hint (one per committed
    /// task change) costs a lookup, not a pass over every open subscription.
    by_task: HashMap<String, Vec<u64>>,
    /// Mailboxes of relays (see [`Hub::relay`]).
    relays: Vec<Arc<Mailbox>>,
    /// Tasks the relays follow, each with how many of the relays' clients follow it.
    relay_tasks: HashMap<String, usize>,
    /// Calls waiting for a task (see [`Hub::watch_task`]), by task id.
    watchers: HashMap<String, Vec<(u64, Arc<Mailbox>)>>,
    closed: bool,
}

impl HubState {
    fn follows_any_task(&self) -> bool {
        !self.by_task.is_empty() || !self.relay_tasks.is_empty() || !self.watchers.is_empty()
    }

    fn remove(&mut self, key: u64) -> Option<Subscriber> {
        let subscriber = self.subscribers.remove(&key)?;
        for task_id in &subscriber.task_ids {
            if let Some(keys) = self.by_task.get_mut(task_id) {
                keys.retain(|k| *k != key);
                if keys.is_empty() {
                    self.by_task.remove(task_id);
                }
            }
        }
        Some(subscriber)
    }
}

pub struct Hub {
    state: Mutex<HubState>,
    /// Signalled when a subscription that follows tasks opens (see [`Hub::await_followers`]).
    followed: Condvar,
    /// `[notifications]`, replaced by a reload: caps apply to subscriptions opened from
    /// then on, and each stream keeps the pacing it opened with.
    limits: ArcSwap<NotificationLimits>,
}

impl Hub {
    pub fn new(limits: NotificationLimits) -> Hub {
        Hub {
            state: Mutex::new(HubState {
                next_key: 1,
                subscribers: HashMap::new(),
                by_task: HashMap::new(),
                relays: Vec::new(),
                relay_tasks: HashMap::new(),
                watchers: HashMap::new(),
                closed: false,
            }),
            followed: Condvar::new(),
            limits: ArcSwap::from_pointee(limits),
        }
    }

    /// The limits in force now.
    pub fn limits(&self) -> Arc<NotificationLimits> {
        self.limits.load_full()
    }

    /// Puts new limits in force (a reload).
    pub fn set_limits(&self, limits: NotificationLimits) {
        self.limits.store(Arc::new(limits));
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        // A panic while holding this lock leaves the map consistent (every mutation is a
        // single insert or remove), so a poisoned lock is safe to reuse.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Opens a subscription for `owner`, within the server-wide and per-identity caps.
    pub fn subscribe(&self, owner: &Identity, filter: Filter) -> Result<Subscription, RpcError> {
        let unavailable = |why: &str| RpcError::new(code::INTERNAL_ERROR, why).with_status(503);
        let limits = self.limits.load();
        let mut state = self.lock();
        if state.closed {
            return Err(unavailable("Server is shutting down"));
        }
        if state.subscribers.len() >= limits.max_subscriptions {
            return Err(unavailable("Too many open subscriptions"));
        }
        let owned = state
            .subscribers
            .values()
            .filter(|subscriber| subscriber.owner == *owner)
            .count();
        if owned >= limits.max_subscriptions_per_identity {
            return Err(RpcError::new(
                code::INTERNAL_ERROR,
                "Too many open subscriptions for this client",
            )
            .with_status(429));
        }
        let key = state.next_key;
        state.next_key += 1;
        let mailbox = Arc::new(Mailbox::default());
        let task_ids: HashSet<String> = filter.task_ids.iter().cloned().collect();
        for task_id in &task_ids {
            state.by_task.entry(task_id.clone()).or_default().push(key);
        }
        if !task_ids.is_empty() {
            self.followed.notify_all();
        }
        state.subscribers.insert(
            key,
            Subscriber {
                owner: owner.clone(),
                filter,
                task_ids,
                mailbox: Arc::clone(&mailbox),
            },
        );
        Ok(Subscription { key, mailbox })
    }

    pub fn unsubscribe(&self, key: u64) {
        self.lock().remove(key);
    }

    /// Ends subscription `key` because its credential was revoked: its stream stops
    /// with an error at its next wait, and the subscription no longer hears anything.
    pub fn revoke(&self, key: u64) {
        if let Some(subscriber) = self.lock().remove(key) {
            subscriber.mailbox.revoke();
        }
    }

    pub fn open_subscriptions(&self) -> usize {
        self.lock().subscribers.len()
    }

    /// Announces that a catalog list changed to every subscription that asked.
    pub fn publish_list_changed(&self, kind: ListKind) {
        let state = self.lock();
        for subscriber in state.subscribers.values() {
            let wants = match kind {
                ListKind::Tools => subscriber.filter.tools_list_changed,
                ListKind::Prompts => subscriber.filter.prompts_list_changed,
            };
            if wants {
                subscriber.mailbox.post_list(kind);
            }
        }
        for relay in &state.relays {
            relay.post_list(kind);
        }
    }

    /// Announces that the resource at `uri` changed, to the relays.
    pub fn publish_resource_updated(&self, uri: &str) {
        for relay in &self.lock().relays {
            relay.post_resource(uri);
        }
    }

    /// A mailbox that hears every list change and every resource update, and changes
    /// of the tasks the relays follow, for a relay that fans them out to clients of its
    /// own (the legacy sessions, which filter resource updates by their
    /// `resources/subscribe` and task changes by the tasks each session follows). It is not a subscription: no
    /// cap applies and [`Hub::open_subscriptions`] does not count it. `None` once the
    /// hub is closed.
    pub fn relay(&self) -> Option<Arc<Mailbox>> {
        let mut state = self.lock();
        if state.closed {
            return None;
        }
        let mailbox = Arc::new(Mailbox::default());
        state.relays.push(Arc::clone(&mailbox));
        Some(mailbox)
    }

    /// Whether any open subscription follows a task (the relay reads the outbox only
    /// then).
    pub fn follows_any_task(&self) -> bool {
        self.lock().follows_any_task()
    }

    /// Waits up to `timeout` until a subscription follows a task; whether one does. A
    /// closed hub answers `false` at once.
    ///
    /// The relay sleeps here while nobody listens, instead of waking (and spinning in
    /// its channel receive) for every commit only to find no one to tell.
    pub fn await_followers(&self, timeout: Duration) -> bool {
        let state = self.lock();
        if state.follows_any_task() {
            return true;
        }
        if state.closed {
            return false;
        }
        let (state, _) = self
            .followed
            .wait_timeout(state, timeout)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.follows_any_task()
    }

    /// Makes the relays hear changes of `task_id` (once per call: each call is undone
    /// by one [`Hub::relay_unfollow_task`]). The relays get a first hint at once, so a
    /// change committed before this call is not missed: they re-read the task anyway.
    pub fn relay_follow_task(&self, task_id: &str) {
        let mut state = self.lock();
        if state.closed {
            return;
        }
        *state.relay_tasks.entry(task_id.to_owned()).or_default() += 1;
        self.followed.notify_all();
        for relay in &state.relays {
            relay.post_task(task_id, 0);
        }
    }

    pub fn relay_unfollow_task(&self, task_id: &str) {
        let mut state = self.lock();
        if let Some(count) = state.relay_tasks.get_mut(task_id) {
            *count -= 1;
            if *count == 0 {
                state.relay_tasks.remove(task_id);
            }
        }
    }

    /// Hints that a task changed (after its commit, outbox row `seq`) to every
    /// subscription naming it, and to the relays if they follow it.
    pub fn publish_task_changed(&self, task_id: &str, seq: i64) {
        let state = self.lock();
        for key in state.by_task.get(task_id).into_iter().flatten() {
            if let Some(subscriber) = state.subscribers.get(key) {
                subscriber.mailbox.post_task(task_id, seq);
            }
        }
        if state.relay_tasks.contains_key(task_id) {
            for relay in &state.relays {
                relay.post_task(task_id, seq);
            }
        }
        for (_, mailbox) in state.watchers.get(task_id).into_iter().flatten() {
            mailbox.post_task(task_id, seq);
        }
    }

    /// Wakes one waiting call whenever `task_id` changes, until the watch is dropped.
    /// Not a subscription: no cap applies (callers bound their own waits), and it
    /// carries hints only, so the caller re-reads the task with its own identity.
    pub fn watch_task(&self, task_id: &str) -> TaskWatch<'_> {
        let mut state = self.lock();
        let key = state.next_key;
        state.next_key += 1;
        let mailbox = Arc::new(Mailbox::default());
        if state.closed {
            mailbox.close();
        } else {
            state
                .watchers
                .entry(task_id.to_owned())
                .or_default()
                .push((key, Arc::clone(&mailbox)));
            self.followed.notify_all();
        }
        TaskWatch {
            hub: self,
            key,
            task_id: task_id.to_owned(),
            mailbox,
        }
    }

    /// Whether [`Hub::close_all`] has run: the server is shutting down.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Shutdown: every stream gets its graceful completion; no new subscriptions.
    pub fn close_all(&self) {
        let mut state = self.lock();
        state.closed = true;
        // Whoever waits for a follower (the outbox relay) wakes to see the hub closed.
        self.followed.notify_all();
        state.by_task.clear();
        state.relay_tasks.clear();
        for (_, subscriber) in state.subscribers.drain() {
            subscriber.mailbox.close();
        }
        for relay in state.relays.drain(..) {
            relay.close();
        }
        for (_, watchers) in state.watchers.drain() {
            for (_, mailbox) in watchers {
                mailbox.close();
            }
        }
    }
}

/// A call's watch on one task (see [`Hub::watch_task`]); dropping it stops the hints.
pub struct TaskWatch<'a> {
    hub: &'a Hub,
    key: u64,
    task_id: String,
    mailbox: Arc<Mailbox>,
}

impl TaskWatch<'_> {
    /// Waits up to `timeout` for a change of the task; `false` once the server is
    /// shutting down.
    pub fn wait(&self, timeout: Duration) -> bool {
        !matches!(
            self.mailbox.wait(timeout),
            Delivery::Close | Delivery::Revoked
        )
    }
}

impl Drop for TaskWatch<'_> {
    fn drop(&mut self) {
        let mut state = self.hub.lock();
        if let Some(watchers) = state.watchers.get_mut(&self.task_id) {
            watchers.retain(|(key, _)| *key != self.key);
            if watchers.is_empty() {
                state.watchers.remove(&self.task_id);
            }
        }
    }
}

#[cfg(test)]
mod tests;
