//! The tool registry: every tool the server serves, in a stable order, with its schemas
//! compiled once.

use std::collections::HashMap;
use std::sync::Arc;

use super::schema::{Compiled, SchemaError};
use serde_json::Value;
use taskd_protocol::headers::{header_params, HeaderParam};

use super::slots::Slots;
use super::{Tool, ToolSpec};
use taskd_protocol::RpcError;

/// A tool as the server holds it: spec, implementation and compiled contracts.
pub struct Registered {
    pub spec: ToolSpec,
    pub tool: Arc<dyn Tool>,
    pub input: Compiled,
    pub output: Option<Compiled>,
    pub header_params: Vec<HeaderParam>,
    /// The tool's concurrency slots, when its spec sets `max_concurrency`.
    pub slots: Option<Arc<Slots>>,
}

impl Registered {
    /// Checks that a result is a `CallToolResult` honouring the output schema. A tool
    /// that breaks its own contract is a server fault: the client gets `-32603` and the
    /// cause goes to the log (without the result itself).
    pub fn check_result(&self, result: Value) -> Result<Value, RpcError> {
        let fault = |why: &str| {
            log::error!("tool {} returned an invalid result: {why}", self.spec.name);
            RpcError::internal()
        };
        if !result.get("content").is_some_and(Value::is_array) {
            return Err(fault("content must be an array"));
        }
        let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
        if let (Some(output), false) = (&self.output, is_error) {
            match result.get("structuredContent") {
                Some(structured) if output.is_valid(structured) => {}
                Some(_) => return Err(fault("structuredContent does not match outputSchema")),
                None => return Err(fault("outputSchema requires structuredContent")),
            }
        }
        Ok(result)
    }
}

/// Why a tool cannot be registered; the message names the tool.
#[derive(Debug, thiserror::Error)]
#[error("tool \"{name}\": {problem}")]
pub struct RegistrationError {
    pub name: String,
    pub problem: RegistrationProblem,
}

/// What is wrong with the tool.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationProblem {
    #[error("name must be 1-128 characters of A-Z a-z 0-9 _ . -")]
    BadName,
    #[error("registered twice")]
    Duplicate,
    #[error("description must not be empty")]
    NoDescription,
    #[error("inputSchema must have \"type\": \"object\"")]
    InputNotObject,
    #[error("inputSchema: {0}")]
    InputSchema(SchemaError),
    #[error("outputSchema: {0}")]
    OutputSchema(SchemaError),
}

/// Tools in registration order; `tools/list` pages through them in that order.
#[derive(Default)]
pub struct Registry {
    tools: Vec<Arc<Registered>>,
    by_name: HashMap<String, usize>,
    /// The tools with a `max_concurrency`, which [`Registry::saturated`] looks at.
    limited: Vec<Arc<Registered>>,
}

impl Registry {
    /// Adds a tool, checking its name and compiling its schemas. Errors name the tool.
    pub fn register(
        &mut self,
        spec: ToolSpec,
        tool: Arc<dyn Tool>,
    ) -> Result<(), RegistrationError> {
        let name = spec.name.clone();
        let fail = |problem| RegistrationError {
            name: name.clone(),
            problem,
        };
        if name.is_empty()
            || name.len() > 128
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        {
            return Err(fail(RegistrationProblem::BadName));
        }
        if self.by_name.contains_key(&name) {
            return Err(fail(RegistrationProblem::Duplicate));
        }
        if spec.description.trim().is_empty() {
            return Err(fail(RegistrationProblem::NoDescription));
        }
        if spec.input_schema.get("type").and_then(|t| t.as_str()) != Some("object") {
            return Err(fail(RegistrationProblem::InputNotObject));
        }
        let input_problem = |error| fail(RegistrationProblem::InputSchema(error));
        let input = Compiled::compile(&spec.input_schema).map_err(input_problem)?;
        let output = match &spec.output_schema {
            Some(schema) => Some(
                Compiled::compile(schema)
                    .map_err(|error| fail(RegistrationProblem::OutputSchema(error)))?,
            ),
            None => None,
        };
        let header_params = header_params(&spec.input_schema)
            .map_err(|error| input_problem(SchemaError::Header(error)))?;
        let slots = spec.max_concurrency.map(Slots::new);
        let registered = Arc::new(Registered {
            spec,
            tool,
            input,
            output,
            header_params,
            slots,
        });
        if registered.slots.is_some() {
            self.limited.push(Arc::clone(&registered));
        }
        self.by_name.insert(name, self.tools.len());
        self.tools.push(registered);
        Ok(())
    }

    /// The tools whose every concurrency slot is taken right now: their jobs stay
    /// queued. Empty, without allocating, when no tool has a `max_concurrency`.
    pub fn saturated(&self) -> Vec<String> {
        self.limited
            .iter()
            .filter(|tool| tool.slots.as_ref().is_some_and(|slots| slots.is_full()))
            .map(|tool| tool.spec.name.clone())
            .collect()
    }

    /// Takes over the concurrency slots of `previous`'s tools of the same name (a
    /// reload): runs started under the old definition hold their slots until they end,
    /// so `max_concurrency` keeps bounding old and new runs together, at the new limit.
    /// Call it before the registry is shared.
    pub fn adopt_slots(&mut self, previous: &Registry) {
        // `limited` holds second references; it is rebuilt below.
        self.limited.clear();
        for tool in &mut self.tools {
            let old = previous
                .get(&tool.spec.name)
                .and_then(|old| old.slots.clone());
            if let (Some(registered), Some(old)) = (Arc::get_mut(tool), old) {
                if let Some(new) = &registered.slots {
                    old.set_limit(new.limit());
                    registered.slots = Some(old);
                }
            }
        }
        self.limited = self
            .tools
            .iter()
            .filter(|tool| tool.slots.is_some())
            .cloned()
            .collect();
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Registered>> {
        self.by_name.get(name).map(|&index| &self.tools[index])
    }

    pub fn all(&self) -> &[Arc<Registered>] {
        &self.tools
    }
}
