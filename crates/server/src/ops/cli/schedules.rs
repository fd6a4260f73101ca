//! `mcp-taskd schedules list`: the schedules in force, each with its next run and what
//! became of its last slot (see `taskd_engine::schedules`).

use clap::Subcommand;

use super::{perform, text, Location, Outcome};
use crate::ops::admin::Request;

#[derive(Subcommand, Debug)]
pub enum SchedulesCommand {
    /// The schedules: timing, next run, the last slot's outcome and task, counts.
    List {
        #[command(flatten)]
        at: Location,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
}

/// `mcp-taskd schedules …`
pub fn schedules(command: SchedulesCommand) -> Outcome {
    let SchedulesCommand::List { at, json } = command;
    let listed = perform(&at, Request::Schedules, "")?;
    let listed = listed.as_array().cloned().unwrap_or_default();
    if json {
        for schedule in &listed {
            println!("{schedule}");
        }
        return Ok(());
    }
    if listed.is_empty() {
        println!("no schedules are configured ([[schedules]])");
    }
    for schedule in &listed {
        println!(
            "{}  {} → {}",
            text(&schedule["name"]),
            text(&schedule["timing"]),
            text(&schedule["tool"])
        );
        println!("  next run      {}", text(&schedule["nextRun"]));
        let last = &schedule["last"];
        if last.is_null() {
            println!("  last          none yet");
        } else {
            let mut line = format!("{} ({})", text(&last["slot"]), text(&last["outcome"]));
            if !last["taskId"].is_null() {
                line.push_str(&format!(
                    ", task {} {}",
                    text(&last["taskId"]),
                    match &last["taskStatus"] {
                        serde_json::Value::Null => "(expired)".to_owned(),
                        status => text(status),
                    }
                ));
            }
            println!("  last          {line}");
        }
        let counts = &schedule["counts"];
        println!(
            "  counts        {} created, {} skipped, {} missed, {} refused",
            counts["created"], counts["skipped"], counts["missed"], counts["refused"]
        );
        println!(
            "  policies      missed = {}, overlap = {}; as {}",
            text(&schedule["missed"]),
            text(&schedule["overlap"]),
            match text(&schedule["tenant"]).as_str() {
                "" => text(&schedule["principal"]),
                tenant => format!("{tenant}/{}", text(&schedule["principal"])),
            }
        );
    }
    Ok(())
}
