//! The settings this crate reads, as the configuration file writes them:
//! `[notifications]` (the file format in `taskd-server` composes them).

use serde::Deserialize;

/// Bounds on `subscriptions/listen` streams.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotificationLimits {
    /// Streams open at once, server-wide.
    pub max_subscriptions: usize,
    /// Streams open at once per identity (endpoint, tenant, principal).
    pub max_subscriptions_per_identity: usize,
    /// Task ids one stream may name.
    pub max_task_ids: usize,
    /// Frames a stream may have written that the kernel could not send yet (the client
    /// is not reading); beyond that the stream pauses (its changes keep coalescing).
    pub queue_len: usize,
    /// How long a paused stream waits for its client to read anything before it is
    /// ended with an error.
    pub max_stall_ms: u64,
    /// Quiet time before a keep-alive comment.
    pub keep_alive_ms: u64,
    /// Longest life of a stream; it then ends gracefully and the client reconnects.
    pub max_stream_lifetime_ms: u64,
}

impl Default for NotificationLimits {
    fn default() -> Self {
        NotificationLimits {
            max_subscriptions: 8192,
            max_subscriptions_per_identity: 32,
            max_task_ids: 256,
            queue_len: 128,
            max_stall_ms: 10_000,
            keep_alive_ms: 15_000,
            max_stream_lifetime_ms: 24 * 3600 * 1000,
        }
    }
}
