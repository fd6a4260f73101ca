//! The operator's view across tasks and their history (issue 48), and actions on many
//! tasks at once:
//!
//! - [`merged_page`]: a page of tasks and history summaries (tasks past their TTL,
//!   `taskd_engine::history`) together, newest first: what `tasks list` and the
//!   dashboard's task list show;
//! - [`count`]: how many match a filter, and the newest one's id, which bounds the
//!   action that follows (`through`): it acts on what was counted, never on tasks
//!   created since (its own re-runs among them);
//! - [`act`]: one bounded batch of a bulk cancel or re-run (the CLI and the dashboard
//!   ask batch after batch, each a request of its own).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{history_summary_json, summary_json, Admin};
use taskd_base::clock::rfc3339;
use taskd_engine::history::HistoryRecord;
use taskd_engine::model::{CancelEffect, TaskFilter, TaskPage};
use taskd_engine::{RerunError, StoreError, TaskStore};

/// Most tasks one bulk request acts on: a batch takes a few hundred milliseconds at
/// most (a re-run is a commit), and the next batch is another request.
pub const MAX_BULK_BATCH: usize = 100;

/// What a bulk request does to each task it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    Cancel,
    Rerun,
}

impl BulkAction {
    pub fn name(self) -> &'static str {
        match self {
            BulkAction::Cancel => "cancel",
            BulkAction::Rerun => "rerun",
        }
    }
}

/// Up to `limit` tasks and history summaries matching `filter`, newest first, below
/// `before` (history only with `history`), as one page of [`TaskStore::list_tasks`]:
/// each source is read one page at a time, and where one stopped early (its examine
/// bound) the merged page stops there too, saying where to continue
/// ([`TaskPage::resume`]).
pub fn merged_page(
    store: &dyn TaskStore,
    filter: &TaskFilter,
    before: Option<&str>,
    limit: usize,
    history: bool,
) -> Result<TaskPage, StoreError> {
    let live = store.list_tasks(filter, before, limit)?;
    if !history || filter.live_only() {
        return Ok(live);
    }
    let kept = store.list_history(filter, before, limit)?;
    // Each source examined everything at or above its `resume`: below the higher of
    // the two, one of them has not looked yet.
    let cut = live.resume.clone().max(kept.resume.clone());
    let mut tasks: Vec<_> = live
        .tasks
        .into_iter()
        .chain(kept.tasks)
        .filter(|task| cut.as_ref().is_none_or(|cut| task.id >= *cut))
        .collect();
    tasks.sort_by(|a, b| b.id.cmp(&a.id));
    let full = tasks.len() >= limit;
    tasks.truncate(limit);
    Ok(TaskPage {
        tasks,
        resume: if full { None } else { cut },
    })
}

/// Up to `limit` matching rows, walking on past pages an examine bound cut short (an
/// operator's request goes on where the dashboard's page stops).
pub fn full_page(
    store: &dyn TaskStore,
    filter: &TaskFilter,
    before: Option<String>,
    limit: usize,
    history: bool,
) -> Result<TaskPage, StoreError> {
    let mut rows = Vec::new();
    let mut before = before;
    loop {
        let page = merged_page(
            store,
            filter,
            before.as_deref(),
            limit - rows.len(),
            history,
        )?;
        rows.extend(page.tasks);
        match page.resume {
            Some(resume) if rows.len() < limit => before = Some(resume),
            _ => {
                return Ok(TaskPage {
                    tasks: rows,
                    resume: None,
                })
            }
        }
    }
}

/// How many tasks (and summaries, with `history`) match `filter`, counting no further
/// than `at_most`: `{"count", "through" (the newest's id), "atLeast"}`.
pub fn count(
    store: &dyn TaskStore,
    filter: &TaskFilter,
    history: bool,
    at_most: Option<u64>,
) -> Result<Value, StoreError> {
    const PAGE: usize = 1_000;
    let mut count = 0u64;
    let mut through = None;
    let mut before: Option<String> = None;
    loop {
        let page = merged_page(store, filter, before.as_deref(), PAGE, history)?;
        if through.is_none() {
            through = page.tasks.first().map(|task| task.id.clone());
        }
        count += page.tasks.len() as u64;
        if at_most.is_some_and(|at_most| count >= at_most) {
            return Ok(json!({"count": count, "through": through, "atLeast": true}));
        }
        before = match (page.resume, page.tasks.len() == PAGE) {
            (Some(resume), _) => Some(resume),
            (None, true) => page.tasks.last().map(|task| task.id.clone()),
            (None, false) => None,
        };
        if before.is_none() {
            return Ok(json!({"count": count, "through": through, "atLeast": false}));
        }
    }
}

impl Admin {
    /// One batch of a bulk action: up to `limit` (at most [`MAX_BULK_BATCH`]) tasks
    /// matching `filter` below `before`, each cancelled or re-run as `tasks cancel ID`
    /// and `tasks rerun ID` would. `{"tasks": [{"id", "outcome", "newId"?}], "next"}`:
    /// `next` is where the next batch starts, `null` once none is left.
    pub(super) fn act(
        &self,
        action: BulkAction,
        filter: &TaskFilter,
        before: Option<String>,
        limit: usize,
    ) -> Result<Value, String> {
        let store_error = |e: StoreError| e.to_string();
        if filter.is_empty() {
            return Err("a bulk action needs a filter (status, tool, principal or since)".into());
        }
        let limit = limit.clamp(1, MAX_BULK_BATCH);
        // A cancel acts on unfinished tasks only; a re-run also on history summaries.
        let mut filter = filter.clone();
        filter.unfinished |= action == BulkAction::Cancel;
        let page = full_page(
            self.store.as_ref(),
            &filter,
            before,
            limit,
            action == BulkAction::Rerun,
        )
        .map_err(store_error)?;
        let mut results = Vec::with_capacity(page.tasks.len());
        for task in &page.tasks {
            let result = match action {
                BulkAction::Cancel => {
                    json!({"id": task.id, "outcome": self.cancel_one(&task.id).map_err(store_error)?})
                }
                BulkAction::Rerun => match self.tasks.rerun(&task.id) {
                    Ok(new) => json!({"id": task.id, "outcome": "rerun", "newId": new}),
                    Err(RerunError::Store(error)) => return Err(error.to_string()),
                    Err(error) => json!({"id": task.id, "outcome": rerun_outcome(&error)}),
                },
            };
            results.push(result);
        }
        let next = (page.tasks.len() == limit)
            .then(|| page.tasks.last().map(|task| task.id.clone()))
            .flatten();
        Ok(json!({"tasks": results, "next": next}))
    }

    /// `tasks/cancel` on any task: "cancel_requested" (an attempt runs and is told), the
    /// status it has now ("cancelled", or the one it had ended with), or "not_found".
    pub(super) fn cancel_one(&self, id: &str) -> Result<String, StoreError> {
        Ok(match self.tasks.admin_cancel(id)? {
            CancelEffect::NotFound => "not_found".to_owned(),
            CancelEffect::SignalRunning => "cancel_requested".to_owned(),
            CancelEffect::Done => self
                .store
                .task_detail(id)?
                .map_or("not_found".to_owned(), |task| {
                    task.summary.status.as_str().to_owned()
                }),
        })
    }
}

/// A bulk re-run's outcome for a task it could not re-run.
fn rerun_outcome(error: &RerunError) -> &'static str {
    match error {
        RerunError::NotFound => "not_found",
        RerunError::NoArguments => "no_arguments",
        RerunError::ToolGone(_) => "tool_gone",
        RerunError::Refused(_) | RerunError::Store(_) => "refused",
    }
}

/// `tasks show` of a task past its TTL: its history summary.
pub fn history_detail_json(record: &HistoryRecord, payload: bool) -> Value {
    let mut detail = history_summary_json(&record.summary);
    detail["error"] = super::stored_json(record.error.as_deref());
    detail["attemptCount"] = json!(record.attempts);
    detail["keptUntil"] = json!(rfc3339(record.keep_until));
    detail["attempts"] = json!([]);
    detail["argumentsKept"] = json!(record.origin.is_some());
    if payload {
        let origin = record
            .origin
            .as_deref()
            .and_then(|origin| serde_json::from_slice::<taskd_engine::Origin>(origin).ok());
        detail["arguments"] = origin.map_or(Value::Null, |origin| Value::Object(origin.arguments));
    }
    detail
}

/// A listed row: a task, or a history summary (marked).
pub fn row_json(task: &taskd_engine::model::TaskSummary) -> Value {
    if task.removed_at.is_some() {
        history_summary_json(task)
    } else {
        summary_json(task)
    }
}
