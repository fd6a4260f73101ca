//! The scheduler thread: at each schedule's slot, one task (or one recorded reason why
//! not), as the module above describes.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::{Missed, Overlap, Schedule};
use crate::backend::{StoreError, TaskStore};
use crate::flow::Gate;
use crate::model::{NewSlot, ScheduleMark, ScheduleSlot, SlotOutcome};
use crate::service::{Start, StartError, Started};
use crate::settings::SettingsSource;
use crate::TaskService;
use taskd_base::clock::{now_ms, rfc3339};

/// Longest sleep between passes: reloads and a change of upkeep leader are seen within
/// it, and a store that failed is tried again.
const AT_MOST: Duration = Duration::from_secs(1);

/// The scheduler's thread; [`Scheduler::stop`] ends it.
pub struct Scheduler {
    stop: Sender<()>,
    thread: JoinHandle<()>,
}

impl Scheduler {
    /// Starts scheduling the schedules `settings` holds (read again at every pass).
    pub fn start(
        tasks: Arc<TaskService>,
        settings: Arc<dyn SettingsSource>,
    ) -> std::io::Result<Scheduler> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::Builder::new()
            .name("scheduler".into())
            .spawn(move || {
                let mut state = State {
                    store: tasks.store(),
                    tasks,
                    settings,
                    tracked: HashMap::new(),
                    leading_since: None,
                    fresh: true,
                };
                run(&mut state, &stopped);
            })?;
        Ok(Scheduler { stop, thread })
    }

    /// Stops the thread (a pass under way finishes first).
    pub fn stop(self) {
        drop(self.stop);
        let _ = self.thread.join();
    }
}

fn run(state: &mut State, stopped: &Receiver<()>) {
    loop {
        let wait = state.pass();
        if !matches!(stopped.recv_timeout(wait), Err(RecvTimeoutError::Timeout)) {
            return;
        }
    }
}

/// What the scheduler remembers of a schedule between passes.
struct Tracked {
    /// The last slot reached (or the time scheduling began, for a new schedule): the
    /// next slot is the first after it.
    since: i64,
    /// The timing it was tracked under ([`super::Timing::describe`]).
    timing: String,
}

struct State {
    tasks: Arc<TaskService>,
    store: Arc<dyn TaskStore>,
    settings: Arc<dyn SettingsSource>,
    tracked: HashMap<String, Tracked>,
    /// Since when this process schedules (Unix ms): slots before it were missed.
    leading_since: Option<i64>,
    /// No pass has completed since scheduling began: schedules go on from the store's
    /// marks (a schedule first seen later, added by a reload, starts from now).
    fresh: bool,
}

impl State {
    /// One pass over the schedules in force; how long to sleep before the next.
    fn pass(&mut self) -> Duration {
        let settings = self.settings.current();
        let schedules = settings.schedules();
        if schedules.is_empty() {
            self.tracked.clear();
            return AT_MOST;
        }
        if !self.store.upkeep_leader() {
            // Another node schedules; if this one takes over, it goes on from the marks.
            self.leading_since = None;
            self.fresh = true;
            self.tracked.clear();
            return AT_MOST;
        }
        let now = now_ms();
        let started = *self.leading_since.get_or_insert(now);
        self.tracked
            .retain(|name, _| schedules.iter().any(|schedule| &schedule.name == name));
        let mut marks: Option<HashMap<String, ScheduleMark>> = None;
        let mut next = now.saturating_add(AT_MOST.as_millis() as i64);
        let mut failed = false;
        for schedule in schedules {
            match self.step(schedule, now, started, &mut marks) {
                Ok(Some(at)) => next = next.min(at),
                Ok(None) => {}
                Err(error) => {
                    failed = true;
                    log::log!(
                        error.log_level(),
                        "schedule {}: the store failed, tried again in a second: {error}",
                        schedule.name
                    );
                }
            }
        }
        if !failed {
            self.fresh = false;
        }
        Duration::from_millis(u64::try_from(next - now_ms()).unwrap_or(0).max(1))
    }

    /// Reaches `schedule`'s latest slot if one has come; its next slot after that.
    fn step(
        &mut self,
        schedule: &Schedule,
        now: i64,
        started: i64,
        marks: &mut Option<HashMap<String, ScheduleMark>>,
    ) -> Result<Option<i64>, StoreError> {
        let timing = schedule.timing.describe();
        let since = match self.tracked.get_mut(&schedule.name) {
            Some(tracked) if tracked.timing == timing => tracked.since,
            Some(tracked) => {
                // New slots from now on: the old timing's are no guide to the new one's.
                tracked.timing = timing;
                tracked.since = tracked.since.max(now);
                tracked.since
            }
            None => {
                let reached = read_marks(self.store.as_ref(), marks)?
                    .get(&schedule.name)
                    .map(|mark| mark.slot);
                let since = match reached {
                    Some(slot) if self.fresh => slot,
                    Some(slot) => slot.max(now),
                    None => now,
                };
                self.tracked
                    .insert(schedule.name.clone(), Tracked { since, timing });
                since
            }
        };
        let Some(first) = schedule.timing.next_after(since) else {
            return Ok(None);
        };
        if first > now {
            return Ok(Some(first));
        }
        let slot = schedule
            .timing
            .latest_at_or_before(now)
            .unwrap_or(first)
            .max(first);
        let count = schedule.timing.count_between(since, slot).max(1);
        let mark = read_marks(self.store.as_ref(), marks)?.get(&schedule.name);
        self.reach(schedule, slot, slot < started, count, mark)?;
        if let Some(tracked) = self.tracked.get_mut(&schedule.name) {
            tracked.since = slot;
        }
        Ok(schedule.timing.next_after(slot))
    }

    /// What `slot` of `schedule` becomes: `count` slots are due up to it (it included),
    /// and `missed` says its time passed before this process began scheduling.
    fn reach(
        &self,
        schedule: &Schedule,
        slot: i64,
        missed: bool,
        count: i64,
        mark: Option<&ScheduleMark>,
    ) -> Result<(), StoreError> {
        let marks = self.store.schedules();
        let name = &schedule.name;
        if missed && schedule.missed == Missed::Skip {
            log::info!(
                "schedule {name}: {count} slot(s) up to {} passed while no server ran: skipped",
                rfc3339(slot)
            );
            return marks.mark_schedule(name, slot, SlotOutcome::Missed, count);
        }
        // A late slot stands for the ones it passed over; a caught-up one for them all.
        let missed_slots = if missed { count } else { count - 1 };
        let previous = mark
            .filter(|mark| mark.task_status.is_some_and(|status| !status.is_terminal()))
            .and_then(|mark| mark.task_id.clone());
        if let Some(previous) = &previous {
            match schedule.overlap {
                Overlap::Skip => {
                    log::info!(
                        "schedule {name}: the slot of {} is skipped: its previous task has not finished",
                        rfc3339(slot)
                    );
                    return marks.mark_schedule(name, slot, SlotOutcome::Skipped, missed_slots);
                }
                Overlap::CancelPrevious => {
                    self.tasks.admin_cancel(previous)?;
                }
                Overlap::Queue => {}
            }
        }
        let gate = (schedule.overlap == Overlap::Queue).then(|| Gate::schedule(name));
        let started = self.tasks.start(Start {
            identity: &schedule.identity,
            tool: &schedule.tool,
            arguments: &schedule.arguments,
            idempotency_key: None,
            run_after: None,
            schedule: Some(NewSlot {
                slot: ScheduleSlot {
                    schedule: name.clone(),
                    slot,
                },
                missed: missed_slots,
                catch_up: missed,
            }),
            gate,
        });
        match started {
            Ok(Started::New(task)) => {
                log::info!(
                    "schedule {name}: task {} started for the slot of {}{}",
                    task.id,
                    rfc3339(slot),
                    if missed {
                        " (missed while no server ran)"
                    } else {
                        ""
                    }
                );
                Ok(())
            }
            // Another node, or this one before a restart, made it.
            Ok(_) => Ok(()),
            Err(StartError::Store(error)) => Err(error),
            Err(refused) => {
                log::warn!(
                    "schedule {name}: no task for the slot of {}: {refused}",
                    rfc3339(slot)
                );
                marks.mark_schedule(name, slot, SlotOutcome::Refused, missed_slots)
            }
        }
    }
}

/// The store's marks, read once per pass (when something needs them).
fn read_marks<'m>(
    store: &dyn TaskStore,
    marks: &'m mut Option<HashMap<String, ScheduleMark>>,
) -> Result<&'m HashMap<String, ScheduleMark>, StoreError> {
    if marks.is_none() {
        let read = store.schedules().schedule_marks()?;
        *marks = Some(
            read.into_iter()
                .map(|mark| (mark.schedule.clone(), mark))
                .collect(),
        );
    }
    Ok(marks.get_or_insert_with(HashMap::new))
}
