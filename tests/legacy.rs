//! The legacy era (initialize-based sessions, 2025-03-26 to 2025-11-25) on the same
//! endpoint as 2026-07-28, through the real binary over raw HTTP.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::{self, poll_until, HttpResponse, Rpc, Server, ALL_SETS, CONFORMANCE};
use serde_json::{json, Value};

/// A legacy client: its session id and negotiated version once initialized.
struct Client<'s> {
    server: &'s Server,
    session: String,
    version: String,
    /// The `Authorization` header every request carries, if the server wants tokens.
    authorization: Option<String>,
}

fn initialize_body(version: &str, capabilities: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": capabilities,
        "clientInfo": {"name": "legacy-test", "version": "1.0.0"}}})
}

fn post(server: &Server, headers: &[(&str, &str)], body: &Value) -> HttpResponse {
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    server.post_raw("/mcp", &all, body.to_string().as_bytes())
}

impl<'s> Client<'s> {
    /// Runs the handshake (initialize + notifications/initialized) the SDKs run.
    fn connect(server: &'s Server, version: &str, capabilities: Value) -> Client<'s> {
        Client::connect_as(server, version, capabilities, None)
    }

    /// [`Client::connect`] with a bearer token.
    fn connect_as(
        server: &'s Server,
        version: &str,
        capabilities: Value,
        token: Option<&str>,
    ) -> Client<'s> {
        let authorization = token.map(|token| format!("Bearer {token}"));
        let auth_header: Vec<(&str, &str)> = authorization
            .as_deref()
            .map(|value| ("Authorization", value))
            .into_iter()
            .collect();
        let response = post(
            server,
            &auth_header,
            &initialize_body(version, capabilities),
        );
        assert_eq!(response.status, 200, "{}", response.text());
        let session = response
            .header("mcp-session-id")
            .expect("a session id")
            .to_owned();
        let version = response.result()["protocolVersion"]
            .as_str()
            .expect("negotiated version")
            .to_owned();
        let client = Client {
            server,
            session,
            version,
            authorization,
        };
        let initialized =
            client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert_eq!(initialized.status, 202, "{}", initialized.text());
        client
    }

    fn headers(&self) -> Vec<(&str, &str)> {
        let mut headers = vec![
            ("Mcp-Session-Id", self.session.as_str()),
            ("MCP-Protocol-Version", self.version.as_str()),
        ];
        if let Some(authorization) = &self.authorization {
            headers.push(("Authorization", authorization.as_str()));
        }
        headers
    }

    /// Opens the standalone GET stream and waits for its `200`.
    fn open_get_stream(&self) -> TcpStream {
        let mut headers = self.headers();
        headers.push(("Accept", "text/event-stream"));
        let mut stream = open(
            self.server,
            &self.server.raw_request("GET", "/mcp", &headers, b""),
        );
        let head = read_until(&mut stream, Duration::from_secs(5), |t| {
            t.contains("\r\n\r\n")
        });
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        stream
    }

    fn send(&self, body: &Value) -> HttpResponse {
        post(self.server, &self.headers(), body)
    }

    fn request(&self, method: &str, params: Value) -> HttpResponse {
        self.send(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
    }

    fn delete(&self) -> HttpResponse {
        let request = self
            .server
            .raw_request("DELETE", "/mcp", &self.headers(), b"");
        self.server.exchange(&request)
    }
}

#[test]
fn the_handshake_negotiates_a_version_and_issues_a_session() {
    let server = Server::start(CONFORMANCE);
    for (asked, answered) in [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2024-11-05", "2025-11-25"),
        ("2031-01-01", "2025-11-25"),
    ] {
        let client = Client::connect(&server, asked, json!({}));
        assert_eq!(client.version, answered, "asked {asked}");
        assert!(
            client.session.bytes().all(|b| (0x21..=0x7e).contains(&b)),
            "session id {:?}",
            client.session
        );
    }
    // The probes' variant: a version header (and Mcp-Method) on the initialize itself.
    let probe = post(
        &server,
        &[
            ("MCP-Protocol-Version", "2025-11-25"),
            ("Mcp-Method", "initialize"),
        ],
        &initialize_body("2025-11-25", json!({})),
    );
    assert_eq!(probe.status, 200, "{}", probe.text());
    let result = probe.result();
    assert_eq!(result["protocolVersion"], "2025-11-25");
    assert_eq!(result["capabilities"]["resources"]["subscribe"], true);
    assert!(result["serverInfo"]["name"].is_string());
    assert!(probe.header("mcp-session-id").is_some());
}

#[test]
fn legacy_methods_answer_in_the_legacy_shape() {
    let server = Server::start(CONFORMANCE);
    let client = Client::connect(&server, "2025-11-25", json!({}));
    assert_eq!(client.request("ping", json!({})).result(), json!({}));
    assert_eq!(
        client
            .request("logging/setLevel", json!({"level": "debug"}))
            .result(),
        json!({})
    );
    let uri = json!({"uri": "test://watched-resource"});
    assert_eq!(
        client.request("resources/subscribe", uri.clone()).result(),
        json!({})
    );
    assert_eq!(
        client.request("resources/unsubscribe", uri).result(),
        json!({})
    );
    let tools = client.request("tools/list", json!({})).result();
    assert_eq!(tools["tools"][0]["name"], "test_simple_text");
    assert!(tools.get("resultType").is_none() && tools.get("ttlMs").is_none());
    let call = client
        .request("tools/call", json!({"name": "test_simple_text"}))
        .result();
    assert!(call.get("resultType").is_none(), "{call}");
    assert!(call["content"][0]["text"]
        .as_str()
        .is_some_and(|t| !t.is_empty()));
    // Logs follow the session's level, on the call's stream, before the result.
    let logged = client.request(
        "tools/call",
        json!({"name": "test_tool_with_logging", "arguments": {}}),
    );
    let messages = logged.sse_messages();
    let logs = messages
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .count();
    assert_eq!(logs, 3, "{messages:?}");
    assert!(messages
        .last()
        .is_some_and(|m| m["result"]["content"].is_array()));
    // Progress uses the request's own token.
    let progress = client.request(
        "tools/call",
        json!({"name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": "p-1"}}),
    );
    let tokens: Vec<Value> = progress
        .sse_messages()
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["progressToken"].clone())
        .collect();
    assert_eq!(tokens, vec![json!("p-1"); 3]);
    // A 2026-only method does not exist on this wire.
    let unknown = client.request("tasks/update", json!({}));
    assert_eq!(unknown.json()["error"]["code"], -32601);
}

#[test]
fn ended_unknown_and_missing_sessions_are_refused_with_reasons() {
    let server = Server::start(CONFORMANCE);
    let client = Client::connect(&server, "2025-06-18", json!({}));
    // The version header must match what was negotiated.
    let wrong = post(
        &server,
        &[
            ("Mcp-Session-Id", client.session.as_str()),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}),
    );
    assert_eq!(wrong.status, 400, "{}", wrong.text());
    assert_eq!(client.delete().status, 200);
    let after = client.request("tools/list", json!({}));
    assert_eq!(after.status, 404, "{}", after.text());
    assert_eq!(client.delete().status, 404);
    let stranger = post(
        &server,
        &[("Mcp-Session-Id", "no-such-session")],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}),
    );
    assert_eq!(stranger.status, 404);
    // No session and no 2026 metadata: the answer names the revisions, not a header.
    let bare = post(
        &server,
        &[],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}),
    );
    assert_eq!(bare.status, 400);
    let message = bare.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("2025-11-25") && message.contains("2026-07-28"),
        "{message}"
    );
    assert!(!message.contains("header"), "{message}");
}

#[test]
fn a_legacy_and_a_modern_client_keep_their_semantics_side_by_side() {
    let server = Server::start(ALL_SETS);
    let legacy = Client::connect(&server, "2025-11-25", json!({}));
    for _ in 0..2 {
        let modern = Rpc::tool("echo", json!({"text": "hi"})).send(&server);
        assert_eq!(modern.result()["resultType"], "complete");
        let old = legacy.request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hi"}}),
        );
        let old = old.result();
        assert!(old.get("resultType").is_none(), "{old}");
        assert_eq!(old["content"][0]["text"], "hi");
        // Methods 2026-07-28 removed stay removed for the modern client...
        for method in [
            "initialize",
            "ping",
            "logging/setLevel",
            "resources/subscribe",
        ] {
            let removed = Rpc::new(method, json!({})).send(&server);
            removed.expect_error(404, -32601);
        }
        // ...and keep working for the legacy one.
        assert_eq!(legacy.request("ping", json!({})).result(), json!({}));
        // The modern lists keep their 2026-only fields.
        let modern_list = Rpc::new("tools/list", json!({})).send(&server);
        assert_eq!(modern_list.result()["resultType"], "complete");
    }
    assert_eq!(legacy.delete().status, 200);
    let after = Rpc::new("server/discover", json!({})).send(&server);
    assert_eq!(after.status, 200);
}

/// Sends a raw request on a fresh connection and returns the open stream.
fn open(server: &Server, request: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(server.addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    stream.write_all(request).expect("write");
    stream
}

/// Reads from `stream` until `done` holds for what arrived so far, or `limit` passes.
fn read_until(stream: &mut TcpStream, limit: Duration, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + limit;
    let mut raw = Vec::new();
    let mut buffer = [0u8; 8192];
    while Instant::now() < deadline && !done(&String::from_utf8_lossy(&raw)) {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buffer[..n]),
            Err(_) => continue,
        }
    }
    String::from_utf8_lossy(&raw).into_owned()
}

/// Posts `body` as one of the session's calls on a fresh connection and reads its
/// stream until the server asks for elicitation: the open stream and that request.
fn call_until_elicited(server: &Server, client: &Client, body: &Value) -> (TcpStream, Value) {
    let mut headers = client.headers();
    headers.push(("Content-Type", "application/json"));
    headers.push(("Accept", "application/json, text/event-stream"));
    let request = server.raw_request("POST", "/mcp", &headers, body.to_string().as_bytes());
    let mut call = open(server, &request);
    let asked = read_until(&mut call, Duration::from_secs(10), |text| {
        text.contains("elicitation/create")
    });
    let question = data_messages(&asked)
        .into_iter()
        .find(|m| m["method"] == "elicitation/create")
        .unwrap_or_else(|| panic!("no elicitation in {asked}"));
    (call, question)
}

fn data_messages(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect()
}

#[test]
fn a_legacy_call_asks_the_client_through_a_server_to_client_request() {
    let server = Server::start(CONFORMANCE);
    let client = Client::connect(
        &server,
        "2025-11-25",
        json!({"elicitation": {}, "sampling": {}}),
    );
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "test_elicitation", "arguments": {"message": "Who are you?"}}});
    let (mut call, question) = call_until_elicited(&server, &client, &body);
    assert_eq!(question["params"]["message"], "Who are you?");
    let answer = client.send(&json!({"jsonrpc": "2.0", "id": question["id"], "result": {
        "action": "accept", "content": {"username": "testuser", "email": "t@example.com"}}}));
    assert_eq!(answer.status, 202, "{}", answer.text());
    let rest = read_until(&mut call, Duration::from_secs(10), |text| {
        text.contains("\"id\":5")
    });
    let result = data_messages(&rest)
        .into_iter()
        .find(|m| m["id"] == 5)
        .unwrap_or_else(|| panic!("no result in {rest}"));
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("action=accept") && text.contains("testuser"),
        "{result}"
    );

    // A session that declared no elicitation is never sent one.
    let plain = Client::connect(&server, "2025-11-25", json!({}));
    let refused = plain.request(
        "tools/call",
        json!({"name": "test_elicitation", "arguments": {"message": "Who?"}}),
    );
    assert!(
        !refused.text().contains("elicitation/create"),
        "{}",
        refused.text()
    );
    assert_eq!(refused.json()["error"]["code"], -32021);
}

#[test]
fn the_get_stream_carries_list_changes_and_replays_after_last_event_id() {
    let server = Server::start(CONFORMANCE);
    let client = Client::connect(&server, "2025-11-25", json!({}));
    let mut headers = client.headers();
    headers.push(("Accept", "text/event-stream"));
    let mut stream = open(&server, &server.raw_request("GET", "/mcp", &headers, b""));
    let head = read_until(&mut stream, Duration::from_secs(5), |t| {
        t.contains("\r\n\r\n")
    });
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let trigger = client.request(
        "tools/call",
        json!({"name": "test_trigger_tool_change", "arguments": {}}),
    );
    assert!(trigger.result()["content"].is_array());
    let events = read_until(&mut stream, Duration::from_secs(5), |t| {
        t.contains("notifications/tools/list_changed")
    });
    assert!(events.contains("id: 1"), "{events}");
    // A resource update reaches only the sessions subscribed to that resource.
    let bystander = Client::connect(&server, "2025-11-25", json!({}));
    let watched = json!({"uri": "test://watched-resource"});
    assert_eq!(
        client.request("resources/subscribe", watched).result(),
        json!({})
    );
    let update = bystander.request(
        "tools/call",
        json!({"name": "test_trigger_resource_update", "arguments": {}}),
    );
    assert!(update.result()["content"].is_array());
    let updated = read_until(&mut stream, Duration::from_secs(5), |t| {
        t.contains("notifications/resources/updated")
    });
    assert!(updated.contains("test://watched-resource"), "{updated}");
    let mut bystander_headers = bystander.headers();
    bystander_headers.push(("Accept", "text/event-stream"));
    bystander_headers.push(("Last-Event-ID", "0"));
    let mut quiet = open(
        &server,
        &server.raw_request("GET", "/mcp", &bystander_headers, b""),
    );
    let heard = read_until(&mut quiet, Duration::from_millis(500), |_| false);
    assert!(heard.starts_with("HTTP/1.1 200"), "{heard}");
    assert!(!heard.contains("resources/updated"), "{heard}");
    drop(stream);
    // Reconnecting after event 0 replays event 1.
    headers.push(("Last-Event-ID", "0"));
    let mut again = open(&server, &server.raw_request("GET", "/mcp", &headers, b""));
    let replayed = read_until(&mut again, Duration::from_secs(5), |t| {
        t.contains("notifications/tools/list_changed")
    });
    assert!(
        replayed.contains("notifications/tools/list_changed"),
        "{replayed}"
    );
}

#[test]
fn task_status_changes_reach_the_creating_sessions_get_stream_only() {
    // Two identities: alice's task must never be announced to bob.
    const ALICE: &str = "legacy-token-alice";
    const BOB: &str = "legacy-token-bob";
    let server = Server::start(&format!(
        "[[auth.tokens]]\nprincipal = \"alice\"\ntenant = \"t1\"\n\
         sha256 = \"928d604f1562e969a1c25cedfc0469d0739378654af09e5aab506546185595f2\"\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntenant = \"t1\"\n\
         sha256 = \"7a15a809fd0dc8c1e1aa27f1c41ea47d18b52b037991be9b90a3dcf6403cdd0e\"\n{CONFORMANCE}"
    ));
    let alice = Client::connect_as(&server, "2025-11-25", json!({}), Some(ALICE));
    let bob = Client::connect_as(&server, "2025-11-25", json!({}), Some(BOB));
    let mut alice_stream = alice.open_get_stream();
    let mut bob_stream = bob.open_get_stream();

    let created = alice
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0.5}, "task": {}}),
        )
        .result();
    let task_id = created["task"]["taskId"]
        .as_str()
        .expect("taskId")
        .to_owned();
    assert_eq!(created["task"]["status"], "working");

    let heard = read_until(&mut alice_stream, Duration::from_secs(20), |t| {
        t.contains("\"completed\"")
    });
    let statuses: Vec<Value> = data_messages(&heard)
        .into_iter()
        .filter(|m| m["method"] == "notifications/tasks/status")
        .map(|m| m["params"].clone())
        .collect();
    let last = statuses
        .last()
        .unwrap_or_else(|| panic!("no status in {heard}"));
    // The full task as tasks/get renders it, without related-task metadata.
    assert_eq!(last["taskId"], task_id.as_str(), "{heard}");
    assert_eq!(last["status"], "completed", "{heard}");
    assert!(last["createdAt"].is_string() && last["lastUpdatedAt"].is_string());
    assert!(
        last.get("ttl").is_some() && last.get("_meta").is_none(),
        "{last}"
    );
    // Only changes: never the status the client already saw, never twice in a row.
    let seen: Vec<&str> = std::iter::once("working")
        .chain(
            statuses
                .iter()
                .map(|s| s["status"].as_str().unwrap_or_default()),
        )
        .collect();
    assert!(seen.windows(2).all(|pair| pair[0] != pair[1]), "{seen:?}");
    assert_eq!(
        alice
            .request("tasks/get", json!({"taskId": task_id}))
            .result()["status"],
        "completed"
    );

    // Nothing after the terminal status, and nothing at all for the other identity.
    let after = read_until(&mut alice_stream, Duration::from_millis(500), |_| false);
    assert!(!after.contains("notifications/tasks/status"), "{after}");
    let bob_heard = read_until(&mut bob_stream, Duration::from_millis(500), |_| false);
    assert!(!bob_heard.contains("tasks/status"), "{bob_heard}");
    assert!(!bob_heard.contains(&task_id), "{bob_heard}");
}

/// Whether a process is gone: no /proc entry, or a zombie waiting for its reaper.
fn process_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state == 'Z' || state == 'X'),
    }
}

fn recorded(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn cancelling_a_legacy_call_kills_the_command_tools_process_group() {
    let temp = tempfile::tempdir().expect("temp dir");
    let work = temp.path().to_path_buf();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/linger.sh");
    let config = format!(
        "[builtin]\nsets = []\n\n[[tools]]\nname = \"slow\"\ndescription = \"lingers\"\n\
         command = [{script:?}]\nenv = {{ WORK = {work:?} }}\ntask_policy = \"inline\"\n",
        script = script.to_string_lossy(),
        work = work.to_string_lossy(),
    );
    let server = Server::start(&config);
    let client = Client::connect(&server, "2025-11-25", json!({}));
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "slow", "arguments": {}}});
    let mut headers = client.headers();
    headers.push(("Content-Type", "application/json"));
    headers.push(("Accept", "application/json, text/event-stream"));
    let mut call = open(
        &server,
        &server.raw_request("POST", "/mcp", &headers, body.to_string().as_bytes()),
    );
    let started = common::poll_until(Duration::from_secs(20), || {
        let children = recorded(&work.join("children"));
        let grandchildren = recorded(&work.join("grandchildren"));
        (!children.is_empty() && !grandchildren.is_empty())
            .then(|| [children, grandchildren].concat())
    })
    .expect("the tool started its processes");
    assert!(started.iter().all(|pid| !process_gone(pid)));
    let cancel = client.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 9, "reason": "test"}}),
    );
    assert_eq!(cancel.status, 202);
    for pid in &started {
        assert!(
            common::poll_until(Duration::from_secs(20), || process_gone(pid).then_some(()))
                .is_some(),
            "process {pid} survived the cancellation"
        );
    }
    // The cancelled request gets no JSON-RPC response.
    let rest = read_until(&mut call, Duration::from_secs(5), |_| false);
    assert!(!rest.contains("\"id\":9"), "{rest}");
    assert_eq!(client.request("ping", json!({})).result(), json!({}));
}

#[test]
fn legacy_tasks_come_from_the_same_store_and_survive_a_new_session() {
    let server = Server::start(CONFORMANCE);
    // A client that speaks 2025-11-25 tasks (so the task bridge leaves it alone).
    let capabilities =
        json!({"elicitation": {}, "tasks": {"requests": {"elicitation": {"create": {}}}}});
    let client = Client::connect(&server, "2025-11-25", capabilities);
    let tools = client.request("tools/list", json!({})).result();
    let support = |name: &str| {
        tools["tools"]
            .as_array()
            .and_then(|all| all.iter().find(|tool| tool["name"] == name))
            .map(|tool| tool["execution"]["taskSupport"].clone())
    };
    assert_eq!(support("confirm_delete"), Some(json!("required")));
    assert_eq!(support("slow_compute"), Some(json!("optional")));
    assert_eq!(support("test_simple_text"), Some(json!("forbidden")));
    let untasked = client.request(
        "tools/call",
        json!({"name": "confirm_delete", "arguments": {"filename": "a.txt"}}),
    );
    assert_eq!(untasked.json()["error"]["code"], -32601);
    let forbidden = client.request(
        "tools/call",
        json!({"name": "test_simple_text", "task": {}}),
    );
    assert_eq!(forbidden.json()["error"]["code"], -32601);

    let created = client
        .request(
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"filename": "a.txt"}, "task": {"ttl": 60000}}),
        )
        .result();
    let task_id = created["task"]["taskId"]
        .as_str()
        .expect("taskId")
        .to_owned();
    assert_eq!(created["task"]["status"], "working");
    assert!(created["task"]["createdAt"].is_string() && created["task"].get("ttl").is_some());

    // tasks/result blocks, asking for the task's input on its own stream.
    let body = json!({"jsonrpc": "2.0", "id": 11, "method": "tasks/result", "params": {"taskId": task_id}});
    let mut headers = client.headers();
    headers.push(("Content-Type", "application/json"));
    headers.push(("Accept", "application/json, text/event-stream"));
    let mut waiting = open(
        &server,
        &server.raw_request("POST", "/mcp", &headers, body.to_string().as_bytes()),
    );
    let asked = read_until(&mut waiting, Duration::from_secs(20), |t| {
        t.contains("elicitation/create")
    });
    let question = data_messages(&asked)
        .into_iter()
        .find(|m| m["method"] == "elicitation/create")
        .unwrap_or_else(|| panic!("no elicitation in {asked}"));
    assert_eq!(
        question["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id
    );
    let answer = client.send(&json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"action": "accept", "content": {"confirm": true}}}));
    assert_eq!(answer.status, 202);
    let rest = read_until(&mut waiting, Duration::from_secs(20), |t| {
        t.contains("\"id\":11")
    });
    let result = data_messages(&rest)
        .into_iter()
        .find(|m| m["id"] == 11)
        .unwrap_or_else(|| panic!("no tasks/result answer in {rest}"));
    assert_eq!(
        result["result"]["content"][0]["text"], "Deleted a.txt",
        "{result}"
    );
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task_id
    );
    assert!(result["result"].get("resultType").is_none());

    // A new session of the same identity finds the task; so does a 2026 client.
    let again = Client::connect(&server, "2025-11-25", json!({}));
    let task = again
        .request("tasks/get", json!({"taskId": task_id}))
        .result();
    assert_eq!(task["status"], "completed");
    let listed = again.request("tasks/list", json!({})).result();
    assert!(listed["tasks"]
        .as_array()
        .is_some_and(|all| all.iter().any(|t| t["taskId"] == task_id)));
    let terminal = again.request("tasks/cancel", json!({"taskId": task_id}));
    assert_eq!(terminal.json()["error"]["code"], -32602);
    let modern = server
        .request(
            "tasks/get",
            json!({"taskId": task_id}),
            common::tasks_caps(),
        )
        .result();
    assert_eq!(modern["status"], "completed");

    // Cancelling a running task answers the cancelled Task.
    let slow = again
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 30}, "task": {}}),
        )
        .result();
    let slow_id = slow["task"]["taskId"].as_str().expect("taskId").to_owned();
    let cancelled = again
        .request("tasks/cancel", json!({"taskId": slow_id}))
        .result();
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    // An older session has no tasks.
    let old = Client::connect(&server, "2025-06-18", json!({}));
    assert_eq!(
        old.request("tasks/get", json!({"taskId": task_id})).json()["error"]["code"],
        -32601
    );
}

#[test]
fn the_session_maximum_is_configurable_and_refuses_with_503_when_no_session_is_idle() {
    let server = Server::start(&format!("{CONFORMANCE}\n[sessions]\nmax_sessions = 1\n"));
    let first = Client::connect(&server, "2025-11-25", json!({}));
    // Its GET stream is open: ending it would cut off its client.
    let stream = first.open_get_stream();
    let refused = post(&server, &[], &initialize_body("2025-11-25", json!({})));
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert!(refused.header("mcp-session-id").is_none());
    // Ending a session makes room again.
    drop(stream);
    assert_eq!(first.delete().status, 200);
    let second = Client::connect(&server, "2025-11-25", json!({}));
    assert_eq!(second.request("ping", json!({})).result(), json!({}));
    let metrics = server.get("/metrics").text();
    assert!(
        metrics.contains("mcp_taskd_sessions_refused_total 1"),
        "{metrics}"
    );
}

/// The quota refusals on /metrics of `quota`.
fn quota_refusals(server: &Server, quota: &str) -> u64 {
    let prefix = format!("mcp_taskd_quota_refusals_total{{quota=\"{quota}\"}} ");
    server
        .get("/metrics")
        .text()
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str())?.trim().parse().ok())
        .expect("the quota's series")
}

#[test]
fn a_flood_of_initialize_ends_the_flooders_own_sessions_and_never_locks_out_another() {
    use crate::fair_share::token;
    // Room for 8 sessions: the flooder may have 3; "vip" has its own share of 5.
    let server = Server::start(&format!(
        "{CONFORMANCE}\n[sessions]\nmax_sessions = 8\nmax_sessions_per_identity = 3\n{}{}{}",
        token("flood", ""),
        token("other", ""),
        token("vip", "max_sessions = 5"),
    ));
    let flood = |n: usize| -> Vec<Client<'_>> {
        (0..n)
            .map(|_| Client::connect_as(&server, "2025-11-25", json!({}), Some("flood-token")))
            .collect()
    };
    let flooded = flood(50);
    // The flooder keeps its 3 most recent sessions; its older ones answer 404.
    let alive = flooded
        .iter()
        .filter(|client| client.request("ping", json!({})).status == 200)
        .count();
    assert_eq!(alive, 3);
    assert_eq!(flooded[0].request("ping", json!({})).status, 404);
    assert_eq!(quota_refusals(&server, "sessions"), 47);
    // Another identity gets a session at once, and keeps it while the flood goes on.
    let other = Client::connect_as(&server, "2025-11-25", json!({}), Some("other-token"));
    let _more = flood(50);
    assert_eq!(other.request("ping", json!({})).result(), json!({}));
    // A token's own share: five sessions, all kept.
    let vips: Vec<Client<'_>> = (0..5)
        .map(|_| Client::connect_as(&server, "2025-11-25", json!({}), Some("vip-token")))
        .collect();
    for vip in &vips {
        assert_eq!(vip.request("ping", json!({})).status, 200);
    }
    // 3 + 1 + 5 is more than the table's 8: the least recently used idle session (the
    // flooder's) ended to make room, and nobody was refused.
    assert_eq!(other.request("ping", json!({})).result(), json!({}));
    let metrics = server.get("/metrics").text();
    assert!(
        metrics.contains("mcp_taskd_sessions_idle_ended_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mcp_taskd_sessions_refused_total 0"),
        "{metrics}"
    );
}

#[test]
fn tasks_of_either_era_survive_a_crash_and_are_found_by_both() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut server = Server::start_in(dir.path(), CONFORMANCE);
    let slow = json!({"seconds": 60});
    let legacy_id = {
        let client = Client::connect(&server, "2025-11-25", json!({}));
        let created = client
            .request(
                "tools/call",
                json!({"name": "slow_compute", "arguments": slow, "task": {}}),
            )
            .result();
        created["task"]["taskId"]
            .as_str()
            .expect("taskId")
            .to_owned()
    };
    let modern_id = common::tasks::create(&server, "slow_compute", slow, &[]);
    server.kill9();

    let server = Server::start_in(dir.path(), CONFORMANCE);
    // A fresh session (the old one died with the process) sees both as 2025-11-25 Tasks.
    let client = Client::connect(&server, "2025-11-25", json!({}));
    for task_id in [&legacy_id, &modern_id] {
        let task = client
            .request("tasks/get", json!({"taskId": task_id}))
            .result();
        assert_eq!(task["taskId"], task_id.as_str(), "{task}");
        assert_eq!(task["status"], "working", "{task}");
        assert!(
            task.get("ttl").is_some() && task.get("ttlMs").is_none(),
            "{task}"
        );
    }
    let listed = client.request("tasks/list", json!({})).result();
    let listed_ids: Vec<&str> = listed["tasks"]
        .as_array()
        .map(|all| all.iter().filter_map(|t| t["taskId"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        listed_ids.contains(&legacy_id.as_str()) && listed_ids.contains(&modern_id.as_str()),
        "{listed}"
    );
    // A 2026 client sees both as DetailedTasks.
    for task_id in [&legacy_id, &modern_id] {
        let task = common::tasks::get(&server, task_id);
        assert_eq!(task["status"], "working", "{task}");
        assert!(task.get("ttlMs").is_some(), "{task}");
    }
}

#[test]
fn a_bridged_task_asks_a_legacy_client_through_a_server_to_client_request() {
    // The task bridge (on by default) runs approve_deployment as a task for a session
    // that does not speak tasks; its question reaches the client on the call's stream.
    let server = Server::start(ALL_SETS);
    let client = Client::connect(&server, "2025-11-25", json!({"elicitation": {}}));
    let body = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {
        "name": "approve_deployment", "arguments": {"service": "api", "version": "9"}}});
    let (mut call, question) = call_until_elicited(&server, &client, &body);
    assert_eq!(question["params"]["message"], "Deploy api@9 to production?");
    let task_id = question["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("the request names its task: {question}"))
        .to_owned();
    let answer = client.send(&json!({"jsonrpc": "2.0", "id": question["id"], "result": {
        "action": "accept", "content": {"approve": true}}}));
    assert_eq!(answer.status, 202, "{}", answer.text());
    let rest = read_until(&mut call, Duration::from_secs(15), |text| {
        text.contains("\"id\":6")
    });
    let result = data_messages(&rest)
        .into_iter()
        .find(|m| m["id"] == 6)
        .unwrap_or_else(|| panic!("no result in {rest}"));
    assert_eq!(
        result["result"]["content"][0]["text"], "Deployed api@9.",
        "{result}"
    );
    // The task is durable: task_status finds it completed.
    let status = client
        .request(
            "tools/call",
            json!({"name": "task_status", "arguments": {"taskId": task_id}}),
        )
        .result();
    assert_eq!(status["content"][0]["text"], "Deployed api@9.", "{status}");
}

#[test]
fn a_legacy_client_that_can_answer_is_sent_to_task_wait_which_asks_it() {
    // A 2026 client without a channel for the question leaves the task waiting...
    let server = Server::start(ALL_SETS);
    let handle = server
        .call_tool(
            "approve_deployment",
            json!({"service": "db", "version": "3"}),
            json!({"elicitation": {}}),
        )
        .result();
    assert_eq!(
        handle["structuredContent"]["status"], "input_required",
        "{handle}"
    );
    let task_id = handle["structuredContent"]["taskId"]
        .as_str()
        .expect("taskId")
        .to_owned();
    // ...and a legacy session of the same identity that declared elicitation is told
    // that task_wait will put the question to its person, which it then does.
    let client = Client::connect(&server, "2025-06-18", json!({"elicitation": {}}));
    let status = client
        .request(
            "tools/call",
            json!({"name": "task_status", "arguments": {"taskId": task_id}}),
        )
        .result();
    let text = status["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("Call task_wait"), "{status}");
    let body = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "task_wait", "arguments": {"taskId": task_id}}});
    let (mut call, question) = call_until_elicited(&server, &client, &body);
    let answer = client.send(&json!({"jsonrpc": "2.0", "id": question["id"], "result": {
        "action": "decline"}}));
    assert_eq!(answer.status, 202, "{}", answer.text());
    let rest = read_until(&mut call, Duration::from_secs(15), |text| {
        text.contains("\"id\":8")
    });
    let result = data_messages(&rest)
        .into_iter()
        .find(|m| m["id"] == 8)
        .unwrap_or_else(|| panic!("no result in {rest}"));
    assert_eq!(
        result["result"]["content"][0]["text"],
        "Deployment of db@3 was not approved; nothing changed.",
        "{result}"
    );
}

#[test]
fn a_legacy_calls_trace_context_reaches_its_command_tool() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/modes.py");
    let work = tempfile::tempdir().expect("temp dir");
    let config = format!(
        "[builtin]\nsets = []\n\n[[tools]]\nname = \"modes\"\ndescription = \"modes.py\"\n\
         command = [\"python3\", {script:?}]\nenv = {{ WORK = {work:?} }}\n\
         input_schema = {{ type = \"object\", properties = {{ mode = {{ type = \"string\" }} }} }}\n",
        script = script.to_string_lossy(),
        work = work.path().to_string_lossy(),
    );
    let server = Server::start(&config);
    let client = Client::connect(&server, "2025-06-18", json!({}));
    let traced = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";
    let from_meta = client
        .request(
            "tools/call",
            json!({"name": "modes", "arguments": {"mode": "env"},
                   "_meta": {"traceparent": traced, "tracestate": "v=1"}}),
        )
        .result();
    assert_eq!(from_meta["structuredContent"]["TRACEPARENT"], traced);
    assert_eq!(from_meta["structuredContent"]["TRACESTATE"], "v=1");
    // The headers, when `_meta` carries none (a call without any `_meta`).
    let header = "00-11111111111111111111111111111111-2222222222222222-01";
    let mut headers = client.headers();
    headers.push(("traceparent", header));
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "modes", "arguments": {"mode": "env"}}});
    let from_header = post(&server, &headers, &body).result();
    assert_eq!(from_header["structuredContent"]["TRACEPARENT"], header);
}

/// Two identities' tokens (as in the status test above) and the conformance tools.
fn alice_and_bob() -> String {
    format!(
        "[[auth.tokens]]\nprincipal = \"alice\"\ntenant = \"t1\"\n\
         sha256 = \"928d604f1562e969a1c25cedfc0469d0739378654af09e5aab506546185595f2\"\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntenant = \"t1\"\n\
         sha256 = \"7a15a809fd0dc8c1e1aa27f1c41ea47d18b52b037991be9b90a3dcf6403cdd0e\"\n{CONFORMANCE}"
    )
}

#[test]
fn a_session_outlives_a_restart_and_stays_its_identitys() {
    const ALICE: &str = "legacy-token-alice";
    const BOB: &str = "legacy-token-bob";
    let dir = tempfile::tempdir().expect("temp dir");
    let config = alice_and_bob();
    let mut server = Server::start_in(dir.path(), &config);
    let (session, version, task_id) = {
        let alice = Client::connect_as(&server, "2025-11-25", json!({}), Some(ALICE));
        let level = alice.request("logging/setLevel", json!({"level": "error"}));
        assert_eq!(level.result(), json!({}));
        let created = alice
            .request(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 2}, "task": {}}),
            )
            .result();
        let task_id = created["task"]["taskId"].as_str().expect("taskId");
        (
            alice.session.clone(),
            alice.version.clone(),
            task_id.to_owned(),
        )
    };
    // As `systemctl restart` does: SIGTERM, then the same data dir.
    assert!(server.terminate(Duration::from_secs(20)), "stopped");
    let server = Server::start_in(dir.path(), &config);
    let as_client = |session: &str, token: &str| Client {
        server: &server,
        session: session.to_owned(),
        version: version.clone(),
        authorization: Some(format!("Bearer {token}")),
    };
    let alice = as_client(&session, ALICE);

    // The same session serves on: a call, and its GET stream, which starts with the
    // current status of the task it follows and then hears it complete.
    assert_eq!(alice.request("ping", json!({})).result(), json!({}));
    // Read from the first byte: the replay may arrive with the response's head.
    let mut headers = alice.headers();
    headers.push(("Accept", "text/event-stream"));
    let mut stream = open(&server, &server.raw_request("GET", "/mcp", &headers, b""));
    let heard = read_until(&mut stream, Duration::from_secs(20), |t| {
        t.contains("\"completed\"")
    });
    assert!(heard.starts_with("HTTP/1.1 200"), "{heard}");
    let statuses: Vec<Value> = data_messages(&heard)
        .into_iter()
        .filter(|m| m["method"] == "notifications/tasks/status")
        .collect();
    assert!(
        statuses
            .iter()
            .all(|m| m["params"]["taskId"] == task_id.as_str()),
        "{heard}"
    );
    assert_eq!(
        statuses.last().map(|m| m["params"]["status"].clone()),
        Some(json!("completed")),
        "{heard}"
    );
    let task = alice
        .request("tasks/get", json!({"taskId": task_id}))
        .result();
    assert_eq!(task["status"], "completed", "{task}");

    // Another identity presenting it, and an unknown id, get the same 404.
    let foreign = as_client(&session, BOB).request("ping", json!({}));
    let unknown =
        as_client("6f1c2c0e-5d2a-4bbf-9a51-1d4f0e0c9a77", ALICE).request("ping", json!({}));
    assert_eq!(foreign.status, 404, "{}", foreign.text());
    assert_eq!(
        (foreign.status, foreign.text()),
        (unknown.status, unknown.text())
    );
    // And the foreign attempt changed nothing: the session is still alice's.
    assert_eq!(alice.request("ping", json!({})).result(), json!({}));

    // DELETE ends it for good.
    assert_eq!(alice.delete().status, 200);
    assert_eq!(alice.request("ping", json!({})).status, 404);
}

#[test]
fn a_session_survives_kill_9_and_a_deleted_one_stays_deleted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut server = Server::start_in(dir.path(), CONFORMANCE);
    let (kept, deleted, version) = {
        let kept = Client::connect(&server, "2025-06-18", json!({}));
        let deleted = Client::connect(&server, "2025-06-18", json!({}));
        assert_eq!(deleted.delete().status, 200);
        (
            kept.session.clone(),
            deleted.session.clone(),
            kept.version.clone(),
        )
    };
    server.kill9();
    let server = Server::start_in(dir.path(), CONFORMANCE);
    let client = |session: &str| Client {
        server: &server,
        session: session.to_owned(),
        version: version.clone(),
        authorization: None,
    };
    let listed = client(&kept).request("tools/list", json!({}));
    assert!(listed.result()["tools"].is_array(), "{}", listed.text());
    assert_eq!(client(&deleted).request("ping", json!({})).status, 404);
}

#[test]
fn a_question_asked_before_a_restart_is_asked_again_after_it_and_the_answer_taken() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut server = Server::start_in(dir.path(), CONFORMANCE);
    let capabilities =
        json!({"elicitation": {}, "tasks": {"requests": {"elicitation": {"create": {}}}}});
    let (session, version, task_id) = {
        let client = Client::connect(&server, "2025-11-25", capabilities);
        let created = client
            .request(
                "tools/call",
                json!({"name": "confirm_delete", "arguments": {"filename": "b.txt"}, "task": {}}),
            )
            .result();
        let task_id = created["task"]["taskId"].as_str().expect("taskId");
        (
            client.session.clone(),
            client.version.clone(),
            task_id.to_owned(),
        )
    };
    // The task waits for its answer when the server restarts.
    let waiting = poll_until_status(&server, &session, &version, &task_id, "input_required");
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    assert!(server.terminate(Duration::from_secs(20)), "stopped");
    let server = Server::start_in(dir.path(), CONFORMANCE);
    let client = Client {
        server: &server,
        session,
        version,
        authorization: None,
    };

    // The same session's next tasks/result asks again, and takes the answer.
    let body = json!({"jsonrpc": "2.0", "id": 21, "method": "tasks/result", "params": {"taskId": task_id}});
    let mut headers = client.headers();
    headers.push(("Content-Type", "application/json"));
    headers.push(("Accept", "application/json, text/event-stream"));
    let mut stream = open(
        &server,
        &server.raw_request("POST", "/mcp", &headers, body.to_string().as_bytes()),
    );
    let asked = read_until(&mut stream, Duration::from_secs(20), |t| {
        t.contains("elicitation/create")
    });
    let question = data_messages(&asked)
        .into_iter()
        .find(|m| m["method"] == "elicitation/create")
        .unwrap_or_else(|| panic!("no elicitation in {asked}"));
    let answer = client.send(&json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"action": "accept", "content": {"confirm": true}}}));
    assert_eq!(answer.status, 202);
    let rest = read_until(&mut stream, Duration::from_secs(20), |t| {
        t.contains("\"id\":21")
    });
    let result = data_messages(&rest)
        .into_iter()
        .find(|m| m["id"] == 21)
        .unwrap_or_else(|| panic!("no tasks/result answer in {rest}"));
    assert_eq!(
        result["result"]["content"][0]["text"], "Deleted b.txt",
        "{result}"
    );
}

/// Polls `tasks/get` in session `session` until the task is `status`.
fn poll_until_status(
    server: &Server,
    session: &str,
    version: &str,
    task_id: &str,
    status: &str,
) -> Value {
    let client = Client {
        server,
        session: session.to_owned(),
        version: version.to_owned(),
        authorization: None,
    };
    common::poll_until(Duration::from_secs(20), || {
        let task = client
            .request("tasks/get", json!({"taskId": task_id}))
            .result();
        (task["status"] == status).then_some(task)
    })
    .unwrap_or_else(|| panic!("task {task_id} never became {status}"))
}

#[test]
fn a_legacy_session_reads_a_tasks_output_and_is_told_to_read_on_instead_of_subscribing() {
    let server = Server::start(CONFORMANCE);
    let capabilities = json!({"tasks": {"requests": {"elicitation": {"create": {}}}}});
    let client = Client::connect(&server, "2025-11-25", capabilities);
    let created = client
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0.3}, "task": {}}),
        )
        .result();
    let task_id = created["task"]["taskId"].as_str().expect("taskId");
    let uri = format!("mcp-taskd://tasks/{task_id}/output");
    let templates = client
        .request("resources/templates/list", json!({}))
        .result();
    assert_eq!(
        templates["resourceTemplates"][0]["uriTemplate"],
        "mcp-taskd://tasks/{taskId}/output"
    );
    let text = poll_until(Duration::from_secs(20), || {
        let read = client
            .request("resources/read", json!({"uri": uri}))
            .result();
        let contents = &read["contents"][0];
        let meta = &contents["_meta"]["dev.mcp-taskd/output"];
        (meta["final"] == true).then(|| contents["text"].as_str().unwrap_or("").to_owned())
    })
    .expect("the output is final once the task ended");
    assert!(!text.is_empty(), "slow_compute's progress is its output");
    let refused = client.request("resources/subscribe", json!({"uri": uri}));
    let error = &refused.json()["error"];
    assert_eq!(error["code"], -32602, "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("read it again")),
        "{error}"
    );
}
