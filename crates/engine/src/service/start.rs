//! Tasks started outside a request: by a schedule's slot ([`crate::schedules`]) or by an
//! operator from the shell (`mcp-taskd tasks start`). They take the path a `tools/call`
//! that becomes a task takes — the tool's task policy, its pause, its input schema, the
//! identity's quotas, the tool's concurrency key — with what no client is there to give:
//! the origin is that of a client declaring the Tasks extension and nothing else, and
//! nothing is asked of a client before creation.

use std::sync::Arc;

use opentelemetry::KeyValue;
use serde_json::{Map, Value};

use super::TaskService;
use crate::backend::StoreError;
use crate::flow::Gate;
use crate::model::{
    arguments_digest, origin_capabilities, Created, KeyConflict, NewSlot, NewTask, Origin, TaskRow,
    ORIGIN_PROTOCOL_VERSION, ORIGIN_VERSION,
};
use taskd_protocol::Identity;
use taskd_telemetry::{Kind, Span, TASK_ID};
use taskd_tools::flow::OnPause;
use taskd_tools::TaskPolicy;

/// A task to start outside a request.
pub struct Start<'a> {
    /// Whom the task belongs to: who may read it with `tasks/get`.
    pub identity: &'a Identity,
    pub tool: &'a str,
    pub arguments: &'a Map<String, Value>,
    /// Per identity, as a client's: the live task holding it answers instead. Without
    /// one, the tool's designated argument is the key, as in a client's call (not for a
    /// schedule's task).
    pub idempotency_key: Option<String>,
    /// When it may first run (Unix ms); a time already past starts it now.
    pub run_after: Option<i64>,
    /// The schedule slot it is the task of.
    pub schedule: Option<NewSlot>,
    /// A gate of its own (a schedule whose runs wait for each other), for a tool
    /// without a concurrency key.
    pub gate: Option<Gate>,
}

/// Why a task was not started. The messages are the operator's: they name the tool
/// and the key, never the arguments.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("no tool {0:?} is served")]
    NotServed(String),
    #[error("the tool {0:?} only runs inline, never as a task")]
    InlineOnly(String),
    #[error("the tool {0:?} needs a client's capabilities ({1}), which no client gives here")]
    NeedsClient(String, String),
    #[error("the tool {0:?} is paused and refuses new calls while it is")]
    Paused(String),
    #[error("the arguments do not match the tool's inputSchema: {0}")]
    Arguments(String),
    #[error(
        "the tool {0:?} has a concurrency key: its runs cannot also wait for each other \
         (overlap = \"queue\")"
    )]
    KeyedQueue(String),
    /// Over a quota of the identity, or an idempotency key held for something else.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a start did, once committed.
#[derive(Debug)]
pub enum Started {
    /// A new task.
    New(TaskRow),
    /// The live task of the identity that holds the idempotency key (for the same tool
    /// and arguments): nothing new was stored.
    Existing(TaskRow),
    /// The schedule slot has its task already: nothing new was stored.
    SlotTaken,
}

impl TaskService {
    /// Starts a task as [`Start`] says, once it is committed.
    pub fn start(&self, start: Start<'_>) -> Result<Started, StartError> {
        let tools = Arc::clone(self.settings.current().tools());
        let tool = tools
            .get(start.tool)
            .ok_or_else(|| StartError::NotServed(start.tool.to_owned()))?;
        let name = &tool.spec.name;
        if tool.spec.task_policy == TaskPolicy::Inline {
            return Err(StartError::InlineOnly(name.clone()));
        }
        if let Some(required) = tool.spec.required_capabilities.as_ref() {
            if !required.is_empty() {
                let names: Vec<&str> = required.keys().map(String::as_str).collect();
                return Err(StartError::NeedsClient(name.clone(), names.join(", ")));
            }
        }
        let paused = self
            .pause_of(name)
            .map_err(|_| StoreError::Unavailable("reading the paused tools".into()))?;
        if paused.is_some() && tool.spec.flow.on_pause == OnPause::Refuse {
            return Err(StartError::Paused(name.clone()));
        }
        let arguments = Value::Object(start.arguments.clone());
        if !tool.input.is_valid(&arguments) {
            let violations = tool.input.violations(&arguments, 5).join("; ");
            return Err(StartError::Arguments(violations));
        }
        self.admit(start.identity)
            .map_err(|refused| StartError::Refused(refused.message))?;
        let origin = Origin {
            v: ORIGIN_VERSION,
            tool: name.clone(),
            arguments: start.arguments.clone(),
            protocol_version: ORIGIN_PROTOCOL_VERSION.to_owned(),
            capabilities: origin_capabilities(),
        };
        let origin =
            serde_json::to_vec(&origin).map_err(|error| StoreError::Other(Box::new(error)))?;
        // As a client's call: else the tool's designated argument, if it has one (not
        // a schedule's: each slot is a task of its own).
        let key = start.idempotency_key.clone().or_else(|| {
            let argument = tool.spec.idempotency_argument.as_deref()?;
            match start.arguments.get(argument)? {
                _ if start.schedule.is_some() => None,
                Value::String(key) => Some(key.clone()),
                Value::Number(number) if number.is_i64() || number.is_u64() => {
                    Some(number.to_string())
                }
                _ => None,
            }
        });
        let digest = key.is_some().then(|| arguments_digest(start.arguments));
        let task = self
            .new_task(
                start.identity,
                tool,
                origin,
                "{}".into(),
                key.clone(),
                digest,
            )
            .map_err(|refused| StartError::Refused(refused.message))?;
        let gate = match (Gate::of(name, &tool.spec.flow, start.arguments), start.gate) {
            (Some(_), Some(_)) => return Err(StartError::KeyedQueue(name.clone())),
            (own, given) => own.or(given),
        };
        let run_after = start.run_after.filter(|at| *at > task.now);
        let mut span = Span::start(Kind::Internal, None, None, || {
            let mut attributes = vec![
                KeyValue::new(TASK_ID, task.id.clone()),
                KeyValue::new("gen_ai.tool.name", task.tool.clone()),
            ];
            if let Some(slot) = &start.schedule {
                attributes.push(KeyValue::new(
                    "mcp_taskd.schedule",
                    slot.slot.schedule.clone(),
                ));
            }
            (format!("create_task {}", task.tool), attributes)
        });
        let new_id = task.id.clone();
        let task = NewTask {
            trace: span.context(),
            gate,
            run_after,
            schedule: start.schedule,
            ..task
        };
        let (sender, created) = crossbeam_channel::bounded(1);
        self.store.create(task).then(move |created| {
            let _ = sender.send(created);
        });
        let created = created
            .recv()
            .map_err(|_| StoreError::NotCommitted("the writer stopped".into()))
            .and_then(|created| created);
        match &created {
            Ok(Created::Task(row)) => span.set(TASK_ID, row.id.clone()),
            Ok(_) => span.fail("not_created", "not created".into()),
            Err(_) => span.fail("store", "not stored".into()),
        }
        span.end();
        let _ = self.wake.try_send(());
        match created? {
            Created::Task(row) if row.id == new_id => Ok(Started::New(row)),
            Created::Task(row) => Ok(Started::Existing(row)),
            Created::SlotTaken => Ok(Started::SlotTaken),
            Created::KeyInUse(conflict) => {
                let key = key.unwrap_or_default();
                Err(StartError::Refused(match conflict {
                    KeyConflict::OtherTool(tool) => format!(
                        "the idempotency key {key:?} is held by a task of the tool {tool:?}"
                    ),
                    KeyConflict::OtherArguments => format!(
                        "the idempotency key {key:?} is held by a task with other arguments"
                    ),
                }))
            }
        }
    }
}

impl TaskService {
    /// The settings in force (the schedules, for operators).
    pub fn settings_in_force(&self) -> Arc<dyn crate::EngineSettings> {
        self.settings.current()
    }
}
