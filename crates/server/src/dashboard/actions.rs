//! The dashboard's actions beyond one task (issue 48), as `mcp-taskd tools pause|resume`
//! and `tasks cancel|rerun` with filters do them (the same admin operations):
//!
//! - `GET api/tools`: the tools served, their flow control and their pauses;
//!   `POST api/tools/{name}/pause` (`{"reason": …}`) and `/resume`;
//! - `GET api/tasks/count?action=cancel|rerun&status&tool&principal&since`: how many
//!   tasks the task list's filter matches for that action (a cancel: unfinished ones;
//!   a re-run: history summaries too), counted no further than [`MAX_COUNT`], and the
//!   newest one's id (`through`), which bounds the action;
//! - `POST api/tasks/bulk` (`{"action", "status", "tool", "principal", "since",
//!   "through", "before"}`): one batch of the action, at most
//!   [`MAX_BULK_BATCH`](crate::ops::admin::MAX_BULK_BATCH) tasks, and where the next
//!   starts (`next`); the page asks batch after batch, showing the count first and the
//!   outcomes at the end.
//!
//! Every POST went through the dashboard's CSRF check first (the parent module).

use std::io::Read;

use serde_json::{json, Value};
use tiny_http::Response;

use super::{json_response, percent_decode, query_pairs, refused, Body};
use crate::ops::admin::{Admin, BulkAction, Request as Op, MAX_BULK_BATCH};
use taskd_engine::model::TaskFilter;
use taskd_protocol::TaskStatus;

/// Largest action body read.
const MAX_BODY: u64 = 16 * 1024;
/// Longest pause reason kept from the page.
const MAX_REASON_CHARS: usize = 500;
/// Most tasks a count on the dashboard walks: past it, it says "at least".
pub const MAX_COUNT: u64 = 100_000;

/// The task list's query: its filter, its page, and the action a count is for.
pub(super) struct Listing {
    pub filter: TaskFilter,
    pub before: Option<String>,
    pub limit: usize,
    pub action: Option<BulkAction>,
}

/// `status`, `tool`, `principal`, `since` (Unix ms), `before`, `limit` (1 to
/// `max_page`, 50 by default) and `action`; empty values are no condition, other names
/// are ignored.
pub(super) fn listing(query: &str, max_page: usize) -> Result<Listing, Response<Body>> {
    let mut listing = Listing {
        filter: TaskFilter::default(),
        before: None,
        limit: 50,
        action: None,
    };
    for (name, value) in query_pairs(query) {
        if value.is_empty() {
            continue;
        }
        match name.as_str() {
            "status" => match TaskStatus::parse(&value) {
                Some(status) => listing.filter.status = Some(status),
                None => return Err(refused(400, "unknown status")),
            },
            "tool" => listing.filter.tool = Some(value),
            "principal" => listing.filter.principal = Some(value),
            "since" => match value.parse::<i64>() {
                Ok(ms) => listing.filter.created_since = Some(ms),
                Err(_) => return Err(refused(400, "since: Unix milliseconds")),
            },
            "before" => listing.before = Some(value),
            "limit" => match value.parse::<usize>() {
                Ok(n) => listing.limit = n.clamp(1, max_page),
                Err(_) => return Err(refused(400, "limit: a number")),
            },
            "action" => listing.action = Some(action(&value)?),
            _ => {}
        }
    }
    Ok(listing)
}

fn action(name: &str) -> Result<BulkAction, Response<Body>> {
    match name {
        "cancel" => Ok(BulkAction::Cancel),
        "rerun" => Ok(BulkAction::Rerun),
        _ => Err(refused(400, "action: cancel or rerun")),
    }
}

/// What an action acts on: a cancel, unfinished tasks only.
fn for_action(mut filter: TaskFilter, action: BulkAction) -> Result<TaskFilter, Response<Body>> {
    if filter.is_empty() {
        return Err(refused(
            400,
            "choose a filter first (status, tool, principal or created within)",
        ));
    }
    if action == BulkAction::Cancel {
        if filter.status.is_some_and(TaskStatus::is_terminal) {
            return Err(refused(400, "only unfinished tasks can be cancelled"));
        }
        filter.unfinished = true;
    }
    Ok(filter)
}

/// The JSON body of an action (`{}` when empty).
fn body(request: &mut tiny_http::Request) -> Result<Value, Response<Body>> {
    let mut bytes = Vec::new();
    if request
        .as_reader()
        .take(MAX_BODY + 1)
        .read_to_end(&mut bytes)
        .is_err()
    {
        return Err(refused(400, "could not read the request"));
    }
    if bytes.len() as u64 > MAX_BODY {
        return Err(refused(413, "the request is too large"));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(value @ Value::Object(_)) => Ok(value),
        _ => Err(refused(400, "expected a JSON object")),
    }
}

/// An operation's answer: its result, or its refusal (an operator-facing sentence).
fn answer(admin: &Admin, op: Op) -> Result<Value, Response<Body>> {
    admin.handle(op, &mut |_, _| {}).map_err(|message| {
        if message.starts_with("the task store") {
            refused(503, &message)
        } else {
            refused(400, &message)
        }
    })
}

/// `GET api/tools`
pub(super) fn tools(admin: &Admin) -> Response<Body> {
    match answer(admin, Op::Tools) {
        Ok(tools) => json_response(200, &json!({"tools": tools})),
        Err(response) => response,
    }
}

/// `POST api/tools/{name}/pause`
pub(super) fn pause(admin: &Admin, name: &str, request: &mut tiny_http::Request) -> Response<Body> {
    let Some(tool) = percent_decode(name) else {
        return refused(400, "not a tool name");
    };
    let reason = match body(request) {
        Ok(body) => body["reason"].as_str().unwrap_or("").trim().to_owned(),
        Err(response) => return response,
    };
    if reason.chars().count() > MAX_REASON_CHARS {
        return refused(400, "the reason is longer than 500 characters");
    }
    match answer(
        admin,
        Op::Pause {
            tool: tool.clone(),
            reason,
        },
    ) {
        Ok(paused) => {
            // A configured tool's name; the reason is the operator's text, not logged.
            log::info!("dashboard: paused tool {tool}");
            json_response(200, &paused)
        }
        Err(response) => response,
    }
}

/// `POST api/tools/{name}/resume`
pub(super) fn resume(admin: &Admin, name: &str) -> Response<Body> {
    let Some(tool) = percent_decode(name) else {
        return refused(400, "not a tool name");
    };
    match answer(admin, Op::Resume { tool: tool.clone() }) {
        Ok(resumed) => {
            log::info!("dashboard: resumed tool {tool}");
            json_response(200, &resumed)
        }
        Err(response) => response,
    }
}

/// `GET api/tasks/count?action=…&{filter}`
pub(super) fn count(admin: &Admin, query: &str) -> Response<Body> {
    let listing = match listing(query, 1) {
        Ok(listing) => listing,
        Err(response) => return response,
    };
    let Some(action) = listing.action else {
        return refused(400, "action: cancel or rerun");
    };
    let filter = match for_action(listing.filter, action) {
        Ok(filter) => filter,
        Err(response) => return response,
    };
    let op = Op::Count {
        filter,
        without_history: action == BulkAction::Cancel,
        at_most: Some(MAX_COUNT),
    };
    match answer(admin, op) {
        Ok(counted) => json_response(200, &counted),
        Err(response) => response,
    }
}

/// `POST api/tasks/bulk`: one batch.
pub(super) fn bulk(admin: &Admin, request: &mut tiny_http::Request) -> Response<Body> {
    let body = match body(request) {
        Ok(body) => body,
        Err(response) => return response,
    };
    let text = |name: &str| body[name].as_str().filter(|value| !value.is_empty());
    let action = match action(text("action").unwrap_or("")) {
        Ok(action) => action,
        Err(response) => return response,
    };
    let status = match text("status").map(TaskStatus::parse) {
        Some(None) => return refused(400, "unknown status"),
        Some(status) => status,
        None => None,
    };
    let Some(through) = text("through") else {
        return refused(400, "through: the newest task counted (count first)");
    };
    let filter = TaskFilter {
        status,
        tool: text("tool").map(str::to_owned),
        principal: text("principal").map(str::to_owned),
        created_since: body["since"].as_i64(),
        through: Some(through.to_owned()),
        ..TaskFilter::default()
    };
    let filter = match for_action(filter, action) {
        Ok(filter) => filter,
        Err(response) => return response,
    };
    let op = Op::Bulk {
        action,
        filter,
        before: text("before").map(str::to_owned),
        limit: MAX_BULK_BATCH,
    };
    match answer(admin, op) {
        Ok(batch) => {
            let acted = batch["tasks"].as_array().map_or(0, Vec::len);
            log::info!("dashboard: bulk {} of {acted} task(s)", action.name());
            json_response(200, &batch)
        }
        Err(response) => response,
    }
}
