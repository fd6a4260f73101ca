//! The PostgreSQL [`ScheduleStore`]: each schedule's mark (`sql::schedules`).

use taskd_base::clock::now_ms;
use taskd_engine::model::{ScheduleMark, SlotOutcome};
use taskd_engine::schedules::ScheduleStore;
use taskd_engine::StoreError;

use super::{sql, Store};

impl ScheduleStore for Store {
    fn schedule_marks(&self) -> Result<Vec<ScheduleMark>, StoreError> {
        self.read(sql::schedules::marks)
    }

    fn mark_schedule(
        &self,
        schedule: &str,
        slot: i64,
        outcome: SlotOutcome,
        missed: i64,
    ) -> Result<(), StoreError> {
        self.transaction(|tx| {
            sql::schedules::mark(tx, schedule, slot, outcome, now_ms(), None, missed)
        })
    }
}
