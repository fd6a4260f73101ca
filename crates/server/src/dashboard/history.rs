//! Per-tool created/completed/failed counts for each of the last 60 minutes, for the
//! dashboard's charts, without querying tasks: a sampler thread reads the trigger-kept
//! totals (`task_totals`, one row per tool) every few seconds and keeps, per minute,
//! the first and last totals seen; a minute's count is its last totals less the last of
//! the minute before (or, for the first minute sampled, less its own first).
//!
//! The history starts when the server does (minutes before are absent), and a sample
//! every [`SAMPLE_EVERY`] places each event within that much of its minute.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::{json, Value};

use taskd_engine::model::ToolTotals;
use taskd_engine::TaskService;

/// How often the totals are read.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Minutes shown (one more is kept as the base of the first difference).
const MINUTES: usize = 60;

/// Totals per tool: (created, completed, failed).
type Totals = BTreeMap<String, [u64; 3]>;

#[derive(Default)]
pub struct History {
    /// (minute since the epoch, first and last totals sampled in it), oldest first.
    minutes: Mutex<VecDeque<(i64, Totals, Totals)>>,
}

impl History {
    /// Starts sampling `tasks` on its own thread, which ends once the service is gone.
    pub fn start(tasks: &Arc<TaskService>) -> Arc<History> {
        let history = Arc::new(History::default());
        let weak_tasks: Weak<TaskService> = Arc::downgrade(tasks);
        let weak_history = Arc::downgrade(&history);
        let spawned = std::thread::Builder::new()
            .name("dashboard-history".into())
            .stack_size(128 * 1024)
            .spawn(move || loop {
                let (Some(tasks), Some(history)) = (weak_tasks.upgrade(), weak_history.upgrade())
                else {
                    return;
                };
                if let Ok(stats) = tasks.stats() {
                    history.record(taskd_base::clock::now_ms(), &stats.totals);
                }
                drop(tasks);
                drop(history);
                std::thread::sleep(SAMPLE_EVERY);
            });
        if spawned.is_err() {
            log::warn!("dashboard: could not start the chart sampler; charts stay empty");
        }
        history
    }

    /// Notes the totals seen at `now_ms`.
    pub fn record(&self, now_ms: i64, totals: &[ToolTotals]) {
        let minute = now_ms.div_euclid(60_000);
        let totals: Totals = totals
            .iter()
            .map(|t| (t.tool.clone(), [t.created, t.completed, t.failed]))
            .collect();
        let Ok(mut minutes) = self.minutes.lock() else {
            return;
        };
        match minutes.back_mut() {
            Some((last, _, kept)) if *last == minute => *kept = totals,
            _ => minutes.push_back((minute, totals.clone(), totals)),
        }
        while minutes.len() > MINUTES + 1 {
            minutes.pop_front();
        }
    }

    /// `{"minutes": [start ms…], "tools": {tool: {"created": […], …}}}`, one value per
    /// minute of the last hour, oldest first, for every tool of `tools` and every tool
    /// sampled; minutes not sampled are null.
    pub fn to_json(&self, now_ms: i64, tools: &[String]) -> Value {
        let current = now_ms.div_euclid(60_000);
        let Ok(minutes) = self.minutes.lock() else {
            return json!({});
        };
        let by_minute: BTreeMap<i64, (&Totals, &Totals)> = minutes
            .iter()
            .map(|(m, first, last)| (*m, (first, last)))
            .collect();
        let window: Vec<i64> = ((current - MINUTES as i64 + 1)..=current).collect();
        let mut series_of: BTreeMap<String, [Vec<Value>; 3]> = tools
            .iter()
            .map(|tool| (tool.clone(), Default::default()))
            .collect();
        for (_, _, totals) in minutes.iter() {
            for tool in totals.keys() {
                series_of.entry(tool.clone()).or_default();
            }
        }
        for (tool, series) in series_of.iter_mut() {
            for minute in &window {
                let delta = by_minute.get(minute).map(|(first, last)| {
                    let before = by_minute
                        .get(&(minute - 1))
                        .map_or(*first, |(_, previous)| *previous);
                    let before = before.get(tool).copied().unwrap_or_default();
                    let after = last.get(tool).copied().unwrap_or_default();
                    [0, 1, 2].map(|i| after[i].saturating_sub(before[i]))
                });
                for (i, values) in series.iter_mut().enumerate() {
                    values.push(delta.map_or(Value::Null, |d| json!(d[i])));
                }
            }
        }
        let tools: serde_json::Map<String, Value> = series_of
            .into_iter()
            .map(|(tool, [created, completed, failed])| {
                (
                    tool,
                    json!({"created": created, "completed": completed, "failed": failed}),
                )
            })
            .collect();
        json!({
            "minutes": window.iter().map(|m| m * 60_000).collect::<Vec<_>>(),
            "tools": tools,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(created: u64, completed: u64) -> Vec<ToolTotals> {
        vec![ToolTotals {
            tool: "echo".into(),
            created,
            completed,
            ..ToolTotals::default()
        }]
    }

    #[test]
    fn a_minute_counts_the_difference_with_the_minute_before() {
        let history = History::default();
        history.record(60_000, &totals(5, 1));
        history.record(60_000 + 30_000, &totals(6, 1));
        history.record(120_000 + 10, &totals(7, 2));
        history.record(120_000 + 50_000, &totals(9, 4));
        let chart = history.to_json(120_000 + 55_000, &["idle".to_owned()]);
        let created = &chart["tools"]["echo"]["created"];
        assert_eq!(created.as_array().unwrap().len(), 60);
        assert_eq!(created[59], json!(3), "9 - 6 in the current minute");
        assert_eq!(chart["tools"]["echo"]["completed"][59], json!(3));
        assert_eq!(created[58], json!(1), "the first minute: 6 - 5 within it");
        assert_eq!(created[57], Value::Null, "not sampled");
        assert_eq!(
            chart["tools"]["idle"]["created"][59],
            json!(0),
            "configured tools show"
        );
    }
}
