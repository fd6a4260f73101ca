//! JSON-RPC errors and the HTTP status each one travels with.
//!
//! Every error the server can send is built here, so that the code, the message and the
//! HTTP status stay consistent (the 2026-07-28 transport pins the status per code).

use serde_json::{json, Value};

/// JSON-RPC 2.0 and MCP error codes used by this server.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// MCP `HeaderMismatch`.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// MCP `MissingRequiredClientCapability`.
    pub const MISSING_CAPABILITY: i64 = -32021;
    /// MCP `UnsupportedProtocolVersion`.
    pub const UNSUPPORTED_VERSION: i64 = -32022;
}

/// A JSON-RPC error object plus the HTTP status it is answered with.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    /// Boxed: errors travel through `Result`s on hot paths and should stay small.
    pub data: Option<Box<Value>>,
    pub http_status: u16,
    /// Seconds for the HTTP `Retry-After` header: the failure is temporary (503).
    pub retry_after_s: Option<u16>,
    /// A `403 insufficient_scope`: the transport names `data.requiredScopes` (every
    /// OAuth scope the operation needs) in its `WWW-Authenticate` challenge. A flag, not
    /// the list, so that errors stay small on hot paths.
    pub insufficient_scope: bool,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        let http_status = match code {
            code::METHOD_NOT_FOUND => 404,
            code::INTERNAL_ERROR => 500,
            _ => 400,
        };
        RpcError {
            code,
            message: message.into(),
            data: None,
            http_status,
            retry_after_s: None,
            insufficient_scope: false,
        }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(Box::new(data));
        self
    }

    pub fn with_status(mut self, status: u16) -> Self {
        self.http_status = status;
        self
    }

    /// A temporary failure: HTTP 503 with `Retry-After: seconds`. The message says what
    /// is wrong (no space, read-only storage), never internal details.
    pub fn unavailable(message: impl Into<String>, seconds: u16) -> Self {
        RpcError {
            retry_after_s: Some(seconds),
            ..Self::new(code::INTERNAL_ERROR, message).with_status(503)
        }
    }

    /// HTTP 403 for an access token without every scope in `scopes` (all of them are
    /// named, so that one step-up authorization is enough).
    pub fn insufficient_scope(scopes: &[String]) -> Self {
        RpcError {
            insufficient_scope: true,
            ..Self::new(
                code::INVALID_REQUEST,
                format!(
                    "Forbidden: the access token lacks the scopes this needs ({})",
                    scopes.join(" ")
                ),
            )
            .with_status(403)
            .with_data(json!({ "requiredScopes": scopes }))
        }
    }

    pub fn parse_error(detail: impl std::fmt::Display) -> Self {
        Self::new(code::PARSE_ERROR, format!("Parse error: {detail}"))
    }

    pub fn invalid_request(detail: impl std::fmt::Display) -> Self {
        Self::new(code::INVALID_REQUEST, format!("Invalid request: {detail}"))
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            code::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        )
    }

    pub fn invalid_params(detail: impl std::fmt::Display) -> Self {
        Self::new(code::INVALID_PARAMS, format!("Invalid params: {detail}"))
    }

    /// The fixed, non-disclosing answer for a task that is unknown, expired or not the
    /// caller's. It must be byte-for-byte the same in every one of those cases.
    pub fn task_not_found() -> Self {
        Self::new(code::INVALID_PARAMS, "Invalid params")
    }

    /// Internal failures never carry details to the client; the cause goes to the log.
    pub fn internal() -> Self {
        Self::new(code::INTERNAL_ERROR, "Internal error")
    }

    pub fn header_mismatch(detail: impl std::fmt::Display) -> Self {
        Self::new(code::HEADER_MISMATCH, format!("Header mismatch: {detail}"))
    }

    /// `-32021` with `data.requiredCapabilities` set to exactly the missing capabilities.
    pub fn missing_capability(required: Value) -> Self {
        Self::new(
            code::MISSING_CAPABILITY,
            "Missing required client capability",
        )
        .with_data(json!({ "requiredCapabilities": required }))
    }

    pub fn unsupported_version(requested: &str, supported: &[&str]) -> Self {
        Self::new(code::UNSUPPORTED_VERSION, "Unsupported protocol version")
            .with_data(json!({ "requested": requested, "supported": supported }))
    }

    /// The scopes of a `403 insufficient_scope` (see [`RpcError::insufficient_scope`]).
    pub fn required_scopes(&self) -> Option<Vec<String>> {
        if !self.insufficient_scope {
            return None;
        }
        let scopes = self.data.as_ref()?.get("requiredScopes")?.as_array()?;
        Some(
            scopes
                .iter()
                .filter_map(|scope| scope.as_str().map(str::to_owned))
                .collect(),
        )
    }

    /// The `error` member of a JSON-RPC response.
    pub fn to_json(&self) -> Value {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            error["data"] = (**data).clone();
        }
        error
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}
