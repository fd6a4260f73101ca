//! The span of one MCP request, as the OpenTelemetry conventions for MCP name it
//! (`{mcp.method.name} {target}`, kind `SERVER`, parent: the caller's `_meta` trace
//! context or the HTTP headers'). Only names the configuration chose become a target
//! or an attribute: a tool name a client made up does not.

use serde_json::Value;

use super::{Reply, Request};
use opentelemetry::KeyValue;
use taskd_protocol::RpcError;
use taskd_telemetry::{Kind, Span, TASK_ID};

/// Longest JSON-RPC id recorded (a client chooses it).
const MAX_ID: usize = 128;

/// Starts the span of `request`; `tool` is its tool when it names a served one.
pub(super) fn start(request: &Request<'_>, tool: Option<&str>) -> Span {
    Span::start(Kind::Server, request.meta.trace.as_ref(), None, || {
        describe(request, tool)
    })
}

/// The span's name and attributes.
fn describe(request: &Request<'_>, tool: Option<&str>) -> (String, Vec<KeyValue>) {
    let method = request.envelope.method.as_str();
    let mut attributes = vec![
        KeyValue::new("mcp.method.name", method.to_owned()),
        KeyValue::new(
            "mcp.protocol.version",
            request.meta.protocol_version.clone(),
        ),
    ];
    if let Some(id) = &request.envelope.id {
        let id = match id {
            Value::String(id) => id.chars().take(MAX_ID).collect(),
            other => other.to_string(),
        };
        attributes.push(KeyValue::new("jsonrpc.request.id", id));
    }
    let name = match tool {
        Some(tool) => {
            attributes.push(KeyValue::new("gen_ai.tool.name", tool.to_owned()));
            attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
            format!("{method} {tool}")
        }
        None => method.to_owned(),
    };
    if method.starts_with("tasks/") {
        if let Some(task_id) = request.envelope.str_param("taskId") {
            attributes.push(KeyValue::new(
                TASK_ID,
                task_id.chars().take(MAX_ID).collect::<String>(),
            ));
        }
    }
    (name, attributes)
}

/// Records how the request was answered on its span and ends it (a task creation's
/// span ends when its commit answers).
pub(super) fn finish(mut span: Span, reply: Reply) -> Reply {
    match reply {
        Reply::Result(result) => {
            outcome(&mut span, Ok(&result));
            span.end();
            Reply::Result(result)
        }
        Reply::Error(error) => {
            outcome(&mut span, Err(&error));
            span.end();
            Reply::Error(error)
        }
        Reply::Later(later) => Reply::Later(later.map(move |answer| {
            outcome(&mut span, answer.as_ref());
            span.end();
            answer
        })),
        Reply::Listen(listen) => {
            span.end();
            Reply::Listen(listen)
        }
    }
}

fn outcome(span: &mut Span, answer: Result<&Value, &RpcError>) {
    match answer {
        Ok(result) => {
            if let Some(task_id) = result.get("taskId").and_then(Value::as_str) {
                span.set(TASK_ID, task_id.to_owned());
            }
            if result.get("isError") == Some(&Value::Bool(true)) {
                span.fail("tool_error", "the tool answered with an error".into());
            }
        }
        Err(error) => {
            let code = error.code.to_string();
            span.set("rpc.response.status_code", code.clone());
            span.fail(code, code_text(error.code).into());
        }
    }
}

/// The status description of an error: what its code means, not its message, which
/// may quote a tool's output or a client's input.
fn code_text(code: i64) -> &'static str {
    match code {
        -32700 => "Parse error",
        -32600 => "Invalid request",
        -32601 => "Method not found",
        -32602 => "Invalid params",
        -32603 => "Internal error",
        _ => "Error",
    }
}
