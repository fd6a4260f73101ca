//! Test harness: starts the real `mcp-taskd` binary on an ephemeral loopback port with a
//! temporary data dir, and speaks raw HTTP/1.1 to it (so tests control every byte).

#![allow(dead_code)] // each test binary uses a different part of the harness

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const VERSION: &str = "2026-07-28";

pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    pub dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl Server {
    /// Starts the binary on `config` (TOML; listen address and data dir are overridden).
    pub fn start(config: &str) -> Server {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = temp.path().to_path_buf();
        let mut server = Server::start_in(&dir, config);
        server._temp = Some(temp);
        server
    }

    /// Starts the binary with its data in `dir` (reused across restarts).
    pub fn start_in(dir: &Path, config: &str) -> Server {
        Server::start_command(dir, config, Command::new(env!("CARGO_BIN_EXE_mcp-taskd")))
    }

    /// Starts the binary under a descriptor limit (`ulimit -n`, soft and hard).
    pub fn start_with_fd_limit(config: &str, limit: u64) -> Server {
        let temp = tempfile::tempdir().expect("temp dir");
        let mut wrapper = Command::new("sh");
        wrapper
            .arg("-c")
            .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
            .arg(env!("CARGO_BIN_EXE_mcp-taskd"));
        let mut server = Server::start_command(temp.path(), config, wrapper);
        server._temp = Some(temp);
        server
    }

    fn start_command(dir: &Path, config: &str, mut command: Command) -> Server {
        std::fs::create_dir_all(dir).expect("data dir");
        let config_path = dir.join("config.toml");
        std::fs::write(&config_path, config).expect("write config");
        let mut child = command
            .arg("serve")
            .arg("--config")
            .arg(&config_path)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn mcp-taskd");
        let stdout = child.stdout.take().expect("stdout");
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        let line = receiver
            .recv_timeout(Duration::from_secs(20))
            .expect("server printed its address");
        let url = line
            .strip_prefix("mcp-taskd listening on http://")
            .expect("address line");
        let addr = url
            .trim_end_matches("/mcp")
            .parse()
            .expect("socket address");
        Server {
            child,
            addr,
            dir: dir.to_path_buf(),
            _temp: None,
        }
    }

    /// SIGKILL: no chance to clean up.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits for exit (up to `limit`); returns whether it exited.
    pub fn terminate(&mut self, limit: Duration) -> bool {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends raw bytes as a POST to `path` with the given headers. `Host`,
    /// `Connection: close` and a correct `Content-Length` are added unless `headers`
    /// already names them (so a test can send a foreign `Host` or a lying length).
    pub fn post_raw(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpResponse {
        self.exchange(&self.raw_request("POST", path, headers, body))
    }

    /// The bytes of an HTTP/1.1 request as [`Server::post_raw`] sends it.
    pub fn raw_request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Vec<u8> {
        let has = |name: &str| headers.iter().any(|(h, _)| h.eq_ignore_ascii_case(name));
        let mut request = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
        if !has("Host") {
            request.extend_from_slice(format!("Host: {}\r\n", self.addr).as_bytes());
        }
        if !has("Connection") {
            request.extend_from_slice(b"Connection: close\r\n");
        }
        if !has("Content-Length") && !has("Transfer-Encoding") {
            request.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
        }
        for (name, value) in headers {
            request.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        request.extend_from_slice(b"\r\n");
        request.extend_from_slice(body);
        request
    }

    /// POSTs `body` with `Transfer-Encoding: chunked` (no `Content-Length`), in chunks of
    /// `chunk` bytes.
    pub fn post_chunked(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        chunk: usize,
    ) -> HttpResponse {
        let mut encoded = Vec::new();
        for piece in body.chunks(chunk.max(1)) {
            encoded.extend_from_slice(format!("{:X}\r\n", piece.len()).as_bytes());
            encoded.extend_from_slice(piece);
            encoded.extend_from_slice(b"\r\n");
        }
        encoded.extend_from_slice(b"0\r\n\r\n");
        let mut all: Vec<(&str, &str)> = vec![("Transfer-Encoding", "chunked")];
        all.extend_from_slice(headers);
        self.post_raw(path, &all, &encoded)
    }

    /// Sends `bytes` as they are, half-closes the connection and reads whatever comes
    /// back within `limit`. Never panics: write errors are ignored (the server may close
    /// early) and `None` means no parseable HTTP response arrived.
    pub fn try_exchange(&self, bytes: &[u8], limit: Duration) -> Option<HttpResponse> {
        HttpResponse::try_parse(&self.try_exchange_raw(bytes, limit)?)
    }

    /// Like [`Server::try_exchange`], returning every byte the server sent (possibly
    /// several responses); `None` only when the connection could not be made.
    pub fn try_exchange_raw(&self, bytes: &[u8], limit: Duration) -> Option<Vec<u8>> {
        let mut stream = TcpStream::connect(self.addr).ok()?;
        stream.set_read_timeout(Some(limit)).ok()?;
        stream.set_write_timeout(Some(limit)).ok()?;
        let _ = stream.write_all(bytes);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let deadline = Instant::now() + limit;
        let mut raw = Vec::new();
        let mut buffer = [0u8; 16 * 1024];
        while Instant::now() < deadline {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&buffer[..n]),
            }
        }
        Some(raw)
    }

    /// Sends a complete raw HTTP request and reads the whole response: up to its
    /// `Content-Length` when it has one (the server may keep reading an unfinished
    /// request body), otherwise to the end of the connection.
    pub fn exchange(&self, request: &[u8]) -> HttpResponse {
        let mut stream = TcpStream::connect(self.addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        stream.write_all(request).expect("write request");
        let mut raw = Vec::new();
        let mut buffer = [0u8; 16 * 1024];
        while !response_complete(&raw) {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&buffer[..n]),
            }
        }
        HttpResponse::parse(&raw)
    }

    pub fn get(&self, path: &str) -> HttpResponse {
        self.exchange(
            format!(
                "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                self.addr
            )
            .as_bytes(),
        )
    }

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

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Capabilities that declare the Tasks extension.
pub fn tasks_caps() -> Value {
    json!({"elicitation": {"form": {}, "url": {}}, "sampling": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}})
}

pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    fn parse(raw: &[u8]) -> HttpResponse {
        HttpResponse::try_parse(raw).unwrap_or_else(|| {
            panic!(
                "not an HTTP response: {:?}",
                String::from_utf8_lossy(&raw[..raw.len().min(2000)])
            )
        })
    }

    /// Parses one HTTP response (status line, headers, body to the end of `raw`).
    pub fn try_parse(raw: &[u8]) -> Option<HttpResponse> {
        let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&raw[..split]).to_string();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .filter(|line| line.starts_with("HTTP/"))
            .and_then(|line| line.split(' ').nth(1))
            .and_then(|code| code.parse().ok())?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let rest = &raw[split + 4..];
        let chunked = headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
        let body = if chunked {
            dechunk(rest)
        } else {
            rest.to_vec()
        };
        Some(HttpResponse {
            status,
            headers,
            body,
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).to_string()
    }

    /// The single JSON document of an `application/json` body, or the last message of an
    /// SSE body (the response).
    pub fn json(&self) -> Value {
        if self
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream"))
        {
            return self.sse_messages().pop().expect("an SSE message");
        }
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("JSON body ({e}): {}", self.text()))
    }

    pub fn sse_messages(&self) -> Vec<Value> {
        self.text()
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|data| serde_json::from_str(data.trim()).expect("SSE data is JSON"))
            .collect()
    }

    pub fn result(&self) -> Value {
        let message = self.json();
        assert!(
            message.get("error").is_none(),
            "expected a result, got {message}"
        );
        message["result"].clone()
    }

    /// Asserts an error with this HTTP status and JSON-RPC code; returns the error.
    pub fn expect_error(&self, status: u16, code: i64) -> Value {
        assert_eq!(self.status, status, "status for {}", self.text());
        let message = self.json();
        assert_eq!(message["error"]["code"], code, "error code in {message}");
        message["error"].clone()
    }
}

/// Whether `raw` holds a whole response with a `Content-Length` body.
fn response_complete(raw: &[u8]) -> bool {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    head.lines()
        .filter_map(|line| line.strip_prefix("content-length:"))
        .find_map(|value| value.trim().parse::<usize>().ok())
        .is_some_and(|length| raw.len() >= split + 4 + length)
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..line_end]).trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            return out;
        }
        let start = line_end + 2;
        let end = (start + size).min(data.len());
        out.extend_from_slice(&data[start..end]);
        data = &data[(end + 2).min(data.len())..];
    }
}

/// Polls `check` until it returns `Some` or `limit` passes.
pub fn poll_until<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub const CONFORMANCE: &str = "[builtin]\nsets = [\"conformance\"]\n";

/// Both built-in sets: the conformance fixtures first (so `tools[0]` stays
/// `test_simple_text`), then the demo `echo` tool, `summarize` prompt and `about` resource.
pub const ALL_SETS: &str = "[builtin]\nsets = [\"conformance\", \"demo\"]\n";

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

/// Task helpers over the harness, for a client declaring the Tasks extension.
pub mod tasks {
    use super::{poll_until, tasks_caps, HttpResponse, Server};
    use serde_json::{json, Value};
    use std::time::Duration;

    /// `tools/call` that must create a task; returns its id.
    pub fn create(
        server: &Server,
        tool: &str,
        arguments: Value,
        headers: &[(&str, &str)],
    ) -> String {
        let response = server.request_with(
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
            tasks_caps(),
            headers,
        );
        let result = response.result();
        assert_eq!(result["resultType"], "task", "expected a task: {result}");
        result["taskId"].as_str().expect("taskId").to_owned()
    }

    pub fn get_raw(server: &Server, task_id: &str, headers: &[(&str, &str)]) -> HttpResponse {
        server.request_with(
            "tasks/get",
            json!({"taskId": task_id}),
            tasks_caps(),
            headers,
        )
    }

    pub fn get(server: &Server, task_id: &str) -> Value {
        get_raw(server, task_id, &[]).result()
    }

    pub fn cancel(server: &Server, task_id: &str, headers: &[(&str, &str)]) -> HttpResponse {
        server.request_with(
            "tasks/cancel",
            json!({"taskId": task_id}),
            tasks_caps(),
            headers,
        )
    }

    pub fn update(
        server: &Server,
        task_id: &str,
        responses: Value,
        headers: &[(&str, &str)],
    ) -> HttpResponse {
        server.request_with(
            "tasks/update",
            json!({"taskId": task_id, "inputResponses": responses}),
            tasks_caps(),
            headers,
        )
    }

    pub fn is_terminal(task: &Value) -> bool {
        matches!(
            task["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        )
    }

    /// Polls until the task reaches `status` (or any terminal status); returns it.
    pub fn wait_for(server: &Server, task_id: &str, status: &str, limit: Duration) -> Value {
        poll_until(limit, || {
            let task = get(server, task_id);
            (task["status"] == status || is_terminal(&task)).then_some(task)
        })
        .unwrap_or_else(|| panic!("task {task_id} did not reach {status} in {limit:?}"))
    }

    pub fn wait_terminal(server: &Server, task_id: &str, limit: Duration) -> Value {
        poll_until(limit, || {
            let task = get(server, task_id);
            is_terminal(&task).then_some(task)
        })
        .unwrap_or_else(|| panic!("task {task_id} did not end in {limit:?}"))
    }
}

/// An open `subscriptions/listen` stream, read line by line as clients do.
pub struct Listen {
    reader: BufReader<TcpStream>,
    pub status: u16,
}

impl Listen {
    /// Opens a listen stream with `notifications` as the filter.
    pub fn open(
        server: &Server,
        notifications: Value,
        capabilities: Value,
        headers: &[(&str, &str)],
    ) -> Listen {
        Listen::open_on(
            TcpStream::connect(server.addr).expect("connect"),
            server,
            notifications,
            capabilities,
            headers,
        )
    }

    /// Like [`Listen::open`], over a socket with a tiny receive buffer: a client that
    /// stops reading then pushes back on the server after a few kilobytes.
    pub fn open_small_buffer(server: &Server, notifications: Value) -> Listen {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
        socket.connect(&server.addr.into()).expect("connect");
        Listen::open_on(socket.into(), server, notifications, json!({}), &[])
    }

    fn open_on(
        mut stream: TcpStream,
        server: &Server,
        notifications: Value,
        capabilities: Value,
        headers: &[(&str, &str)],
    ) -> Listen {
        let body = json!({"jsonrpc": "2.0", "id": 77, "method": "subscriptions/listen", "params": {
            "notifications": notifications,
            "_meta": {"io.modelcontextprotocol/protocolVersion": VERSION,
                      "io.modelcontextprotocol/clientCapabilities": capabilities}}})
        .to_string();
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {VERSION}\r\n\
             Mcp-Method: subscriptions/listen\r\nContent-Length: {}\r\n",
            server.addr,
            body.len()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(&body);
        stream.write_all(request.as_bytes()).expect("send listen");
        let mut reader = BufReader::new(stream);
        let mut status_line = String::new();
        reader.read_line(&mut status_line).expect("status line");
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status");
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("header line");
            if line == "\r\n" || line.is_empty() {
                break;
            }
        }
        Listen { reader, status }
    }

    /// The next raw line, or `None` on timeout or end of stream.
    pub fn next_line(&mut self, limit: Duration) -> Option<String> {
        self.reader.get_ref().set_read_timeout(Some(limit)).ok()?;
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim_end().to_owned()),
        }
    }

    /// The next JSON-RPC message (SSE `data:` line), or `None` on timeout or end.
    pub fn next_message(&mut self, limit: Duration) -> Option<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let line = self.next_line(left.max(Duration::from_millis(1)))?;
            if let Some(data) = line.strip_prefix("data:") {
                return Some(serde_json::from_str(data.trim()).expect("SSE data is JSON"));
            }
        }
    }

    /// Reads messages until the stream ends (or `limit` passes); returns them all.
    pub fn drain(&mut self, limit: Duration) -> Vec<Value> {
        let deadline = Instant::now() + limit;
        let mut messages = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.next_message(left) {
                Some(message) => messages.push(message),
                None => break,
            }
        }
        messages
    }
}
