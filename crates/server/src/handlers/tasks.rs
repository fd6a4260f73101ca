//! `tasks/get`, `tasks/update`, `tasks/cancel`, and the task snapshot a listen stream
//! sends as `notifications/tasks`.

use serde_json::{json, Map, Value};

use super::{Request, Service};
use taskd_protocol::TASKS_EXTENSION;
use taskd_protocol::{ClientCapabilities, RpcError};
use taskd_protocol::{Identity, Scopes};

/// A task as a listen stream sends it in `notifications/tasks`.
pub struct TaskNotification {
    /// The task is terminal: the stream sends nothing more about it.
    pub terminal: bool,
    pub params: Map<String, Value>,
}

impl Service {
    /// The `notifications/tasks` params for a task, read now with the subscriber's
    /// identity and capabilities; `None` when it must not be sent (gone, foreign, or
    /// not deliverable to this client).
    pub fn task_notification(
        &self,
        identity: &Identity,
        scopes: &Scopes,
        capabilities: &ClientCapabilities,
        task_id: &str,
    ) -> Option<TaskNotification> {
        let (status, detailed) = self
            .tasks
            .snapshot(identity, scopes, task_id, capabilities)
            .ok()?;
        let Value::Object(mut params) = detailed else {
            return None;
        };
        params.remove("resultType");
        Some(TaskNotification {
            terminal: status.is_terminal(),
            params,
        })
    }

    /// `tasks/get`, `tasks/update`, `tasks/cancel`: the extension gate comes before
    /// any lookup, then the task is authorized inside the lookup itself.
    pub(super) fn task_method(&self, request: &Request<'_>) -> Result<Value, RpcError> {
        if !request.meta.capabilities.tasks() {
            return Err(tasks_required());
        }
        let task_id = request
            .envelope
            .str_param("taskId")
            .ok_or_else(RpcError::task_not_found)?;
        let (identity, scopes) = (request.identity, request.scopes);
        match request.envelope.method.as_str() {
            "tasks/get" => self
                .tasks
                .get(identity, scopes, task_id, &request.meta.capabilities),
            "tasks/update" => {
                let responses = match request.envelope.params.get("inputResponses") {
                    Some(Value::Object(responses)) => responses.clone(),
                    _ => return Err(RpcError::invalid_params("inputResponses must be an object")),
                };
                self.tasks.update(identity, scopes, task_id, responses)
            }
            _ => self.tasks.cancel(identity, scopes, task_id),
        }
    }
}

/// `-32021` naming the Tasks extension.
pub(super) fn tasks_required() -> RpcError {
    RpcError::missing_capability(json!({ "extensions": { TASKS_EXTENSION: {} } }))
}
