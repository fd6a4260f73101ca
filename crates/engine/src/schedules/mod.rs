//! Schedules (issue 49): `[[schedules]]` entries whose slots — times from a cron pattern
//! or a fixed period ([`timing`]) — each start one task of a tool, with fixed arguments,
//! as an identity of the configuration.
//!
//! # Exactly one task per slot
//!
//! A slot is a unique key in the store: a scheduled task carries its schedule's name
//! and its slot's time, and the store refuses a second task of the same slot
//! ([`crate::model::Created::SlotTaken`]), inserted in the same transaction as the task.
//! Whatever happens — a restart, a `kill -9` at the due time, two PostgreSQL nodes — a
//! slot gets at most one task; what became of each slot is recorded beside it (the
//! schedule's [`ScheduleMark`]: its last slot, and how many were created, skipped,
//! missed or refused), so that a restarted scheduler goes on after the last slot
//! reached, not after the last one this process remembers.
//!
//! # The scheduler
//!
//! One thread per server ([`Scheduler`]); when nodes share a PostgreSQL store, only the
//! upkeep leader's schedules (`TaskStore::upkeep_leader`), and a node that takes over
//! goes on from the store's marks. It wakes at the next slot of any schedule (at least
//! once a second, to see reloads), and for each schedule whose slot has come:
//!
//! - takes the latest slot due (slots it could not reach in time, because the store
//!   was unavailable, are passed over and counted as missed);
//! - a slot whose time passed before this process began scheduling was *missed*:
//!   `missed = "skip"` records it and starts nothing, `missed = "run_once"` starts one
//!   task for it, standing for every slot missed since the last one reached;
//! - `overlap` decides what happens when the schedule's newest task is not finished:
//!   `"skip"` records the slot as skipped, `"cancel_previous"` cancels that task and
//!   starts the new one, `"queue"` starts the new one, held until the previous ends
//!   (a concurrency gate of one per schedule: see [`crate::flow`]);
//! - creates the task through [`TaskService::start`](crate::TaskService::start): the
//!   tool's policy, pause and input schema, the identity's quotas and the tool's
//!   concurrency key apply as to a client's call. A slot whose task is refused is
//!   recorded as refused, and the schedule goes on with its next slot.
//!
//! A reload adds, changes and removes schedules (each read from the settings in force at
//! every pass): a schedule added, or whose timing changed, starts with its next slot
//! after the reload; one removed starts nothing more (its tasks run on).

mod scheduler;
pub mod timing;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::model::{ScheduleMark, SlotOutcome};
use crate::store_error::StoreError;
pub use scheduler::Scheduler;
use taskd_protocol::Identity;
pub use timing::{Timing, TimingError};

/// Longest schedule name.
const MAX_NAME: usize = 64;

/// What happens to slots missed while no server ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// Nothing: the schedule goes on with its next slot.
    #[default]
    Skip,
    /// One task, at once, for all of them.
    RunOnce,
}

/// What happens at a slot while the schedule's previous task has not finished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// No task for this slot.
    #[default]
    Skip,
    /// A task, which waits for the previous ones to finish.
    Queue,
    /// The previous task is cancelled, and this slot's starts.
    CancelPrevious,
}

impl Missed {
    pub fn as_str(self) -> &'static str {
        match self {
            Missed::Skip => "skip",
            Missed::RunOnce => "run_once",
        }
    }
}

impl Overlap {
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::Queue => "queue",
            Overlap::CancelPrevious => "cancel_previous",
        }
    }
}

/// A `[[schedules]]` entry as the configuration file writes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleConfig {
    /// Unique among the schedules: the tasks it starts name it, and the store keys its
    /// slots by it (a renamed schedule starts afresh).
    pub name: String,
    /// The tool each slot calls (it must be able to run as a task).
    pub tool: String,
    /// The call's arguments, checked against the tool's input schema.
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// Five-field cron pattern, or `@hourly` and the like (exclusive with `every`).
    pub cron: Option<String>,
    /// A period: `"30s"`, `"5m"`, `"1h30m"`, `"1d"` (exclusive with `cron`).
    pub every: Option<String>,
    /// The IANA time zone `cron` is read in (default UTC).
    pub timezone: Option<String>,
    /// The identity the tasks belong to, as `[[auth.tokens]]` names one: a client
    /// holding a token of this principal and tenant reads them with `tasks/get`. The
    /// default, `anonymous`, is every client's when no tokens are configured.
    #[serde(default = "anonymous")]
    pub principal: String,
    #[serde(default)]
    pub tenant: String,
    /// Slots missed while no server ran: `skip` (default) or `run_once`.
    #[serde(default)]
    pub missed: Missed,
    /// A slot while the previous task runs: `skip` (default), `queue` or
    /// `cancel_previous`.
    #[serde(default)]
    pub overlap: Overlap,
}

fn anonymous() -> String {
    "anonymous".into()
}

/// A schedule as the scheduler runs it.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub name: String,
    pub tool: String,
    pub arguments: Map<String, Value>,
    pub timing: Timing,
    /// Whom its tasks are bound to (on the server's endpoint).
    pub identity: Identity,
    pub missed: Missed,
    pub overlap: Overlap,
}

/// Why a `[[schedules]]` entry was refused.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("name: 1-{MAX_NAME} characters of A-Z a-z 0-9 _ . -")]
    Name,
    #[error("give either cron or every, not both")]
    Both,
    #[error("give cron (\"0 3 * * *\", \"@hourly\") or every (\"5m\")")]
    Neither,
    #[error("timezone applies to cron; every counts from the Unix epoch (UTC)")]
    ZoneWithEvery,
    #[error("principal must not be empty")]
    Principal,
    #[error(transparent)]
    Timing(#[from] TimingError),
}

impl Schedule {
    /// The schedule `config` describes, its tasks bound to `endpoint`.
    pub fn build(config: &ScheduleConfig, endpoint: &str) -> Result<Schedule, ScheduleError> {
        let name_ok = !config.name.is_empty()
            && config.name.len() <= MAX_NAME
            && config
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if !name_ok {
            return Err(ScheduleError::Name);
        }
        if config.principal.is_empty() {
            return Err(ScheduleError::Principal);
        }
        let timing = match (&config.cron, &config.every) {
            (Some(_), Some(_)) => return Err(ScheduleError::Both),
            (None, None) => return Err(ScheduleError::Neither),
            (Some(cron), None) => Timing::cron(cron, config.timezone.as_deref().unwrap_or("UTC"))?,
            (None, Some(_)) if config.timezone.is_some() => {
                return Err(ScheduleError::ZoneWithEvery)
            }
            (None, Some(every)) => Timing::every(every)?,
        };
        Ok(Schedule {
            name: config.name.clone(),
            tool: config.tool.clone(),
            arguments: config.arguments.clone(),
            timing,
            identity: Identity {
                endpoint: endpoint.to_owned(),
                issuer: String::new(),
                tenant: config.tenant.clone(),
                principal: config.principal.clone(),
            },
            missed: config.missed,
            overlap: config.overlap,
        })
    }
}

/// What the stores keep of schedules besides their tasks: each schedule's mark.
pub trait ScheduleStore: Send + Sync {
    /// Every schedule's mark (any schedule that ever reached a slot), with the status
    /// of its newest task.
    fn schedule_marks(&self) -> Result<Vec<ScheduleMark>, StoreError>;
    /// Records that `schedule` reached `slot` and started no task (`outcome` is
    /// skipped, missed or refused), counting it and `missed` slots missed. A slot before
    /// the one recorded moves nothing back (its counts still count).
    fn mark_schedule(
        &self,
        schedule: &str,
        slot: i64,
        outcome: SlotOutcome,
        missed: i64,
    ) -> Result<(), StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(text: &str) -> ScheduleConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn an_entry_needs_one_timing_and_a_fair_name() {
        let base = "name = \"sync\"\ntool = \"t\"\n";
        let built = |extra: &str| Schedule::build(&entry(&format!("{base}{extra}")), "/mcp");
        let every = built("every = \"5m\"").unwrap();
        assert_eq!(every.identity.principal, "anonymous");
        assert_eq!(every.identity.endpoint, "/mcp");
        assert_eq!((every.missed, every.overlap), (Missed::Skip, Overlap::Skip));
        assert!(matches!(built(""), Err(ScheduleError::Neither)));
        assert!(matches!(
            built("every = \"5m\"\ncron = \"@hourly\""),
            Err(ScheduleError::Both)
        ));
        assert!(matches!(
            built("every = \"5m\"\ntimezone = \"UTC\""),
            Err(ScheduleError::ZoneWithEvery)
        ));
        assert!(built("cron = \"@daily\"\ntimezone = \"Europe/Berlin\"").is_ok());
        let named = |name: &str| {
            Schedule::build(
                &entry(&format!("name = \"{name}\"\ntool = \"t\"\nevery = \"1s\"")),
                "/mcp",
            )
        };
        assert!(matches!(named("a b"), Err(ScheduleError::Name)));
        assert!(matches!(named(""), Err(ScheduleError::Name)));
        assert!(named("nightly-backup.v2").is_ok());
        let policies =
            built("every = \"1s\"\nmissed = \"run_once\"\noverlap = \"cancel_previous\"").unwrap();
        assert_eq!(
            (policies.missed, policies.overlap),
            (Missed::RunOnce, Overlap::CancelPrevious)
        );
        assert!(toml::from_str::<ScheduleConfig>(&format!("{base}overlap = \"later\"")).is_err());
    }
}
