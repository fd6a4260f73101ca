//! The SQLite [`ScheduleStore`]: each schedule's mark (`sql::schedules`).

use taskd_base::clock::now_ms;
use taskd_engine::model::{ScheduleMark, SlotOutcome};
use taskd_engine::schedules::ScheduleStore;
use taskd_engine::StoreError;

use super::{classify, sql, Store};

impl ScheduleStore for Store {
    fn schedule_marks(&self) -> Result<Vec<ScheduleMark>, StoreError> {
        let conn = self.read()?;
        sql::schedules::marks(&conn).map_err(classify)
    }

    fn mark_schedule(
        &self,
        schedule: &str,
        slot: i64,
        outcome: SlotOutcome,
        missed: i64,
    ) -> Result<(), StoreError> {
        let schedule = schedule.to_owned();
        self.write(move |conn| {
            sql::schedules::mark(conn, &schedule, slot, outcome, now_ms(), None, missed)
        })
    }
}
