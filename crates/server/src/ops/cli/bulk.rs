//! `mcp-taskd tasks cancel|rerun` with the filters of `tasks list` instead of ids
//! (issue 48): count what matches, say so, and act only once the operator agreed
//! (`--yes`, or a y/N answer on a terminal), in batches of
//! [`MAX_BULK_BATCH`](crate::ops::admin::MAX_BULK_BATCH) tasks, each one request
//! through the admin socket (or on the database, offline); then report what each task
//! became, counted by outcome (and each task with `--json`).
//!
//! The action is bounded by the count: it acts on the tasks counted (those created no
//! later than the newest of them), never on tasks created meanwhile, its own re-runs
//! among them. A cancel considers unfinished tasks only; a re-run also the history
//! summaries of tasks past their TTL (re-run when their arguments were kept).

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};

use clap::Args;
use serde_json::json;

use super::{perform, text, Location, Outcome};
use crate::ops::admin::{BulkAction, Request, MAX_BULK_BATCH};
use taskd_base::clock::now_ms;
use taskd_engine::history::parse_duration;
use taskd_engine::model::TaskFilter;
use taskd_protocol::TaskStatus;

/// The filters of `tasks list`, and of bulk actions.
#[derive(Args, Debug, Clone, Default)]
pub struct FilterArgs {
    /// Only tasks in this status (working, input_required, completed, failed, cancelled).
    #[arg(long, value_name = "S")]
    pub status: Option<String>,
    /// Only tasks of this tool.
    #[arg(long, value_name = "T")]
    pub tool: Option<String>,
    /// Only tasks bound to this principal.
    #[arg(long, value_name = "P")]
    pub principal: Option<String>,
    /// Only tasks created within this long (e.g. 90s, 15m, 2h, 7d).
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
}

impl FilterArgs {
    /// The filter these name (`since` counted back from now).
    pub fn filter(&self) -> Result<TaskFilter, String> {
        let status = self
            .status
            .as_deref()
            .map(|name| TaskStatus::parse(name).ok_or_else(|| format!("unknown status {name:?}")))
            .transpose()?;
        let created_since = self
            .since
            .as_deref()
            .map(|text| parse_duration(text).map(|ms| now_ms() - ms))
            .transpose()?;
        Ok(TaskFilter {
            status,
            tool: self.tool.clone(),
            principal: self.principal.clone(),
            created_since,
            ..TaskFilter::default()
        })
    }

    /// Whether any filter is given.
    pub fn given(&self) -> bool {
        self.status.is_some()
            || self.tool.is_some()
            || self.principal.is_some()
            || self.since.is_some()
    }

    /// The filters as the operator wrote them, for the count's line.
    fn describe(&self) -> String {
        let parts: Vec<String> = [
            ("status", &self.status),
            ("tool", &self.tool),
            ("principal", &self.principal),
            ("created within", &self.since),
        ]
        .iter()
        .filter_map(|(name, value)| value.as_ref().map(|value| format!("{name} {value}")))
        .collect();
        parts.join(", ")
    }
}

/// `tasks cancel|rerun` with filters: count, confirm, act in batches, report.
pub fn bulk(
    at: &Location,
    action: BulkAction,
    args: &FilterArgs,
    yes: bool,
    json: bool,
) -> Outcome {
    let verb = action.name();
    if !args.given() {
        return Err(format!(
            "give task ids, or filters (--status, --tool, --principal, --since) to {verb} \
             every task they match"
        )
        .into());
    }
    let mut filter = args.filter()?;
    if action == BulkAction::Cancel {
        if filter.status.is_some_and(TaskStatus::is_terminal) {
            return Err(
                "only unfinished tasks (working, input_required) can be cancelled"
                    .to_owned()
                    .into(),
            );
        }
        filter.unfinished = true;
    }
    let counted = perform(
        at,
        Request::Count {
            filter: filter.clone(),
            without_history: action == BulkAction::Cancel,
            at_most: None,
        },
        "",
    )?;
    let matched = counted["count"].as_u64().unwrap_or(0);
    let what = if action == BulkAction::Cancel {
        "unfinished task(s)"
    } else {
        "task(s)"
    };
    if json {
        eprintln!("{matched} {what} match ({})", args.describe());
    } else {
        println!("{matched} {what} match ({})", args.describe());
    }
    if matched == 0 {
        if json {
            println!(
                "{}",
                json!({"action": verb, "matched": 0, "counts": {}, "tasks": []})
            );
        }
        return Ok(());
    }
    if !yes && !confirmed(&format!("{verb} them? [y/N] ")) {
        return Err(format!(
            "nothing was done: {verb} asks for --yes (or a y on a terminal) before it acts"
        )
        .into());
    }
    filter.through = counted["through"].as_str().map(str::to_owned);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut tasks = Vec::new();
    let mut before = None;
    let terminal = std::io::stderr().is_terminal();
    loop {
        let request = Request::Bulk {
            action,
            filter: filter.clone(),
            before: before.take(),
            limit: MAX_BULK_BATCH,
        };
        let batch = perform(at, request, "")?;
        for task in batch["tasks"].as_array().into_iter().flatten() {
            *counts.entry(text(&task["outcome"])).or_default() += 1;
            if json {
                tasks.push(task.clone());
            }
        }
        if terminal {
            let done: u64 = counts.values().sum();
            eprint!("\r{verb}: {done} of {matched}");
        }
        before = batch["next"].as_str().map(str::to_owned);
        if before.is_none() {
            break;
        }
    }
    if terminal {
        eprintln!();
    }
    if json {
        println!(
            "{}",
            json!({"action": verb, "matched": matched, "counts": counts, "tasks": tasks})
        );
    } else {
        let total: u64 = counts.values().sum();
        let parts: Vec<String> = counts
            .iter()
            .map(|(outcome, count)| format!("{count} {}", label(action, outcome)))
            .collect();
        println!("{verb}: {total} task(s): {}", parts.join(", "));
    }
    Ok(())
}

/// What an outcome means, for the report.
fn label(action: BulkAction, outcome: &str) -> String {
    match (action, outcome) {
        (_, "not_found") => "gone meanwhile (expired or deleted)".into(),
        (BulkAction::Cancel, "cancelled") => "cancelled".into(),
        (BulkAction::Cancel, "cancel_requested") => {
            "cancellation requested (an attempt is running)".into()
        }
        (BulkAction::Cancel, status) => format!("already {status}"),
        (BulkAction::Rerun, "rerun") => "re-run as new tasks".into(),
        (BulkAction::Rerun, "no_arguments") => {
            "not re-run: past their TTL, their arguments were not kept \
             (history.keep_arguments)"
                .into()
        }
        (BulkAction::Rerun, "tool_gone") => "not re-run: their tool is no longer served".into(),
        (BulkAction::Rerun, other) => format!("not re-run ({other})"),
    }
}

/// Asks `question` on a terminal (stdin and stderr); `false` elsewhere, and for
/// anything but y or yes.
fn confirmed(question: &str) -> bool {
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return false;
    }
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}
