//! The webhook operations of the admin socket (issue 49): the webhooks configured and
//! their deliveries counted (`webhooks list`), recent deliveries (`webhooks list
//! --deliveries`, the dashboard), and dead deliveries made pending again (`webhooks
//! retry`). No task contents: ids, events, states, times, the receiver's status and
//! the reason an attempt failed.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::live::Live;
use taskd_base::clock::rfc3339;
use taskd_engine::webhooks::{
    DeliveryFilter, DeliveryRecord, DeliveryState, RetryFilter, WebhookCounts, WebhookStore,
};
use taskd_webhooks::WebhookConfig;

/// Most deliveries one request lists.
pub const MAX_DELIVERIES: usize = 1000;

/// What the webhook operations read: the store's deliveries, the webhooks configured.
pub struct WebhookOps {
    pub store: Arc<dyn WebhookStore>,
    pub live: Arc<Live>,
}

/// A URL as operators see it: no credentials, no query (either may hold a secret).
pub fn shown_url(url: &str) -> String {
    let Ok(uri) = url.parse::<ureq::http::Uri>() else {
        return "(not a URL)".into();
    };
    let authority = uri.authority().map_or("", |a| a.as_str());
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{}://{host}{}", uri.scheme_str().unwrap_or(""), uri.path())
}

fn webhook_json(
    config: Option<&WebhookConfig>,
    name: &str,
    counts: Option<&WebhookCounts>,
) -> Value {
    let counts = counts.cloned().unwrap_or_default();
    json!({
        "name": name,
        "configured": config.is_some(),
        "url": config.map(|c| shown_url(&c.url)),
        "events": config.map(|c| c.events.clone()),
        "tools": config.map(|c| c.tools.clone()),
        "identities": config.map(|c| c.identities.clone()),
        "includeResult": config.map(|c| c.include_result),
        "retryFor": config.map(|c| c.retry_for.clone()),
        "pending": counts.pending,
        "dead": counts.dead,
        "deliveredRecently": counts.delivered,
        "oldestPendingAt": counts.oldest_pending_at.map(rfc3339),
        "lastDeliveredAt": counts.last_delivered_at.map(rfc3339),
    })
}

fn delivery_json(record: &DeliveryRecord) -> Value {
    json!({
        "seq": record.seq,
        "id": record.id,
        "webhook": record.webhook,
        "taskId": record.task_id,
        "event": record.event,
        "tool": record.tool,
        "state": record.state.as_str(),
        "attempts": record.attempts,
        "at": rfc3339(record.at_ms),
        "doneAt": record.done_at.map(rfc3339),
        "nextAttemptAt": (record.state == DeliveryState::Pending).then(|| rfc3339(record.next_at)),
        "lastStatus": record.last_status,
        "lastError": record.last_error,
    })
}

impl WebhookOps {
    /// Every webhook configured, then every other one with deliveries kept.
    pub fn list(&self) -> Result<Value, String> {
        let counts = self.store.delivery_counts().map_err(|e| e.to_string())?;
        let configured = self.live.load().config.webhooks.clone();
        let mut list: Vec<Value> = configured
            .iter()
            .map(|config| {
                let name = config.name();
                let counted = counts.iter().find(|c| c.webhook == name);
                webhook_json(Some(config), &name, counted)
            })
            .collect();
        for counted in &counts {
            if !configured.iter().any(|c| c.name() == counted.webhook) {
                list.push(webhook_json(None, &counted.webhook, Some(counted)));
            }
        }
        Ok(Value::Array(list))
    }

    /// Deliveries, newest first.
    pub fn deliveries(
        &self,
        webhook: Option<String>,
        state: Option<String>,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Value, String> {
        let state =
            match state.as_deref() {
                None | Some("") => None,
                Some(text) => Some(DeliveryState::parse(text).ok_or_else(|| {
                    format!("unknown state {text:?} (pending, delivered or dead)")
                })?),
            };
        let filter = DeliveryFilter {
            webhook,
            state,
            before,
        };
        let records = self
            .store
            .list_deliveries(&filter, limit.clamp(1, MAX_DELIVERIES))
            .map_err(|e| e.to_string())?;
        Ok(Value::Array(records.iter().map(delivery_json).collect()))
    }

    /// Dead deliveries of `webhook` (or the one `id`, or all) pending again.
    pub fn retry(&self, webhook: Option<String>, id: Option<String>) -> Result<Value, String> {
        if let Some(name) = &webhook {
            let configured = self.live.load().config.webhooks.clone();
            if !configured.iter().any(|c| c.name() == *name) {
                return Err(format!(
                    "no webhook {name} is configured (mcp-taskd webhooks list shows them)"
                ));
            }
        }
        let retried = self
            .store
            .retry_deliveries(&RetryFilter { webhook, id })
            .map_err(|e| e.to_string())?;
        Ok(json!({"retried": retried}))
    }
}

#[cfg(test)]
mod tests {
    use super::shown_url;

    #[test]
    fn urls_are_shown_without_credentials_or_query() {
        assert_eq!(
            shown_url("https://user:pw@hooks.example.com:8443/in?token=s3cret"),
            "https://hooks.example.com:8443/in"
        );
        assert_eq!(shown_url("http://127.0.0.1:9/"), "http://127.0.0.1:9/");
    }
}
