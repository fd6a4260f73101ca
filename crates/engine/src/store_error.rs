//! [`StoreError`]: why a store operation failed, in the kinds the engine acts on. Its
//! own module, below [`super::backend`] and the store traits beside it
//! ([`super::schedules::ScheduleStore`], [`super::webhooks::WebhookStore`]), which all
//! return it.

use std::error::Error;

/// Why a store operation failed. Details go to the log. Clients see what they can act
/// on: `Full`, `ReadOnly`, `Unavailable` and `NotCommitted` are temporary (503 with
/// `Retry-After`, naming the cause); the rest is a generic internal error.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No space left for the database or its log.
    #[error("the task store is full: {0}")]
    Full(Box<dyn Error + Send + Sync>),
    /// The database cannot be written (file permissions, read-only medium).
    #[error("the task store is read-only: {0}")]
    ReadOnly(Box<dyn Error + Send + Sync>),
    /// The database is damaged or not a task store.
    #[error("the task store is corrupt: {0}")]
    Corrupt(Box<dyn Error + Send + Sync>),
    /// The store cannot serve right now (no connection within its timeout, busy).
    #[error("the task store is unavailable: {0}")]
    Unavailable(Box<dyn Error + Send + Sync>),
    /// The write was not committed: the writer has stopped, or the commit failed.
    #[error("not committed: {0}")]
    NotCommitted(String),
    #[error("task store: {0}")]
    Other(Box<dyn Error + Send + Sync>),
}

impl StoreError {
    /// Whether the same write may succeed later: space returns, the medium is writable
    /// again, the writer comes back.
    pub fn is_temporary(&self) -> bool {
        matches!(
            self,
            StoreError::Full(_)
                | StoreError::ReadOnly(_)
                | StoreError::Unavailable(_)
                | StoreError::NotCommitted(_)
        )
    }

    /// How loudly a background loop that retries anyway logs this failure: a store
    /// that cannot write is logged once, when it stops and when it starts writing
    /// again, not by every loop on every round.
    pub fn log_level(&self) -> log::Level {
        if self.is_temporary() {
            log::Level::Debug
        } else {
            log::Level::Error
        }
    }
}
