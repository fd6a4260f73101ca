//! `tasks start`: a task started by an operator, through the engine's own creation path
//! ([`TaskService::start`]), bound to an identity of the operator's choosing.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use taskd_base::clock::rfc3339;
use taskd_engine::{Start, Started, TaskService};
use taskd_protocol::Identity;

/// Longest idempotency key accepted (as a client's).
pub const MAX_KEY: usize = 256;

/// What `tasks start` asks for.
#[derive(Debug, Serialize, Deserialize)]
pub struct StartRequest {
    pub tool: String,
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// When it may first run (Unix ms).
    pub at: Option<i64>,
    pub key: Option<String>,
    /// Whom the task belongs to: this endpoint (the configuration's), principal and
    /// tenant, as a static token's identity.
    pub endpoint: String,
    pub principal: String,
    #[serde(default)]
    pub tenant: String,
}

/// Starts the task; answers `{"id", "status", "createdAt", "deduplicated", "runAfter"}`:
/// `deduplicated` when a live task of the identity held the key already (its id is
/// given; nothing new was stored).
pub(super) fn start(tasks: &TaskService, request: StartRequest) -> Result<Value, String> {
    if request.principal.is_empty() {
        return Err("the principal must not be empty".into());
    }
    if let Some(key) = &request.key {
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(format!("an idempotency key must be 1-{MAX_KEY} bytes"));
        }
    }
    let identity = Identity {
        endpoint: request.endpoint,
        issuer: String::new(),
        tenant: request.tenant,
        principal: request.principal,
    };
    let created = tasks
        .start(Start {
            identity: &identity,
            tool: &request.tool,
            arguments: &request.arguments,
            idempotency_key: request.key,
            run_after: request.at,
            schedule: None,
            gate: None,
        })
        .map_err(|error| error.to_string())?;
    let (row, deduplicated) = match created {
        Started::New(row) => (row, false),
        Started::Existing(row) => (row, true),
        Started::SlotTaken => return Err("the task was not created".into()),
    };
    Ok(json!({
        "id": row.id,
        "status": row.status,
        "createdAt": rfc3339(row.created_at),
        "deduplicated": deduplicated,
        // The time asked for; a task found by its key keeps its own.
        "runAfter": request.at.filter(|_| !deduplicated).map(rfc3339),
    }))
}
