//! JSON Schema (2020-12 by default) validation of tool inputs and outputs, and the
//! `x-mcp-header` annotations that mirror arguments into `Mcp-Param-*` headers.
//!
//! Validation is done by the `jsonschema` crate; schemas are compiled once, at
//! registration. Remote `$ref`s are not fetched (the crate is built without its HTTP
//! resolver), so a schema must be self-contained.

use serde_json::Value;
use taskd_protocol::headers::HeaderError;

/// Why a tool's schema cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// Not a JSON Schema the validator accepts.
    #[error("{0}")]
    Invalid(Box<jsonschema::ValidationError<'static>>),
    /// An `x-mcp-header` annotation the transport's rules refuse.
    #[error(transparent)]
    Header(#[from] HeaderError),
}

/// A compiled schema.
pub struct Compiled(jsonschema::Validator);

impl Compiled {
    pub fn compile(schema: &Value) -> Result<Compiled, SchemaError> {
        jsonschema::validator_for(schema)
            .map(Compiled)
            .map_err(|error| SchemaError::Invalid(Box::new(error)))
    }

    pub fn is_valid(&self, instance: &Value) -> bool {
        self.0.is_valid(instance)
    }

    /// Up to `limit` human-readable violations, each naming where it is.
    pub fn violations(&self, instance: &Value, limit: usize) -> Vec<String> {
        self.0
            .iter_errors(instance)
            .take(limit)
            .map(|error| {
                let path = error.instance_path().to_string();
                if path.is_empty() {
                    error.to_string()
                } else {
                    format!("{path}: {error}")
                }
            })
            .collect()
    }
}
