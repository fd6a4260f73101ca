//! JSON-RPC requests as MCP clients send them: well-formed calls with the standard headers
//! and `_meta`, and [`Rpc`], a request that a test breaks in exactly one place.

use serde_json::{json, Value};

use super::{HttpResponse, Server, VERSION};

impl Server {
    /// A well-formed MCP request with the standard headers and `_meta`.
    pub fn request(&self, method: &str, params: Value, capabilities: Value) -> HttpResponse {
        self.request_with(method, params, capabilities, &[])
    }

    /// Like [`Server::request`], with extra headers (and `Mcp-Name` derived when needed).
    pub fn request_with(
        &self,
        method: &str,
        mut params: Value,
        capabilities: Value,
        extra: &[(&str, &str)],
    ) -> HttpResponse {
        let meta = params
            .as_object_mut()
            .expect("params object")
            .entry("_meta")
            .or_insert_with(|| json!({}));
        meta["io.modelcontextprotocol/protocolVersion"] = json!(VERSION);
        meta["io.modelcontextprotocol/clientCapabilities"] = capabilities;
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let name = ["name", "uri", "taskId"]
            .iter()
            .find_map(|key| body["params"][key].as_str())
            .map(str::to_owned);
        let mut headers = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", VERSION),
            ("Mcp-Method", method),
        ];
        if let Some(name) = name.as_deref() {
            if !extra
                .iter()
                .any(|(h, _)| h.eq_ignore_ascii_case("Mcp-Name"))
            {
                headers.push(("Mcp-Name", name));
            }
        }
        headers.extend_from_slice(extra);
        self.post_raw("/mcp", &headers, body.to_string().as_bytes())
    }

    /// `tools/call` with default capabilities; returns the JSON-RPC `result`.
    pub fn call_tool(&self, name: &str, arguments: Value, capabilities: Value) -> HttpResponse {
        self.request(
            "tools/call",
            json!({"name": name, "arguments": arguments}),
            capabilities,
        )
    }
}

/// Capabilities that declare the Tasks extension.
pub fn tasks_caps() -> Value {
    json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}})
}

/// A well-formed MCP request that a test then breaks in exactly one place.
///
/// By default: id 7, `params._meta` with the protocol version and `{}` capabilities, and
/// the headers the conformance harness sends (`Mcp-Name` mirrored from `params.name` /
/// `params.uri` / `params.taskId` for the methods that need it).
#[derive(Clone, Debug)]
pub struct Rpc {
    pub body: Value,
    pub headers: Vec<(String, String)>,
}

impl Rpc {
    pub fn new(method: &str, mut params: Value) -> Rpc {
        let object = params.as_object_mut().expect("params object");
        let meta = object.entry("_meta").or_insert_with(|| json!({}));
        meta["io.modelcontextprotocol/protocolVersion"] = json!(VERSION);
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
        let mut headers = vec![
            ("Content-Type".to_owned(), "application/json".to_owned()),
            (
                "Accept".to_owned(),
                "application/json, text/event-stream".to_owned(),
            ),
            ("MCP-Protocol-Version".to_owned(), VERSION.to_owned()),
            ("Mcp-Method".to_owned(), method.to_owned()),
        ];
        let source = match method {
            "tools/call" | "prompts/get" => Some("name"),
            "resources/read" => Some("uri"),
            "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
            _ => None,
        };
        if let Some(value) = source.and_then(|key| params[key].as_str()) {
            headers.push(("Mcp-Name".to_owned(), value.to_owned()));
        }
        Rpc {
            body: json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}),
            headers,
        }
    }

    /// `tools/call` of `name` with `arguments`.
    pub fn tool(name: &str, arguments: Value) -> Rpc {
        Rpc::new("tools/call", json!({"name": name, "arguments": arguments}))
    }

    pub fn id(mut self, id: Value) -> Rpc {
        self.body["id"] = id;
        self
    }

    /// Sets a header, replacing any of the same name (names compared case-insensitively).
    pub fn header(self, name: &str, value: &str) -> Rpc {
        let mut rpc = self.without_header(name);
        rpc.headers.push((name.to_owned(), value.to_owned()));
        rpc
    }

    pub fn without_header(mut self, name: &str) -> Rpc {
        self.headers.retain(|(h, _)| !h.eq_ignore_ascii_case(name));
        self
    }

    /// Sets `params._meta[key]`.
    pub fn meta(mut self, key: &str, value: Value) -> Rpc {
        self.body["params"]["_meta"][key] = value;
        self
    }

    /// The request's client capabilities.
    pub fn caps(self, capabilities: Value) -> Rpc {
        self.meta("io.modelcontextprotocol/clientCapabilities", capabilities)
    }

    pub fn without_meta(mut self, key: &str) -> Rpc {
        if let Some(meta) = self.body["params"]["_meta"].as_object_mut() {
            meta.remove(key);
        }
        self
    }

    /// Sets `params[key]`.
    pub fn param(mut self, key: &str, value: Value) -> Rpc {
        self.body["params"][key] = value;
        self
    }

    /// Arbitrary edits of the JSON body.
    pub fn edit(mut self, edit: impl FnOnce(&mut Value)) -> Rpc {
        edit(&mut self.body);
        self
    }

    pub fn header_pairs(&self) -> Vec<(&str, &str)> {
        self.headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect()
    }

    pub fn send(&self, server: &Server) -> HttpResponse {
        self.send_bytes(server, self.body.to_string().as_bytes())
    }

    /// Sends these headers with `body` instead of the JSON body.
    pub fn send_bytes(&self, server: &Server, body: &[u8]) -> HttpResponse {
        server.post_raw("/mcp", &self.header_pairs(), body)
    }

    /// The full HTTP request as bytes.
    pub fn to_bytes(&self, server: &Server) -> Vec<u8> {
        server.raw_request(
            "POST",
            "/mcp",
            &self.header_pairs(),
            self.body.to_string().as_bytes(),
        )
    }
}

impl HttpResponse {
    /// Asserts an `application/json` JSON-RPC error with this HTTP status and code that
    /// echoes `id`; returns the `error` member.
    pub fn expect_rpc_error(&self, status: u16, code: i64, id: &Value) -> Value {
        assert_eq!(self.status, status, "HTTP status of {}", self.text());
        assert!(
            self.header("content-type")
                .is_some_and(|t| t.starts_with("application/json")),
            "error content type: {:?}",
            self.header("content-type")
        );
        let message = self.json();
        assert_eq!(message["jsonrpc"], "2.0", "jsonrpc in {message}");
        assert_eq!(message["error"]["code"], code, "error code in {message}");
        assert!(
            message["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "error message in {message}"
        );
        assert_eq!(
            message.get("id"),
            Some(id),
            "the error must echo id {id}: {message}"
        );
        assert!(
            message.get("result").is_none(),
            "error with a result: {message}"
        );
        message["error"].clone()
    }
}

/// One MRTR round trip through the testing set's request-state tool: `sealer` answers
/// the first call with an input request and its sealed `requestState`; `opener` takes
/// the retry carrying the responses and that state, and completes the call. It fails
/// unless `opener` can open what `sealer` sealed (the same request-state key: after a
/// restart, a hostile barrage, or on another node of a cluster).
pub fn assert_mrtr_round_trip(sealer: &Server, opener: &Server) {
    let tool = "test_input_required_result_request_state";
    let caps = json!({"elicitation": {}});
    let first = Rpc::tool(tool, json!({}))
        .caps(caps.clone())
        .send(sealer)
        .result();
    let state = first["requestState"].as_str().expect("requestState");
    let done = Rpc::tool(tool, json!({}))
        .caps(caps)
        .param(
            "inputResponses",
            json!({"confirm": {"action": "accept", "content": {"ok": true}}}),
        )
        .param("requestState", json!(state))
        .send(opener)
        .result();
    assert!(
        done["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("state-ok")),
        "{done}"
    );
}
