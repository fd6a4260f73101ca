//! `mcp-taskd tools list|pause|resume`: the tools served, their flow control
//! (concurrency keys, rates) and their pauses; pausing and resuming one on every node
//! (see `taskd_engine::flow`).

use clap::Subcommand;

use super::{perform, text, Location, Outcome};
use crate::ops::admin::Request;

#[derive(Subcommand, Debug)]
pub enum ToolsCommand {
    /// The tools served: flow control (key, rate) and whether each is paused.
    List {
        #[command(flatten)]
        at: Location,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Pause a tool: its queued tasks stay queued (on every node), running ones
    /// finish, new calls queue up (or are refused, per its on_pause). Survives
    /// restarts and reloads.
    Pause {
        #[command(flatten)]
        at: Location,
        name: String,
        /// Why: shown in the status message of its queued tasks.
        #[arg(long, value_name = "TEXT", default_value = "")]
        reason: String,
    },
    /// Resume a paused tool: its queued tasks run again, in their turns.
    Resume {
        #[command(flatten)]
        at: Location,
        name: String,
    },
}

/// `mcp-taskd tools …`
pub fn tools(command: ToolsCommand) -> Outcome {
    match command {
        ToolsCommand::List { at, json } => {
            let tools = perform(&at, Request::Tools, "")?;
            for tool in tools.as_array().into_iter().flatten() {
                if json {
                    println!("{tool}");
                    continue;
                }
                let mut flow = Vec::new();
                if tool["concurrencyKey"] == true {
                    flow.push(format!("key (≤{} per value)", tool["maxConcurrencyPerKey"]));
                }
                if let Some(rate) = tool["rate"].as_str() {
                    let scope = if tool["ratePerKey"] == true {
                        " per key"
                    } else {
                        ""
                    };
                    flow.push(format!("rate {rate}{scope}"));
                }
                let state = if tool["paused"] == true {
                    let reason = text(&tool["pauseReason"]);
                    let served = if tool["served"] == false {
                        ", not served"
                    } else {
                        ""
                    };
                    if reason.is_empty() {
                        format!("PAUSED since {}{served}", text(&tool["pausedAt"]))
                    } else {
                        format!("PAUSED since {}: {reason}{served}", text(&tool["pausedAt"]))
                    }
                } else {
                    "running".to_owned()
                };
                println!(
                    "{:<32} {:<8} {}",
                    text(&tool["name"]),
                    state,
                    flow.join(", ")
                );
            }
            Ok(())
        }
        ToolsCommand::Pause { at, name, reason } => {
            let paused = perform(&at, Request::Pause { tool: name, reason }, "")?;
            let already = if paused["already"] == true {
                " (it was paused already; the reason is updated)"
            } else {
                ""
            };
            println!("{} paused{already}", text(&paused["tool"]));
            Ok(())
        }
        ToolsCommand::Resume { at, name } => {
            let resumed = perform(&at, Request::Resume { tool: name }, "")?;
            println!("{} resumed", text(&resumed["tool"]));
            Ok(())
        }
    }
}
