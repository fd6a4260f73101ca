//! JSON Schema (2020-12 by default) validation of tool inputs and outputs, and the
//! `x-mcp-header` annotations that mirror arguments into `Mcp-Param-*` headers.
//!
//! Validation is done by the `jsonschema` crate; schemas are compiled once, at
//! registration. Remote `$ref`s are not fetched (the crate is built without its HTTP
//! resolver), so a schema must be self-contained.

use serde_json::{Map, Value};

/// Why a tool's schema cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// Not a JSON Schema the validator accepts.
    #[error("{0}")]
    Invalid(Box<jsonschema::ValidationError<'static>>),
    #[error("x-mcp-header \"{name}\" is used more than once")]
    HeaderRepeated { name: String },
    #[error("x-mcp-header is only allowed on properties reachable through \"properties\" keys")]
    HeaderUnreachable,
    #[error("x-mcp-header on \"{property}\" must be a non-empty HTTP token")]
    HeaderNotToken { property: String },
    #[error("x-mcp-header on \"{property}\" needs type string, integer or boolean")]
    HeaderNotPrimitive { property: String },
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

/// The JSON type a header-mirrored parameter may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderParamType {
    String,
    Integer,
    Boolean,
}

/// One `x-mcp-header` annotation: the argument at `path` travels as `Mcp-Param-{name}`.
#[derive(Debug, Clone, PartialEq)]
pub struct HeaderParam {
    pub name: String,
    pub path: Vec<String>,
    pub kind: HeaderParamType,
}

impl HeaderParam {
    /// The argument value this header mirrors, if the call carries one (null = absent).
    pub fn value_in<'a>(&self, arguments: &'a Map<String, Value>) -> Option<&'a Value> {
        let (last, parents) = self.path.split_last()?;
        let mut object = arguments;
        for key in parents {
            object = object.get(key)?.as_object()?;
        }
        object.get(last).filter(|value| !value.is_null())
    }
}

/// Finds every `x-mcp-header` annotation and checks the spec's constraints on it: only
/// on primitive (string, integer, boolean) properties reachable through `properties`
/// chains alone, a valid header token, unique (case-insensitively) within the schema.
pub fn header_params(input_schema: &Value) -> Result<Vec<HeaderParam>, SchemaError> {
    let mut found = Vec::new();
    collect(input_schema, &mut Vec::new(), &mut found)?;
    let mut seen = std::collections::HashSet::new();
    for param in &found {
        if !seen.insert(param.name.to_ascii_lowercase()) {
            return Err(SchemaError::HeaderRepeated {
                name: param.name.clone(),
            });
        }
    }
    // An annotation anywhere but on a statically reachable property is invalid.
    let reachable = found.len();
    if count_annotations(input_schema) != reachable {
        return Err(SchemaError::HeaderUnreachable);
    }
    Ok(found)
}

fn collect(
    schema: &Value,
    path: &mut Vec<String>,
    found: &mut Vec<HeaderParam>,
) -> Result<(), SchemaError> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    for (key, property) in properties {
        path.push(key.clone());
        if let Some(name) = property.get("x-mcp-header") {
            let name = name.as_str().filter(|name| is_token(name)).ok_or_else(|| {
                SchemaError::HeaderNotToken {
                    property: key.clone(),
                }
            })?;
            let kind = match property.get("type").and_then(Value::as_str) {
                Some("string") => HeaderParamType::String,
                Some("integer") => HeaderParamType::Integer,
                Some("boolean") => HeaderParamType::Boolean,
                _ => {
                    return Err(SchemaError::HeaderNotPrimitive {
                        property: key.clone(),
                    })
                }
            };
            found.push(HeaderParam {
                name: name.to_owned(),
                path: path.clone(),
                kind,
            });
        }
        collect(property, path, found)?;
        path.pop();
    }
    Ok(())
}

fn count_annotations(value: &Value) -> usize {
    match value {
        Value::Object(object) => {
            usize::from(object.contains_key("x-mcp-header"))
                + object.values().map(count_annotations).sum::<usize>()
        }
        Value::Array(items) => items.iter().map(count_annotations).sum(),
        _ => 0,
    }
}

/// RFC 9110 `token` (`1*tchar`).
pub fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_nested_header_params() {
        let schema = json!({"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "opts":{"type":"object","properties":{"n":{"type":"integer","x-mcp-header":"N"}}}}});
        let params = header_params(&schema).unwrap();
        assert_eq!(params.len(), 2);
        assert_eq!(params[1].path, vec!["opts".to_string(), "n".to_string()]);
        let args = json!({"opts":{"n":3}});
        assert_eq!(
            params[1].value_in(args.as_object().unwrap()),
            Some(&json!(3))
        );
        assert_eq!(params[0].value_in(args.as_object().unwrap()), None);
    }

    #[test]
    fn rejects_invalid_annotations() {
        let number = json!({"properties":{"x":{"type":"number","x-mcp-header":"X"}}});
        assert!(header_params(&number).is_err());
        let in_items = json!({"properties":{"x":{"type":"array","items":{"type":"string","x-mcp-header":"X"}}}});
        assert!(header_params(&in_items).is_err());
        let duplicate = json!({"properties":{"a":{"type":"string","x-mcp-header":"X"},"b":{"type":"string","x-mcp-header":"x"}}});
        assert!(header_params(&duplicate).is_err());
        let bad_token = json!({"properties":{"a":{"type":"string","x-mcp-header":"a b"}}});
        assert!(header_params(&bad_token).is_err());
    }
}
