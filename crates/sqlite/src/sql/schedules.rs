//! Schedules (schema.sql, migration 17): a slot's task, claimed in the transaction that
//! creates it, and each schedule's mark.

use rusqlite::{params, Connection, OptionalExtension};

use taskd_engine::model::{NewSlot, ScheduleMark, ScheduleSlot, SlotOutcome};
use taskd_protocol::TaskStatus;

/// Whether a task of `slot` is stored already. The writer is the only one to write, so
/// nothing can come between this and the insert that follows it (and the unique index
/// would refuse it if it did).
pub fn slot_taken(conn: &Connection, slot: &ScheduleSlot) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM tasks WHERE schedule = ?1 AND schedule_slot = ?2")?
        .query_row(params![slot.schedule, slot.slot], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
}

/// Makes the new task `task_id` the task of `slot`, and moves the schedule's mark to
/// it (a caught-up slot's when it stands for missed ones).
pub fn claim_slot(
    conn: &Connection,
    task_id: &str,
    slot: &NewSlot,
    now: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE OR FAIL tasks SET schedule = ?2, schedule_slot = ?3 WHERE id = ?1",
    )?
    .execute(params![task_id, slot.slot.schedule, slot.slot.slot])?;
    let outcome = if slot.catch_up {
        SlotOutcome::CaughtUp
    } else {
        SlotOutcome::Created
    };
    mark(
        conn,
        &slot.slot.schedule,
        slot.slot.slot,
        outcome,
        now,
        Some(task_id),
        slot.missed,
    )
}

/// Records `outcome` at `slot` of `schedule`, with `task_id` when it started a task, and
/// counts it and `missed` slots missed. A slot before the one recorded keeps the mark
/// where it is (its counts still count).
pub fn mark(
    conn: &Connection,
    schedule: &str,
    slot: i64,
    outcome: SlotOutcome,
    now: i64,
    task_id: Option<&str>,
    missed: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR FAIL INTO schedule_marks (schedule, slot, outcome, at) \
         VALUES (?1, ?2, ?3, ?4) ON CONFLICT (schedule) DO NOTHING",
    )?
    .execute(params![schedule, slot, outcome.as_str(), now])?;
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
    // Every expression reads the row as it was before this UPDATE.
    conn.prepare_cached(
        "UPDATE OR FAIL schedule_marks SET \
         outcome = CASE WHEN ?2 >= slot THEN ?3 ELSE outcome END, \
         at = CASE WHEN ?2 >= slot THEN ?4 ELSE at END, \
         task_id = CASE WHEN ?5 IS NOT NULL AND ?2 >= slot THEN ?5 ELSE task_id END, \
         slot = max(slot, ?2), created = created + ?6, skipped = skipped + ?7, \
         missed = missed + ?8, refused = refused + ?9 WHERE schedule = ?1",
    )?
    .execute(params![
        schedule,
        slot,
        outcome.as_str(),
        now,
        task_id,
        created,
        skipped,
        missed,
        refused
    ])?;
    Ok(())
}

/// Every schedule's mark, with the status of its newest task.
pub fn marks(conn: &Connection) -> rusqlite::Result<Vec<ScheduleMark>> {
    let mut statement = conn.prepare_cached(
        "SELECT m.schedule, m.slot, m.outcome, m.at, m.task_id, t.status, m.created, \
         m.skipped, m.missed, m.refused FROM schedule_marks m \
         LEFT JOIN tasks t ON t.id = m.task_id ORDER BY m.schedule",
    )?;
    let rows = statement.query_map([], |row| {
        let outcome: String = row.get(2)?;
        let status: Option<String> = row.get(5)?;
        Ok(ScheduleMark {
            schedule: row.get(0)?,
            slot: row.get(1)?,
            outcome: SlotOutcome::parse(&outcome).unwrap_or(SlotOutcome::Created),
            at: row.get(3)?,
            task_id: row.get(4)?,
            task_status: status.as_deref().and_then(TaskStatus::parse),
            created: row.get(6)?,
            skipped: row.get(7)?,
            missed: row.get(8)?,
            refused: row.get(9)?,
        })
    })?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::create::create_task;
    use crate::sql::turns::give_due;
    use crate::tests::{fresh_store, task_at};
    use taskd_engine::model::{Created, NewTask};

    fn slotted(id: &str, slot: i64, catch_up: bool) -> NewTask {
        NewTask {
            schedule: Some(NewSlot {
                slot: ScheduleSlot {
                    schedule: "sync".into(),
                    slot,
                },
                missed: i64::from(catch_up) * 3,
                catch_up,
            }),
            ..task_at(id, slot + 5)
        }
    }

    #[test]
    fn a_slot_gets_one_task_and_the_mark_follows_the_newest_slot() {
        let (_dir, store) = fresh_store();
        store
            .write(|conn| {
                assert!(matches!(
                    create_task(conn, &slotted("a", 1000, true))?,
                    Created::Task(_)
                ));
                assert!(matches!(
                    create_task(conn, &slotted("b", 1000, false))?,
                    Created::SlotTaken
                ));
                assert!(matches!(
                    create_task(conn, &slotted("c", 2000, false))?,
                    Created::Task(_)
                ));
                mark(conn, "sync", 3000, SlotOutcome::Skipped, 3001, None, 0)?;
                // An older slot counts, and moves nothing back.
                mark(conn, "sync", 500, SlotOutcome::Refused, 3002, None, 0)?;
                mark(conn, "other", 10, SlotOutcome::Missed, 11, None, 4)?;
                let tasks: i64 = conn.query_row("SELECT count(*) FROM tasks", [], |r| r.get(0))?;
                assert_eq!(tasks, 2, "the taken slot stored nothing");
                let marks = marks(conn)?;
                assert_eq!(marks.len(), 2);
                let other = &marks[0];
                assert_eq!(
                    (
                        other.schedule.as_str(),
                        other.outcome,
                        other.missed,
                        other.task_id.as_deref()
                    ),
                    ("other", SlotOutcome::Missed, 4, None)
                );
                let sync = &marks[1];
                assert_eq!(
                    (sync.slot, sync.outcome, sync.at),
                    (3000, SlotOutcome::Skipped, 3001)
                );
                assert_eq!(sync.task_id.as_deref(), Some("c"));
                assert_eq!(sync.task_status, Some(TaskStatus::Working));
                assert_eq!(
                    (sync.created, sync.skipped, sync.missed, sync.refused),
                    (2, 1, 3, 1)
                );
                let summary = crate::sql::admin::task_detail(conn, "a")?.unwrap().summary;
                assert_eq!(
                    summary.schedule,
                    Some(ScheduleSlot {
                        schedule: "sync".into(),
                        slot: 1000
                    })
                );
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn a_later_start_waits_without_a_turn_until_its_time() {
        let (_dir, store) = fresh_store();
        store
            .write(|conn| {
                let later = NewTask {
                    run_after: Some(5_000),
                    ..task_at("later", 100)
                };
                create_task(conn, &later)?;
                let turn = |conn: &Connection| -> rusqlite::Result<(Option<i64>, i64)> {
                    conn.query_row(
                        "SELECT turn, run_after FROM jobs WHERE task_id = 'later'",
                        [],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                };
                assert_eq!(turn(conn)?, (None, 5_000));
                assert_eq!(give_due(conn, 4_999)?, 0);
                assert_eq!(give_due(conn, 5_000)?, 1);
                assert!(turn(conn)?.0.is_some());
                Ok(())
            })
            .unwrap();
    }
}
