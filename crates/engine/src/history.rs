//! Retention by outcome (issue 48): the operator's history of finished tasks.
//!
//! A task, its attempts and its output go when its `ttlMs` passes, whatever happened:
//! the TTL bounds what a *client* may read. The operator keeps more: when the janitor
//! deletes a finished task past its TTL, it writes a summary row of it in the same
//! transaction (its id, tool, identity, status, times, error, number of attempts, the
//! task it re-ran and its schedule slot; its arguments only with `[history]
//! keep_arguments`; never its result or output), kept until its end plus `[history]`'s duration for its status
//! ([`HistoryConfig`]), then pruned, in bounded batches both. `mcp-taskd tasks list`
//! and `show`, and the dashboard, read these rows for tasks no longer stored; clients
//! never do (`tasks/get` knows only `tasks`).
//!
//! A task deleted before it finished (its TTL passed while it ran or waited) leaves no
//! row: the history is of outcomes.

use serde::{Deserialize, Deserializer};

use crate::model::TaskSummary;
use taskd_protocol::TaskStatus;

/// `[history]`: how long the operator's summary of a finished task is kept, by its
/// outcome, counted from its end (the task itself goes at its TTL; a duration shorter
/// than what is left of the TTL then keeps nothing beyond it).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryConfig {
    /// Completed tasks ("1d"; "0" keeps none).
    #[serde(deserialize_with = "duration")]
    pub completed: u64,
    /// Failed tasks.
    #[serde(deserialize_with = "duration")]
    pub failed: u64,
    /// Cancelled tasks.
    #[serde(deserialize_with = "duration")]
    pub cancelled: u64,
    /// Whether a summary keeps the task's arguments (its stored origin), so that it can
    /// be shown and re-run after the task is gone. Off: arguments go with the task.
    pub keep_arguments: bool,
}

const DAY_MS: u64 = 86_400_000;

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            completed: DAY_MS,
            failed: 14 * DAY_MS,
            cancelled: DAY_MS,
            keep_arguments: false,
        }
    }
}

impl HistoryConfig {
    /// How long a summary of a task that ended `status` is kept (ms; 0: none is kept,
    /// nor of a task not finished).
    pub fn keep_ms(&self, status: TaskStatus) -> i64 {
        let ms = match status {
            TaskStatus::Completed => self.completed,
            TaskStatus::Failed => self.failed,
            TaskStatus::Cancelled => self.cancelled,
            TaskStatus::Working | TaskStatus::InputRequired => 0,
        };
        // Far beyond any lifetime, and never an overflow added to a time.
        i64::try_from(ms).unwrap_or(i64::MAX).min(1 << 60)
    }
}

/// A duration as the configuration writes it: `"90s"`, `"15m"`, `"12h"`, `"14d"`, or
/// `"0"`.
fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text)
        .and_then(|ms| u64::try_from(ms).map_err(|_| format!("{text:?} is negative")))
        .map_err(serde::de::Error::custom)
}

/// `"90s"`, `"15m"`, `"2h"`, `"7d"` (or bare seconds) in milliseconds.
pub fn parse_duration(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: i64 = number
        .parse()
        .map_err(|_| format!("not a duration: {text:?} (e.g. 90s, 15m, 2h, 7d)"))?;
    let unit_ms = match unit {
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("unknown unit in {text:?} (use s, m, h or d)")),
    };
    number
        .checked_mul(unit_ms)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// A history row: the summary of a finished task kept past its TTL.
#[derive(Debug, Clone)]
pub struct HistoryRecord {
    /// Its id, tool, identity, status, times, status message, re-run link and schedule
    /// slot, as a listed task (`removed_at` set).
    pub summary: TaskSummary,
    /// Its JSON-RPC error, when it failed.
    pub error: Option<String>,
    /// How many attempts it started.
    pub attempts: i64,
    /// When the summary goes (Unix ms).
    pub keep_until: i64,
    /// Its stored origin (tool, arguments, protocol version, client capabilities), with
    /// `keep_arguments` only. Sensitive, as the task's was.
    pub origin: Option<Vec<u8>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_the_usual_units_and_the_defaults_keep_failures_longest() {
        assert_eq!(parse_duration("90s"), Ok(90_000));
        assert_eq!(parse_duration("15m"), Ok(900_000));
        assert_eq!(parse_duration("2h"), Ok(7_200_000));
        assert_eq!(parse_duration("7d"), Ok(604_800_000));
        assert_eq!(parse_duration("5"), Ok(5_000));
        assert!(parse_duration("5w").is_err());
        assert!(parse_duration("m").is_err());
        let parse = |value| serde_json::from_value::<HistoryConfig>(value);
        let history = parse(serde_json::json!({"failed": "3d", "completed": "0"})).unwrap();
        assert_eq!(history.keep_ms(TaskStatus::Failed), 3 * DAY_MS as i64);
        assert_eq!(history.keep_ms(TaskStatus::Completed), 0);
        assert_eq!(history.keep_ms(TaskStatus::Cancelled), DAY_MS as i64);
        assert_eq!(history.keep_ms(TaskStatus::Working), 0);
        assert!(parse(serde_json::json!({"failed": 5})).is_err());
        assert!(parse(serde_json::json!({"failed": "2 weeks"})).is_err());
    }
}
