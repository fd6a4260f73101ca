//! The webhooks view (issue 49): `GET api/webhooks?state=S&webhook=NAME` lists the
//! webhooks (as `mcp-taskd webhooks list --json` does) and their newest deliveries
//! (`state`: only pending, delivered or dead ones; `webhook`: only one webhook's), and
//! `POST api/webhooks/{name}/retry` sends a webhook's dead deliveries again (as
//! `mcp-taskd webhooks retry --webhook NAME`; a POST, so the parent's CSRF rules
//! apply). No task contents: ids, events, states, times, the receiver's status and why
//! an attempt failed.

use serde_json::json;
use tiny_http::Response;

use super::{json_response, query_pairs, refused, Body};
use crate::ops::admin::{Admin, Request as Op};

/// Deliveries the view lists.
const SHOWN: usize = 100;

pub fn list(admin: &Admin, query: &str) -> Response<Body> {
    let (mut state, mut webhook) = (None, None);
    for (name, value) in query_pairs(query) {
        match name.as_str() {
            "state" if !value.is_empty() => state = Some(value),
            "webhook" if !value.is_empty() => webhook = Some(value),
            _ => {}
        }
    }
    let webhooks = match admin.handle(Op::Webhooks, &mut |_, _| {}) {
        Ok(webhooks) => webhooks,
        Err(_) => return refused(503, "the task store cannot be read"),
    };
    let request = Op::WebhookDeliveries {
        webhook,
        state,
        before: None,
        limit: SHOWN,
    };
    match admin.handle(request, &mut |_, _| {}) {
        Ok(deliveries) => json_response(
            200,
            &json!({"webhooks": webhooks, "deliveries": deliveries}),
        ),
        Err(message) if message.starts_with("unknown state") => refused(400, &message),
        Err(_) => refused(503, "the task store cannot be read"),
    }
}

pub fn retry(admin: &Admin, name: &str) -> Response<Body> {
    let request = Op::WebhookRetry {
        webhook: Some(name.to_owned()),
        id: None,
    };
    match admin.handle(request, &mut |_, _| {}) {
        Ok(retried) => {
            log::info!("dashboard: sent the dead deliveries of webhook {name} again");
            json_response(200, &retried)
        }
        Err(message) if message.starts_with("no webhook") => refused(404, "no such webhook"),
        Err(_) => refused(503, "the task store cannot be written"),
    }
}
