//! The PostgreSQL store itself (issue 18), through real binaries on the harness's
//! throwaway cluster: what nodes share besides tasks (the schema, migrated once; the
//! MRTR request-state key; the counts of `/metrics`), the core task flow on one node,
//! the password kept out of the configuration text, and pooled connections that carried
//! a large row replaced. (Two-node task flows, crashes and
//! database restarts are in `cluster.rs`.)
//!
//! Like `cluster.rs`, these need PostgreSQL whatever `MCP_TASKD_TEST_BACKEND` says.

use std::time::Duration;

use serde_json::json;

use crate::common::postgres::{self, Cluster};
use crate::common::tasks::{self, wait_terminal};
use crate::common::{assert_mrtr_round_trip, Server};

fn node_config(url: &str) -> String {
    format!(
        "[builtin]\nsets = [\"conformance\", \"testing\"]\n\
         [workers]\nthreads = 2\nlease_ms = 1000\njanitor_interval_ms = 50\n\
         shutdown_grace_ms = 200\n\
         [store]\nbackend = \"postgres\"\nurl = \"{url}\"\npool_size = 4\n"
    )
}

/// The shared cluster and a fresh database on it, or `None` (SKIPPED).
fn database(test: &str) -> Option<(&'static Cluster, String)> {
    let cluster = postgres::required_by(test)?;
    let name = cluster.create_database();
    Some((cluster, name))
}

fn node(config: &str) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(dir.path(), config);
    (dir, server)
}

#[test]
fn create_get_update_and_cancel_on_one_node() {
    let Some((cluster, name)) = database("create_get_update_and_cancel_on_one_node") else {
        return;
    };
    let (_dir, server) = node(&node_config(&cluster.url(&name)));
    let done = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    let task = wait_terminal(&server, &done, Duration::from_secs(10));
    assert_eq!(task["status"], "completed", "{task}");

    let asking = tasks::create(
        &server,
        "approval_then_work",
        json!({"prepare_seconds": 0, "work_seconds": 0}),
        &[],
    );
    tasks::wait_for(&server, &asking, "input_required", Duration::from_secs(10));
    tasks::update(
        &server,
        &asking,
        json!({"approval": {"action": "accept", "content": {"approved": true}}}),
        &[],
    )
    .result();
    let answered = wait_terminal(&server, &asking, Duration::from_secs(10));
    assert_eq!(answered["status"], "completed", "{answered}");

    let running = tasks::create(&server, "slow_compute", json!({"seconds": 60}), &[]);
    tasks::cancel(&server, &running, &[]).result();
    let cancelled = wait_terminal(&server, &running, Duration::from_secs(5));
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
}

#[test]
fn nodes_starting_together_migrate_the_schema_once() {
    let Some((cluster, name)) = database("nodes_starting_together_migrate_the_schema_once") else {
        return;
    };
    let config = node_config(&cluster.url(&name));
    let starting: Vec<_> = (0..3)
        .map(|_| {
            let config = config.clone();
            std::thread::spawn(move || node(&config))
        })
        .collect();
    let nodes: Vec<_> = starting.into_iter().map(|t| t.join().unwrap()).collect();
    for (_, server) in &nodes {
        assert_eq!(server.get("/healthz").status, 200);
    }
    let applied = cluster
        .sql(
            &name,
            "SELECT version, COUNT(*) FROM taskd_migrations GROUP BY version",
        )
        .unwrap();
    for line in applied.lines() {
        assert!(line.ends_with("|1"), "each migration once: {applied}");
    }
    assert!(!applied.trim().is_empty());
}

#[test]
fn a_request_state_sealed_by_one_node_opens_on_another() {
    let Some((cluster, name)) = database("a_request_state_sealed_by_one_node_opens_on_another")
    else {
        return;
    };
    let config = node_config(&cluster.url(&name));
    let (_a_dir, a) = node(&config);
    let (_b_dir, b) = node(&config);
    assert_mrtr_round_trip(&a, &b);
}

#[test]
fn every_nodes_metrics_count_the_tasks_of_every_node() {
    let Some((cluster, name)) = database("every_nodes_metrics_count_the_tasks_of_every_node")
    else {
        return;
    };
    let config = node_config(&cluster.url(&name));
    let (_a_dir, a) = node(&config);
    let (_b_dir, b) = node(&config);
    let ids: Vec<String> = (0..3)
        .map(|_| tasks::create(&a, "slow_compute", json!({"seconds": 0}), &[]))
        .collect();
    for id in &ids {
        wait_terminal(&a, id, Duration::from_secs(10));
    }
    let metrics = b.get("/metrics").text();
    assert!(
        metrics.contains("mcp_taskd_tasks_created_total{tool=\"slow_compute\"} 3"),
        "{metrics}"
    );
}

#[test]
fn a_password_in_the_url_is_refused_and_a_missing_password_file_named() {
    let Some((cluster, name)) =
        database("a_password_in_the_url_is_refused_and_a_missing_password_file_named")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = cluster.url(&name);
    let with_password = node_config(&url.replace("taskd@", "taskd:hunter2@"));
    std::fs::write(dir.path().join("bad.toml"), with_password).unwrap();
    let refused = crate::common::binary()
        .arg("check-config")
        .arg(dir.path().join("bad.toml"))
        .output()
        .unwrap();
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(message.contains("must not contain a password"), "{message}");
    assert!(
        !message.contains("hunter2"),
        "the password is not echoed: {message}"
    );

    // The password file is read at start-up: a missing one stops the server with its
    // name, before it serves anything.
    let config = format!("{}password_file = \"no-such-file\"\n", node_config(&url));
    std::fs::write(dir.path().join("good.toml"), &config).unwrap();
    let checked = crate::common::binary()
        .arg("check-config")
        .arg(dir.path().join("good.toml"))
        .output()
        .unwrap();
    assert!(checked.status.success(), "{checked:?}");
    let started = crate::common::binary()
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(dir.path().join("good.toml"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    let message = String::from_utf8_lossy(&started.stderr);
    assert!(!started.status.success());
    assert!(
        message.contains("store.password_file") && message.contains("no-such-file"),
        "{message}"
    );
}

/// libfaketime, which makes a process see another wall clock; `None` (SKIPPED) without it
/// (Debian: `apt-get install libfaketime`), unless PostgreSQL's tests are required
/// (`MCP_TASKD_REQUIRE_POSTGRES`, set by `.ci/run`, whose `.ci/postgres.sh` installs
/// it): then its absence fails the test rather than letting it pass unrun.
fn faketime_library() -> Option<std::path::PathBuf> {
    let found = std::env::var_os("MCP_TASKD_FAKETIME_LIB")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            [
                "/usr/lib/x86_64-linux-gnu",
                "/usr/lib/aarch64-linux-gnu",
                "/usr/lib",
            ]
            .iter()
            .map(|dir| std::path::Path::new(dir).join("faketime/libfaketime.so.1"))
            .find(|path| path.is_file())
        });
    if found.is_none() {
        assert!(
            std::env::var_os("MCP_TASKD_REQUIRE_POSTGRES").is_none(),
            "libfaketime is required with MCP_TASKD_REQUIRE_POSTGRES (apt-get install libfaketime)"
        );
        eprintln!("SKIPPED: no libfaketime (apt-get install libfaketime)");
    }
    found
}

/// A node whose clock is an hour behind the database's writes leases, expiry and
/// backoff in the database's time: its running attempt is not reclaimed as if its lease
/// had ended an hour ago, and its task is not expired on a node with the right time.
#[test]
fn a_node_with_a_skewed_clock_keeps_its_leases_and_its_tasks() {
    let Some((cluster, name)) =
        database("a_node_with_a_skewed_clock_keeps_its_leases_and_its_tasks")
    else {
        return;
    };
    let Some(faketime) = faketime_library() else {
        return;
    };
    let config = node_config(&cluster.url(&name));
    let skewed_dir = tempfile::tempdir().unwrap();
    let skewed = Server::start_in_with_env(
        skewed_dir.path(),
        &config,
        &[
            ("LD_PRELOAD", faketime.as_os_str()),
            ("FAKETIME", "-3600s".as_ref()),
            // Timers and sleeps keep the real pace; only the wall clock is an hour off.
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".as_ref()),
        ],
    );
    // Runs longer than three leases (1 s each), so the lease is renewed and checked.
    let id = tasks::create(&skewed, "slow_compute", json!({"seconds": 3.5}), &[]);
    crate::common::poll_until(Duration::from_secs(10), || {
        (tasks::get(&skewed, &id)["statusMessage"] == "computing").then_some(())
    })
    .expect("the skewed node runs the attempt");
    // A node on the right time joins while the attempt runs on the skewed one.
    let (_dir, on_time) = node(&config);
    let seen = tasks::get(&on_time, &id);
    assert_eq!(
        seen["status"], "working",
        "not expired on the other node: {seen}"
    );
    let done = wait_terminal(&on_time, &id, Duration::from_secs(15));
    assert_eq!(done["status"], "completed", "{done}");
    let attempts = cluster
        .sql(
            &name,
            &format!("SELECT attempt, outcome FROM attempts WHERE task_id = '{id}'"),
        )
        .unwrap();
    assert_eq!(
        attempts.trim(),
        "1|completed",
        "one attempt, never reclaimed"
    );
}

#[test]
fn creations_at_once_share_transactions_and_each_is_committed_when_acknowledged() {
    let Some((cluster, name)) =
        database("creations_at_once_share_transactions_and_each_is_committed_when_acknowledged")
    else {
        return;
    };
    let config = node_config(&cluster.url(&name));
    let (_a_dir, a) = node(&config);
    let (_b_dir, b) = node(&config);
    const CREATIONS: usize = 48;
    let start = std::sync::Barrier::new(CREATIONS);
    let ids: Vec<String> = std::thread::scope(|scope| {
        let creators: Vec<_> = (0..CREATIONS)
            .map(|_| {
                scope.spawn(|| {
                    start.wait();
                    // Long enough that the two attempts claimed stay running: the
                    // other tasks' rows stay as their creation wrote them.
                    tasks::create(&a, "slow_compute", json!({"seconds": 60}), &[])
                })
            })
            .collect();
        creators
            .into_iter()
            .map(|creator| creator.join().unwrap())
            .collect()
    });
    let mut distinct = ids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), CREATIONS, "{ids:?}");
    // Acknowledged means committed: the other node finds every task at once.
    for id in &ids {
        let task = tasks::get(&b, id);
        assert!(
            ["working", "completed"].contains(&task["status"].as_str().unwrap_or("")),
            "{task}"
        );
    }
    // Tasks created at once were written by fewer transactions than tasks (the row's
    // `xmin`; the two attempts running have rewritten theirs since, at most).
    let list = ids
        .iter()
        .map(|id| format!("'{id}'"))
        .collect::<Vec<_>>()
        .join(",");
    let writers = cluster
        .sql(
            &name,
            &format!("SELECT COUNT(DISTINCT xmin::text) FROM tasks WHERE id IN ({list})"),
        )
        .unwrap();
    let writers: usize = writers.trim().parse().unwrap();
    assert!(
        writers < CREATIONS,
        "{writers} transactions for {CREATIONS} creations"
    );
}

/// The sessions on `database` other than the asking one: their backend pids, sorted.
fn sessions(cluster: &Cluster, database: &str) -> Vec<String> {
    cluster
        .sql(
            database,
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
             AND pid <> pg_backend_pid() ORDER BY pid",
        )
        .expect("pg_stat_activity")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A pooled connection that carried a row over 1 MiB is closed when it goes back to the
/// pool (the client would keep its buffers that large), and the pool opens another;
/// one that carried small rows is kept. One pooled connection here, so that every
/// request runs on it.
#[test]
fn a_pooled_connection_that_carried_a_large_result_is_replaced() {
    let Some((cluster, name)) =
        database("a_pooled_connection_that_carried_a_large_result_is_replaced")
    else {
        return;
    };
    let config = format!(
        "{}[[tools]]\nname = \"big\"\ndescription = \"prints 2 MB\"\n\
         command = ['sh', '-c', 'cat > /dev/null; head -c 2000000 /dev/zero | tr \"\\0\" a; echo']\n\
         max_output_bytes = 2100000\n",
        node_config(&cluster.url(&name)).replace("pool_size = 4", "pool_size = 1")
    );
    let (_dir, server) = node(&config);
    let big = tasks::create(&server, "big", json!({}), &[]);
    let small = tasks::create(&server, "slow_compute", json!({"seconds": 0}), &[]);
    assert_eq!(
        wait_terminal(&server, &big, Duration::from_secs(10))["status"],
        "completed"
    );
    assert_eq!(
        wait_terminal(&server, &small, Duration::from_secs(10))["status"],
        "completed"
    );
    tasks::get(&server, &small);
    let settled = sessions(cluster, &name);
    for _ in 0..3 {
        tasks::get(&server, &small);
    }
    assert_eq!(
        sessions(cluster, &name),
        settled,
        "small rows: the same connection"
    );

    let answer = tasks::get_raw(&server, &big, &[]);
    assert!(answer.body.len() > 2_000_000, "{} bytes", answer.body.len());
    tasks::get(&server, &small);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let now = sessions(cluster, &name);
        let gone = settled.iter().filter(|pid| !now.contains(pid)).count();
        let new = now.iter().filter(|pid| !settled.contains(pid)).count();
        if gone == 1 && new == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "after a 2 MB row: sessions {settled:?} became {now:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
