//! `schedules list`: the schedules in force, each with its next slot and what became of
//! its last (the store's mark), for the CLI and the dashboard alike.

use serde_json::{json, Value};

use taskd_base::clock::{now_ms, rfc3339};
use taskd_engine::model::ScheduleMark;
use taskd_engine::schedules::Schedule;
use taskd_engine::TaskService;

/// Each schedule in force, in configuration order.
pub(super) fn list(tasks: &TaskService) -> Result<Value, String> {
    let settings = tasks.settings_in_force();
    let marks = tasks
        .store()
        .schedules()
        .schedule_marks()
        .map_err(|error| error.to_string())?;
    let now = now_ms();
    let listed = settings
        .schedules()
        .iter()
        .map(|schedule| {
            let mark = marks.iter().find(|mark| mark.schedule == schedule.name);
            schedule_json(schedule, mark, now)
        })
        .collect();
    Ok(Value::Array(listed))
}

fn schedule_json(schedule: &Schedule, mark: Option<&ScheduleMark>, now: i64) -> Value {
    // The next slot after the last one reached, or after now: one missed while no
    // server ran is not "next".
    let after = mark.map_or(now, |mark| mark.slot.max(now));
    json!({
        "name": schedule.name,
        "tool": schedule.tool,
        "timing": schedule.timing.describe(),
        "tenant": schedule.identity.tenant,
        "principal": schedule.identity.principal,
        "missed": schedule.missed.as_str(),
        "overlap": schedule.overlap.as_str(),
        "nextRun": schedule.timing.next_after(after).map(rfc3339),
        "last": mark.map(|mark| json!({
            "slot": rfc3339(mark.slot),
            "outcome": mark.outcome.as_str(),
            "at": rfc3339(mark.at),
            "taskId": mark.task_id,
            "taskStatus": mark.task_status,
        })),
        "counts": {
            "created": mark.map_or(0, |mark| mark.created),
            "skipped": mark.map_or(0, |mark| mark.skipped),
            "missed": mark.map_or(0, |mark| mark.missed),
            "refused": mark.map_or(0, |mark| mark.refused),
        },
    })
}
