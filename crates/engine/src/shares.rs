//! Each identity's share of the server, as the engine applies it: its weight and
//! priority in the job queue and its task quotas ([`Share`], from the settings in force),
//! the pacing of its task creations ([`Pacer`]) and the estimate of its tasks not yet
//! terminal ([`LiveTaskEstimates`]). Which identity gets which share is the
//! configuration's business (`taskd-server`'s `shares`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One identity's share.
#[derive(Debug, Clone, PartialEq)]
pub struct Share {
    /// Turns it takes in the queue for one of an identity of weight 1.
    pub weight: u32,
    /// Added to its jobs' tool priorities.
    pub priority: i32,
    /// Legacy sessions it may have open (`sessions.max_sessions_per_identity`).
    pub max_sessions: usize,
    /// Tasks not yet terminal it may have (`tasks.max_live_tasks_per_identity`).
    pub max_live_tasks: u64,
    /// Task creations a second, on average; 0: no limit.
    pub creations_per_sec: f64,
    /// Creations it may make at once before the rate paces it.
    pub creation_burst: u32,
    /// Bridged calls it may have waiting for their task at once.
    pub max_inline_waits: usize,
    /// Dashboard logins it may have at once.
    pub max_dashboard_logins: usize,
}

/// Each identity's task creations a second, as a token bucket: `creation_burst` at
/// once, then `creations_per_sec` on average. In memory: a restart gives everyone a
/// full bucket, which a rate allows anyway.
#[derive(Default)]
pub struct Pacer {
    buckets: Mutex<HashMap<String, Bucket>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
    /// The rate and burst it was last paced by.
    rate: f64,
    burst: f64,
}

impl Bucket {
    /// What it holds at `now`, refilled at its rate up to its burst.
    fn at(&self, now: Instant) -> f64 {
        (self.tokens + elapsed_s(self.at, now) * self.rate).min(self.burst)
    }
}

/// Buckets kept before the full ones are dropped (a full bucket is what a new
/// identity gets, so dropping it changes nothing).
const MAX_BUCKETS: usize = 4096;

impl Pacer {
    /// Takes one creation from the bucket of the identity keyed `owner`; when it is
    /// empty, how long until it holds one again.
    pub fn take(&self, owner: &str, share: &Share, now: Instant) -> Result<(), f64> {
        if share.creations_per_sec <= 0.0 {
            return Ok(());
        }
        let burst = f64::from(share.creation_burst.max(1));
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(owner) {
            buckets.retain(|_, bucket| bucket.at(now) < bucket.burst);
        }
        let rate = share.creations_per_sec;
        let bucket = buckets.entry(owner.to_owned()).or_insert(Bucket {
            tokens: burst,
            at: now,
            rate,
            burst,
        });
        // A reload may have changed the share: refill at the old rate, cap at the new.
        bucket.tokens = bucket.at(now).min(burst);
        (bucket.at, bucket.rate, bucket.burst) = (now, rate, burst);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err((1.0 - bucket.tokens) / share.creations_per_sec)
        }
    }
}

/// Each identity's tasks not yet terminal, as last counted in the store plus the
/// creations admitted since. The quota is checked against this estimate, so a creation
/// costs a store count at most once per [`RECOUNT_EVERY`] per identity instead of one
/// count each: a count walks up to the quota's worth of index entries (100,000 by
/// default), and one per creation made creations of a busy identity quadratic.
///
/// The store stays the authority: every estimate is a recent count, a restart starts
/// from a fresh count, and a refusal is confirmed by a count no older than
/// [`RECOUNT_WHEN_FULL`]. Tasks that end after a count are seen at the next one, and
/// admitted creations that store nothing (an idempotent repeat, a failed write) count
/// until then: the estimate errs towards refusing, for at most a second. On PostgreSQL,
/// creations on other nodes since the count are not in a node's estimate: the quota can
/// be passed by what the other nodes admit in one [`RECOUNT_EVERY`].
#[derive(Default)]
pub struct LiveTaskEstimates {
    estimates: Mutex<HashMap<String, Estimate>>,
}

struct Estimate {
    counted: u64,
    at: Instant,
    admitted_since: u64,
}

/// How old a count may be before the next creation counts again.
pub const RECOUNT_EVERY: Duration = Duration::from_secs(1);

/// How old a count that said "full" may be and still refuse without counting again:
/// bounds the counting a client over its quota can cause to 10 a second.
pub const RECOUNT_WHEN_FULL: Duration = Duration::from_millis(100);

/// Estimates kept before the old ones are dropped (a dropped one is counted afresh).
const MAX_ESTIMATES: usize = 4096;

impl LiveTaskEstimates {
    /// Whether the identity keyed `owner` may have one more task not yet terminal under
    /// `limit`; if so, the creation is added to its estimate. `count(at_most)` counts
    /// its live tasks in the store, and is called without the estimates' lock held.
    pub fn admit<E>(
        &self,
        owner: &str,
        limit: u64,
        now: Instant,
        count: impl FnOnce(u64) -> Result<u64, E>,
    ) -> Result<bool, E> {
        {
            let mut estimates = self.estimates.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(estimate) = estimates.get_mut(owner) {
                let age = now.saturating_duration_since(estimate.at);
                let live = estimate.counted.saturating_add(estimate.admitted_since);
                if age < RECOUNT_EVERY && live < limit {
                    estimate.admitted_since += 1;
                    return Ok(true);
                }
                if age < RECOUNT_WHEN_FULL {
                    return Ok(false);
                }
            }
        }
        let counted = count(limit)?;
        let admitted = counted < limit;
        let mut estimates = self.estimates.lock().unwrap_or_else(|p| p.into_inner());
        if estimates.len() >= MAX_ESTIMATES && !estimates.contains_key(owner) {
            estimates
                .retain(|_, estimate| now.saturating_duration_since(estimate.at) < RECOUNT_EVERY);
        }
        estimates.insert(
            owner.to_owned(),
            Estimate {
                counted,
                at: now,
                admitted_since: u64::from(admitted),
            },
        );
        Ok(admitted)
    }
}

fn elapsed_s(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64()
}

/// An identity's quota that a request went beyond (issue 29; `shares`): the label of
/// `mcp_taskd_quota_refusals_total`. Never the identity itself.
#[derive(Debug, Clone, Copy)]
pub enum Quota {
    /// An `initialize` beyond the identity's sessions: its oldest session ended.
    Sessions,
    /// A task creation beyond the identity's tasks not yet terminal.
    LiveTasks,
    /// A task creation faster than the identity's rate.
    TaskRate,
    /// A bridged call beyond the identity's waiting calls: it got its handle at once.
    InlineWaits,
    /// A dashboard login beyond the identity's logins: its oldest login ended.
    DashboardLogins,
}

impl Quota {
    pub const ALL: [Quota; 5] = [
        Quota::Sessions,
        Quota::LiveTasks,
        Quota::TaskRate,
        Quota::InlineWaits,
        Quota::DashboardLogins,
    ];

    /// The name clients and operators see (error data, metric label, docs).
    pub fn name(self) -> &'static str {
        match self {
            Quota::Sessions => "sessions",
            Quota::LiveTasks => "live_tasks",
            Quota::TaskRate => "task_rate",
            Quota::InlineWaits => "inline_waits",
            Quota::DashboardLogins => "dashboard_logins",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A share with every quota at a harmless value.
    fn unlimited() -> Share {
        Share {
            weight: 1,
            priority: 0,
            max_sessions: 1,
            max_live_tasks: 1,
            creations_per_sec: 0.0,
            creation_burst: 1,
            max_inline_waits: 1,
            max_dashboard_logins: 1,
        }
    }

    #[test]
    fn the_pacer_allows_a_burst_then_the_rate_per_identity() {
        let mut share = unlimited();
        share.creations_per_sec = 10.0;
        share.creation_burst = 3;
        let pacer = Pacer::default();
        let start = Instant::now();
        for _ in 0..3 {
            assert!(pacer.take("a", &share, start).is_ok());
        }
        let wait = pacer.take("a", &share, start).unwrap_err();
        assert!((wait - 0.1).abs() < 1e-9, "{wait}");
        assert!(pacer.take("b", &share, start).is_ok(), "another identity");
        let later = start + std::time::Duration::from_millis(100);
        assert!(pacer.take("a", &share, later).is_ok(), "refilled");
        assert!(pacer.take("a", &share, later).is_err());
        share.creations_per_sec = 0.0;
        assert!(pacer.take("a", &share, later).is_ok(), "no limit");
    }

    #[test]
    fn live_task_estimates_count_in_the_store_once_a_second_and_confirm_refusals() {
        let estimates = LiveTaskEstimates::default();
        let counts = std::cell::Cell::new(0);
        let store = |live: u64| {
            let counts = &counts;
            move |_at_most: u64| -> Result<u64, ()> {
                counts.set(counts.get() + 1);
                Ok(live)
            }
        };
        let start = Instant::now();
        // The first creation counts; the next ones within the second add to the count.
        assert_eq!(estimates.admit("a", 3, start, store(1)), Ok(true));
        assert_eq!(estimates.admit("a", 3, start, store(1)), Ok(true));
        assert_eq!(counts.get(), 1);
        // Estimated full (1 counted + 2 admitted): refused at once without a count...
        assert_eq!(estimates.admit("a", 3, start, store(0)), Ok(false));
        assert_eq!(counts.get(), 1);
        // ...until the count is older than RECOUNT_WHEN_FULL: then the store decides.
        let later = start + RECOUNT_WHEN_FULL;
        assert_eq!(estimates.admit("a", 3, later, store(0)), Ok(true));
        assert_eq!(counts.get(), 2);
        // A full store refuses, and so does the estimate right after.
        let full = later + RECOUNT_EVERY;
        assert_eq!(estimates.admit("a", 3, full, store(3)), Ok(false));
        assert_eq!(estimates.admit("a", 3, full, store(0)), Ok(false));
        assert_eq!(counts.get(), 3);
        // Identities are estimated apart; a store error is passed on.
        assert_eq!(estimates.admit("b", 3, full, store(0)), Ok(true));
        assert_eq!(estimates.admit("c", 3, full, |_| Err(())), Err(()));
    }
}
