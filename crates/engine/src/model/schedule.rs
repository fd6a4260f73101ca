//! The records of schedules (see [`crate::schedules`]) as the stores keep them: a
//! task's slot, and each schedule's mark (the last slot it reached, and its counts).

use serde::{Deserialize, Serialize};

use taskd_protocol::TaskStatus;

/// A task's place in its schedule: the schedule's name and the slot's time (Unix ms).
/// A store holds at most one task per slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleSlot {
    pub schedule: String,
    pub slot: i64,
}

/// The slot a new task is created for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSlot {
    pub slot: ScheduleSlot,
    /// The slots missed that this task stands for: with `catch_up`, those that passed
    /// while no server ran (`missed = "run_once"`), its own included; else those a late
    /// scheduler passed over before it (0 for a slot reached in time).
    pub missed: i64,
    /// Whether its own slot passed while no server ran (its outcome is `caught_up`).
    pub catch_up: bool,
}

/// What became of the last slot a schedule reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotOutcome {
    /// Its task was created.
    Created,
    /// Its task was created, standing for slots missed while no server ran.
    CaughtUp,
    /// The previous run had not finished (`overlap = "skip"`): no task.
    Skipped,
    /// It passed while no server ran (`missed = "skip"`): no task.
    Missed,
    /// Its task could not be created (the tool is not served, or refused it): no task.
    Refused,
}

impl SlotOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            SlotOutcome::Created => "created",
            SlotOutcome::CaughtUp => "caught_up",
            SlotOutcome::Skipped => "skipped",
            SlotOutcome::Missed => "missed",
            SlotOutcome::Refused => "refused",
        }
    }

    pub fn parse(text: &str) -> Option<SlotOutcome> {
        [
            SlotOutcome::Created,
            SlotOutcome::CaughtUp,
            SlotOutcome::Skipped,
            SlotOutcome::Missed,
            SlotOutcome::Refused,
        ]
        .into_iter()
        .find(|outcome| outcome.as_str() == text)
    }
}

/// Where a schedule stands in the store: the last slot it reached and what became of
/// it, its newest task, and what became of its slots since it first reached one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleMark {
    pub schedule: String,
    /// The last slot reached (Unix ms): the scheduler goes on after it.
    pub slot: i64,
    pub outcome: SlotOutcome,
    /// When that slot was reached (Unix ms).
    pub at: i64,
    /// The newest task the schedule created, and its status as read with the mark
    /// (`None` once the task has expired).
    pub task_id: Option<String>,
    pub task_status: Option<TaskStatus>,
    /// Tasks created (catch-ups included), slots skipped for overlap, slots missed
    /// while no server ran (those a catch-up stood for included), slots refused.
    pub created: i64,
    pub skipped: i64,
    pub missed: i64,
    pub refused: i64,
}
