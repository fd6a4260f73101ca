//! PostgreSQL (issue 18): the throwaway cluster of the harness, and several nodes —
//! real binaries — serving the tasks of one database.
//!
//! These tests need PostgreSQL whatever `MCP_TASKD_TEST_BACKEND` says; without it they
//! say `SKIPPED` and pass, unless `MCP_TASKD_REQUIRE_POSTGRES=1` (CI).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::postgres::{self, Cluster};
use crate::common::tasks::{self, wait_terminal};
use crate::common::{self, poll_until, tasks_caps, HttpResponse, Listen, Server, VERSION};

#[test]
fn the_harness_gives_each_data_dir_a_database_of_its_own() {
    let Some(cluster) =
        postgres::required_by("the_harness_gives_each_data_dir_a_database_of_its_own")
    else {
        return;
    };
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = postgres::database_for(one.path());
    let second = postgres::database_for(two.path());
    assert_ne!(first, second);
    // A restarted server (same data dir) finds its database again.
    assert_eq!(postgres::database_for(one.path()), first);
    cluster
        .sql(
            &first,
            "CREATE TABLE marker (n int); INSERT INTO marker VALUES (7)",
        )
        .unwrap();
    assert_eq!(cluster.sql(&first, "SELECT n FROM marker").unwrap(), "7");
    let elsewhere = cluster.sql(&second, "SELECT n FROM marker").unwrap_err();
    assert!(elsewhere.contains("does not exist"), "{elsewhere}");
    assert!(cluster
        .url(&first)
        .starts_with("postgresql://taskd@127.0.0.1:"));
}

#[test]
fn a_private_cluster_stops_restarts_and_is_gone_once_dropped() {
    let Some(cluster) = Cluster::start("a_private_cluster_stops_restarts_and_is_gone_once_dropped")
    else {
        return;
    };
    let database = cluster.create_database();
    cluster
        .sql(
            &database,
            "CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)",
        )
        .unwrap();
    cluster.stop(true);
    assert!(cluster.sql(&database, "SELECT 1").is_err(), "stopped");
    cluster.restart();
    // An immediate stop is a crash for PostgreSQL: committed rows survive its recovery.
    cluster.stop(false);
    cluster.restart();
    assert_eq!(cluster.sql(&database, "SELECT n FROM kept").unwrap(), "1");
    let dir = cluster.dir().to_path_buf();
    let pid = std::fs::read_to_string(dir.join("data/postmaster.pid")).unwrap();
    let pid = pid.lines().next().unwrap().trim().to_string();
    drop(cluster);
    assert!(!dir.exists(), "{dir:?} removed");
    let postmaster = format!("/proc/{pid}");
    poll_until(Duration::from_secs(5), || {
        (!Path::new(&postmaster).exists()).then_some(())
    })
    .expect("the postmaster is gone");
}

/// The testing tools on `url`'s database: `workers` threads, 1 s leases and a brisk
/// janitor (a dead node's attempt is taken over within about a second), a small pool.
fn node_config(url: &str, workers: usize, extra: &str) -> String {
    format!(
        "[builtin]\nsets = [\"conformance\", \"testing\"]\n\
         [workers]\nthreads = {workers}\nlease_ms = 1000\njanitor_interval_ms = 50\n\
         shutdown_grace_ms = 200\n\
         [store]\nbackend = \"postgres\"\nurl = \"{url}\"\npool_size = 8\n{extra}"
    )
}

/// A node: the binary on its own data dir (its admin socket, its request-state key),
/// sharing `config`'s database with the others.
fn node(config: &str) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(dir.path(), config);
    (dir, server)
}

/// A fresh database on the shared cluster for one multi-node test, or `None` (SKIPPED).
fn shared_database(test: &str) -> Option<String> {
    let cluster = postgres::required_by(test)?;
    Some(cluster.url(&cluster.create_database()))
}

/// Waits until a worker runs the `slow_compute` task (it then says "computing").
fn wait_until_running(server: &Server, id: &str) {
    poll_until(Duration::from_secs(10), || {
        (tasks::get(server, id)["statusMessage"] == "computing").then_some(())
    })
    .expect("a worker claims the task");
}

#[test]
fn a_task_created_on_one_node_is_polled_updated_and_cancelled_on_another() {
    let Some(url) =
        shared_database("a_task_created_on_one_node_is_polled_updated_and_cancelled_on_another")
    else {
        return;
    };
    let config = node_config(&url, 2, "");
    let (_a_dir, a) = node(&config);
    let (_b_dir, b) = node(&config);

    let asking = tasks::create(
        &a,
        "approval_then_work",
        json!({"prepare_seconds": 0, "work_seconds": 0}),
        &[],
    );
    let waiting = tasks::wait_for(&b, &asking, "input_required", Duration::from_secs(10));
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    tasks::update(
        &b,
        &asking,
        json!({"approval": {"action": "accept", "content": {"approved": true}}}),
        &[],
    )
    .result();
    let done_on_a = wait_terminal(&a, &asking, Duration::from_secs(10));
    assert_eq!(done_on_a["status"], "completed", "{done_on_a}");
    assert_eq!(
        tasks::get(&b, &asking),
        done_on_a,
        "both nodes answer the same"
    );

    let long = tasks::create(&b, "slow_compute", json!({"seconds": 60}), &[]);
    wait_until_running(&a, &long);
    tasks::cancel(&a, &long, &[]).result();
    let cancelled = wait_terminal(&b, &long, Duration::from_secs(5));
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
}

#[test]
fn cancel_on_one_node_reaches_an_attempt_running_on_another_within_a_second() {
    let Some(url) =
        shared_database("cancel_on_one_node_reaches_an_attempt_running_on_another_within_a_second")
    else {
        return;
    };
    let config = node_config(&url, 2, "");
    // A claims the attempt before B exists: it runs on A.
    let (_a_dir, a) = node(&config);
    let id = tasks::create(&a, "slow_compute", json!({"seconds": 60}), &[]);
    wait_until_running(&a, &id);
    let (_b_dir, b) = node(&config);
    let asked = Instant::now();
    tasks::cancel(&b, &id, &[]).result();
    // A task ends as cancelled once its attempt has stopped: A's worker heard it.
    let task = poll_until(Duration::from_secs(5), || {
        let task = tasks::get(&a, &id);
        tasks::is_terminal(&task).then_some(task)
    })
    .expect("the cancel ends the task");
    let took = asked.elapsed();
    assert_eq!(task["status"], "cancelled", "{task}");
    assert!(
        took < Duration::from_secs(1),
        "the attempt on A stopped {took:?} after the cancel on B"
    );
}

#[test]
fn a_killed_nodes_attempt_is_reclaimed_by_another_after_its_lease() {
    let Some(url) =
        shared_database("a_killed_nodes_attempt_is_reclaimed_by_another_after_its_lease")
    else {
        return;
    };
    let config = node_config(&url, 2, "");
    let (_a_dir, mut a) = node(&config);
    let id = tasks::create(
        &a,
        "slow_compute",
        json!({"seconds": 1, "label": "kept"}),
        &[],
    );
    wait_until_running(&a, &id);
    a.kill9();
    let killed = Instant::now();
    let (_b_dir, b) = node(&config);
    let task = wait_terminal(&b, &id, Duration::from_secs(20));
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["result"]["content"][0]["text"], "kept: done after 1 s");
    // The second attempt started once A's 1 s lease had run out, and ran for 1 s.
    assert!(
        killed.elapsed() >= Duration::from_secs(1),
        "completed {:?} after the kill: before the lease ended",
        killed.elapsed()
    );
}

#[test]
fn a_subscriber_on_one_node_sees_the_changes_committed_on_another() {
    let Some(url) =
        shared_database("a_subscriber_on_one_node_sees_the_changes_committed_on_another")
    else {
        return;
    };
    let config = node_config(&url, 2, "");
    let (_a_dir, a) = node(&config);
    let (_b_dir, b) = node(&config);
    let id = tasks::create(
        &a,
        "approval_then_work",
        json!({"prepare_seconds": 0.5, "work_seconds": 0.5}),
        &[],
    );
    let mut listen = Listen::open(&b, json!({"taskIds": [id]}), tasks_caps(), &[]);
    assert_eq!(listen.status, 200);
    let ack = listen.next_message(SECOND * 5).expect("acknowledged");
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    let mut next_status = || {
        let message = listen.next_message(SECOND * 5).expect("a notification");
        assert_eq!(message["method"], "notifications/tasks", "{message}");
        message["params"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(next_status(), "working");
    assert_eq!(next_status(), "input_required");
    tasks::update(
        &a,
        &id,
        json!({"approval": {"action": "accept", "content": {"approved": true}}}),
        &[],
    )
    .result();
    assert_eq!(next_status(), "working");
    assert_eq!(next_status(), "completed");
    // Terminal means the end: nothing more for this task.
    let after = listen.drain(Duration::from_millis(500));
    assert!(
        after
            .iter()
            .all(|message| message["method"] != "notifications/tasks"),
        "{after:?}"
    );
}

const SECOND: Duration = Duration::from_secs(1);

const ALICE: &str = "alice-token";
const BOB: &str = "bob-token";
/// Digests of "alice-token" and "bob-token", in tenants of their own.
const TENANTS: &str = "[[auth.tokens]]\nprincipal = \"alice\"\ntenant = \"a\"\n\
     sha256 = \"9c220f200955d76c0a38d308225e0ef10c5f971acaf2f8d1d8f732affa5bd1dc\"\n\
     [[auth.tokens]]\nprincipal = \"bob\"\ntenant = \"b\"\n\
     sha256 = \"97dd3707015dcf069cf73022ed7173b1165db6eff24b441cb57fd069a8c4e525\"\n";

#[test]
fn a_foreign_task_is_unknown_on_every_node() {
    let Some(url) = shared_database("a_foreign_task_is_unknown_on_every_node") else {
        return;
    };
    let config = node_config(&url, 2, TENANTS);
    let (_a_dir, a) = node(&config);
    let (_b_dir, b) = node(&config);
    let bob = format!("Bearer {BOB}");
    let alice = format!("Bearer {ALICE}");
    let as_bob = [("Authorization", bob.as_str())];
    let as_alice = [("Authorization", alice.as_str())];
    let bobs = tasks::create(&a, "slow_compute", json!({"seconds": 1}), &as_bob);
    let unknown = "0b6c1a9e-3f0d-4d5e-9a51-7c1f2e3d4b5a";
    for (method, params) in [
        ("tasks/get", json!({})),
        ("tasks/cancel", json!({})),
        (
            "tasks/update",
            json!({"inputResponses": {"k": {"action": "accept"}}}),
        ),
    ] {
        for server in [&a, &b] {
            let ask = |id: &str| {
                let mut params = params.clone();
                params["taskId"] = json!(id);
                server.request_with(method, params, tasks_caps(), &as_alice)
            };
            let foreign = ask(&bobs);
            let never = ask(unknown);
            foreign.expect_error(400, -32602);
            assert_eq!(foreign.status, never.status, "{method}");
            assert_eq!(
                foreign.body, never.body,
                "{method}: byte-for-byte identical"
            );
        }
    }
    // Bob's task went on untouched, and is his to read on either node.
    let task = poll_until(Duration::from_secs(10), || {
        let task = tasks::get_raw(&b, &bobs, &as_bob).result();
        tasks::is_terminal(&task).then_some(task)
    })
    .expect("bob's task ends");
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(tasks::get_raw(&a, &bobs, &as_bob).result(), task);
}

/// Creates a `slow_compute` task on the node at `addr` as any client would, without
/// panicking when the node is down or answers an error: the response, if one came.
fn try_create(addr: SocketAddr, seconds: f64, label: &str) -> Option<HttpResponse> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "slow_compute", "arguments": {"seconds": seconds, "label": label},
        "_meta": {"io.modelcontextprotocol/protocolVersion": VERSION,
                  "io.modelcontextprotocol/clientCapabilities": tasks_caps()}}})
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: {VERSION}\r\nMcp-Method: tools/call\r\n\
         Mcp-Name: slow_compute\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect_timeout(&addr, SECOND).ok()?;
    stream.set_read_timeout(Some(SECOND * 10)).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    HttpResponse::try_parse(&raw)
}

/// The task id of an acknowledged creation (200 with a task).
fn created_id(response: &HttpResponse) -> Option<String> {
    if response.status != 200 {
        return None;
    }
    let message: Value = serde_json::from_slice(&response.body).ok()?;
    Some(message["result"]["taskId"].as_str()?.to_owned())
}

/// Clients creating tasks on the nodes at `addrs` (round robin, following each node to
/// its new address when it restarts) until dropped; every acknowledged id is kept, and
/// every answer that is neither 200 nor 503 (the clear "try again") is noted.
struct Load {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<Mutex<Vec<String>>>,
    unavailable: Arc<AtomicUsize>,
    unexpected: Arc<Mutex<Vec<String>>>,
    clients: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(addrs: &Arc<Vec<Mutex<SocketAddr>>>, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let unavailable = Arc::new(AtomicUsize::new(0));
        let unexpected = Arc::new(Mutex::new(Vec::new()));
        let clients = (0..clients)
            .map(|client| {
                let (addrs, stop) = (Arc::clone(addrs), Arc::clone(&stop));
                let (acknowledged, unavailable, unexpected) = (
                    Arc::clone(&acknowledged),
                    Arc::clone(&unavailable),
                    Arc::clone(&unexpected),
                );
                std::thread::spawn(move || {
                    let mut n = 0usize;
                    while !stop.load(Ordering::Acquire) {
                        n += 1;
                        let addr = *addrs[(client + n) % addrs.len()]
                            .lock()
                            .unwrap_or_else(|p| p.into_inner());
                        let seconds = 0.05 * (n % 4) as f64;
                        let Some(response) = try_create(addr, seconds, &format!("c{client}-{n}"))
                        else {
                            // Down or restarting: no answer, nothing acknowledged.
                            std::thread::sleep(Duration::from_millis(20));
                            continue;
                        };
                        let whole = serde_json::from_slice::<Value>(&response.body).is_ok();
                        match created_id(&response) {
                            Some(id) => acknowledged.lock().unwrap().push(id),
                            // Cut off by a kill: no answer either.
                            None if !whole && response.status == 200 => {}
                            None if response.status == 503 => {
                                unavailable.fetch_add(1, Ordering::AcqRel);
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            None => unexpected.lock().unwrap().push(format!(
                                "{} {}",
                                response.status,
                                response.text()
                            )),
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            acknowledged,
            unavailable,
            unexpected,
            clients,
        }
    }

    fn acknowledged_count(&self) -> usize {
        self.acknowledged.lock().unwrap().len()
    }

    /// Waits until `more` tasks beyond those acknowledged so far are acknowledged.
    fn wait_for_more(&self, more: usize, limit: Duration) {
        let target = self.acknowledged_count() + more;
        poll_until(limit, || {
            (self.acknowledged_count() >= target).then_some(())
        })
        .unwrap_or_else(|| panic!("no {more} more acknowledged tasks within {limit:?}"));
    }

    /// Stops the clients; returns every acknowledged id.
    fn finish(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::Release);
        for client in self.clients.drain(..) {
            client.join().expect("a load client");
        }
        self.acknowledged.lock().unwrap().clone()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Every acknowledged task completes (on `server`, a node of the database) within
/// `limit` overall: none lost, none stuck.
fn all_complete(server: &Server, ids: &[String], limit: Duration) {
    let deadline = Instant::now() + limit;
    for id in ids {
        let left = deadline.saturating_duration_since(Instant::now());
        let task = wait_terminal(server, id, left.max(Duration::from_millis(1)));
        assert_eq!(task["status"], "completed", "{task}");
    }
}

#[test]
fn kill_9_cycles_of_either_node_under_load_lose_nothing_and_leave_nothing_stuck() {
    let Some(url) = shared_database(
        "kill_9_cycles_of_either_node_under_load_lose_nothing_and_leave_nothing_stuck",
    ) else {
        return;
    };
    let _heavy = common::heavy();
    let config = node_config(&url, 4, "");
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut nodes: Vec<Server> = dirs
        .iter()
        .map(|dir| Server::start_in(dir.path(), &config))
        .collect();
    let addrs = Arc::new(nodes.iter().map(|node| Mutex::new(node.addr)).collect());
    let load = Load::start(&addrs, 3);
    for cycle in 0..8 {
        load.wait_for_more(15, Duration::from_secs(30));
        let victim = cycle % 2;
        nodes[victim].kill9();
        nodes[victim] = Server::start_in(dirs[victim].path(), &config);
        *addrs[victim].lock().unwrap() = nodes[victim].addr;
    }
    load.wait_for_more(15, Duration::from_secs(30));
    let unexpected = load.unexpected.lock().unwrap().clone();
    let acknowledged = load.finish();
    assert!(unexpected.is_empty(), "{unexpected:?}");
    all_ended(&nodes[0], &acknowledged, Duration::from_secs(60));
}

/// Waits until every task of `ids` has ended: completed, or failed only because every
/// attempt it had was cut short by a kill (a task whose attempts each run into one of
/// the kills legitimately uses up its `max_attempts`; it is neither lost nor stuck).
fn all_ended(server: &Server, ids: &[String], limit: Duration) {
    let deadline = Instant::now() + limit;
    for id in ids {
        let left = deadline.saturating_duration_since(Instant::now());
        let task = wait_terminal(server, id, left.max(Duration::from_millis(1)));
        // The reason is in the task's error (or status message, as the era shows it).
        let text = task.to_string();
        let killed = task["status"] == "failed"
            && (text.contains("the server stopped while the attempt was running")
                || text.contains("lease expired"));
        assert!(task["status"] == "completed" || killed, "{task}");
    }
}

#[test]
fn a_database_restart_under_load_answers_503_then_recovers_and_loses_nothing() {
    let Some(cluster) =
        Cluster::start("a_database_restart_under_load_answers_503_then_recovers_and_loses_nothing")
    else {
        return;
    };
    let _heavy = common::heavy();
    let config = node_config(&cluster.url(&cluster.create_database()), 2, "");
    let (_a_dir, a) = node(&config);
    let (_b_dir, b) = node(&config);
    let addrs = Arc::new(vec![Mutex::new(a.addr), Mutex::new(b.addr)]);
    let load = Load::start(&addrs, 2);
    load.wait_for_more(20, Duration::from_secs(20));
    let known = load.acknowledged.lock().unwrap()[0].clone();

    cluster.stop(true);
    for node in [&a, &b] {
        poll_until(Duration::from_secs(10), || {
            (node.get("/healthz").status == 503).then_some(())
        })
        .expect("/healthz says 503 while the database is down");
        let read = tasks::get_raw(node, &known, &[]);
        assert_eq!(read.status, 503, "{}", read.text());
        assert!(read.header("retry-after").is_some(), "Retry-After");
    }
    poll_until(Duration::from_secs(10), || {
        (load.unavailable.load(Ordering::Acquire) > 0).then_some(())
    })
    .expect("creations are refused with 503 while the database is down");

    cluster.restart();
    for node in [&a, &b] {
        poll_until(Duration::from_secs(20), || {
            (node.get("/healthz").status == 200).then_some(())
        })
        .expect("/healthz is 200 again once the database is back");
    }
    load.wait_for_more(20, Duration::from_secs(20));
    let unexpected = load.unexpected.lock().unwrap().clone();
    let acknowledged = load.finish();
    assert!(unexpected.is_empty(), "only 200 or 503: {unexpected:?}");
    all_complete(&b, &acknowledged, Duration::from_secs(60));
}

/// Bob's task once `ready` says so (within 10 s).
fn bobs_task_once(server: &Server, id: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let bob = format!("Bearer {BOB}");
    poll_until(Duration::from_secs(10), || {
        let task = tasks::get_raw(server, id, &[("Authorization", bob.as_str())]).result();
        ready(&task).then_some(task)
    })
    .unwrap_or_else(|| panic!("bob's task {id} did not get there"))
}

#[test]
fn copy_store_moves_a_sqlite_store_into_postgres_where_every_task_reads_the_same() {
    let Some(url) = shared_database(
        "copy_store_moves_a_sqlite_store_into_postgres_where_every_task_reads_the_same",
    ) else {
        return;
    };
    let bob = format!("Bearer {BOB}");
    let as_bob = [("Authorization", bob.as_str())];
    let alice = format!("Bearer {ALICE}");
    let as_alice = [("Authorization", alice.as_str())];
    let sqlite_dir = tempfile::tempdir().unwrap();
    let sqlite_config = format!(
        "[builtin]\nsets = [\"conformance\", \"testing\"]\n\
         [workers]\nthreads = 2\nshutdown_grace_ms = 200\n\
         [store]\nbackend = \"sqlite\"\n{TENANTS}"
    );
    let mut sqlite = Server::start_in(sqlite_dir.path(), &sqlite_config);
    let mut ids: Vec<String> = (0..5)
        .map(|i| {
            let label = format!("copied {i}");
            tasks::create(
                &sqlite,
                "slow_compute",
                json!({"seconds": 0, "label": label}),
                &as_bob,
            )
        })
        .collect();
    for id in &ids {
        bobs_task_once(&sqlite, id, tasks::is_terminal);
    }
    let asking = tasks::create(
        &sqlite,
        "approval_then_work",
        json!({"prepare_seconds": 0, "work_seconds": 0}),
        &as_bob,
    );
    bobs_task_once(&sqlite, &asking, |task| task["status"] == "input_required");
    ids.push(asking.clone());
    let before: Vec<Value> = ids
        .iter()
        .map(|id| tasks::get_raw(&sqlite, id, &as_bob).result())
        .collect();
    let output = |server: &Server, id: &str| {
        let uri = format!("mcp-taskd://tasks/{id}/output");
        server
            .request_with("resources/read", json!({"uri": uri}), json!({}), &as_bob)
            .result()["contents"][0]
            .clone()
    };
    let outputs: Vec<Value> = ids.iter().map(|id| output(&sqlite, id)).collect();
    assert!(
        outputs.iter().any(|read| read["text"] != ""),
        "some task has output to copy: {outputs:?}"
    );
    assert!(
        sqlite.terminate(Duration::from_secs(10)),
        "the SQLite server stops"
    );
    // The history summary of a task past its TTL (issue 48) goes along too.
    let kept = "0000000000010123456789abcdef0123456789abcdef";
    rusqlite::Connection::open(sqlite_dir.path().join("data/tasks.db"))
        .unwrap()
        .execute(
            "INSERT INTO task_history (id, tool, endpoint, issuer, tenant, principal, status, \
             created_at, updated_at, removed_at, keep_until, error, attempts) VALUES (?1, \
             'slow_compute', '/mcp', '', 't', 'bob', 'failed', 1, 2, 3, 9000000000000, \
             '{\"code\":-32603,\"message\":\"gone\"}', 2)",
            [kept],
        )
        .unwrap();

    let target_dir = tempfile::tempdir().unwrap();
    let target_config = target_dir.path().join("postgres.toml");
    std::fs::write(&target_config, node_config(&url, 2, TENANTS)).unwrap();
    let copy = || {
        crate::common::binary()
            .arg("copy-store")
            .arg("--config")
            .arg(sqlite_dir.path().join("config.toml"))
            .arg("--data-dir")
            .arg(sqlite_dir.path().join("data"))
            .arg("--to-config")
            .arg(&target_config)
            .output()
            .expect("run mcp-taskd copy-store")
    };
    let copied = copy();
    assert!(
        copied.status.success(),
        "{}",
        String::from_utf8_lossy(&copied.stderr)
    );
    let said = String::from_utf8_lossy(&copied.stdout);
    assert!(said.contains("6 tasks"), "{said}");

    let node = Server::start_in(target_dir.path(), &node_config(&url, 2, TENANTS));
    for ((id, was), output_was) in ids.iter().zip(&before).zip(&outputs) {
        assert_eq!(&tasks::get_raw(&node, id, &as_bob).result(), was, "{id}");
        assert_eq!(&output(&node, id), output_was, "the output of {id}");
        // Still bound to bob: alice's answer is the unknown one.
        let foreign = tasks::get_raw(&node, id, &as_alice);
        foreign.expect_error(400, -32602);
    }
    tasks::update(
        &node,
        &asking,
        json!({"approval": {"action": "accept", "content": {"approved": true}}}),
        &as_bob,
    )
    .result();
    let done = bobs_task_once(&node, &asking, tasks::is_terminal);
    assert_eq!(done["status"], "completed", "{done}");
    let shown = crate::common::binary()
        .args(["tasks", "show", kept, "--json", "--config"])
        .arg(target_dir.path().join("config.toml"))
        .arg("--data-dir")
        .arg(target_dir.path().join("data"))
        .output()
        .expect("run tasks show");
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("a JSON summary");
    assert_eq!(
        (&shown["history"], &shown["status"], &shown["attemptCount"]),
        (&json!(true), &json!("failed"), &json!(2)),
        "{shown}"
    );

    // A second copy would mix two stores: refused, nothing written.
    let again = copy();
    assert!(!again.status.success(), "a second copy was accepted");
    let refusal = String::from_utf8_lossy(&again.stderr);
    assert!(refusal.contains("already holds 6 task"), "{refusal}");
}

/// A legacy (2025-11-25) request to `server` in session `session` (none: `initialize`).
fn legacy_post(server: &Server, session: Option<&str>, body: &Value) -> HttpResponse {
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    if let Some(session) = session {
        headers.push(("Mcp-Session-Id", session));
        headers.push(("MCP-Protocol-Version", "2025-11-25"));
    }
    server.post_raw("/mcp", &headers, body.to_string().as_bytes())
}

#[test]
fn a_legacy_session_opened_on_one_node_is_served_by_another_and_outlives_it() {
    let Some(url) =
        shared_database("a_legacy_session_opened_on_one_node_is_served_by_another_and_outlives_it")
    else {
        return;
    };
    let config = node_config(&url, 2, "");
    let (_a_dir, mut a) = node(&config);
    let (_b_dir, b) = node(&config);
    let opened = legacy_post(
        &a,
        None,
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "behind-a-balancer", "version": "1"}}}),
    );
    assert_eq!(opened.status, 200, "{}", opened.text());
    let session = opened
        .header("mcp-session-id")
        .expect("a session id")
        .to_owned();

    // Node B never saw the initialize: it reads the session from the database.
    let created = legacy_post(
        &b,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "slow_compute", "arguments": {"seconds": 0.2}, "task": {}}}),
    )
    .result();
    let task_id = created["task"]["taskId"].as_str().expect("taskId");
    let done = poll_until(Duration::from_secs(10), || {
        let task = legacy_post(
            &a,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get",
                    "params": {"taskId": task_id}}),
        )
        .result();
        (task["status"] == "completed").then_some(task)
    });
    assert!(
        done.is_some(),
        "the task is read through the session on node A"
    );
    // The node that opened it dies: the session lives on, on the other.
    a.kill9();
    let listed = legacy_post(
        &b,
        Some(&session),
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/list"}),
    )
    .result();
    assert!(
        listed.to_string().contains(task_id),
        "the session still lists its task on node B: {listed}"
    );
    // An id neither node knows is refused alike.
    let unknown = legacy_post(
        &b,
        Some("0b4c9d1e-3f5a-4c2b-8d7e-6a1f2e3d4c5b"),
        &json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
    );
    assert_eq!(unknown.status, 404, "{}", unknown.text());
}
