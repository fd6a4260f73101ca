// Over 600 lines: one operator request after another (each long one in a child module), and the socket.
//! The operator interface: what `mcp-taskd tasks …`, `stats` and `backup` ask for
//! ([`Request`]), answered the same way by a running server through its admin socket
//! ([`AdminSocket`]) and by the CLI itself on the database when no server runs
//! ([`Admin::handle`] in both cases).
//!
//! # The socket protocol
//!
//! `data_dir/admin.sock`, a Unix stream socket of mode 0600 owned by the server's user.
//! One request per connection: a JSON object on one line (at most [`MAX_REQUEST`]
//! bytes), `{"op": "list" | "show" | "cancel" | "rerun" | "count" | "bulk" | "output" |
//! "pause" | "resume" | "tools" | "start" | "schedules" | "stats" | "backup" | "reload" |
//! "webhooks" | "webhook_deliveries" | "webhook_retry", …}`. The
//! answer is zero or more `{"progress": [done, total]}` lines, then exactly one line
//! `{"result": …}` or `{"error": "…"}`; then the server closes the connection.
//!
//! The socket is as trusted as its file mode: whoever can connect is an operator (no
//! identity binding). The server also refuses peers whose user is neither its own nor
//! root (as the kernel recorded it at `connect`, see [`peer_user`]), which covers the
//! moment between `bind` and `chmod`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::reload::Reloader;
use crate::metrics::Metrics;
use taskd_base::clock::rfc3339;
use taskd_engine::flow::Pause;
use taskd_engine::model::{Origin, StatsDetail, TaskDetail, TaskFilter, TaskSummary};
use taskd_engine::output::{OutputPage, OutputRead};
use taskd_engine::{TaskService, TaskStore};
use taskd_protocol::TaskStatus;
use taskd_tools::flow::{FlowControl, OnPause};

mod bulk;
mod peer_user;
mod schedules;
pub mod start;
mod webhooks;

pub use self::webhooks::{WebhookOps, MAX_DELIVERIES};

pub use bulk::{merged_page, row_json, BulkAction, MAX_BULK_BATCH};

/// The socket's file name in the data dir.
pub const SOCKET_NAME: &str = "admin.sock";
/// Longest request line accepted.
pub const MAX_REQUEST: usize = 64 * 1024;
/// Longest page `tasks list` returns.
pub const MAX_LIST: usize = 10_000;
/// Most output lines one `output` request returns.
pub const MAX_OUTPUT_LINES: usize = 5_000;
/// Connections served at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 4;
/// A client has this long to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One operator request.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Tasks, and the history summaries of tasks past their TTL (unless
    /// `without_history`), newest first.
    List {
        #[serde(default)]
        filter: TaskFilter,
        before: Option<String>,
        limit: usize,
        #[serde(default)]
        without_history: bool,
    },
    Show {
        id: String,
        #[serde(default)]
        payload: bool,
    },
    Cancel {
        ids: Vec<String>,
    },
    Rerun {
        id: String,
    },
    /// How many tasks (and history summaries, unless `without_history`) match, and the
    /// newest one's id (a bulk action's `through`); counting stops at `at_most`.
    Count {
        filter: TaskFilter,
        #[serde(default)]
        without_history: bool,
        #[serde(default)]
        at_most: Option<u64>,
    },
    /// One batch of a bulk cancel or re-run (see [`bulk`]).
    Bulk {
        action: BulkAction,
        filter: TaskFilter,
        before: Option<String>,
        limit: usize,
    },
    /// Lines of a task's output after position `after` (`tasks logs`).
    Output {
        id: String,
        #[serde(default)]
        after: i64,
        attempt: Option<i64>,
        limit: usize,
    },
    /// Pauses a tool on every node ([`taskd_engine::flow`]).
    Pause {
        tool: String,
        #[serde(default)]
        reason: String,
    },
    Resume {
        tool: String,
    },
    /// The tools served, with their flow control and pauses.
    Tools,
    /// Starts a task (`tasks start`; see [`start`]).
    Start(start::StartRequest),
    /// The schedules in force, their next slots and what became of their last.
    Schedules,
    Stats,
    /// Copies the store into a new file in the data dir (the staging file); the answer
    /// names it. The CLI moves it where the operator asked: the server's user may not
    /// be allowed to write there (systemd sandboxing), the operator is.
    Backup,
    /// Re-reads the server's configuration file (see [`super::reload`]); answered once
    /// the reload is applied or refused.
    Reload,
    /// The webhooks, configured or with deliveries kept, counted (`webhooks list`).
    Webhooks,
    /// Webhook deliveries, newest first (`webhooks list --deliveries`).
    WebhookDeliveries {
        webhook: Option<String>,
        state: Option<String>,
        before: Option<i64>,
        limit: usize,
    },
    /// Dead webhook deliveries made pending again (`webhooks retry`).
    WebhookRetry {
        webhook: Option<String>,
        id: Option<String>,
    },
}

impl Request {
    /// The operation's name, the only thing about a request that is logged.
    pub fn name(&self) -> &'static str {
        match self {
            Request::List { .. } => "list",
            Request::Show { .. } => "show",
            Request::Cancel { .. } => "cancel",
            Request::Rerun { .. } => "rerun",
            Request::Count { .. } => "count",
            Request::Bulk { .. } => "bulk",
            Request::Output { .. } => "output",
            Request::Pause { .. } => "pause",
            Request::Resume { .. } => "resume",
            Request::Tools => "tools",
            Request::Start(_) => "start",
            Request::Schedules => "schedules",
            Request::Stats => "stats",
            Request::Backup => "backup",
            Request::Reload => "reload",
            Request::Webhooks => "webhooks",
            Request::WebhookDeliveries { .. } => "webhook_deliveries",
            Request::WebhookRetry { .. } => "webhook_retry",
        }
    }
}

/// What answers operator requests: the engine, and where its data lives.
pub struct Admin {
    pub store: Arc<dyn TaskStore>,
    pub tasks: Arc<TaskService>,
    /// Quota refusals by identity, for `stats`.
    pub metrics: Arc<Metrics>,
    pub data_dir: PathBuf,
    /// Worker threads, when this process runs workers (a server); `None` offline.
    pub worker_threads: Option<usize>,
    /// What applies reloads, once the server serves; unset offline and while starting.
    pub reloader: OnceLock<Arc<Reloader>>,
    /// The webhooks and their deliveries.
    pub webhooks: WebhookOps,
}

impl Admin {
    /// Answers one request. Errors are operator-facing sentences.
    pub(crate) fn handle(
        &self,
        request: Request,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Value, String> {
        let store_error = |e: taskd_engine::StoreError| e.to_string();
        match request {
            Request::List {
                filter,
                before,
                limit,
                without_history,
            } => {
                // A full page, however far a sparse filter must walk for it: the
                // store's pages stop early (see `TaskStore::list_tasks`) so that the
                // dashboard's stay quick; an operator's command goes on.
                let limit = limit.clamp(1, MAX_LIST);
                let page = bulk::full_page(
                    self.store.as_ref(),
                    &filter,
                    before,
                    limit,
                    !without_history,
                )
                .map_err(store_error)?;
                Ok(Value::Array(page.tasks.iter().map(row_json).collect()))
            }
            Request::Show { id, payload } => {
                if let Some(detail) = self.store.task_detail(&id).map_err(store_error)? {
                    return Ok(detail_json(&detail, payload));
                }
                // Past its TTL, the task may have left its summary.
                let record = self.store.history_record(&id).map_err(store_error)?;
                let record = record.ok_or_else(|| format!("no task {id}"))?;
                Ok(bulk::history_detail_json(&record, payload))
            }
            Request::Cancel { ids } => {
                let mut outcomes = Vec::with_capacity(ids.len());
                for id in ids {
                    let outcome = self.cancel_one(&id).map_err(store_error)?;
                    outcomes.push(json!({"id": id, "outcome": outcome}));
                }
                Ok(Value::Array(outcomes))
            }
            Request::Rerun { id } => {
                let new = self.tasks.rerun(&id).map_err(|e| e.to_string())?;
                Ok(json!({"id": new, "rerunOf": id}))
            }
            Request::Count {
                filter,
                without_history,
                at_most,
            } => bulk::count(self.store.as_ref(), &filter, !without_history, at_most)
                .map_err(store_error),
            Request::Bulk {
                action,
                filter,
                before,
                limit,
            } => self.act(action, &filter, before, limit),
            Request::Output {
                id,
                after,
                attempt,
                limit,
            } => {
                let read = OutputRead {
                    after,
                    attempt,
                    limit: limit.clamp(1, MAX_OUTPUT_LINES),
                    newest: false,
                };
                let (status, page) = self
                    .tasks
                    .admin_output(&id, read)
                    .map_err(store_error)?
                    .ok_or_else(|| format!("no task {id}"))?;
                Ok(output_json(status, &page))
            }
            Request::Pause { tool, reason } => {
                self.check_served(&tool)?;
                let newly = self.tasks.pause_tool(&tool, &reason).map_err(store_error)?;
                Ok(json!({"tool": tool, "paused": true, "already": !newly}))
            }
            Request::Resume { tool } => {
                let was = self.tasks.resume_tool(&tool).map_err(store_error)?;
                if !was {
                    return Err(format!("tool {tool} is not paused"));
                }
                Ok(json!({"tool": tool, "paused": false}))
            }
            Request::Tools => {
                let pauses = self.tasks.paused_tools().map_err(store_error)?;
                Ok(tools_json(&self.tasks.served_tools(), &pauses))
            }
            Request::Start(request) => start::start(&self.tasks, request),
            Request::Schedules => schedules::list(&self.tasks),
            Request::Stats => {
                let stats = self.store.stats_detail().map_err(store_error)?;
                let workers = self.worker_threads.map(
                    |threads| json!({"threads": threads, "busy": self.tasks.running_attempts()}),
                );
                let refusals = self.metrics.refusals_by_identity();
                Ok(stats_json(&stats, workers, &refusals))
            }
            Request::Reload => match self.reloader.get() {
                Some(reloader) => reloader
                    .reload("mcp-taskd reload")
                    .map(|report| report.to_json())
                    .map_err(|error| error.to_string()),
                None if self.worker_threads.is_none() => {
                    Err("no server is running: there is nothing to reload".into())
                }
                None => Err("the server is still starting; try again in a moment".into()),
            },
            Request::Webhooks => self.webhooks.list(),
            Request::WebhookDeliveries {
                webhook,
                state,
                before,
                limit,
            } => self.webhooks.deliveries(webhook, state, before, limit),
            Request::WebhookRetry { webhook, id } => self.webhooks.retry(webhook, id),
            Request::Backup => {
                let staged = super::backup::staging_file(&self.data_dir)
                    .map_err(|e| format!("creating the backup file: {e}"))?;
                match self.store.backup_to(&staged, progress) {
                    Ok(()) => {
                        let bytes = std::fs::metadata(&staged).map_or(0, |m| m.len());
                        Ok(json!({"staged": staged, "bytes": bytes}))
                    }
                    Err(error) => {
                        let _ = std::fs::remove_file(&staged);
                        Err(format!("backup failed: {error}"))
                    }
                }
            }
        }
    }
}

impl Admin {
    /// An operator's pause must name a tool the server serves (a typo would pause
    /// nothing). Without a server, upstream servers' tools are not known: any name goes.
    fn check_served(&self, tool: &str) -> Result<(), String> {
        let served = self.tasks.served_tools();
        if self.worker_threads.is_none() || served.iter().any(|(name, _)| name == tool) {
            return Ok(());
        }
        Err(format!(
            "no tool {tool} is served (mcp-taskd tools list shows those that are)"
        ))
    }
}

/// `tools list`: each tool served, its flow control and its pause; then paused names
/// the configuration no longer serves.
fn tools_json(served: &[(String, FlowControl)], pauses: &[Pause]) -> Value {
    let pause_of = |name: &str| pauses.iter().find(|pause| pause.tool == name);
    let mut tools: Vec<Value> = served
        .iter()
        .map(|(name, flow)| {
            let pause = pause_of(name);
            json!({
                "name": name,
                "paused": pause.is_some(),
                "pauseReason": pause.map(|pause| pause.reason.clone()),
                "pausedAt": pause.map(|pause| rfc3339(pause.since)),
                "concurrencyKey": flow.key.is_some(),
                "maxConcurrencyPerKey": flow.key.as_ref().map(|_| flow.max_per_key),
                "rate": flow.rate.map(|rate| rate.describe()),
                "ratePerKey": flow.rate_per_key,
                "onPause": match flow.on_pause {
                    OnPause::Queue => "queue",
                    OnPause::Refuse => "refuse",
                },
            })
        })
        .collect();
    for pause in pauses {
        if !served.iter().any(|(name, _)| *name == pause.tool) {
            tools.push(json!({
                "name": pause.tool,
                "served": false,
                "paused": true,
                "pauseReason": pause.reason,
                "pausedAt": rfc3339(pause.since),
            }));
        }
    }
    Value::Array(tools)
}

/// A listed task as operators and scripts see it (no contents).
pub(crate) fn summary_json(task: &TaskSummary) -> Value {
    json!({
        "id": task.id,
        "status": task.status,
        "tool": task.tool,
        "endpoint": task.endpoint,
        "tenant": task.tenant,
        "principal": task.principal,
        "createdAt": rfc3339(task.created_at),
        "updatedAt": rfc3339(task.updated_at),
        "statusMessage": task.status_message,
        "schedule": task.schedule.as_ref().map(|slot| json!({
            "name": slot.schedule,
            "slot": rfc3339(slot.slot),
        })),
        "rerunOf": task.rerun_of,
    })
}

/// A history summary as listed: a task's fields, marked, with when the task left.
pub(crate) fn history_summary_json(task: &TaskSummary) -> Value {
    let mut row = summary_json(task);
    row["history"] = json!(true);
    row["removedAt"] = json!(task.removed_at.map(rfc3339));
    row
}

/// `tasks logs`: a page of a task's output, each line with its position.
fn output_json(status: TaskStatus, page: &OutputPage) -> Value {
    let lines: Vec<Value> = page
        .lines
        .iter()
        .map(|(position, line)| {
            json!({
                "position": position,
                "attempt": line.attempt,
                "at": rfc3339(line.at_ms),
                "stream": line.stream.as_str(),
                "text": line.text,
            })
        })
        .collect();
    json!({
        "status": status,
        "lines": lines,
        "next": page.next,
        "dropped": page.dropped,
    })
}

/// A stored JSON text as JSON (a damaged one as its text).
fn stored_json(text: Option<&str>) -> Value {
    text.map_or(Value::Null, |text| {
        serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
    })
}

/// `tasks show`: everything but the contents, which come only with `payload`.
fn detail_json(task: &TaskDetail, payload: bool) -> Value {
    let origin: Option<Origin> = serde_json::from_slice(&task.origin).ok();
    let mut detail = summary_json(&task.summary);
    detail["ttlMs"] = json!(task.ttl_ms);
    detail["expiresAt"] = json!(task.expires_at.map(rfc3339));
    detail["cancelRequested"] = json!(task.cancel_requested);
    // An id, not content: the trace the task's spans (and its programs') belong to.
    detail["traceId"] = json!(task.trace.as_ref().map(|trace| trace.trace_id()));
    detail["job"] = task.job.as_ref().map_or(Value::Null, |job| {
        json!({
            "state": job.state,
            "attempt": job.attempt,
            "maxAttempts": job.max_attempts,
            "runAfter": rfc3339(job.run_after),
            "leaseExpires": job.lease_expires.map(rfc3339),
            "lastError": job.last_error,
        })
    });
    detail["attempts"] = task
        .attempts
        .iter()
        .map(|attempt| {
            json!({
                "attempt": attempt.attempt,
                "startedAt": rfc3339(attempt.started_at),
                "endedAt": attempt.ended_at.map(rfc3339),
                "outcome": attempt.outcome,
            })
        })
        .collect();
    detail["error"] = stored_json(task.error.as_deref());
    detail["inputRequests"] = stored_json(task.input_requests.as_deref());
    detail["origin"] = origin.as_ref().map_or(Value::Null, |origin| {
        json!({
            "protocolVersion": origin.protocol_version,
            "clientCapabilities": origin.capabilities,
        })
    });
    if payload {
        detail["arguments"] = origin.map_or(Value::Null, |origin| Value::Object(origin.arguments));
        detail["result"] = stored_json(task.result.as_deref());
        detail["inputResponses"] = stored_json(Some(&task.input_responses));
    }
    detail
}

/// Each identity with jobs (the most first, as the store lists them) or with refusals
/// since start-up: its fields, its jobs by state and its refusals by quota. For the
/// operator, over the admin socket: identities never leave the box otherwise.
fn identities_json(stats: &StatsDetail, refusals: &[(String, Vec<(&'static str, u64)>)]) -> Value {
    let refusals_of = |owner: &str| -> Value {
        let counts = refusals
            .iter()
            .find(|(key, _)| key == owner)
            .map(|(_, counts)| counts.clone())
            .unwrap_or_else(|| {
                let quotas = taskd_engine::shares::Quota::ALL.iter();
                quotas.map(|quota| (quota.name(), 0)).collect()
            });
        counts
            .into_iter()
            .map(|(quota, count)| (quota.to_owned(), json!(count)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let entry = |owner: &str, jobs: [u64; 3]| -> Value {
        let identity = taskd_protocol::Identity::from_key(owner);
        json!({
            "endpoint": identity.as_ref().map(|i| i.endpoint.clone()),
            "issuer": identity.as_ref().map(|i| i.issuer.clone()),
            "tenant": identity.as_ref().map(|i| i.tenant.clone()),
            "principal": identity.as_ref().map(|i| i.principal.clone()),
            "queued": jobs[0],
            "running": jobs[1],
            "waiting": jobs[2],
            "refusals": refusals_of(owner),
        })
    };
    let mut list: Vec<Value> = stats
        .by_identity
        .iter()
        .map(|row| entry(&row.owner, [row.queued, row.running, row.waiting]))
        .collect();
    for (owner, _) in refusals {
        if !stats.by_identity.iter().any(|row| &row.owner == owner) {
            list.push(entry(owner, [0; 3]));
        }
    }
    Value::Array(list)
}

fn stats_json(
    stats: &StatsDetail,
    workers: Option<Value>,
    refusals: &[(String, Vec<(&'static str, u64)>)],
) -> Value {
    let counts = |pairs: &[(String, u64)]| -> Value {
        pairs
            .iter()
            .map(|(name, count)| (name.clone(), json!(count)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    // Every status, zero included, so scripts need not guess.
    let mut by_status: serde_json::Map<String, Value> = TaskStatus::ALL
        .iter()
        .map(|status| (status.as_str().to_owned(), json!(0)))
        .collect();
    let mut by_tool = serde_json::Map::new();
    for (tool, status, count) in &stats.by_tool_status {
        let total = by_status.entry(status.as_str()).or_insert(json!(0));
        *total = json!(total.as_u64().unwrap_or(0) + count);
        let per_tool = by_tool.entry(tool.clone()).or_insert(json!({}));
        per_tool[status.as_str()] = json!(count);
    }
    json!({
        "tasksByStatus": by_status,
        "tasksByTool": by_tool,
        "jobs": counts(&stats.jobs),
        "oldestReadyAgeSeconds": stats.oldest_ready_age_ms as f64 / 1000.0,
        "identities": identities_json(stats, refusals),
        "workers": workers,
        "created": {"lastMinute": stats.created_last_minute, "lastHour": stats.created_last_hour},
        "attemptsEnded": {
            "lastMinute": counts(&stats.ended_last_minute),
            "lastHour": counts(&stats.ended_last_hour),
        },
    })
}

/// The server's end of the admin socket.
pub struct AdminSocket {
    path: PathBuf,
    stopping: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl AdminSocket {
    /// Listens on `data_dir/admin.sock` (mode 0600). The caller holds the data-dir lock,
    /// so a socket file already there is a leftover of a server that died: replaced.
    pub fn start(admin: Arc<Admin>) -> std::io::Result<AdminSocket> {
        let path = admin.data_dir.join(SOCKET_NAME);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        super::backup::remove_leftover_staging_files(&admin.data_dir);
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&stopping);
        let thread = std::thread::Builder::new()
            .name("admin-socket".into())
            .spawn(move || accept_loop(&listener, &admin, &stop))?;
        Ok(AdminSocket {
            path,
            stopping,
            thread,
        })
    }

    /// Stops accepting (requests being answered finish on their own) and removes the
    /// socket file.
    pub fn stop(self) {
        self.stopping.store(true, Ordering::Release);
        // Wakes the blocking accept. When the socket file is gone (the data dir was
        // removed under a running server) nothing can: the thread is left to end with
        // the process rather than holding the shutdown up for ever.
        if UnixStream::connect(&self.path).is_ok() {
            let _ = self.thread.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn accept_loop(listener: &UnixListener, admin: &Arc<Admin>, stopping: &AtomicBool) {
    let serving = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        if stopping.load(Ordering::Acquire) {
            return;
        }
        let Ok(stream) = stream else { continue };
        if !peer_is_trusted(&stream) {
            log::warn!("admin socket: refused a peer of another user");
            continue;
        }
        if serving.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
            serving.fetch_sub(1, Ordering::AcqRel);
            let _ = answer(
                &stream,
                &json!({"error": "the server is busy with other admin requests"}),
            );
            continue;
        }
        let (admin, serving) = (Arc::clone(admin), Arc::clone(&serving));
        let spawned = std::thread::Builder::new()
            .name("admin-request".into())
            .spawn(move || {
                serve_one(stream, &admin);
                serving.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            log::error!("admin socket: cannot start a thread for a request");
        }
    }
}

/// The peer runs as this process's user or as root.
fn peer_is_trusted(stream: &UnixStream) -> bool {
    // SAFETY: geteuid has no preconditions.
    let own = unsafe { libc::geteuid() };
    peer_user::peer_uid(stream).is_ok_and(|uid| uid == own || uid == 0)
}

fn answer(mut stream: &UnixStream, line: &Value) -> std::io::Result<()> {
    let mut text = line.to_string();
    text.push('\n');
    stream.write_all(text.as_bytes())
}

fn serve_one(stream: UnixStream, admin: &Admin) {
    let request = read_request(&stream);
    let request = match request {
        Ok(request) => request,
        Err(why) => {
            let _ = answer(&stream, &json!({"error": why}));
            return;
        }
    };
    let op = request.name();
    log::info!("admin request: {op}");
    let mut report = |done: u64, total: u64| {
        // A client that went away does not stop the operation; it just is not told.
        let _ = answer(&stream, &json!({"progress": [done, total]}));
    };
    let reply = match admin.handle(request, &mut report) {
        Ok(result) => json!({"result": result}),
        Err(why) => {
            // Most refusals are the operator's (an unknown id); a failed backup is not,
            // and a refused reload has logged its reason already.
            match op {
                "reload" => {}
                "backup" => log::warn!("admin request {op} failed"),
                _ => log::info!("admin request {op} refused"),
            }
            json!({"error": why})
        }
    };
    if answer(&stream, &reply).is_err() {
        // Nobody will move a backup whose client went away.
        if let Some(staged) = reply["result"]["staged"].as_str() {
            let _ = std::fs::remove_file(staged);
        }
    }
}

fn read_request(stream: &UnixStream) -> Result<Request, String> {
    stream
        .set_read_timeout(Some(REQUEST_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut line = Vec::new();
    BufReader::new(stream.take(MAX_REQUEST as u64 + 1))
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("reading the request: {e}"))?;
    if line.len() > MAX_REQUEST {
        return Err(format!("the request is longer than {MAX_REQUEST} bytes"));
    }
    serde_json::from_slice(&line).map_err(|e| format!("not a valid request: {e}"))
}

/// The client's end: sends `request` to the server on `socket` and returns its result,
/// passing progress lines to `progress`.
pub(crate) fn ask(
    socket: &Path,
    request: &Request,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Value, String> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot connect to the server's admin socket {}: {e} (run this command as the \
             server's user or as root)",
            socket.display()
        )
    })?;
    let mut text = serde_json::to_string(request).map_err(|e| e.to_string())?;
    text.push('\n');
    stream
        .write_all(text.as_bytes())
        .map_err(|e| format!("sending the request: {e}"))?;
    for line in BufReader::new(&stream).lines() {
        let line = line.map_err(|e| format!("reading the answer: {e}"))?;
        let mut message: Value =
            serde_json::from_str(&line).map_err(|e| format!("a garbled answer: {e}"))?;
        if let Some([done, total]) = message
            .get("progress")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
        {
            progress(done.as_u64().unwrap_or(0), total.as_u64().unwrap_or(0));
            continue;
        }
        if let Some(why) = message.get("error").and_then(Value::as_str) {
            return Err(why.to_owned());
        }
        return Ok(message["result"].take());
    }
    Err("the server closed the admin connection without an answer".into())
}
