//! One task attempt: run the tool with a [`TaskHost`] (progress becomes the status
//! message, cancellation and the deadline stop it), then commit its outcome, fenced.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::KeyValue;

use serde_json::{json, Map, Value};

use super::inflight::{registering, AttemptControl, Stop};
use super::Shared;
use crate::backend::{Finished, StoreError, TaskStore};
use crate::model::{Claim, Finish, Lease, Origin};
use crate::output::{log_lines, OutputBatch, OutputBuffer, OutputRules, OutputTail};
use taskd_base::clock::now_ms;
use taskd_protocol::{ClientCapabilities, InputKind, LogLevel, RpcError, TraceContext};
use taskd_telemetry::logs::LogScope;
use taskd_telemetry::{Kind, Span, ATTEMPT, OUTCOME, RETRY_COUNT, TASK_ID};
use taskd_tools::panics::run_tool;
use taskd_tools::{Invocation, InvocationHost, Outcome, OutputStream};

/// Runs one claimed attempt and commits its outcome (fenced by the claim's token). The
/// same write claims the worker's next job, unless the pool is stopping: under load a
/// worker goes from job to job with one commit each, and the dispatcher only feeds
/// workers that found nothing.
pub(super) fn run_attempt(shared: &Shared, claim: Claim) -> Option<Claim> {
    let control = shared
        .inflight
        .get(&claim.task_id, &claim.token)
        .unwrap_or_else(|| {
            Arc::new(AttemptControl::new(
                claim.token.clone(),
                claim.deadline,
                None,
            ))
        });
    let queue_wait = Duration::from_millis(claim.queue_wait_ms.max(0) as u64);
    shared.observer.attempt_started(&claim.tool, queue_wait);
    let mut attempt_span = trace_queue_wait_and_attempt(&claim, queue_wait);
    // Log lines of this attempt name its task and span (the JSON log format).
    let attempt_context = attempt_span.context();
    let _log_scope = LogScope::enter(
        Some(&claim.task_id),
        attempt_context.as_ref().or(claim.trace.as_ref()),
    );
    let started = Instant::now();
    let (finish, last_output) = execute(shared, &claim, &control, attempt_context.clone());
    shared
        .observer
        .attempt_ended(&claim.tool, started.elapsed());
    // Before the commit, which may claim this worker's next job of the same tool; idle
    // workers may take the tool's queued jobs too, so the dispatcher is told.
    if control.release_slot() {
        let _ = shared.wake.try_send(());
    }
    let lease = Lease {
        task_id: claim.task_id.clone(),
        token: claim.token.clone(),
    };
    let label = finish.label();
    let claim_next = !shared.stopping.load(Ordering::Acquire);
    let (next, registered) = registering(
        &shared.inflight,
        &shared.rate_waits,
        shared.settings.current().tools(),
        1,
        shared.lease_ms,
    );
    let committed = shared.store.finish(
        lease.clone(),
        finish.clone(),
        last_output.clone(),
        claim_next.then_some(next),
    );
    let committed = match committed {
        Err(error) if error.is_temporary() => {
            registered.forget(&shared.inflight);
            commit_later(shared, lease, finish, last_output, error)
        }
        other => other,
    };
    shared.inflight.remove(&claim.task_id, &claim.token);
    let outcome = match &committed {
        Ok(Finished { applied: false, .. }) => "discarded",
        Ok(_) => label,
        Err(_) => "not_committed",
    };
    attempt_span.set(OUTCOME, outcome);
    attempt_span.end();
    match committed {
        Ok(Finished { applied, mut next }) => {
            if !applied {
                log::warn!("an attempt finished after losing its lease; its outcome was discarded");
                shared.observer.outcome_discarded(&claim.tool);
            }
            next.pop()
        }
        Err(error) => {
            registered.forget(&shared.inflight);
            log::warn!(
                "committing an attempt's outcome: {error}; the attempt runs again once its \
                 lease expires"
            );
            None
        }
    }
}

/// First wait before committing an outcome again; doubles up to [`COMMIT_RETRY_MOST`].
const COMMIT_RETRY_FIRST: Duration = Duration::from_millis(100);
const COMMIT_RETRY_MOST: Duration = Duration::from_secs(1);

/// Commits an outcome the store could not take, again and again (with backoff) for up
/// to one lease: a disk that was full for a moment costs no attempt. The attempt stays
/// registered meanwhile, so a cancellation still reaches it and the lease keeper keeps
/// its lease while writes work. Past that, the lease has expired (its renewals failed
/// too) and the janitor reclaims the job once the store writes again: the attempt runs
/// again, and nothing stays `working`.
fn commit_later(
    shared: &Shared,
    lease: Lease,
    finish: Finish,
    last_output: Option<OutputBatch>,
    mut error: StoreError,
) -> Result<Finished, StoreError> {
    let give_up = Instant::now() + Duration::from_millis(shared.lease_ms.max(0) as u64);
    let mut wait = COMMIT_RETRY_FIRST;
    while Instant::now() + wait < give_up && !shared.stopping.load(Ordering::Acquire) {
        std::thread::sleep(wait);
        match shared
            .store
            .finish(lease.clone(), finish.clone(), last_output.clone(), None)
        {
            Err(again) if again.is_temporary() => error = again,
            done => return done,
        }
        wait = (wait * 2).min(COMMIT_RETRY_MOST);
    }
    Err(error)
}

/// Records the claimed job's wait in the queue (a span that ended just now) and starts
/// the attempt's span; both hang under the task's stored trace context.
fn trace_queue_wait_and_attempt(claim: &Claim, queue_wait: Duration) -> Span {
    let parent = claim.trace.as_ref();
    let ids = || {
        vec![
            KeyValue::new(TASK_ID, claim.task_id.clone()),
            KeyValue::new(ATTEMPT, claim.attempt),
        ]
    };
    let now = SystemTime::now();
    Span::start(Kind::Internal, parent, Some(now - queue_wait), || {
        (format!("task_queued {}", claim.tool), ids())
    })
    .end_at(now);
    Span::start(Kind::Internal, parent, Some(now), || {
        let mut attributes = ids();
        attributes.push(KeyValue::new(RETRY_COUNT, claim.attempt - 1));
        attributes.push(KeyValue::new("gen_ai.tool.name", claim.tool.clone()));
        (format!("task_attempt {}", claim.tool), attributes)
    })
}

/// The span of the tool's run in an attempt, under the attempt's span.
fn tool_run_span(claim: &Claim, attempt: Option<&TraceContext>) -> Span {
    Span::start(Kind::Internal, attempt, None, || {
        (
            format!("execute_tool {}", claim.tool),
            vec![
                KeyValue::new(TASK_ID, claim.task_id.clone()),
                KeyValue::new(ATTEMPT, claim.attempt),
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", claim.tool.clone()),
            ],
        )
    })
}

/// Runs the tool: its outcome, and the output it printed since its last batch was
/// written (written with the outcome, in the same transaction: a quick task pays one
/// commit, not two).
fn execute(
    shared: &Shared,
    claim: &Claim,
    control: &Arc<AttemptControl>,
    attempt: Option<TraceContext>,
) -> (Finish, Option<OutputBatch>) {
    let mut span = tool_run_span(claim, attempt.as_ref());
    let mut last_output = None;
    let finish = run_tool_of(
        shared,
        claim,
        control,
        span.context().or(attempt),
        &mut last_output,
    );
    match &finish {
        Finish::Completed { .. } | Finish::InputRequired { .. } | Finish::Release => {}
        Finish::Cancelled => span.set(OUTCOME, "cancelled"),
        Finish::Failed { .. } => span.fail("failed", "the tool's run failed".into()),
        Finish::Retry { .. } => span.fail("retry", "the attempt failed and may be retried".into()),
    }
    span.end();
    (finish, last_output)
}

fn run_tool_of(
    shared: &Shared,
    claim: &Claim,
    control: &Arc<AttemptControl>,
    trace: Option<TraceContext>,
    last_output: &mut Option<OutputBatch>,
) -> Finish {
    let Ok(origin) = serde_json::from_slice::<Origin>(&claim.origin) else {
        log::error!("a task's stored origin is unreadable");
        return Finish::failed(&RpcError::internal());
    };
    // This attempt runs the definition it starts with, whatever a reload does meanwhile.
    let settings = shared.settings.current();
    let Some(tool) = settings.tools().get(&claim.tool).cloned() else {
        log::warn!(
            "a task of tool {} failed: the tool is no longer served",
            claim.tool
        );
        return Finish::failed(&RpcError::new(
            taskd_protocol::code::INTERNAL_ERROR,
            format!(
                "The tool \"{}\" is no longer served: the server's configuration no longer \
                 has it, so this task cannot run",
                claim.tool
            ),
        ));
    };
    let responses: Map<String, Value> =
        serde_json::from_str(&claim.input_responses).unwrap_or_default();
    let state: Option<Value> = claim
        .tool_state
        .as_deref()
        .and_then(|text| serde_json::from_str(text).ok());
    let capabilities = ClientCapabilities(origin.capabilities.clone());
    let rules = settings.output();
    let cap = tool
        .spec
        .execution
        .output_max_bytes
        .unwrap_or(rules.max_bytes_per_task);
    let mut host = TaskHost {
        store: shared.store.as_ref(),
        task_id: &claim.task_id,
        attempt: claim.attempt,
        token: &claim.token,
        control,
        last_status: None,
        trace: trace.or_else(|| claim.trace.clone()),
        rules,
        output: RefCell::new(OutputBuffer::new(claim.attempt, cap)),
        tail: OutputTail::default(),
    };
    let mut invocation = Invocation {
        arguments: &origin.arguments,
        input_responses: &responses,
        state: state.as_ref(),
        capabilities: &capabilities,
        caller: &claim.owner,
        host: &mut host,
    };
    let outcome = run_tool(|| tool.tool.run(&mut invocation));
    // The rest of the attempt's output goes with its outcome: a failure's lines are
    // there when it is.
    *last_output = host.output.borrow_mut().take();
    match outcome {
        Err(place) => {
            log::error!(
                "tool {} panicked in a task attempt (at {place})",
                claim.tool
            );
            Finish::Retry {
                reason: "the tool panicked".into(),
            }
        }
        Ok(Outcome::Complete(result)) => match tool.check_result(result) {
            Ok(mut result) => {
                result["resultType"] = json!("complete");
                Finish::Completed {
                    result: result.to_string(),
                }
            }
            Err(error) => Finish::failed(&error),
        },
        Ok(Outcome::InputRequired { requests, state }) => {
            if requests.is_empty()
                || !requests
                    .values()
                    .all(|request| InputKind::of(request).is_some())
            {
                log::error!(
                    "tool {} asked for input without valid input requests",
                    claim.tool
                );
                return Finish::failed(&RpcError::internal());
            }
            Finish::InputRequired {
                requests,
                state: state.map(|state| state.to_string()),
            }
        }
        Ok(Outcome::Error(error)) => Finish::failed(&error),
        Ok(Outcome::Retry(reason)) => {
            log::warn!(
                "tool {} failed attempt {}: {reason}",
                claim.tool,
                claim.attempt
            );
            // Whoever reads the task learns why, with the end of the run's output.
            Finish::Retry {
                reason: host.tail.explain(&reason),
            }
        }
        // Not worth another attempt (an upstream call whose effect is unknown): the task
        // fails now, saying why, with the end of the run's output.
        Ok(Outcome::Failed(reason)) => {
            log::warn!(
                "tool {} failed attempt {} for good: {reason}",
                claim.tool,
                claim.attempt
            );
            Finish::failed(&RpcError::new(
                taskd_protocol::code::INTERNAL_ERROR,
                host.tail.explain(&format!("Task failed: {reason}")),
            ))
        }
        Ok(Outcome::Cancelled) => match control.reason() {
            Stop::Shutdown => Finish::Release,
            Stop::Deadline => Finish::Retry {
                reason: format!(
                    "the attempt exceeded its deadline (timeout {} ms)",
                    tool.spec.execution.timeout.as_millis()
                ),
            },
            Stop::LeaseLost | Stop::Expired => Finish::Retry {
                reason: "the attempt lost its lease".into(),
            },
            Stop::Cancelled | Stop::Running => Finish::Cancelled,
        },
    }
}

/// The host of a task attempt: progress becomes the task's status message, and the
/// run's output is kept with the task (batched: see `crate::output`).
struct TaskHost<'a> {
    store: &'a dyn TaskStore,
    task_id: &'a str,
    attempt: i64,
    token: &'a str,
    control: &'a Arc<AttemptControl>,
    last_status: Option<Instant>,
    /// The run's span (else the task's stored context): a program's `TRACEPARENT`.
    trace: Option<TraceContext>,
    rules: &'a OutputRules,
    /// Written when due, from any of the host's calls (`cancelled` takes `&self`: tools
    /// poll it while they wait for their program).
    output: RefCell<OutputBuffer>,
    /// The end of the output, for the failure message.
    tail: OutputTail,
}

impl TaskHost<'_> {
    /// Writes the output held in memory (fenced by the lease).
    fn flush_output(&self) {
        let Some(batch) = self.output.borrow_mut().take() else {
            return;
        };
        let lease = Lease {
            task_id: self.task_id.to_owned(),
            token: self.token.to_owned(),
        };
        match self.store.append_output(lease, batch) {
            Ok(true) => {}
            Ok(false) => self.control.stop(Stop::LeaseLost),
            Err(error) => log::warn!("a task's output was not kept: {error}"),
        }
    }

    /// Writes the output held in memory when it has waited long enough.
    fn flush_output_when_due(&self) {
        let due = self.output.borrow().due();
        if due {
            self.flush_output();
        }
    }

    /// Keeps a line (and in the failure message's tail), unless the tool keeps none.
    fn keep_output(&mut self, stream: OutputStream, line: &str) {
        if !self.output.borrow().keeps() {
            return;
        }
        let line = self.rules.redact(line);
        self.tail.push(stream, &line);
        let due = {
            let mut output = self.output.borrow_mut();
            output.push(stream, line.into_owned());
            output.due()
        };
        if due {
            self.flush_output();
        }
    }
}

/// Least time between two status-message writes of one attempt.
const STATUS_INTERVAL: Duration = Duration::from_millis(200);

impl InvocationHost for TaskHost<'_> {
    fn progress(&mut self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let finished = total.is_some_and(|total| progress >= total);
        if !finished
            && self
                .last_status
                .is_some_and(|at| at.elapsed() < STATUS_INTERVAL)
        {
            return;
        }
        self.last_status = Some(Instant::now());
        let text = match (message, total) {
            (Some(message), _) => message.to_owned(),
            (None, Some(total)) => format!("{progress}/{total}"),
            (None, None) => format!("{progress}"),
        };
        self.keep_output(OutputStream::Status, &text);
        let lease = Lease {
            task_id: self.task_id.to_owned(),
            token: self.token.to_owned(),
        };
        let written = self.store.set_status_message(lease, text);
        if let Ok(false) = written {
            self.control.stop(Stop::LeaseLost);
        }
    }

    /// Tasks carry no log stream (SEP-2663): a log message is kept as output.
    fn log(&mut self, level: LogLevel, data: Value) {
        for line in log_lines(level, &data) {
            self.keep_output(OutputStream::Log, &line);
        }
    }

    fn output(&mut self, stream: OutputStream, line: &str) {
        self.keep_output(stream, line);
    }

    fn cancelled(&self) -> bool {
        self.flush_output_when_due();
        if now_ms() >= self.control.deadline {
            self.control.stop(Stop::Deadline);
        }
        self.control.reason() != Stop::Running
    }

    fn sleep(&mut self, duration: Duration) -> bool {
        let until_deadline = (self.control.deadline - now_ms()).max(0) as u64;
        let wait = duration.min(Duration::from_millis(until_deadline));
        if self.control.sleep_unless_stopped(wait) {
            return false;
        }
        if wait < duration {
            self.control.stop(Stop::Deadline);
            return false;
        }
        !self.cancelled()
    }

    fn released(&self) -> bool {
        matches!(self.control.reason(), Stop::Shutdown | Stop::LeaseLost)
    }

    fn timed_out(&self) -> bool {
        self.control.reason() == Stop::Deadline
    }

    fn save_state(&mut self, state: &Value) -> bool {
        let lease = Lease {
            task_id: self.task_id.to_owned(),
            token: self.token.to_owned(),
        };
        match self.store.set_tool_state(lease, state.to_string()) {
            Ok(true) => true,
            Ok(false) => {
                self.control.stop(Stop::LeaseLost);
                false
            }
            Err(error) => {
                log::warn!("a task's tool state was not saved: {error}");
                false
            }
        }
    }

    fn task_attempt(&self) -> Option<(&str, i64)> {
        Some((self.task_id, self.attempt))
    }

    fn trace(&self) -> Option<TraceContext> {
        self.trace.clone()
    }
}
