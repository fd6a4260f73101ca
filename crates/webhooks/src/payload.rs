//! The body of a delivery, as Standard Webhooks recommends: `type`, `timestamp` (of the
//! change, RFC 3339) and `data`. `data` holds the task's id, tool, status and times,
//! and a failed task's error; its result (and a task's input requests, for
//! `task.input_required`) only with `include_result`. Never the arguments.

use serde_json::{json, Map, Value};

use taskd_base::clock::rfc3339;
use taskd_engine::webhooks::Delivery;

/// A stored JSON text as JSON (an unparsable one as its text).
fn stored(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// The body of `delivery`.
pub fn body(delivery: &Delivery, include_result: bool) -> Vec<u8> {
    let mut data = Map::new();
    data.insert("taskId".into(), json!(delivery.task_id));
    data.insert("tool".into(), json!(delivery.tool));
    data.insert("status".into(), json!(delivery.status));
    if let Some(task) = &delivery.task {
        data.insert("createdAt".into(), json!(rfc3339(task.created_at)));
    }
    data.insert("lastUpdatedAt".into(), json!(rfc3339(delivery.at_ms)));
    if let Some(task) = &delivery.task {
        if delivery.event == "task.failed" {
            if let Some(error) = &task.error {
                data.insert("error".into(), stored(error));
            }
        }
        if include_result {
            if delivery.event == "task.completed" {
                if let Some(result) = &task.result {
                    data.insert("result".into(), stored(result));
                }
            }
            if delivery.event == "task.input_required" {
                if let Some(requests) = &task.input_requests {
                    data.insert("inputRequests".into(), stored(requests));
                }
            }
        }
    }
    let body = json!({
        "type": delivery.event,
        "timestamp": rfc3339(delivery.at_ms),
        "data": data,
    });
    serde_json::to_vec(&body).unwrap_or_default()
}
