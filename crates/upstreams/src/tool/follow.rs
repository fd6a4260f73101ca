//! Following an upstream task: the run that waits on a task the upstream created
//! (2025-11-25 tasks through `tasks/result` and `tasks/get`, or the 2026-07-28
//! extension's `tasks/get` polls), taking it up again after an interruption, and what
//! a run answers when the task can no longer be followed (see the parent module's
//! "Upstreams that serve tasks").

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Map, Value};
use taskd_protocol::{code, RpcError};
use taskd_tools::{Invocation, Outcome};

use super::{
    call_tool_result, poll_interval, task_params, with_caller_capabilities, Flight, FollowedTask,
    Polling, StatusRelay, UpstreamTool, ASKED_KEY, EXTENSION_KEY, POLL_FAILURES, POLL_INTERVAL,
    REATTACH_TIMEOUT, TASK_KEY, TICK,
};
use crate::session::SessionError;

impl UpstreamTool {
    /// Follows the upstream task `task_id` again, on a session of the caller's: `None`
    /// when the upstream no longer has it (or it was cancelled).
    pub(super) fn reattach(&self, task_id: &str, call: &Invocation<'_>) -> Option<Flight> {
        let deadline = Instant::now() + self.timeout;
        let session = self.supervisor.session_for(call.caller).ok()?;
        let task = session
            .session
            .ask("tasks/get", json!({ "taskId": task_id }), REATTACH_TIMEOUT)
            .ok()?;
        if task.get("status").and_then(Value::as_str) == Some("cancelled") {
            return None;
        }
        let place = self.place(deadline).ok()?;
        let (id, token, events) = session
            .session
            .call("tasks/result", task_params(task_id), None, Vec::new())
            .ok()?;
        session.session.follow_task(task_id, &token);
        Some(Flight {
            place,
            session,
            id,
            token,
            events,
            deadline,
            task: Some(FollowedTask::new(task_id)),
            timed_from: None,
        })
    }

    /// The call became the upstream task `task_id`: its id is kept with our task, and
    /// the run waits on its `tasks/result`.
    pub(super) fn follow(
        &self,
        mut flight: Flight,
        task_id: &str,
        call: &mut Invocation<'_>,
    ) -> Option<Flight> {
        if !call.host.save_state(&json!({ TASK_KEY: task_id }))
            && call.host.task_attempt().is_some()
        {
            // The attempt no longer holds the task (or its state could not be kept):
            // whoever runs it next cannot find the upstream task, so it is not left
            // running unowned.
            flight
                .session
                .session
                .tell("tasks/cancel", json!({ "taskId": task_id }));
            return None;
        }
        let session = Arc::clone(&flight.session.session);
        session.follow_task(task_id, &flight.token);
        match session.call(
            "tasks/result",
            task_params(task_id),
            Some(&flight.token),
            Vec::new(),
        ) {
            Ok((id, _, events)) => {
                flight.id = id;
                flight.events = events;
                flight.task = Some(FollowedTask::new(task_id));
                Some(flight)
            }
            Err(_) => {
                flight.leave();
                self.reattach(task_id, call)
            }
        }
    }

    /// Follows a Tasks-extension task of the upstream's again (after an interruption,
    /// or with our caller's answers to its questions when `asked`).
    pub(super) fn follow_extension_again(
        &self,
        task_id: &str,
        asked: bool,
        call: &mut Invocation<'_>,
    ) -> Outcome {
        let deadline = Instant::now() + self.timeout;
        let session = match self.supervisor.session_for(call.caller) {
            Ok(session) => session,
            Err(why) => return self.unavailable(why.0, call),
        };
        if asked {
            let update = with_caller_capabilities(
                json!({ "taskId": task_id, "inputResponses": call.input_responses }),
                call.capabilities,
            );
            if let Err(error) = session
                .session
                .ask("tasks/update", update, REATTACH_TIMEOUT)
            {
                log::warn!(
                    "upstream {}: tasks/update failed: {error}",
                    self.supervisor.upstream.name
                );
            }
        }
        let place = match self.place(deadline) {
            Ok(place) => place,
            Err(why) => return self.unavailable(why, call),
        };
        let polling = Polling {
            _place: place,
            session,
            deadline,
            timed_from: None,
        };
        self.follow_extension(polling, task_id, call)
    }

    /// Polls a Tasks-extension task of the upstream's (`tasks/get`, at its
    /// `pollIntervalMs`) to its end: its status message becomes ours, its questions our
    /// caller's (`input_required`, answered by `tasks/update` in the next round).
    pub(super) fn follow_extension(
        &self,
        polling: Polling,
        task_id: &str,
        call: &mut Invocation<'_>,
    ) -> Outcome {
        let session = &polling.session.session;
        let mut interval = POLL_INTERVAL;
        let mut next_poll = Instant::now();
        let mut failures = 0;
        let mut status = StatusRelay::default();
        loop {
            if call.host.cancelled() {
                if call.host.released() {
                    return Outcome::Cancelled;
                }
                session.tell("tasks/cancel", json!({ "taskId": task_id }));
                return self.stopped(call);
            }
            if Instant::now() >= polling.deadline {
                session.tell("tasks/cancel", json!({ "taskId": task_id }));
                return self.timed_out(call);
            }
            if Instant::now() < next_poll {
                call.host.sleep(TICK.min(next_poll - Instant::now()));
                continue;
            }
            let task = match session.ask(
                "tasks/get",
                with_caller_capabilities(json!({ "taskId": task_id }), call.capabilities),
                REATTACH_TIMEOUT,
            ) {
                Ok(task) => task,
                Err(SessionError::Refused { code, .. }) if code == code::INVALID_PARAMS => {
                    return self.lost_task(call);
                }
                Err(error) => {
                    failures += 1;
                    if failures >= POLL_FAILURES {
                        let why = self.said(&format!(
                            "could not say how the task the call became is doing \
                             ({POLL_FAILURES} tasks/get in a row failed; the last: {error})"
                        ));
                        return self.broke(why, call);
                    }
                    next_poll = Instant::now() + interval;
                    continue;
                }
            };
            failures = 0;
            interval = poll_interval(&task, "pollIntervalMs", interval);
            next_poll = Instant::now() + interval;
            status.relay(&task, call.host);
            match task.get("status").and_then(Value::as_str) {
                Some("completed") => {
                    self.answered(polling.timed_from);
                    self.supervisor.succeeded();
                    let result = task.get("result").cloned().unwrap_or_default();
                    return Outcome::Complete(call_tool_result(result));
                }
                Some("failed") => {
                    self.count_error();
                    let error = task.get("error").cloned().unwrap_or_default();
                    return Outcome::Error(RpcError::new(
                        error
                            .get("code")
                            .and_then(Value::as_i64)
                            .unwrap_or(code::INTERNAL_ERROR),
                        error
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("the upstream's task failed"),
                    ));
                }
                Some("cancelled") => {
                    // Its end is known: nothing to repeat, nothing interrupted.
                    self.count_error();
                    return Outcome::Failed(self.said("cancelled the task the call became"));
                }
                Some("input_required") => {
                    let mut asking = task.clone();
                    asking["resultType"] = json!("input_required");
                    let outcome = self.ask_caller(&asking, call);
                    let Outcome::InputRequired { requests, .. } = outcome else {
                        return outcome;
                    };
                    let mut state = Map::new();
                    state.insert(TASK_KEY.into(), json!(task_id));
                    state.insert(EXTENSION_KEY.into(), json!(true));
                    state.insert(ASKED_KEY.into(), json!(true));
                    return Outcome::InputRequired {
                        requests,
                        state: Some(Value::Object(state)),
                    };
                }
                _ => {}
            }
        }
    }

    /// The upstream no longer has the task a call became: an idempotent call runs
    /// again (its state forgotten), any other is reported as interrupted.
    pub(super) fn lost_task(&self, call: &mut Invocation<'_>) -> Outcome {
        if self.idempotent && call.host.task_attempt().is_some() {
            call.host.save_state(&json!({}));
        }
        self.broke(self.said("no longer has the task the call became"), call)
    }

    /// The call became an upstream task this run cannot follow: the attempt was
    /// stopped (what stopped it decides what follows) or the upstream went away.
    pub(super) fn unfollowable(&self, call: &mut Invocation<'_>) -> Outcome {
        if call.host.cancelled() {
            return Outcome::Cancelled;
        }
        let why = self.said("created a task for the call, but it could not be followed");
        self.broke(why, call)
    }
}
