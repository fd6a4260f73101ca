// Over 600 lines: one short function per operator command, over one shared path.
//! The operator commands on the client side: `tasks list|show|cancel|rerun|logs`
//! (cancel and rerun by filter: [`bulk`]), `tasks start` ([`start`]), `schedules list`
//! ([`schedules`]), `tools list|pause|resume` ([`tools`]), `webhooks list|retry`
//! ([`webhooks`]), `stats`, `backup` and `restore`. Each one asks the running server
//! through its admin socket, or, when the data-dir lock says no server runs, opens the
//! database itself and answers the same request the same way
//! ([`super::admin::Admin::handle`]).
//!
//! Output: a readable table or layout by default, JSON (lines, for lists) with
//! `--json`. Task contents are printed only by `tasks show --payload`.

mod bulk;
mod schedules;
mod start;
mod tools;
mod webhooks;

pub use self::bulk::FilterArgs;
pub use self::schedules::{schedules, SchedulesCommand};
pub use self::start::StartArgs;
pub use self::tools::{tools, ToolsCommand};
pub use self::webhooks::{webhooks, WebhooksCommand};

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use serde_json::Value;

use super::admin::{ask, Admin, BulkAction, Request, MAX_LIST, MAX_OUTPUT_LINES, SOCKET_NAME};
use super::backup::{move_into_place, restore, return_store_files, server_running};
use crate::config::Config;
use crate::live::{Live, Settings};
use crate::metrics::Metrics;
use taskd_engine::history::parse_duration;
use taskd_engine::webhooks::WebhookStore;
use taskd_engine::workers::Inflight;
use taskd_engine::{TaskService, TaskStore};
use taskd_notifications::Hub;
use taskd_protocol::TaskStatus;
use taskd_sqlite::{OpenError, Opened, Store};

/// Where the data is: the same options as `serve`.
#[derive(Args, Debug, Clone)]
pub struct Location {
    /// TOML configuration file; without it the embedded default is used.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Data directory, overriding server.data_dir.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum TasksCommand {
    /// List tasks, newest first, with the history summaries of finished tasks past their
    /// TTL (marked as such).
    List {
        #[command(flatten)]
        at: Location,
        #[command(flatten)]
        filter: FilterArgs,
        /// Only tasks still stored, not the history summaries of those past their TTL.
        #[arg(long)]
        no_history: bool,
        /// At most this many tasks, newest first (asked for 10,000 at a time).
        #[arg(long, value_name = "N", default_value_t = 50)]
        limit: usize,
        /// Only tasks older than this task id (the next page: the last id listed).
        #[arg(long, value_name = "ID")]
        before: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Show a task: status, attempts, error, input requests, origin.
    Show {
        #[command(flatten)]
        at: Location,
        id: String,
        /// Also show the task's contents: arguments, result and input responses.
        #[arg(long)]
        payload: bool,
        #[arg(long)]
        json: bool,
    },
    /// Cancel tasks, as tasks/cancel does, whatever their binding: those named, or
    /// every unfinished task the filters match (counted first; acts with --yes).
    Cancel {
        #[command(flatten)]
        at: Location,
        #[arg(value_name = "ID", conflicts_with_all = ["status", "tool", "principal", "since"])]
        ids: Vec<String>,
        #[command(flatten)]
        filter: FilterArgs,
        /// Act on every task the filters match without asking.
        #[arg(long)]
        yes: bool,
        /// Report as one JSON object (counts by outcome, and each task).
        #[arg(long)]
        json: bool,
    },
    /// Start a task of TOOL now or at a time, and print its id (or, with --wait, its
    /// result; the exit status then tells its outcome).
    Start(StartArgs),
    /// Start a new task with the same tool, arguments and binding as ID (linked to it:
    /// its rerunOf), or as each task the filters match (counted first; acts with --yes).
    Rerun {
        #[command(flatten)]
        at: Location,
        #[arg(conflicts_with_all = ["status", "tool", "principal", "since"])]
        id: Option<String>,
        #[command(flatten)]
        filter: FilterArgs,
        /// Act on every task the filters match without asking.
        #[arg(long)]
        yes: bool,
        /// Report as one JSON object (counts by outcome, and each task).
        #[arg(long)]
        json: bool,
    },
    /// Print a task's output: what its tool printed (stderr, stdout beyond the
    /// protocol, status and log messages), oldest first.
    Logs {
        #[command(flatten)]
        at: Location,
        id: String,
        /// Keep printing new lines until the task ends (Ctrl-C stops).
        #[arg(long, short = 'f')]
        follow: bool,
        /// Only this attempt's lines.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(1..))]
        attempt: Option<i64>,
        /// One JSON object per line: position, attempt, at, stream, text.
        #[arg(long)]
        json: bool,
    },
}

/// How an operator command ends: `Err` carries one sentence for the operator, which
/// `main` prints after `mcp-taskd: `.
type Outcome = Result<(), CommandFailed>;

/// Why an operator command failed, as the operator reads it, and the exit status it
/// ends with (1, unless a waited-for task's outcome says otherwise: see [`start`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CommandFailed(String, u8);

impl CommandFailed {
    pub fn exit_code(&self) -> u8 {
        self.1
    }
}

impl From<String> for CommandFailed {
    fn from(sentence: String) -> CommandFailed {
        CommandFailed(sentence, 1)
    }
}

/// `mcp-taskd tasks …`
pub fn tasks(command: TasksCommand) -> Outcome {
    match command {
        TasksCommand::List {
            at,
            filter,
            no_history,
            limit,
            before,
            json,
        } => {
            let filter = filter.filter()?;
            // One answer holds at most MAX_LIST tasks (it is one line on the admin
            // socket); a longer list is asked for page by page, each page after the
            // last id of the one before. JSON lines are printed as they come; the
            // table needs every row for its column widths.
            let mut table = Vec::new();
            let mut before = before;
            let mut left = limit;
            while left > 0 {
                let asked = left.min(MAX_LIST);
                let request = Request::List {
                    filter: filter.clone(),
                    before: before.take(),
                    limit: asked,
                    without_history: no_history,
                };
                let page = match perform(&at, request, "")? {
                    Value::Array(rows) => rows,
                    _ => Vec::new(),
                };
                left = left.saturating_sub(page.len());
                let full = page.len() == asked;
                before = page
                    .last()
                    .and_then(|row| row["id"].as_str())
                    .map(str::to_owned);
                if json {
                    for row in &page {
                        println!("{row}");
                    }
                } else {
                    table.extend(page);
                }
                if !full || before.is_none() {
                    break;
                }
            }
            if !json {
                print_table(&table);
            }
            Ok(())
        }
        TasksCommand::Show {
            at,
            id,
            payload,
            json,
        } => {
            let task = perform(&at, Request::Show { id, payload }, "")?;
            if json {
                println!("{task}");
            } else {
                print_task(&task);
            }
            Ok(())
        }
        TasksCommand::Cancel {
            at,
            ids,
            filter,
            yes,
            json,
        } => {
            if ids.is_empty() {
                return bulk::bulk(&at, BulkAction::Cancel, &filter, yes, json);
            }
            let outcomes = perform(&at, Request::Cancel { ids }, "")?;
            let mut missing = 0;
            for outcome in outcomes.as_array().into_iter().flatten() {
                let id = text(&outcome["id"]);
                let said = match outcome["outcome"].as_str() {
                    Some("not_found") => {
                        missing += 1;
                        "not found".to_owned()
                    }
                    Some("cancel_requested") => {
                        "cancellation requested (an attempt is running)".to_owned()
                    }
                    Some(status) if TaskStatus::parse(status) == Some(TaskStatus::Cancelled) => {
                        status.to_owned()
                    }
                    Some(status) => format!("already {status}"),
                    None => "?".to_owned(),
                };
                println!("{id}  {said}");
            }
            if missing > 0 {
                return Err(format!("{missing} task(s) not found").into());
            }
            Ok(())
        }
        TasksCommand::Start(args) => start::start(args),
        TasksCommand::Rerun {
            at, id: Some(id), ..
        } => {
            let created = perform(&at, Request::Rerun { id }, "")?;
            println!("{}", text(&created["id"]));
            Ok(())
        }
        TasksCommand::Rerun {
            at,
            id: None,
            filter,
            yes,
            json,
        } => bulk::bulk(&at, BulkAction::Rerun, &filter, yes, json),
        TasksCommand::Logs {
            at,
            id,
            follow,
            attempt,
            json,
        } => logs(&at, id, follow, attempt, json),
    }
}

/// How often `tasks logs --follow` asks for new lines: a running attempt writes its
/// output at most every 250 ms, so a line shows within about half a second.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// `mcp-taskd tasks logs`: every kept line, then (with `follow`) new ones until the
/// task ends and its last lines are printed.
fn logs(at: &Location, id: String, follow: bool, attempt: Option<i64>, json: bool) -> Outcome {
    let data_dir = load(at)?.server.data_dir;
    let mut after = 0;
    let mut shown_attempt = attempt;
    let mut told_dropped = false;
    loop {
        let request = Request::Output {
            id: id.clone(),
            after,
            attempt,
            limit: MAX_OUTPUT_LINES,
        };
        let page = perform(at, request, "")?;
        let lines = page["lines"].as_array().cloned().unwrap_or_default();
        let dropped = page["dropped"].as_i64().unwrap_or(0);
        if dropped > 0 && !told_dropped && !json {
            eprintln!(
                "({dropped} earlier lines were dropped to keep the task's output within its cap)"
            );
            told_dropped = true;
        }
        for line in &lines {
            if json {
                println!("{line}");
                continue;
            }
            let this_attempt = line["attempt"].as_i64();
            if shown_attempt.is_some() && this_attempt != shown_attempt {
                println!("--- attempt {} ---", line["attempt"]);
            }
            shown_attempt = this_attempt;
            println!("{}", text(&line["text"]));
        }
        after = page["next"].as_i64().unwrap_or(after);
        if lines.len() == MAX_OUTPUT_LINES {
            continue;
        }
        let ended = page["status"]
            .as_str()
            .and_then(TaskStatus::parse)
            .is_none_or(TaskStatus::is_terminal);
        if !follow || ended {
            return Ok(());
        }
        if !server_running(&data_dir).map_err(|e| e.to_string())? {
            return Err(
                "no server is running: nothing more will be written until one starts"
                    .to_owned()
                    .into(),
            );
        }
        std::thread::sleep(FOLLOW_EVERY);
    }
}

/// `mcp-taskd stats`
pub fn stats(at: &Location, json: bool) -> Outcome {
    let stats = perform(at, Request::Stats, "")?;
    if json {
        println!("{stats}");
        return Ok(());
    }
    println!("tasks by status:");
    for status in TaskStatus::ALL {
        let count = stats["tasksByStatus"][status.as_str()]
            .as_u64()
            .unwrap_or(0);
        println!("  {:<16}{count}", status.as_str());
    }
    println!("tasks by tool:");
    for (tool, counts) in stats["tasksByTool"].as_object().into_iter().flatten() {
        let parts: Vec<String> = counts
            .as_object()
            .into_iter()
            .flatten()
            .map(|(status, count)| format!("{status} {count}"))
            .collect();
        println!("  {tool:<24}{}", parts.join(", "));
    }
    let jobs = &stats["jobs"];
    println!(
        "queue:            {} queued, {} running, {} waiting for input; oldest ready {}s",
        jobs["queued"], jobs["running"], jobs["waiting"], stats["oldestReadyAgeSeconds"]
    );
    match stats["workers"].as_object() {
        Some(workers) => println!(
            "workers:          {} busy of {}",
            workers["busy"], workers["threads"]
        ),
        None => println!("workers:          none (no server running)"),
    }
    println!(
        "created:          {} in the last minute, {} in the last hour",
        stats["created"]["lastMinute"], stats["created"]["lastHour"]
    );
    for (window, key) in [("minute", "lastMinute"), ("hour", "lastHour")] {
        let ended: Vec<String> = stats["attemptsEnded"][key]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(outcome, count)| format!("{outcome} {count}"))
            .collect();
        let ended = if ended.is_empty() {
            "none".to_owned()
        } else {
            ended.join(", ")
        };
        println!("attempts ended in the last {window}: {ended}");
    }
    let identities = stats["identities"].as_array().cloned().unwrap_or_default();
    if !identities.is_empty() {
        println!("identities (most unfinished tasks first; refusals since the server started):");
    }
    for identity in &identities {
        let text = |field: &str| identity[field].as_str().unwrap_or("?").to_owned();
        let mut name = text("principal");
        if !text("tenant").is_empty() {
            name = format!("{}/{name}", text("tenant"));
        }
        if !text("issuer").is_empty() {
            name = format!("{name} ({})", text("issuer"));
        }
        let refusals: Vec<String> = identity["refusals"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, count)| count.as_u64().unwrap_or(0) > 0)
            .map(|(quota, count)| format!("{quota} {count}"))
            .collect();
        let refusals = if refusals.is_empty() {
            "none".to_owned()
        } else {
            refusals.join(", ")
        };
        println!(
            "  {name:<24}{} queued, {} running, {} waiting for input; refused: {refusals}",
            identity["queued"], identity["running"], identity["waiting"]
        );
    }
    Ok(())
}

/// `mcp-taskd reload`: asks the running server to re-read its configuration file, and
/// prints what changed; fails with the server's reason when it refused the file.
pub fn reload(at: &Location) -> Outcome {
    let data_dir = reload_data_dir(at)?;
    if !server_running(&data_dir).map_err(|e| e.to_string())? {
        return Err(format!(
            "no server is running on {}: there is nothing to reload",
            data_dir.display()
        )
        .into());
    }
    let report = ask(
        &data_dir.join(SOCKET_NAME),
        &Request::Reload,
        &mut |_, _| {},
    )?;
    println!("reloaded {}", text(&report["file"]));
    for kind in ["tools", "schedules"] {
        for change in ["added", "removed", "changed"] {
            let names = names(&report[kind][change]);
            if !names.is_empty() {
                println!("{kind} {change}: {names}");
            }
        }
    }
    let tokens = &report["tokens"];
    if tokens["added"].as_u64().unwrap_or(0) + tokens["removed"].as_u64().unwrap_or(0) > 0 {
        println!(
            "tokens: {} added, {} removed; ended {} listen stream(s) and {} session(s) of \
             revoked tokens",
            tokens["added"],
            tokens["removed"],
            report["ended"]["listenStreams"],
            report["ended"]["sessions"]
        );
    }
    let restart = names(&report["restartNeeded"]);
    if !restart.is_empty() {
        println!("needs a restart to take effect (running values kept): {restart}");
    }
    Ok(())
}

/// The names in a JSON array, comma-separated.
fn names(list: &Value) -> String {
    let names: Vec<String> = list.as_array().into_iter().flatten().map(text).collect();
    names.join(", ")
}

/// The data dir of the server to reload: `--data-dir`, else `server.data_dir` of the
/// file. The file may be the broken one the reload is about: its data dir is then read
/// from the TOML alone, unchecked.
fn reload_data_dir(at: &Location) -> Result<PathBuf, String> {
    if let Some(data_dir) = &at.data_dir {
        return Ok(data_dir.clone());
    }
    match Config::load(at.config.as_deref()) {
        Ok(config) => Ok(config.server.data_dir),
        Err(error) => {
            let path = at.config.as_deref().unwrap_or(Path::new(""));
            let table: toml::Table = std::fs::read_to_string(path)
                .ok()
                .and_then(|text| text.parse().ok())
                .ok_or_else(|| format!("{error} (pass --data-dir to reach the server)"))?;
            let data_dir = table
                .get("server")
                .and_then(|server| server.get("data_dir"))
                .and_then(toml::Value::as_str)
                .map_or_else(
                    || crate::config::ServerConfig::default().data_dir,
                    PathBuf::from,
                );
            Ok(data_dir)
        }
    }
}

/// `mcp-taskd backup FILE`
pub fn backup(at: &Location, file: &Path) -> Outcome {
    if file.exists() {
        return Err(format!("{} already exists", file.display()).into());
    }
    let done = perform(at, Request::Backup, "backup")?;
    let staged = PathBuf::from(text(&done["staged"]));
    let mut progress = Progress::new("moving");
    let moved = move_into_place(&staged, file, &mut |d, t| progress.show(d, t));
    progress.finish();
    if moved.is_err() {
        let _ = std::fs::remove_file(&staged);
    }
    moved.map_err(|e| e.to_string())?;
    println!(
        "backup written to {} ({} bytes, integrity check ok)",
        file.display(),
        done["bytes"]
    );
    Ok(())
}

/// `mcp-taskd restore FILE`
pub fn restore_file(at: &Location, file: &Path, force: bool) -> Outcome {
    let config = load(at)?;
    if config.store.backend == taskd_engine::config::Backend::Postgres {
        return Err(
            "restore puts a SQLite backup in the data dir; this configuration stores \
             tasks in PostgreSQL: restore the database with its own tools (pg_restore), or \
             copy a SQLite store into it with `mcp-taskd copy-store`"
                .to_owned()
                .into(),
        );
    }
    let data_dir = &config.server.data_dir;
    let mut progress = Progress::new("restore");
    let restored = restore(file, data_dir, force, &mut |d, t| progress.show(d, t));
    progress.finish();
    restored.map_err(|e| e.to_string())?;
    println!("restored {} into {}", file.display(), data_dir.display());
    Ok(())
}

fn load(at: &Location) -> Result<Config, String> {
    let mut config = Config::load(at.config.as_deref()).map_err(|e| e.to_string())?;
    if let Some(data_dir) = &at.data_dir {
        config.server.data_dir = data_dir.clone();
    }
    Ok(config)
}

/// Sends `request` to the running server, or answers it on the database when none
/// runs. `label` names the progress shown on a terminal (none when empty).
fn perform(at: &Location, request: Request, label: &str) -> Result<Value, String> {
    let config = load(at)?;
    let data_dir = config.server.data_dir.clone();
    let mut progress = Progress::new(label);
    let mut report = |done: u64, total: u64| progress.show(done, total);
    let result = if server_running(&data_dir).map_err(|e| e.to_string())? {
        ask(&data_dir.join(SOCKET_NAME), &request, &mut report)
    } else {
        offline(config, request, &mut report)
    };
    progress.finish();
    result
}

/// Answers `request` on the database itself, with the engine the server would use
/// (its tools registered for reruns), but no workers: a rerun task waits in the queue
/// for the next server.
fn offline(
    config: Config,
    request: Request,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Value, String> {
    let data_dir = config.server.data_dir.clone();
    let postgres = config.store.backend == taskd_engine::config::Backend::Postgres;
    if !postgres && !data_dir.join("tasks.db").is_file() {
        return Err(format!(
            "no task store in {} (and no server running there)",
            data_dir.display()
        ));
    }
    let hub = Arc::new(Hub::new(config.notifications.clone()));
    let live = Arc::new(Live::new(
        Settings::build(config.clone(), &hub, &taskd_upstreams::Upstreams::none())
            .map_err(|e| e.to_string())?,
    ));
    let (store, webhook_store, writer): (Arc<dyn TaskStore>, Arc<dyn WebhookStore>, _) = if postgres
    {
        let taskd_postgres::Opened { store, listener } =
            taskd_postgres::Store::open(&config.store, &data_dir).map_err(|e| e.to_string())?;
        (store.clone(), store, listener)
    } else {
        let Opened { store, writer } =
            Store::open(&data_dir, &config.store).map_err(|e| match e {
                OpenError::InUse { .. } => format!(
                    "a server started on {} meanwhile; run the command again",
                    data_dir.display()
                ),
                other => other.to_string(),
            })?;
        (store.clone(), store, writer)
    };
    let (wake, _) = crossbeam_channel::bounded(1);
    let metrics = Arc::new(Metrics::new([]));
    let tasks = Arc::new(TaskService::new(
        Arc::clone(&live) as Arc<dyn taskd_engine::SettingsSource>,
        Arc::clone(&store),
        Arc::new(Inflight::default()),
        wake,
        Arc::clone(&metrics) as Arc<dyn taskd_engine::QuotaCounter>,
    ));
    let admin = Admin {
        store,
        tasks,
        metrics,
        data_dir: data_dir.clone(),
        worker_threads: None,
        reloader: Default::default(),
        webhooks: super::admin::WebhookOps {
            store: webhook_store,
            live,
        },
    };
    let result = admin.handle(request, progress);
    // Every store handle gone: the writer commits what is queued and ends.
    drop(admin);
    let _ = writer.join();
    if !postgres {
        return_store_files(&data_dir).map_err(|e| e.to_string())?;
    }
    result
}

/// Progress of a long operation on stderr, only when it is a terminal.
struct Progress {
    label: &'static str,
    shown: Option<u64>,
    terminal: bool,
}

impl Progress {
    fn new(label: &str) -> Progress {
        let label = match label {
            "backup" => "backup",
            "restore" => "restore",
            "moving" => "moving the backup",
            _ => "",
        };
        Progress {
            label,
            shown: None,
            terminal: !label.is_empty() && std::io::stderr().is_terminal(),
        }
    }

    fn show(&mut self, done: u64, total: u64) {
        if !self.terminal || total == 0 {
            return;
        }
        let percent = done.saturating_mul(100) / total;
        if self.shown != Some(percent) {
            self.shown = Some(percent);
            eprint!("\r{}: {percent:>3}%", self.label);
        }
    }

    fn finish(&mut self) {
        if self.shown.take().is_some() {
            eprintln!();
        }
    }
}

/// A JSON value as plain text (strings without quotes).
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

fn print_table(rows: &[Value]) {
    const COLUMNS: [(&str, &str); 6] = [
        ("ID", "id"),
        ("STATUS", "status"),
        ("TOOL", "tool"),
        ("PRINCIPAL", "principal"),
        ("CREATED", "createdAt"),
        ("UPDATED", "updatedAt"),
    ];
    // A task past its TTL is listed by its history summary, marked as such.
    let cell = |row: &Value, key: &str| match key {
        "status" if row["history"] == true => format!("{} (history)", text(&row[key])),
        _ => text(&row[key]),
    };
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| COLUMNS.iter().map(|(_, key)| cell(row, key)).collect())
        .collect();
    let widths: Vec<usize> = COLUMNS
        .iter()
        .enumerate()
        .map(|(i, (title, _))| {
            cells
                .iter()
                .map(|row| row[i].chars().count())
                .chain([title.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |values: Vec<&str>| {
        let padded: Vec<String> = values
            .iter()
            .zip(&widths)
            .map(|(value, width)| format!("{value:<width$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(COLUMNS.iter().map(|(title, _)| *title).collect());
    for row in &cells {
        line(row.iter().map(String::as_str).collect());
    }
}

fn print_task(task: &Value) {
    let field = |name: &str, value: String| println!("{name:<16}{value}");
    field("task", text(&task["id"]));
    let mut status = text(&task["status"]);
    if task["cancelRequested"] == true && !status.starts_with("cancel") {
        status.push_str(" (cancellation requested)");
    }
    field("status", status);
    if !task["statusMessage"].is_null() {
        field("status message", text(&task["statusMessage"]));
    }
    field("tool", text(&task["tool"]));
    field(
        "bound to",
        format!(
            "endpoint {}, tenant {}, principal {}",
            text(&task["endpoint"]),
            match text(&task["tenant"]) {
                tenant if tenant.is_empty() => "(none)".to_owned(),
                tenant => tenant,
            },
            text(&task["principal"])
        ),
    );
    if let Some(schedule) = task["schedule"].as_object() {
        let (name, slot) = (text(&schedule["name"]), text(&schedule["slot"]));
        field("schedule", format!("{name}, the slot of {slot}"));
    }
    if !task["rerunOf"].is_null() {
        field("rerun of", text(&task["rerunOf"]));
    }
    field("created", text(&task["createdAt"]));
    field("updated", text(&task["updatedAt"]));
    if task["history"] == true {
        // Only its summary is left (docs/operating.md, "History").
        field(
            "removed",
            format!("{} (past its TTL)", text(&task["removedAt"])),
        );
        field(
            "summary kept",
            format!("until {}", text(&task["keptUntil"])),
        );
        field("attempts", text(&task["attemptCount"]));
        if !task["error"].is_null() {
            field("error", task["error"].to_string());
        }
        if !task["arguments"].is_null() {
            field("arguments", task["arguments"].to_string());
        }
        return;
    }
    field("expires", text(&task["expiresAt"]));
    if let Some(origin) = task["origin"].as_object() {
        field(
            "origin",
            format!(
                "protocol {}, client capabilities {}",
                text(&origin["protocolVersion"]),
                origin["clientCapabilities"]
            ),
        );
    }
    if let Some(job) = task["job"].as_object() {
        let mut line = format!(
            "{}, attempt {} of {}, runs after {}",
            text(&job["state"]),
            job["attempt"],
            job["maxAttempts"],
            text(&job["runAfter"])
        );
        if !job["leaseExpires"].is_null() {
            line.push_str(&format!(", leased until {}", text(&job["leaseExpires"])));
        }
        if !job["lastError"].is_null() {
            line.push_str(&format!(", last error: {}", text(&job["lastError"])));
        }
        field("job", line);
    }
    let attempts = task["attempts"].as_array().cloned().unwrap_or_default();
    if attempts.is_empty() {
        field("attempts", "none".to_owned());
    } else {
        println!("attempts");
        for attempt in attempts {
            println!(
                "  #{:<4}started {}  ended {}  outcome {}",
                text(&attempt["attempt"]),
                text(&attempt["startedAt"]),
                text(&attempt["endedAt"]),
                text(&attempt["outcome"])
            );
        }
    }
    for (name, key) in [
        ("error", "error"),
        ("input requests", "inputRequests"),
        ("arguments", "arguments"),
        ("result", "result"),
        ("input responses", "inputResponses"),
    ] {
        if !task[key].is_null() {
            field(name, task[key].to_string());
        }
    }
}
