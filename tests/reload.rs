//! Reload without a restart, through the real binary: the configuration file is
//! rewritten and re-read, by SIGHUP and by `mcp-taskd reload`, each test once per
//! trigger. Tokens (revoked, rotated, added), tools (added, removed, changed, with
//! attempts running and tasks queued), limits, a refused file, and keys that need a
//! restart.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::common::{poll_until, tasks, tasks_caps, HttpResponse, Listen, Server};

/// How a test asks for the reload.
#[derive(Clone, Copy, Debug)]
enum Trigger {
    Signal,
    Command,
}

/// What a reload answered: for `mcp-taskd reload` its exit status and output; for
/// SIGHUP, the log line that reported the outcome.
struct Outcome {
    ok: bool,
    said: String,
}

fn start(config: &str) -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [("RUST_LOG", std::ffi::OsStr::new("info"))];
    let server = Server::start_in_with_env(&dir.path().join("server"), config, &env);
    // The directory lives as long as the test process; each test has its own.
    std::mem::forget(dir);
    server
}

/// Rewrites the server's file to `config` and reloads it by `trigger`.
fn reload(server: &Server, trigger: Trigger, config: &str) -> Outcome {
    server.rewrite_config(config);
    reload_file(server, trigger)
}

/// Reloads the file as it is now.
fn reload_file(server: &Server, trigger: Trigger) -> Outcome {
    let outcomes = |server: &Server| -> Vec<String> {
        server
            .log_lines()
            .into_iter()
            .filter(|line| line.contains("reloaded ") || line.contains(") refused"))
            .collect()
    };
    match trigger {
        Trigger::Signal => {
            let before = outcomes(server).len();
            server.signal("HUP");
            let line = poll_until(Duration::from_secs(20), || {
                outcomes(server).get(before).cloned()
            })
            .expect("the reload's outcome in the log");
            Outcome {
                ok: line.contains("reloaded "),
                said: line,
            }
        }
        Trigger::Command => {
            let output = crate::common::binary()
                .arg("reload")
                .arg("--config")
                .arg(server.config_path())
                .arg("--data-dir")
                .arg(server.dir.join("data"))
                .output()
                .expect("run mcp-taskd reload");
            Outcome {
                ok: output.status.success(),
                said: format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ),
            }
        }
    }
}

fn digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn token(principal: &str, secret: &str, admin: bool) -> String {
    let roles = if admin { "roles = [\"admin\"]\n" } else { "" };
    format!(
        "[[auth.tokens]]\nprincipal = \"{principal}\"\nsha256 = \"{}\"\n{roles}",
        digest(secret)
    )
}

fn bearer(secret: &str) -> String {
    format!("Bearer {secret}")
}

fn tools_list(server: &Server, secret: &str) -> HttpResponse {
    let authorization = bearer(secret);
    server.request_with(
        "tools/list",
        json!({}),
        json!({}),
        &[("Authorization", authorization.as_str())],
    )
}

/// A legacy session: `initialize` with `secret`; its id.
fn legacy_session(server: &Server, secret: &str) -> String {
    let authorization = bearer(secret);
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "reload-test", "version": "1"}}});
    let response = server.post_raw(
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Authorization", authorization.as_str()),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(response.status, 200, "{}", response.text());
    response
        .header("Mcp-Session-Id")
        .expect("a session id")
        .to_owned()
}

/// A legacy session's call, as `secret`.
fn legacy_call(server: &Server, session: &str, secret: &str, method: &str) -> HttpResponse {
    let authorization = bearer(secret);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {}});
    server.post_raw(
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Authorization", authorization.as_str()),
            ("Mcp-Session-Id", session),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        body.to_string().as_bytes(),
    )
}

/// A legacy session's GET stream, once its head has arrived.
struct GetStream(TcpStream, String);

impl GetStream {
    fn open(server: &Server, session: &str, secret: &str) -> GetStream {
        let authorization = bearer(secret);
        let request = server.raw_request(
            "GET",
            "/mcp",
            &[
                ("Accept", "text/event-stream"),
                ("Authorization", authorization.as_str()),
                ("Mcp-Session-Id", session),
                ("MCP-Protocol-Version", "2025-11-25"),
            ],
            b"",
        );
        let mut stream = TcpStream::connect(server.addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        stream.write_all(&request).expect("write");
        let mut get = GetStream(stream, String::new());
        assert!(get.read_until(Duration::from_secs(5), |t| t.contains("\r\n\r\n")));
        assert!(get.1.starts_with("HTTP/1.1 200"), "{}", get.1);
        get
    }

    /// Reads until `done` holds for all that arrived; false at the deadline or at the
    /// end of the stream (see [`GetStream::ended`]).
    fn read_until(&mut self, limit: Duration, done: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        let mut buffer = [0u8; 8192];
        while !done(&self.1) {
            if Instant::now() >= deadline {
                return false;
            }
            match self.0.read(&mut buffer) {
                Ok(0) => return done(&self.1),
                Ok(n) => self.1.push_str(&String::from_utf8_lossy(&buffer[..n])),
                Err(_) => {}
            }
        }
        true
    }

    /// Whether the server ends the stream within `limit`.
    fn ended(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut buffer = [0u8; 8192];
        while Instant::now() < deadline {
            match self.0.read(&mut buffer) {
                Ok(0) => return true,
                Ok(n) => self.1.push_str(&String::from_utf8_lossy(&buffer[..n])),
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(error) if error.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return true,
            }
        }
        false
    }
}

fn open_listen(server: &Server, secret: &str) -> Listen {
    let authorization = bearer(secret);
    let mut listen = Listen::open(
        server,
        json!({"toolsListChanged": true}),
        json!({}),
        &[("Authorization", authorization.as_str())],
    );
    assert_eq!(listen.status, 200);
    let ack = listen
        .next_message(Duration::from_secs(5))
        .expect("acknowledgement");
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    listen
}

/// Logs in to the dashboard with `secret`; the cookie pair.
fn dashboard_login(server: &Server, secret: &str) -> String {
    let origin = format!("http://{}", server.addr);
    let body = json!({ "token": secret }).to_string();
    let response = server.post_raw(
        "/dashboard/login",
        &[
            ("Origin", origin.as_str()),
            ("Content-Type", "application/json"),
        ],
        body.as_bytes(),
    );
    assert_eq!(response.status, 200, "{}", response.text());
    let cookie = response.header("Set-Cookie").expect("a cookie");
    cookie.split(';').next().expect("name=value").to_owned()
}

fn dashboard_session(server: &Server, cookie: &str) -> u16 {
    let request = server.raw_request("GET", "/dashboard/api/session", &[("Cookie", cookie)], b"");
    server.exchange(&request).status
}

// --- tokens ------------------------------------------------------------------------

fn tokens(trigger: Trigger) {
    let builtin = "[builtin]\nsets = [\"conformance\"]\n";
    let before = format!(
        "{builtin}{}{}",
        token("alice", "alice-old", true),
        token("bob", "bob-token", false)
    );
    let server = start(&before);
    assert_eq!(tools_list(&server, "alice-old").status, 200);
    let mut alice_listen = open_listen(&server, "alice-old");
    let mut bob_listen = open_listen(&server, "bob-token");
    let alice_session = legacy_session(&server, "alice-old");
    let mut alice_stream = GetStream::open(&server, &alice_session, "alice-old");
    let bob_session = legacy_session(&server, "bob-token");
    let mut bob_stream = GetStream::open(&server, &bob_session, "bob-token");
    let cookie = dashboard_login(&server, "alice-old");
    assert_eq!(dashboard_session(&server, &cookie), 200);
    assert_eq!(tools_list(&server, "carol-token").status, 401);

    // alice's token is rotated (same principal, new token), carol gets one.
    let after = format!(
        "{builtin}{}{}{}",
        token("alice", "alice-new", true),
        token("bob", "bob-token", false),
        token("carol", "carol-token", false)
    );
    let outcome = reload(&server, trigger, &after);
    assert!(outcome.ok, "{}", outcome.said);
    if let Trigger::Command = trigger {
        assert!(
            outcome.said.contains("tokens: 2 added, 1 removed"),
            "{}",
            outcome.said
        );
    }

    // The revoked token: 401 on its next request, and everything it opened ends.
    assert_eq!(tools_list(&server, "alice-old").status, 401);
    let last = alice_listen
        .next_message(Duration::from_secs(5))
        .expect("the revoked stream's last message");
    assert_eq!(last["id"], 77, "the listen request is answered: {last}");
    let why = last["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("no longer accepted"), "{last}");
    assert!(
        alice_stream.ended(Duration::from_secs(5)),
        "the GET stream ends"
    );
    // The session ended too: the same principal's new token does not reach it.
    let gone = legacy_call(&server, &alice_session, "alice-new", "tools/list");
    assert_eq!(gone.status, 404, "{}", gone.text());
    assert_eq!(dashboard_session(&server, &cookie), 401, "the login ends");

    // The new tokens work at once; what the kept token opened goes on.
    assert_eq!(tools_list(&server, "alice-new").status, 200);
    assert_eq!(tools_list(&server, "carol-token").status, 200);
    assert_eq!(
        legacy_call(&server, &bob_session, "bob-token", "tools/list").status,
        200
    );
    assert!(
        !bob_stream.ended(Duration::from_millis(300)),
        "bob's GET stream stays open"
    );
    assert!(
        bob_listen
            .next_message(Duration::from_millis(300))
            .is_none(),
        "bob's listen stream stays open, quiet"
    );
    assert_eq!(
        dashboard_session(&server, &dashboard_login(&server, "alice-new")),
        200
    );
}

#[test]
fn a_revoked_token_is_refused_and_ends_what_it_opened_by_signal() {
    tokens(Trigger::Signal);
}

#[test]
fn a_revoked_token_is_refused_and_ends_what_it_opened_by_command() {
    tokens(Trigger::Command);
}

// --- tools -------------------------------------------------------------------------

/// A task tool that reads its input, leaves a file named `says` in `work` (it has
/// started), waits `pause` seconds and prints `says`.
fn sh_tool(name: &str, description: &str, pause: &str, says: &str, work: &Path) -> String {
    format!(
        "[[tools]]\nname = \"{name}\"\ndescription = \"{description}\"\n\
         command = [\"/bin/sh\", \"-c\", \"cat >/dev/null; touch $WORK/$SAYS; sleep $PAUSE; echo $SAYS\"]\n\
         env = {{ PAUSE = \"{pause}\", SAYS = \"{says}\", WORK = {work:?} }}\n\
         task_policy = \"required\"\n",
        work = work.to_string_lossy(),
    )
}

fn text_of(task: &Value, server: &Server) -> String {
    let id = task["taskId"].as_str().expect("taskId");
    let done = tasks::wait_terminal(server, id, Duration::from_secs(20));
    assert_eq!(done["status"], "completed", "{done}");
    done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

fn submit(server: &Server, tool: &str) -> Value {
    let result = server.call_tool(tool, json!({}), tasks_caps()).result();
    assert_eq!(result["resultType"], "task", "{result}");
    result
}

fn tools(trigger: Trigger) {
    // One worker: while `slow` runs, `doomed`'s task waits in the queue.
    let work = tempfile::tempdir().expect("temp dir");
    let work = work.path();
    let head = "[builtin]\nsets = []\n[workers]\nthreads = 1\n";
    let before = format!(
        "{head}{}{}",
        sh_tool("slow", "Slow, first version", "3", "v1", work),
        sh_tool("doomed", "Removed by the reload", "0", "never", work)
    );
    let server = start(&before);
    let mut listen = open_listen(&server, "");
    let session = legacy_session(&server, "");
    let mut stream = GetStream::open(&server, &session, "");

    let running = submit(&server, "slow");
    poll_until(Duration::from_secs(10), || {
        work.join("v1").exists().then_some(())
    })
    .expect("the first attempt starts");
    // Its attempt holds the only worker: this one waits in the queue.
    let queued = submit(&server, "doomed");

    let after = format!(
        "{head}{}{}",
        sh_tool("slow", "Slow, second version", "0", "v2", work),
        sh_tool("fresh", "Added by the reload", "0", "hello", work)
    );
    let outcome = reload(&server, trigger, &after);
    assert!(outcome.ok, "{}", outcome.said);
    if let Trigger::Command = trigger {
        for line in [
            "tools added: fresh",
            "tools removed: doomed",
            "tools changed: slow",
        ] {
            assert!(outcome.said.contains(line), "{line}: {}", outcome.said);
        }
    }

    // Open streams and sessions hear about it.
    let heard = listen
        .next_message(Duration::from_secs(5))
        .expect("a notification");
    assert_eq!(
        heard["method"], "notifications/tools/list_changed",
        "{heard}"
    );
    assert!(stream.read_until(Duration::from_secs(5), |t| {
        t.contains("notifications/tools/list_changed")
    }));
    // The list is the new one.
    let listed = tools_list(&server, "").result();
    let described: Vec<(String, String)> = listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|tool| {
            let field = |key: &str| tool[key].as_str().unwrap_or_default().to_owned();
            (field("name"), field("description"))
        })
        .filter(|(name, _)| !name.starts_with("task_"))
        .collect();
    assert_eq!(
        described,
        vec![
            ("slow".to_owned(), "Slow, second version".to_owned()),
            ("fresh".to_owned(), "Added by the reload".to_owned())
        ]
    );
    // The running attempt finishes with the definition it started with.
    assert_eq!(text_of(&running, &server), "v1");
    assert!(!work.join("never").exists(), "the removed tool never ran");
    // The queued task of the removed tool fails, saying why.
    let failed = tasks::wait_terminal(
        &server,
        queued["taskId"].as_str().expect("taskId"),
        Duration::from_secs(20),
    );
    assert_eq!(failed["status"], "failed", "{failed}");
    let why = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("\"doomed\" is no longer served"), "{failed}");
    // New calls get the new definitions.
    assert_eq!(text_of(&submit(&server, "slow"), &server), "v2");
    assert_eq!(text_of(&submit(&server, "fresh"), &server), "hello");
    // The removed tool is unknown.
    let unknown = server.call_tool("doomed", json!({}), tasks_caps());
    assert!(unknown.json()["error"].is_object(), "{}", unknown.text());
}

#[test]
fn tools_are_added_removed_and_changed_by_signal() {
    tools(Trigger::Signal);
}

#[test]
fn tools_are_added_removed_and_changed_by_command() {
    tools(Trigger::Command);
}

// --- limits ------------------------------------------------------------------------

fn limits(trigger: Trigger) {
    let sets = "[builtin]\nsets = [\"conformance\", \"demo\"]\n";
    let server = start(&format!(
        "{sets}[limits]\ncache_ttl_ms = 60000\n[tasks]\nttl_ms = 3600000\n"
    ));
    let first = tools_list(&server, "").result();
    assert!(first.get("nextCursor").is_none(), "one page: {first}");
    let outcome = reload(
        &server,
        trigger,
        &format!(
            "{sets}[server]\nname = \"renamed\"\n\
             [limits]\npage_size = 2\ncache_ttl_ms = 5000\n[tasks]\nttl_ms = 120000\n"
        ),
    );
    assert!(outcome.ok, "{}", outcome.said);
    let paged = tools_list(&server, "").result();
    assert_eq!(paged["tools"].as_array().map(Vec::len), Some(2), "{paged}");
    assert!(paged["nextCursor"].is_string(), "{paged}");
    assert_eq!(paged["ttlMs"], 5000);
    let discovered = server
        .request("server/discover", json!({}), json!({}))
        .result();
    assert_eq!(
        discovered["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "renamed"
    );
    let id = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    assert_eq!(tasks::get(&server, &id)["ttlMs"], 120000);
}

#[test]
fn limits_apply_to_the_next_request_by_signal() {
    limits(Trigger::Signal);
}

#[test]
fn limits_apply_to_the_next_request_by_command() {
    limits(Trigger::Command);
}

// --- a refused file ----------------------------------------------------------------

fn bad_file(trigger: Trigger) {
    let good = format!(
        "[builtin]\nsets = [\"conformance\"]\n[limits]\npage_size = 2\n{}",
        token("alice", "alice-token", false)
    );
    let server = start(&good);
    let refusals = |server: &Server| {
        server
            .log_lines()
            .into_iter()
            .filter(|line| line.contains("refused, still running on the previous"))
            .collect::<Vec<_>>()
    };
    // A value of the wrong type, a failed check, a tool that cannot be built.
    let broken = [
        ("limits.page_size", "[limits]\npage_size = \"two\"\n".to_owned()),
        (
            "auth.tokens[0].sha256",
            "[[auth.tokens]]\nprincipal = \"mallory\"\nsha256 = \"nope\"\n".to_owned(),
        ),
        (
            "tools[0]",
            "[[tools]]\nname = \"ghost\"\ndescription = \"x\"\ncommand = [\"/nonexistent/ghost\"]\n"
                .to_owned(),
        ),
    ];
    for (index, (key, text)) in broken.iter().enumerate() {
        let outcome = reload(&server, trigger, text);
        assert!(!outcome.ok, "{key}: {}", outcome.said);
        assert!(outcome.said.contains(key), "{key}: {}", outcome.said);
        // The log is read from the server's stderr as it comes.
        poll_until(Duration::from_secs(5), || {
            (refusals(&server).len() > index).then_some(())
        });
        let logged = refusals(&server);
        assert_eq!(logged.len(), index + 1, "one line per refusal: {logged:?}");
        assert!(logged[index].contains(key), "{}", logged[index]);
    }
    // A file that is not TOML at all.
    std::fs::write(server.config_path(), "[limits\npage_size = 3\n").expect("write");
    let outcome = reload_file(&server, trigger);
    assert!(!outcome.ok, "{}", outcome.said);
    // Nothing changed: the same token, the same page size.
    let listed = tools_list(&server, "alice-token").result();
    assert_eq!(listed["tools"].as_array().map(Vec::len), Some(2));
    assert_eq!(tools_list(&server, "").status, 401);
    // And a good file still applies afterwards.
    let outcome = reload(
        &server,
        trigger,
        &good.replace("page_size = 2", "page_size = 3"),
    );
    assert!(outcome.ok, "{}", outcome.said);
    let listed = tools_list(&server, "alice-token").result();
    assert_eq!(listed["tools"].as_array().map(Vec::len), Some(3));
}

#[test]
fn a_refused_file_changes_nothing_by_signal() {
    bad_file(Trigger::Signal);
}

#[test]
fn a_refused_file_changes_nothing_by_command() {
    bad_file(Trigger::Command);
}

// --- restart-only keys -------------------------------------------------------------

fn restart_only(trigger: Trigger) {
    let sets = "[builtin]\nsets = [\"conformance\"]\n";
    let server = start(&format!("{sets}[workers]\nthreads = 2\n"));
    let outcome = reload(
        &server,
        trigger,
        &format!(
            "{sets}[server]\nendpoint = \"/elsewhere\"\nname = \"applied\"\n\
             [workers]\nthreads = 5\n[store]\nbusy_timeout_ms = 1234\n"
        ),
    );
    assert!(outcome.ok, "{}", outcome.said);
    let named = "server.endpoint, store.busy_timeout_ms, workers.threads";
    assert!(outcome.said.contains(named), "{}", outcome.said);
    if let Trigger::Command = trigger {
        assert!(outcome.said.contains("needs a restart"), "{}", outcome.said);
    }
    // The running values are kept: still served on /mcp; the rest applied.
    let discovered = server
        .request("server/discover", json!({}), json!({}))
        .result();
    assert_eq!(
        discovered["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "applied"
    );
    assert_eq!(server.get("/elsewhere").status, 404);
    let stats = crate::common::binary()
        .args(["stats", "--json", "--data-dir"])
        .arg(server.dir.join("data"))
        .arg("--config")
        .arg(server.config_path())
        .output()
        .expect("stats");
    let stats: Value = serde_json::from_slice(&stats.stdout).expect("stats JSON");
    assert_eq!(stats["workers"]["threads"], 2, "{stats}");
}

#[test]
fn restart_only_keys_keep_their_running_values_by_signal() {
    restart_only(Trigger::Signal);
}

#[test]
fn restart_only_keys_keep_their_running_values_by_command() {
    restart_only(Trigger::Command);
}

/// `mcp-taskd reload` with no server there fails, saying so.
#[test]
fn reload_without_a_server_fails() {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = crate::common::binary()
        .arg("reload")
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .expect("run mcp-taskd reload");
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("no server is running"), "{said}");
    assert!(!dir.path().join("tasks.db").exists(), "nothing was opened");
}
