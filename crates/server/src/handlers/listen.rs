//! `subscriptions/listen`: checks what the client asked to follow, subscribes, and hands
//! the transport a [`Listen`] stream to write.

use serde_json::Value;

use super::tasks::tasks_required;
use super::{Listen, Reply, Request, Service};
use taskd_notifications::Filter;
use taskd_protocol::RpcError;

impl Service {
    pub(super) fn listen(&self, request: &Request<'_>) -> Reply {
        let params = &request.envelope.params;
        let Some(wanted) = params.get("notifications").and_then(Value::as_object) else {
            return Reply::Error(RpcError::invalid_params("notifications must be an object"));
        };
        let flag = |name: &str| wanted.get(name).and_then(Value::as_bool) == Some(true);
        let requested_tasks = match wanted.get("taskIds") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(ids)) => {
                let mut unique: Vec<String> = Vec::new();
                for id in ids {
                    let Some(id) = id.as_str() else {
                        return Reply::Error(RpcError::invalid_params("taskIds must be strings"));
                    };
                    if !unique.iter().any(|seen| seen == id) {
                        unique.push(id.to_owned());
                    }
                }
                unique
            }
            Some(_) => return Reply::Error(RpcError::invalid_params("taskIds must be an array")),
        };
        if !requested_tasks.is_empty() && !request.meta.capabilities.tasks() {
            return Reply::Error(tasks_required());
        }
        let max_task_ids = self.hub.limits().max_task_ids;
        if requested_tasks.len() > max_task_ids {
            return Reply::Error(RpcError::invalid_params(format!(
                "at most {max_task_ids} taskIds per subscription"
            )));
        }
        let mut filter = Filter {
            tools_list_changed: flag("toolsListChanged"),
            prompts_list_changed: flag("promptsListChanged"),
            task_ids: requested_tasks,
        };
        // Note where the outbox stands, then subscribe, then authorize: a change
        // committed meanwhile is queued rather than lost, nothing older is replayed, and
        // the acknowledgement names only the caller's tasks.
        let changes_after = match self.tasks.outbox_position() {
            Ok(position) => position,
            Err(error) => return Reply::Error(error),
        };
        let subscription = match self.hub.subscribe(request.identity, filter.clone()) {
            Ok(subscription) => subscription,
            Err(error) => return Reply::Error(error),
        };
        filter
            .task_ids
            .retain(|id| self.tasks.is_visible(request.identity, id));
        Reply::Listen(Box::new(Listen {
            subscription_id: request.envelope.id.clone().unwrap_or(Value::Null),
            filter,
            subscription,
            identity: request.identity.clone(),
            scopes: request.scopes.clone(),
            capabilities: request.meta.capabilities.clone(),
            changes_after,
        }))
    }
}
