//! `mcp-taskd stdio`, as a desktop or IDE host runs it: both eras over stdin/stdout,
//! nothing but protocol on stdout, durable tasks across a crash and a graceful stop,
//! the refusal of a data dir a server holds, the `--connect` relay, and task questions
//! put to a legacy host as server-to-client requests (with tasks, and through the bridge).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::stdio::{run_to_end, stdio_command, Stdio};
use crate::common::{poll_until, postgres, tasks, tasks_caps, Server};

const LIMIT: Duration = Duration::from_secs(20);

/// The conformance (slow_compute), demo and testing tools, short leases and a short shutdown grace.
const TESTING: &str = "[builtin]\nsets = [\"conformance\", \"demo\", \"testing\"]\n\
    [workers]\nthreads = 2\nlease_ms = 1000\njanitor_interval_ms = 50\nshutdown_grace_ms = 200\n";

fn legacy_init(stdio: &mut Stdio, id: u64) -> Value {
    let answer = stdio.request(
        id,
        "initialize",
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "stdio-test", "version": "1"},
        }),
    );
    stdio.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    answer
}

fn task_status(stdio: &mut Stdio, id: u64, task_id: &str) -> Value {
    stdio.modern(id, "tasks/get", json!({"taskId": task_id}), tasks_caps())
}

/// Polls `tasks/get` over stdio until the task is `status`.
fn wait_status(stdio: &mut Stdio, task_id: &str, status: &str) -> Value {
    let mut id = 1000;
    let mut last = Value::Null;
    poll_until(LIMIT, || {
        id += 1;
        last = task_status(stdio, id, task_id);
        (last["status"] == status).then(|| last.clone())
    })
    .unwrap_or_else(|| panic!("task never became {status}: {last}"))
}

fn create_task(stdio: &mut Stdio, id: u64, tool: &str, arguments: Value) -> String {
    let created = stdio.modern(
        id,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
        tasks_caps(),
    );
    assert_eq!(created["resultType"], "task", "{created}");
    created["taskId"].as_str().expect("taskId").to_owned()
}

#[test]
fn both_eras_answer_over_stdio_and_stdout_carries_only_their_messages() {
    let dir = tempfile::tempdir().unwrap();
    let mut stdio = Stdio::start_in(dir.path(), TESTING);
    // Modern: the probe a dual-era client sends first, then a stateless call.
    let discovered = stdio.modern(1, "server/discover", json!({}), json!({}));
    assert!(discovered["supportedVersions"]
        .as_array()
        .unwrap()
        .contains(&json!(crate::common::VERSION)));
    let echoed = stdio.modern(
        2,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "over stdio"}}),
        json!({}),
    );
    assert_eq!(echoed["content"][0]["text"], "over stdio");
    // A request without modern _meta before initialize names both ways in.
    let refused = stdio.request(3, "tools/list", json!({}));
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("initialize") && message.contains("_meta"),
        "{refused}"
    );

    // Legacy: the handshake opens the connection's session.
    let init = legacy_init(&mut stdio, 4);
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    assert_eq!(stdio.request(5, "ping", json!({}))["result"], json!({}));
    let listed = stdio.request(6, "tools/list", json!({}));
    let tools = listed["result"]["tools"].as_array().unwrap();
    assert!(tools.iter().any(|tool| tool["name"] == "echo"), "{listed}");
    assert!(
        listed["result"].get("resultType").is_none(),
        "legacy results carry no 2026 fields: {listed}"
    );
    // A legacy 2025-11-25 task, created and read in the session.
    let created = stdio.request(
        7,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 0}, "task": {}}),
    );
    let task_id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let result = stdio.request(8, "tasks/result", json!({"taskId": task_id}));
    assert!(result["result"]["content"].is_array(), "{result}");
    // Bad input gets a JSON-RPC error line, never anything else.
    stdio.send(&json!("not an object"));
    stdio.close_stdin();
    assert!(stdio
        .wait_exit(LIMIT)
        .is_some_and(|status| status.success()));
    let rest = stdio.drain_stdout();
    assert!(
        rest.iter()
            .any(|message| message["error"]["code"] == -32600),
        "{rest:?}"
    );
}

#[test]
fn a_long_inline_call_does_not_hold_up_other_requests() {
    let dir = tempfile::tempdir().unwrap();
    let mut stdio = Stdio::start_in(dir.path(), TESTING);
    // generate_report runs inline for a client without the Tasks extension: 4 sections
    // take about 2.4 s.
    stdio.send(&json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "generate_report", "arguments": {"topic": "t", "sections": 4},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": crate::common::VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }));
    stdio.modern(2, "server/discover", json!({}), json!({}));
    assert!(
        stdio.seen().iter().all(|message| message["id"] != 1),
        "the discovery was answered while the call still ran"
    );
    let report = stdio.answer(1);
    assert_eq!(
        report["result"]["structuredContent"]["topic"], "t",
        "{report}"
    );
}

#[test]
fn a_task_survives_kill_9_of_the_stdio_process_and_completes_on_the_next_launch() {
    let dir = tempfile::tempdir().unwrap();
    let mut stdio = Stdio::start_in(dir.path(), TESTING);
    let task_id = create_task(&mut stdio, 1, "slow_compute", json!({"seconds": 1.5}));
    wait_status_message(&mut stdio, &task_id, "computing");
    stdio.kill9();

    let mut stdio = Stdio::start_in(dir.path(), TESTING);
    let task = wait_status(&mut stdio, &task_id, "completed");
    assert!(
        task["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|text| text.contains("done after")),
        "{task}"
    );
}

/// Polls `tasks/get` until the task's statusMessage is `message` (a worker runs it).
fn wait_status_message(stdio: &mut Stdio, task_id: &str, message: &str) {
    let mut id = 500;
    poll_until(LIMIT, || {
        id += 1;
        (task_status(stdio, id, task_id)["statusMessage"] == message).then_some(())
    })
    .unwrap_or_else(|| panic!("the task never said {message}"));
}

fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scripts")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn end_of_stdin_stops_gracefully_and_the_running_attempt_is_requeued_uncounted() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    // restart.sh: the first run keeps going (and records "task:attempt"); later runs
    // finish at once.
    let config = format!(
        "[builtin]\nsets = []\n[workers]\nshutdown_grace_ms = 200\n\
         [[tools]]\nname = \"restartable\"\ndescription = \"restart.sh\"\n\
         command = [{script:?}]\nenv = {{ WORK = {work:?} }}\ntask_policy = \"required\"\n",
        script = script("restart.sh"),
        work = work.to_string_lossy(),
    );
    let mut stdio = Stdio::start_in(dir.path(), &config);
    let task_id = create_task(&mut stdio, 1, "restartable", json!({}));
    poll_until(LIMIT, || {
        (!lines(&work.join("runs")).is_empty()).then_some(())
    })
    .expect("the first run started");
    stdio.close_stdin();
    let status = stdio.wait_exit(LIMIT).expect("exits at end of input");
    assert!(status.success(), "a graceful stop: {status}");

    let mut stdio = Stdio::start_in(dir.path(), &config);
    let task = wait_status(&mut stdio, &task_id, "completed");
    assert_eq!(task["result"]["content"][0]["text"], "finished on run 2");
    assert_eq!(
        lines(&work.join("runs")),
        vec![format!("{task_id}:1"), format!("{task_id}:1")],
        "the released attempt ran again as attempt 1"
    );
}

#[test]
fn sigterm_sigint_and_sighup_stop_it_gracefully_while_stdin_is_open() {
    let dir = tempfile::tempdir().unwrap();
    for signal in ["TERM", "INT", "HUP"] {
        let mut stdio = Stdio::start_in(dir.path(), TESTING);
        stdio.modern(1, "server/discover", json!({}), json!({}));
        stdio.signal(signal);
        let status = stdio.wait_exit(LIMIT).expect("exits on the signal");
        assert!(status.success(), "SIG{signal}: {status}");
    }
    // The relay too, ending its legacy session on the way out.
    let served = tempfile::tempdir().unwrap();
    let server = Server::start_in(served.path(), TESTING);
    let mut relay = Stdio::connect(&url(&server), None);
    legacy_init(&mut relay, 1);
    relay.signal("TERM");
    let status = relay.wait_exit(LIMIT).expect("the relay exits on SIGTERM");
    assert!(status.success(), "relay: {status}");
}

#[test]
fn a_data_dir_held_by_a_running_server_is_refused_in_one_line_suggesting_connect() {
    if postgres::sqlite_only(
        "the exclusive lock is on tasks.db; PostgreSQL nodes share their database",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let _server = Server::start_in(dir.path(), TESTING);
    let output = run_to_end(stdio_command(dir.path(), TESTING));
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "nothing on stdout");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(
        lines[0].contains("in use") && lines[0].contains("--connect http://"),
        "{stderr}"
    );
}

const ALICE: &str = "alice-token";

/// The testing tools behind a token for alice (digest of "alice-token").
fn with_alice() -> String {
    format!(
        "{TESTING}[[auth.tokens]]\nprincipal = \"alice\"\ntenant = \"a\"\n\
         sha256 = \"9c220f200955d76c0a38d308225e0ef10c5f971acaf2f8d1d8f732affa5bd1dc\"\n"
    )
}

fn token_file(dir: &Path, token: &str) -> PathBuf {
    let path = dir.join(format!("{token}.txt"));
    std::fs::write(&path, format!("{token}\n")).unwrap();
    path
}

fn url(server: &Server) -> String {
    format!("http://{}/mcp", server.addr)
}

#[test]
fn the_relay_shares_tasks_with_direct_http_clients_of_the_same_identity() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(dir.path(), &with_alice());
    let token = token_file(dir.path(), ALICE);
    let bearer = format!("Bearer {ALICE}");
    let mut relay = Stdio::connect(&url(&server), Some(&token));

    // Created through the relay, found over HTTP with alice's token.
    let relayed = create_task(&mut relay, 1, "slow_compute", json!({"seconds": 0}));
    let found = tasks::get_raw(&server, &relayed, &[("Authorization", &bearer)]).result();
    assert_eq!(found["taskId"], relayed.as_str());
    // Created over HTTP, found through the relay.
    let direct = tasks::create(
        &server,
        "slow_compute",
        json!({"seconds": 0}),
        &[("Authorization", &bearer)],
    );
    let task = wait_status(&mut relay, &direct, "completed");
    assert_eq!(task["taskId"], direct.as_str());
    // An `x-mcp-header` argument travels in its Mcp-Param-* header too (Base64 here).
    let region = relay.modern(
        20,
        "tools/call",
        json!({"name": "test_custom_header", "arguments": {"region": "Zürich"}}),
        json!({}),
    );
    assert_eq!(region["content"][0]["text"], "Region: Zürich", "{region}");

    // The legacy era through the relay: a session, its requests, its task list.
    let init = legacy_init(&mut relay, 2);
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    assert_eq!(relay.request(3, "ping", json!({}))["result"], json!({}));
    let listed = relay.request(4, "tasks/list", json!({}));
    let ids: Vec<&str> = listed["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|task| task["taskId"].as_str())
        .collect();
    assert!(
        ids.contains(&relayed.as_str()) && ids.contains(&direct.as_str()),
        "{listed}"
    );
    relay.close_stdin();
    assert!(relay
        .wait_exit(LIMIT)
        .is_some_and(|status| status.success()));
}

#[test]
fn the_relay_says_in_one_line_when_the_server_is_unreachable_or_refuses_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(dir.path(), &with_alice());
    let wrong = token_file(dir.path(), "wrong-token");
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let cases = [
        (format!("http://{closed}/mcp"), None, "cannot reach"),
        (url(&server), Some(&wrong), "refused the token"),
        (url(&server), None, "refused"),
    ];
    for (target, token, expected) in cases {
        let mut command = crate::common::binary();
        command.arg("stdio").arg("--connect").arg(&target);
        if let Some(token) = token {
            command.arg("--token-file").arg(token);
        }
        let output = run_to_end(command);
        assert!(!output.status.success(), "{target}");
        assert!(output.stdout.is_empty(), "nothing on stdout");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
}

/// A legacy session's task asks for approval: the server's `elicitation/create` request
/// arrives as a line, the answer goes back as a line, and `tasks/result` completes.
fn approve_through(stdio: &mut Stdio) {
    let init = stdio.request(
        1,
        "initialize",
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "stdio-test", "version": "1"},
        }),
    );
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    stdio.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let created = stdio.request(
        2,
        "tools/call",
        json!({"name": "approve_deployment", "arguments": {"service": "api", "version": "1.4.0"}, "task": {}}),
    );
    let task_id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    stdio.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": task_id}}));
    let asked = stdio.wait_for(|message| message["method"] == "elicitation/create");
    assert!(
        asked["params"]["message"]
            .as_str()
            .unwrap()
            .contains("api@1.4.0"),
        "{asked}"
    );
    stdio.send(&json!({
        "jsonrpc": "2.0", "id": asked["id"],
        "result": {"action": "accept", "content": {"approve": true}},
    }));
    let result = stdio.answer(3);
    assert_eq!(
        result["result"]["content"][0]["text"], "Deployed api@1.4.0.",
        "{result}"
    );
}

/// Runs `flow` on a local `stdio` server, then on a relay to a running `serve`.
fn locally_and_through_the_relay(flow: fn(&mut Stdio)) {
    let dir = tempfile::tempdir().unwrap();
    flow(&mut Stdio::start_in(dir.path(), TESTING));

    let served = tempfile::tempdir().unwrap();
    let server = Server::start_in(served.path(), TESTING);
    flow(&mut Stdio::connect(&url(&server), None));
}

#[test]
fn a_legacy_task_asks_its_question_over_stdio_and_through_the_relay() {
    locally_and_through_the_relay(approve_through);
}

/// A legacy session that declared elicitation but not tasks calls `approve_deployment`
/// plainly: the task bridge runs it as a durable task, and within the call's inline wait
/// the task's question arrives as an `elicitation/create` line naming the task; the
/// answer goes back as a line, and the call answers the tool's own result.
fn approve_bridged_through(stdio: &mut Stdio) {
    let init = stdio.request(
        1,
        "initialize",
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "stdio-test", "version": "1"},
        }),
    );
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    stdio.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    stdio.send(&json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "approve_deployment", "arguments": {"service": "web", "version": "2.0.1"}},
    }));
    let asked = stdio.wait_for(|message| message["method"] == "elicitation/create");
    assert!(
        asked["params"]["message"]
            .as_str()
            .unwrap()
            .contains("web@2.0.1"),
        "{asked}"
    );
    assert!(
        asked["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"].is_string(),
        "the question names its task: {asked}"
    );
    stdio.send(&json!({
        "jsonrpc": "2.0", "id": asked["id"],
        "result": {"action": "accept", "content": {"approve": true}},
    }));
    let result = stdio.answer(2);
    assert!(
        result["result"].get("task").is_none(),
        "no task for this client: {result}"
    );
    assert_eq!(
        result["result"]["content"][0]["text"], "Deployed web@2.0.1.",
        "{result}"
    );
}

#[test]
fn a_bridged_task_asks_a_legacy_client_that_declared_elicitation_over_stdio_and_the_relay() {
    locally_and_through_the_relay(approve_bridged_through);
}

#[test]
fn a_host_on_the_relay_stays_connected_across_a_restart_and_a_lost_session() {
    let dir = tempfile::tempdir().unwrap();
    let config = with_alice();
    let mut server = Server::start_in(dir.path(), &config);
    let addr = server.addr;
    let token = token_file(dir.path(), ALICE);
    let mut relay = Stdio::connect(&url(&server), Some(&token));
    let init = legacy_init(&mut relay, 1);
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    let started = relay.request(
        2,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 1}, "task": {}}),
    );
    let task_id = started["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {started}"))
        .to_owned();

    // `systemctl restart`: the same port, the same data dir. The session is the store's.
    assert!(server.terminate(LIMIT), "stopped");
    let server = Server::start_in_on(dir.path(), &config, addr);
    assert_eq!(relay.request(3, "ping", json!({}))["result"], json!({}));
    let done = poll_until(LIMIT, || {
        let task = relay.request(4, "tasks/get", json!({"taskId": task_id}));
        (task["result"]["status"] == "completed").then_some(task)
    });
    assert!(
        done.is_some(),
        "the task started before the restart completes"
    );

    // A session the server no longer knows (here: a server on a fresh store): the
    // relay opens a new one with the host's initialize and sends the request again.
    let mut server = server;
    assert!(server.terminate(LIMIT), "stopped");
    let fresh = tempfile::tempdir().unwrap();
    let _server = Server::start_in_on(fresh.path(), &config, addr);
    let listed = relay.request(5, "tools/list", json!({}));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    assert_eq!(relay.request(6, "ping", json!({}))["result"], json!({}));
    relay.close_stdin();
    assert!(relay
        .wait_exit(LIMIT)
        .is_some_and(|status| status.success()));
}

#[test]
fn a_task_wait_whose_answer_breaks_off_in_the_relay_is_asked_again_once_the_server_is_back() {
    // A host (without tasks: bridged task tools) waits on `task_wait` through the relay
    // when the server is killed in the middle of the answer's stream. The relay sends the
    // call again once the server is back, and the host gets the task's result: never
    // silence for a request it sent.
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{TESTING}[tasks]\ninline_wait_ms = 300\n");
    let mut server = Server::start_in(dir.path(), &config);
    let addr = server.addr;
    let mut relay = Stdio::connect(&url(&server), None);
    legacy_init(&mut relay, 1);
    let handle = relay.request(
        2,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 2}}),
    );
    let task_id = handle["result"]["structuredContent"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a handle: {handle}"))
        .to_owned();
    relay.send(
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "task_wait", "arguments": {"taskId": task_id},
        "_meta": {"progressToken": "wait-3"}}}),
    );
    // The answer's stream is open: the server sends the task's progress on it.
    relay.wait_for(|message| {
        message["method"] == "notifications/progress"
            && message["params"]["progressToken"] == "wait-3"
    });
    server.kill9();
    let _server = Server::start_in_on(dir.path(), &config, addr);
    let answer = relay.answer(3);
    assert!(
        answer.get("error").is_none() && answer["result"]["isError"] != true,
        "task_wait's answer after the restart: {answer}"
    );
    // The task (reclaimed at start-up) finishes, and task_wait hands its result over.
    let mut id = 3;
    let done = poll_until(LIMIT, || {
        id += 1;
        let answer = relay.request(
            id,
            "tools/call",
            json!({"name": "task_wait", "arguments": {"taskId": task_id}}),
        );
        answer["result"]["structuredContent"]["taskId"]
            .is_null()
            .then_some(answer)
    });
    let done = done.expect("the task's result through task_wait");
    assert_ne!(done["result"]["isError"], true, "{done}");
}
