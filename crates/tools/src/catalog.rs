//! Resources, resource templates and prompts: the non-tool catalog a server exposes,
//! plus argument completion for prompts. Like tools, entries are registered once at
//! start-up and listed in registration order.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::Outcome;
use taskd_protocol::ClientCapabilities;
use taskd_protocol::RpcError;

/// Reads a resource: the URI asked for, the template variables it matched (empty for
/// a plain resource) and the caller's identity key (an upstream keeps a session per
/// identity by it). Returns `ResourceContents` objects.
pub type ReadFn =
    Arc<dyn Fn(&str, &HashMap<String, String>, &str) -> Result<Vec<Value>, RpcError> + Send + Sync>;

pub struct Resource {
    pub uri: String,
    pub name: String,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    pub read: ReadFn,
}

pub struct ResourceTemplate {
    pub uri_template: String,
    pub name: String,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    pub read: ReadFn,
}

pub struct PromptArgument {
    pub name: String,
    pub description: Option<String>,
    pub required: bool,
    /// Values offered by `completion/complete`, filtered by prefix.
    pub completions: Vec<String>,
}

/// One `prompts/get` call, with its MRTR inputs.
pub struct PromptCall<'a> {
    pub arguments: &'a Map<String, Value>,
    pub input_responses: &'a Map<String, Value>,
    pub state: Option<&'a Value>,
    pub capabilities: &'a ClientCapabilities,
    /// The caller's identity key (`auth::Identity::key`).
    pub caller: &'a str,
}

/// `Outcome::Complete` carries a `GetPromptResult` body (`messages`, optional
/// `description`).
pub type PromptFn = Arc<dyn Fn(&PromptCall<'_>) -> Outcome + Send + Sync>;

pub struct Prompt {
    pub name: String,
    pub description: String,
    pub arguments: Vec<PromptArgument>,
    pub get: PromptFn,
}

#[derive(Default)]
pub struct Catalog {
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
    pub prompts: Vec<Prompt>,
}

impl Resource {
    pub fn to_json(&self) -> Value {
        let entry = json!({ "uri": self.uri, "name": self.name });
        with_description_and_mime(
            entry,
            self.description.as_deref(),
            self.mime_type.as_deref(),
        )
    }
}

impl ResourceTemplate {
    pub fn to_json(&self) -> Value {
        let entry = json!({ "uriTemplate": self.uri_template, "name": self.name });
        with_description_and_mime(
            entry,
            self.description.as_deref(),
            self.mime_type.as_deref(),
        )
    }
}

/// Adds the optional members resources and templates share.
fn with_description_and_mime(
    mut entry: Value,
    description: Option<&str>,
    mime_type: Option<&str>,
) -> Value {
    if let Some(description) = description {
        entry["description"] = json!(description);
    }
    if let Some(mime) = mime_type {
        entry["mimeType"] = json!(mime);
    }
    entry
}

impl Prompt {
    pub fn to_json(&self) -> Value {
        let arguments: Vec<Value> = self
            .arguments
            .iter()
            .map(|arg| {
                let mut entry = json!({ "name": arg.name, "required": arg.required });
                if let Some(description) = &arg.description {
                    entry["description"] = json!(description);
                }
                entry
            })
            .collect();
        let mut prompt = json!({ "name": self.name, "description": self.description });
        if !arguments.is_empty() {
            prompt["arguments"] = Value::Array(arguments);
        }
        prompt
    }
}

impl Catalog {
    pub fn prompt(&self, name: &str) -> Option<&Prompt> {
        self.prompts.iter().find(|prompt| prompt.name == name)
    }

    /// Whether `uri` names a plain resource or matches a template (without reading it).
    pub fn serves(&self, uri: &str) -> bool {
        self.resources.iter().any(|r| r.uri == uri)
            || self
                .templates
                .iter()
                .any(|template| match_template(&template.uri_template, uri).is_some())
    }

    /// Reads `uri` from a plain resource or the first template that matches it.
    /// Unknown URIs are `-32602` with `data.uri` (SEP-2164).
    pub fn read(&self, uri: &str, caller: &str) -> Result<Vec<Value>, RpcError> {
        if let Some(resource) = self.resources.iter().find(|r| r.uri == uri) {
            return (resource.read)(uri, &HashMap::new(), caller);
        }
        for template in &self.templates {
            if let Some(vars) = match_template(&template.uri_template, uri) {
                return (template.read)(uri, &vars, caller);
            }
        }
        Err(RpcError::invalid_params("Resource not found").with_data(json!({ "uri": uri })))
    }

    /// Completion values for a prompt argument (at most 100, as the schema allows).
    pub fn complete_prompt_argument(
        &self,
        prompt: &str,
        argument: &str,
        prefix: &str,
    ) -> Option<Vec<String>> {
        let prompt = self.prompt(prompt)?;
        let argument = prompt.arguments.iter().find(|a| a.name == argument)?;
        Some(
            argument
                .completions
                .iter()
                .filter(|value| value.starts_with(prefix))
                .take(100)
                .cloned()
                .collect(),
        )
    }
}

/// Matches a level-1 RFC 6570 template (`{var}` expansions) against a URI. A variable
/// matches one or more characters up to the next literal, never across a `/`.
pub fn match_template(template: &str, uri: &str) -> Option<HashMap<String, String>> {
    let mut vars = HashMap::new();
    let mut rest_template = template;
    let mut rest_uri = uri;
    while !rest_template.is_empty() {
        match rest_template.find('{') {
            Some(0) => {
                let close = rest_template.find('}')?;
                let name = &rest_template[1..close];
                rest_template = &rest_template[close + 1..];
                let literal_end = rest_template.find('{').unwrap_or(rest_template.len());
                let next_literal = &rest_template[..literal_end];
                let end = if next_literal.is_empty() {
                    rest_uri.len()
                } else {
                    rest_uri.find(next_literal)?
                };
                let value = &rest_uri[..end];
                if value.is_empty() || value.contains('/') {
                    return None;
                }
                vars.insert(name.to_owned(), value.to_owned());
                rest_uri = &rest_uri[end..];
            }
            found => {
                let end = found.unwrap_or(rest_template.len());
                let literal = &rest_template[..end];
                rest_uri = rest_uri.strip_prefix(literal)?;
                rest_template = &rest_template[end..];
            }
        }
    }
    rest_uri.is_empty().then_some(vars)
}

#[cfg(test)]
mod tests {
    use super::match_template;

    #[test]
    fn templates_match_single_segments() {
        let vars = match_template("test://template/{id}/data", "test://template/123/data").unwrap();
        assert_eq!(vars["id"], "123");
        assert!(match_template("test://template/{id}/data", "test://template/1/2/data").is_none());
        assert!(match_template("test://template/{id}/data", "test://template//data").is_none());
        assert!(match_template("test://template/{id}/data", "test://other/1/data").is_none());
        let tail = match_template("file:///{name}", "file:///x.txt").unwrap();
        assert_eq!(tail["name"], "x.txt");
    }
}
