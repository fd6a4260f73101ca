//! `mcp-taskd tasks start TOOL`: a durable task started from the shell, through the
//! running server's admin socket (or, when none runs, into the store's queue for the
//! next server, as `tasks rerun` does). It prints the task's id; with `--wait`, the
//! task's result, and the exit status tells its outcome:
//!
//! | status | outcome |
//! |---|---|
//! | 0 | completed |
//! | 1 | the command failed (no such tool, arguments refused, no store, …) |
//! | 2 | the command line is wrong |
//! | 3 | completed, but the tool reported an error (`isError: true`) |
//! | 4 | failed |
//! | 5 | cancelled |
//! | 6 | it waits for input (`input_required`), which a shell cannot give |

use std::io::Read;
use std::time::Duration;

use clap::Args;
use serde_json::{json, Map, Value};

use super::{load, parse_duration, perform, text, CommandFailed, Location, Outcome};
use crate::ops::admin::start::StartRequest;
use crate::ops::admin::{ask, Request, SOCKET_NAME};
use crate::ops::backup::server_running;
use taskd_base::clock::{now_ms, parse_rfc3339};
use taskd_protocol::TaskStatus;

/// How often `--wait` reads the task.
const WAIT_EVERY: Duration = Duration::from_millis(200);

#[derive(Args, Debug)]
pub struct StartArgs {
    #[command(flatten)]
    at: Location,
    /// The tool to call.
    tool: String,
    /// The call's arguments: a JSON object, or @FILE to read one from a file (@- reads
    /// standard input).
    #[arg(long, value_name = "JSON|@FILE", default_value = "{}")]
    args: String,
    /// Start no earlier than TIME: RFC 3339 (2026-03-01T09:00:00Z, or with an offset)
    /// or +DURATION from now (+90s, +15m, +2h, +7d). The task waits in the queue, across
    /// restarts, and starts within a second of its time.
    #[arg(long = "at", value_name = "TIME")]
    start_at: Option<String>,
    /// An idempotency key (1-256 bytes): while a task of the identity holds it, the same
    /// command answers with that task instead of starting another (the same key with
    /// another tool or other arguments is refused).
    #[arg(long, value_name = "KEY")]
    key: Option<String>,
    /// Wait for the task to end and print its result; the exit status tells its
    /// outcome (0 completed, 3 isError, 4 failed, 5 cancelled, 6 waits for input).
    /// Needs a running server.
    #[arg(long)]
    wait: bool,
    /// Print JSON: the task's id and times; with --wait, its id, status and result or
    /// error.
    #[arg(long)]
    json: bool,
    /// The identity the task belongs to, as a static token's (`[[auth.tokens]]`
    /// principal and tenant): a client with such a token can follow it with tasks/get.
    /// The default, anonymous, is every client's when no tokens are configured.
    #[arg(long, value_name = "P", default_value = "anonymous")]
    principal: String,
    #[arg(long, value_name = "T", default_value = "")]
    tenant: String,
}

/// `mcp-taskd tasks start`
pub(super) fn start(args: StartArgs) -> Outcome {
    let arguments = read_arguments(&args.args)?;
    let at = args.start_at.as_deref().map(parse_time).transpose()?;
    let config = load(&args.at)?;
    let data_dir = config.server.data_dir.clone();
    if args.wait && !server_running(&data_dir).map_err(|e| e.to_string())? {
        return Err(format!(
            "--wait needs a running server on {} (without --wait, the task is queued for \
             the next one)",
            data_dir.display()
        )
        .into());
    }
    let request = Request::Start(StartRequest {
        tool: args.tool,
        arguments,
        at,
        key: args.key,
        endpoint: config.server.endpoint.clone(),
        principal: args.principal,
        tenant: args.tenant,
    });
    let started = perform(&args.at, request, "")?;
    let id = text(&started["id"]);
    if !args.wait {
        if args.json {
            println!("{started}");
        } else {
            println!("{id}");
        }
        return Ok(());
    }
    let task = wait_for(&data_dir, &id)?;
    report(&id, &task, args.json)
}

/// The arguments as given: a JSON object, inline or from `@FILE` (`@-`: stdin).
fn read_arguments(given: &str) -> Result<Map<String, Value>, String> {
    let text = match given.strip_prefix('@') {
        Some("-") => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| format!("reading the arguments from standard input: {e}"))?;
            text
        }
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("reading the arguments from {path}: {e}"))?,
        None => given.to_owned(),
    };
    match serde_json::from_str(&text) {
        Ok(Value::Object(arguments)) => Ok(arguments),
        Ok(_) => Err("the arguments must be a JSON object".into()),
        Err(error) => Err(format!("the arguments are not JSON: {error}")),
    }
}

/// `--at`: an RFC 3339 time, or `+DURATION` from now, in Unix ms.
fn parse_time(text: &str) -> Result<i64, String> {
    if let Some(duration) = text.trim().strip_prefix('+') {
        return parse_duration(duration).map(|ms| now_ms().saturating_add(ms));
    }
    parse_rfc3339(text).ok_or_else(|| {
        format!("--at {text:?}: give an RFC 3339 time (2026-03-01T09:00:00Z) or +DURATION (+15m)")
    })
}

/// The task once it has ended, or waits for input; read through the admin socket,
/// and only while a server runs (the store stays the server's: a server restarting
/// meanwhile finds it free).
fn wait_for(data_dir: &std::path::Path, id: &str) -> Result<Value, String> {
    let socket = data_dir.join(SOCKET_NAME);
    loop {
        if server_running(data_dir).map_err(|e| e.to_string())? {
            let show = Request::Show {
                id: id.to_owned(),
                payload: true,
            };
            // A server stopping between the check and the question: asked again.
            if let Ok(task) = ask(&socket, &show, &mut |_, _| {}) {
                let status = task["status"].as_str().and_then(TaskStatus::parse);
                if status.is_some_and(|s| s.is_terminal() || s == TaskStatus::InputRequired) {
                    return Ok(task);
                }
            }
        }
        std::thread::sleep(WAIT_EVERY);
    }
}

/// Prints what the task came to; its outcome is the exit status.
fn report(id: &str, task: &Value, json: bool) -> Outcome {
    let status = task["status"].as_str().and_then(TaskStatus::parse);
    let result = &task["result"];
    if json {
        let mut out = json!({"id": id, "status": task["status"]});
        for key in ["result", "error", "inputRequests"] {
            if !task[key].is_null() {
                out[key] = task[key].clone();
            }
        }
        println!("{out}");
    }
    let (sentence, code) = match status {
        Some(TaskStatus::Completed) => {
            if !json {
                print_result(result);
            }
            if result["isError"] != true {
                return Ok(());
            }
            (format!("task {id}: the tool reported an error"), 3)
        }
        Some(TaskStatus::Failed) => {
            let message = task["error"]["message"]
                .as_str()
                .map_or_else(|| task["error"].to_string(), str::to_owned);
            (format!("task {id} failed: {message}"), 4)
        }
        Some(TaskStatus::Cancelled) => (format!("task {id} was cancelled"), 5),
        _ => {
            if !json {
                println!("{}", task["inputRequests"]);
            }
            (
                format!(
                    "task {id} waits for input, which a client with its identity can give \
                     (tasks/update)"
                ),
                6,
            )
        }
    };
    Err(CommandFailed(sentence, code))
}

/// A `CallToolResult` for a shell: each text block's text, anything else as JSON.
fn print_result(result: &Value) {
    let blocks = result["content"].as_array().cloned().unwrap_or_default();
    if blocks.is_empty() {
        println!("{result}");
    }
    for block in blocks {
        match block["text"].as_str() {
            Some(text) if block["type"] == "text" => println!("{text}"),
            _ => println!("{block}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc_3339_or_a_duration_from_now() {
        assert_eq!(parse_time("2026-03-01T09:00:00Z"), Ok(1_772_355_600_000));
        let later = parse_time("+90s").unwrap() - now_ms();
        assert!((89_000..=90_000).contains(&later), "{later}");
        assert!(parse_time("tomorrow").is_err());
        assert!(parse_time("+soon").is_err());
    }

    #[test]
    fn arguments_are_a_json_object() {
        assert_eq!(read_arguments("{\"n\": 1}").unwrap()["n"], 1);
        assert!(read_arguments("[1]").is_err());
        assert!(read_arguments("{").is_err());
        assert!(read_arguments("@/nonexistent/args.json").is_err());
    }
}
