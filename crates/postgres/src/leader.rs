//! The upkeep leader: the one node that runs store-wide upkeep (lease reclaim, TTL
//! expiry, outbox pruning, count folding) is the one holding a session advisory lock on
//! a dedicated connection. When that node dies, or loses its connection, the database
//! ends the session and frees the lock, and another node's janitor takes it at its next
//! round.
//!
//! The lock saves work; it is not what keeps upkeep correct: every upkeep write is
//! fenced or skips locked rows, so two leaders for a moment (a connection the database
//! has not noticed dead yet) change nothing twice.

use std::sync::Mutex;

use postgres::Client;

use super::connection::{connect, PING_TIMEOUT};

const TRY_LOCK: &str = "SELECT pg_try_advisory_lock(1952542059, 3)";

#[derive(Default)]
pub(super) struct Leader {
    /// The dedicated connection, and whether its session holds the lock.
    state: Mutex<Option<(Client, bool)>>,
}

impl Leader {
    /// Whether this node leads upkeep now: its session still holds the lock, or takes it.
    pub fn lead(&self, settings: &postgres::Config) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((client, holding)) = state.as_mut() {
            if client.is_valid(PING_TIMEOUT).is_err() {
                *state = None;
            } else if *holding {
                return true;
            }
        }
        if state.is_none() {
            match connect(settings) {
                Ok(client) => *state = Some((client, false)),
                Err(_) => return false,
            }
        }
        let Some((client, holding)) = state.as_mut() else {
            return false;
        };
        match client.query_one(TRY_LOCK, &[]) {
            Ok(row) => {
                *holding = row.try_get(0).unwrap_or(false);
                if *holding {
                    log::info!("this node now runs the store-wide upkeep");
                }
                *holding
            }
            Err(_) => {
                *state = None;
                false
            }
        }
    }
}
