//! The in-process notification hub behind `subscriptions/listen` streams.
//!
//! Publishers (list-change hooks, and the outbox relay for task changes) call the hub; the hub hands
//! each open subscription whose filter asks for the event a [`Frame`] through its own
//! bounded queue. A subscriber whose queue is full is cut off (its sender is dropped, so
//! its stream ends) rather than allowed to grow memory or slow the publisher down.

use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use serde_json::{Map, Value};

use crate::auth::Identity;
use crate::config::NotificationLimits;
use crate::protocol::error::{code, RpcError};

/// What a subscription asked for and the server agreed to send.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    pub tools_list_changed: bool,
    pub prompts_list_changed: bool,
    /// `notifications/resources/updated` (only legacy sessions subscribe to resources;
    /// their relay asks for these).
    pub resources_updated: bool,
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
    fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "notifications/tools/list_changed",
            ListKind::Prompts => "notifications/prompts/list_changed",
        }
    }
}

/// One message for a subscription's stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A notification to write (the stream adds the subscription id to `_meta`).
    Notify {
        method: String,
        params: Map<String, Value>,
    },
    /// A task the subscriber listens to changed; `seq` is the outbox row of the
    /// (committed) change, so a stream can ignore changes from before it opened.
    TaskChanged { task_id: String, seq: i64 },
    /// The server is shutting down: answer the listen request and close.
    Close,
}

/// The receiving half handed to a listen stream.
#[derive(Debug)]
pub struct Subscription {
    pub key: u64,
    pub frames: Receiver<Frame>,
}

struct Subscriber {
    owner: Identity,
    filter: Filter,
    task_ids: HashSet<String>,
    sender: Sender<Frame>,
}

struct HubState {
    next_key: u64,
    subscribers: HashMap<u64, Subscriber>,
    /// Which subscriptions follow each task, so a task-change hint (one per committed
    /// task change) costs a lookup, not a pass over every open subscription.
    by_task: HashMap<String, Vec<u64>>,
    closed: bool,
}

impl HubState {
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
    limits: NotificationLimits,
}

impl Hub {
    pub fn new(limits: NotificationLimits) -> Hub {
        Hub {
            state: Mutex::new(HubState {
                next_key: 1,
                subscribers: HashMap::new(),
                by_task: HashMap::new(),
                closed: false,
            }),
            followed: Condvar::new(),
            limits,
        }
    }

    pub fn limits(&self) -> &NotificationLimits {
        &self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        // A panic while holding this lock leaves the map consistent (every mutation is a
        // single insert or remove), so a poisoned lock is safe to reuse.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Opens a subscription for `owner`, within the server-wide and per-identity caps.
    pub fn subscribe(&self, owner: &Identity, filter: Filter) -> Result<Subscription, RpcError> {
        let unavailable = |why: &str| RpcError::new(code::INTERNAL_ERROR, why).with_status(503);
        let mut state = self.lock();
        if state.closed {
            return Err(unavailable("Server is shutting down"));
        }
        if state.subscribers.len() >= self.limits.max_subscriptions {
            return Err(unavailable("Too many open subscriptions"));
        }
        let owned = state
            .subscribers
            .values()
            .filter(|subscriber| subscriber.owner == *owner)
            .count();
        if owned >= self.limits.max_subscriptions_per_identity {
            return Err(RpcError::new(
                code::INTERNAL_ERROR,
                "Too many open subscriptions for this client",
            )
            .with_status(429));
        }
        let key = state.next_key;
        state.next_key += 1;
        let (sender, frames) = crossbeam_channel::bounded(self.limits.queue_len);
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
                sender,
            },
        );
        Ok(Subscription { key, frames })
    }

    pub fn unsubscribe(&self, key: u64) {
        self.lock().remove(key);
    }

    pub fn open_subscriptions(&self) -> usize {
        self.lock().subscribers.len()
    }

    /// Announces that a catalog list changed to every subscription that asked.
    pub fn publish_list_changed(&self, kind: ListKind) {
        let frame = Frame::Notify {
            method: kind.method().into(),
            params: Map::new(),
        };
        self.publish(frame, |subscriber| match kind {
            ListKind::Tools => subscriber.filter.tools_list_changed,
            ListKind::Prompts => subscriber.filter.prompts_list_changed,
        });
    }

    /// Announces that the resource at `uri` changed to every subscription that asked.
    pub fn publish_resource_updated(&self, uri: &str) {
        let mut params = Map::new();
        params.insert("uri".into(), Value::String(uri.to_owned()));
        let frame = Frame::Notify {
            method: "notifications/resources/updated".into(),
            params,
        };
        self.publish(frame, |subscriber| subscriber.filter.resources_updated);
    }

    /// Whether any open subscription follows a task (the relay reads the outbox only
    /// then).
    pub fn follows_any_task(&self) -> bool {
        !self.lock().by_task.is_empty()
    }

    /// Waits up to `timeout` until a subscription follows a task; whether one does.
    ///
    /// The relay sleeps here while nobody listens, instead of waking (and spinning in
    /// its channel receive) for every commit only to find no one to tell.
    pub fn await_followers(&self, timeout: Duration) -> bool {
        let state = self.lock();
        if !state.by_task.is_empty() {
            return true;
        }
        let (state, _) = self
            .followed
            .wait_timeout(state, timeout)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        !state.by_task.is_empty()
    }

    /// Hints that a task changed (after its commit, outbox row `seq`) to every
    /// subscription naming it.
    pub fn publish_task_changed(&self, task_id: &str, seq: i64) {
        let mut state = self.lock();
        let Some(keys) = state.by_task.get(task_id) else {
            return;
        };
        let frame = Frame::TaskChanged {
            task_id: task_id.to_owned(),
            seq,
        };
        let keys = keys.clone();
        Self::deliver(&mut state, &frame, keys);
    }

    fn publish(&self, frame: Frame, wants: impl Fn(&Subscriber) -> bool) {
        let mut state = self.lock();
        let keys: Vec<u64> = state
            .subscribers
            .iter()
            .filter(|(_, subscriber)| wants(subscriber))
            .map(|(key, _)| *key)
            .collect();
        Self::deliver(&mut state, &frame, keys);
    }

    /// Queues `frame` for each of `keys`, cutting off those whose queue is full or gone.
    fn deliver(state: &mut HubState, frame: &Frame, keys: Vec<u64>) {
        for key in keys {
            let Some(subscriber) = state.subscribers.get(&key) else {
                continue;
            };
            if subscriber.sender.try_send(frame.clone()).is_err() && state.remove(key).is_some() {
                log::warn!("closed a subscription whose queue was full or gone");
            }
        }
    }

    /// Shutdown: every stream gets its graceful completion; no new subscriptions.
    pub fn close_all(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.by_task.clear();
        for (_, subscriber) in state.subscribers.drain() {
            // A full queue means the subscriber is being cut off anyway.
            let _ = subscriber.sender.try_send(Frame::Close);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn someone() -> Identity {
        Identity {
            endpoint: "/mcp".into(),
            tenant: String::new(),
            principal: "someone".into(),
        }
    }

    #[test]
    fn filters_and_cuts_off_full_queues() {
        let hub = Hub::new(NotificationLimits {
            queue_len: 1,
            ..NotificationLimits::default()
        });
        let tools = hub
            .subscribe(
                &someone(),
                Filter {
                    tools_list_changed: true,
                    ..Filter::default()
                },
            )
            .unwrap();
        let prompts = hub
            .subscribe(
                &someone(),
                Filter {
                    prompts_list_changed: true,
                    ..Filter::default()
                },
            )
            .unwrap();
        hub.publish_list_changed(ListKind::Tools);
        assert!(matches!(tools.frames.try_recv(), Ok(Frame::Notify { .. })));
        assert!(prompts.frames.try_recv().is_err());
        hub.publish_list_changed(ListKind::Tools);
        hub.publish_list_changed(ListKind::Tools); // queue of 1 is full: cut off
        assert_eq!(hub.open_subscriptions(), 1);
        hub.close_all();
        assert_eq!(prompts.frames.try_recv(), Ok(Frame::Close));
        assert!(hub.subscribe(&someone(), Filter::default()).is_err());
    }

    #[test]
    fn task_hints_reach_only_the_subscriptions_naming_the_task() {
        let hub = Hub::new(NotificationLimits {
            queue_len: 1,
            ..NotificationLimits::default()
        });
        let follows = |ids: &[&str]| Filter {
            task_ids: ids.iter().map(|id| (*id).to_owned()).collect(),
            ..Filter::default()
        };
        let a = hub.subscribe(&someone(), follows(&["a"])).unwrap();
        let ab = hub.subscribe(&someone(), follows(&["a", "b"])).unwrap();
        hub.publish_task_changed("b", 1);
        assert!(a.frames.try_recv().is_err());
        assert!(matches!(
            ab.frames.try_recv(),
            Ok(Frame::TaskChanged { seq: 1, .. })
        ));
        hub.publish_task_changed("c", 2);
        assert!(a.frames.try_recv().is_err() && ab.frames.try_recv().is_err());
        // `ab`'s queue of 1 fills up on the second hint for "a": it is cut off, and
        // forgotten for "b" too.
        hub.publish_task_changed("a", 3);
        assert!(matches!(
            a.frames.try_recv(),
            Ok(Frame::TaskChanged { seq: 3, .. })
        ));
        hub.publish_task_changed("a", 4);
        assert_eq!(hub.open_subscriptions(), 1);
        hub.publish_task_changed("b", 5);
        hub.unsubscribe(a.key);
        assert_eq!(hub.open_subscriptions(), 0);
        assert!(hub.lock().by_task.is_empty());
    }

    #[test]
    fn caps_subscriptions_per_identity() {
        let hub = Hub::new(NotificationLimits {
            max_subscriptions_per_identity: 2,
            ..NotificationLimits::default()
        });
        let _first = hub.subscribe(&someone(), Filter::default()).unwrap();
        let second = hub.subscribe(&someone(), Filter::default()).unwrap();
        assert_eq!(
            hub.subscribe(&someone(), Filter::default())
                .unwrap_err()
                .http_status,
            429
        );
        let other = Identity {
            principal: "other".into(),
            ..someone()
        };
        assert!(hub.subscribe(&other, Filter::default()).is_ok());
        hub.unsubscribe(second.key);
        assert!(hub.subscribe(&someone(), Filter::default()).is_ok());
    }
}
