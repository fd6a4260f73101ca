//! Schedules on PostgreSQL (schema-postgres.sql, migration 12): a slot's task claimed
//! in the transaction that creates it (`create::create_task`), and each schedule's mark.

use postgres::GenericClient;

use super::super::statements::{Db, Tx};
use super::Failure;
use taskd_engine::model::{NewSlot, ScheduleMark, SlotOutcome};
use taskd_protocol::TaskStatus;

/// Moves the schedule's mark to the slot whose task `task_id` was just inserted.
pub fn claimed(
    tx: &mut Tx<'_, '_>,
    task_id: &str,
    slot: &NewSlot,
    now: i64,
) -> Result<(), Failure> {
    let outcome = if slot.catch_up {
        SlotOutcome::CaughtUp
    } else {
        SlotOutcome::Created
    };
    mark(
        tx,
        &slot.slot.schedule,
        slot.slot.slot,
        outcome,
        now,
        Some(task_id),
        slot.missed,
    )
}

/// Records `outcome` at `slot` of `schedule` (with `task_id` when it started a task),
/// counting it and `missed` slots missed; a slot before the one recorded moves nothing
/// back. Concurrent marks of one schedule serialize on its row.
pub fn mark(
    tx: &mut Tx<'_, '_>,
    schedule: &str,
    slot: i64,
    outcome: SlotOutcome,
    now: i64,
    task_id: Option<&str>,
    missed: i64,
) -> Result<(), Failure> {
    let [created, skipped, refused] = [
        matches!(outcome, SlotOutcome::Created | SlotOutcome::CaughtUp),
        outcome == SlotOutcome::Skipped,
        outcome == SlotOutcome::Refused,
    ]
    .map(i64::from);
    let missed = if outcome == SlotOutcome::Missed {
        missed.max(1)
    } else {
        missed
    };
    tx.execute(
        "INSERT INTO schedule_marks AS m (schedule, slot, outcome, at, task_id, created, \
         skipped, missed, refused) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (schedule) DO UPDATE SET \
         outcome = CASE WHEN $2 >= m.slot THEN $3 ELSE m.outcome END, \
         at = CASE WHEN $2 >= m.slot THEN $4 ELSE m.at END, \
         task_id = CASE WHEN $5::text IS NOT NULL AND $2 >= m.slot THEN $5 ELSE m.task_id END, \
         slot = GREATEST(m.slot, $2), created = m.created + $6, \
         skipped = m.skipped + $7, missed = m.missed + $8, refused = m.refused + $9",
        &[
            &schedule,
            &slot,
            &outcome.as_str(),
            &now,
            &task_id,
            &created,
            &skipped,
            &missed,
            &refused,
        ],
    )?;
    Ok(())
}

/// Every schedule's mark, with the status of its newest task.
pub fn marks(conn: &mut Db<'_, impl GenericClient>) -> Result<Vec<ScheduleMark>, Failure> {
    let rows = conn.query(
        "SELECT m.schedule, m.slot, m.outcome, m.at, m.task_id, t.status, m.created, \
         m.skipped, m.missed, m.refused FROM schedule_marks m \
         LEFT JOIN tasks t ON t.id = m.task_id ORDER BY m.schedule",
        &[],
    )?;
    rows.iter()
        .map(|row| {
            let outcome: String = row.try_get(2)?;
            let status: Option<String> = row.try_get(5)?;
            Ok(ScheduleMark {
                schedule: row.try_get(0)?,
                slot: row.try_get(1)?,
                outcome: SlotOutcome::parse(&outcome).unwrap_or(SlotOutcome::Created),
                at: row.try_get(3)?,
                task_id: row.try_get(4)?,
                task_status: status.as_deref().and_then(TaskStatus::parse),
                created: row.try_get(6)?,
                skipped: row.try_get(7)?,
                missed: row.try_get(8)?,
                refused: row.try_get(9)?,
            })
        })
        .collect()
}
