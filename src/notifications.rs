//! The in-process notification hub behind `subscriptions/listen` streams.
//!
//! Publishers (list-change hooks, and the outbox relay for task changes) call the hub; the hub hands
//! each open subscription whose filter asks for the event a [`Frame`] through its own
//! bounded queue. A subscriber whose queue is full is cut off (its sender is dropped, so
//! its stream ends) rather than allowed to grow memory or slow the publisher down.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use serde_json::{Map, Value};

use crate::protocol::error::RpcError;

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
    /// A task the subscriber listens to changed (committed); re-read it.
    TaskChanged(String),
    /// The server is shutting down: answer the listen request and close.
    Close,
}

/// The receiving half handed to a listen stream.
pub struct Subscription {
    pub key: u64,
    pub frames: Receiver<Frame>,
}

struct Subscriber {
    filter: Filter,
    task_ids: HashSet<String>,
    sender: Sender<Frame>,
}

struct HubState {
    next_key: u64,
    subscribers: HashMap<u64, Subscriber>,
    closed: bool,
}

pub struct Hub {
    state: Mutex<HubState>,
    max_subscriptions: usize,
    queue_len: usize,
}

impl Hub {
    pub fn new(max_subscriptions: usize, queue_len: usize) -> Hub {
        Hub {
            state: Mutex::new(HubState {
                next_key: 1,
                subscribers: HashMap::new(),
                closed: false,
            }),
            max_subscriptions,
            queue_len,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        // A panic while holding this lock leaves the map consistent (every mutation is a
        // single insert or remove), so a poisoned lock is safe to reuse.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn subscribe(&self, filter: Filter) -> Result<Subscription, RpcError> {
        let mut state = self.lock();
        if state.closed {
            return Err(RpcError::new(
                crate::protocol::error::code::INTERNAL_ERROR,
                "Server is shutting down",
            )
            .with_status(503));
        }
        if state.subscribers.len() >= self.max_subscriptions {
            return Err(RpcError::new(
                crate::protocol::error::code::INTERNAL_ERROR,
                "Too many open subscriptions",
            )
            .with_status(503));
        }
        let key = state.next_key;
        state.next_key += 1;
        let (sender, frames) = crossbeam_channel::bounded(self.queue_len);
        let task_ids = filter.task_ids.iter().cloned().collect();
        state.subscribers.insert(
            key,
            Subscriber {
                filter,
                task_ids,
                sender,
            },
        );
        Ok(Subscription { key, frames })
    }

    pub fn unsubscribe(&self, key: u64) {
        self.lock().subscribers.remove(&key);
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

    /// Hints that a task changed (after its commit) to every subscription naming it.
    pub fn publish_task_changed(&self, task_id: &str) {
        self.publish(Frame::TaskChanged(task_id.to_owned()), |subscriber| {
            subscriber.task_ids.contains(task_id)
        });
    }

    fn publish(&self, frame: Frame, wants: impl Fn(&Subscriber) -> bool) {
        let mut state = self.lock();
        let mut cut_off = Vec::new();
        for (key, subscriber) in &state.subscribers {
            if !wants(subscriber) {
                continue;
            }
            match subscriber.sender.try_send(frame.clone()) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                    cut_off.push(*key)
                }
            }
        }
        for key in cut_off {
            if state.subscribers.remove(&key).is_some() {
                log::warn!("closed a subscription whose queue was full or gone");
            }
        }
    }

    /// Shutdown: every stream gets its graceful completion; no new subscriptions.
    pub fn close_all(&self) {
        let mut state = self.lock();
        state.closed = true;
        for (_, subscriber) in state.subscribers.drain() {
            // A full queue means the subscriber is being cut off anyway.
            let _ = subscriber.sender.try_send(Frame::Close);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_and_cuts_off_full_queues() {
        let hub = Hub::new(10, 1);
        let tools = hub
            .subscribe(Filter {
                tools_list_changed: true,
                ..Filter::default()
            })
            .unwrap();
        let prompts = hub
            .subscribe(Filter {
                prompts_list_changed: true,
                ..Filter::default()
            })
            .unwrap();
        hub.publish_list_changed(ListKind::Tools);
        assert!(matches!(tools.frames.try_recv(), Ok(Frame::Notify { .. })));
        assert!(prompts.frames.try_recv().is_err());
        hub.publish_list_changed(ListKind::Tools);
        hub.publish_list_changed(ListKind::Tools); // queue of 1 is full: cut off
        assert_eq!(hub.open_subscriptions(), 1);
        hub.close_all();
        assert_eq!(prompts.frames.try_recv(), Ok(Frame::Close));
        assert!(hub.subscribe(Filter::default()).is_err());
    }
}
