//! `subscriptions/listen` with task ids: hints from the outbox, re-read with the
//! subscriber's identity, bounded streams, graceful closing.

use std::time::Duration;

use crate::common::tasks::{self, wait_terminal};
use crate::common::{self, postgres, tasks_caps, Listen, Server};
use serde_json::{json, Value};

const CONFIG: &str = "[builtin]\nsets = [\"conformance\", \"testing\"]\n\
    [workers]\nthreads = 4\njanitor_interval_ms = 50\nshutdown_grace_ms = 200\n";
const SECOND: Duration = Duration::from_secs(1);

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

/// The params of a `notifications/tasks` message, without the subscription `_meta`.
fn task_params(message: &Value) -> Value {
    assert_eq!(message["method"], "notifications/tasks", "{message}");
    assert_eq!(
        message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        77
    );
    let mut params = message["params"].clone();
    params.as_object_mut().unwrap().remove("_meta");
    params
}

/// `tasks/get` as a notification carries it (no `resultType`).
fn snapshot(server: &Server, id: &str) -> Value {
    let mut task = tasks::get(server, id);
    task.as_object_mut().unwrap().remove("resultType");
    task
}

#[test]
fn a_subscriber_follows_a_task_through_input_to_completion_with_tasks_get_payloads() {
    let server = Server::start(CONFIG);
    let id = tasks::create(
        &server,
        "approval_then_work",
        json!({"prepare_seconds": 0.5, "work_seconds": 0.5}),
        &[],
    );
    let mut listen = Listen::open(&server, json!({"taskIds": [id]}), tasks_caps(), &[]);
    assert_eq!(listen.status, 200);
    let ack = listen.next_message(5 * SECOND).unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]));

    let working = task_params(&listen.next_message(5 * SECOND).unwrap());
    assert_eq!(working["status"], "working");
    assert_eq!(working["statusMessage"], "prepared; asking for approval");

    let asking = task_params(&listen.next_message(5 * SECOND).unwrap());
    assert_eq!(asking["status"], "input_required");
    assert_eq!(asking, snapshot(&server, &id), "identical to tasks/get");

    tasks::update(
        &server,
        &id,
        json!({"approval": accept(json!({"approved": true}))}),
        &[],
    )
    .result();
    let resumed = task_params(&listen.next_message(5 * SECOND).unwrap());
    assert_eq!(resumed["status"], "working");
    let done = task_params(&listen.next_message(5 * SECOND).unwrap());
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"]["resultType"], "complete");
    assert_eq!(done, snapshot(&server, &id), "identical to tasks/get");
}

const KEYS: &str = "[[auth.tokens]]\nprincipal = \"alice\"\n\
    sha256 = \"9c220f200955d76c0a38d308225e0ef10c5f971acaf2f8d1d8f732affa5bd1dc\"\n\
    [[auth.tokens]]\nprincipal = \"bob\"\n\
    sha256 = \"97dd3707015dcf069cf73022ed7173b1165db6eff24b441cb57fd069a8c4e525\"\n";

#[test]
fn a_foreign_task_is_left_out_of_the_acknowledgement_and_never_notified() {
    let server = Server::start(&format!("{CONFIG}{KEYS}"));
    let as_alice = [("Authorization", "Bearer alice-token")];
    let as_bob = [("Authorization", "Bearer bob-token")];
    let bobs = tasks::create(&server, "slow_compute", json!({"seconds": 0.3}), &as_bob);
    let alices = tasks::create(&server, "slow_compute", json!({"seconds": 60}), &as_alice);
    let mut alice = Listen::open(
        &server,
        json!({"taskIds": [bobs, alices, "no-such-task"], "toolsListChanged": true}),
        tasks_caps(),
        &as_alice,
    );
    let ack = alice.next_message(5 * SECOND).unwrap();
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([alices]),
        "only her own task"
    );
    // Bob hears about his task completing; by then the hint has been published to
    // every stream, so anything Alice got would already be queued before the next
    // list change.
    let mut bob = Listen::open(&server, json!({"taskIds": [bobs]}), tasks_caps(), &as_bob);
    bob.next_message(5 * SECOND).unwrap();
    let completed = (0..5)
        .filter_map(|_| bob.next_message(5 * SECOND))
        .map(|message| task_params(&message))
        .find(tasks::is_terminal)
        .expect("Bob hears his task end");
    assert_eq!(completed["status"], "completed");
    server
        .request_with(
            "tools/call",
            json!({"name": "test_trigger_tool_change"}),
            json!({}),
            &as_alice,
        )
        .result();
    // Alice may hear about her own task; never about Bob's. The list change comes
    // after anything the hub queued for her before it.
    loop {
        let next = alice
            .next_message(5 * SECOND)
            .expect("the list change arrives");
        if next["method"] == "notifications/tools/list_changed" {
            break;
        }
        assert_eq!(
            task_params(&next)["taskId"],
            alices.as_str(),
            "not Bob's task: {next}"
        );
    }
    tasks::cancel(&server, &alices, &as_alice).result();
}

#[test]
fn listening_for_tasks_requires_the_extension() {
    let server = Server::start(CONFIG);
    let response = server.request(
        "subscriptions/listen",
        json!({"notifications": {"taskIds": ["x"]}}),
        json!({}),
    );
    let error = response.expect_error(400, -32021);
    assert_eq!(
        error["data"]["requiredCapabilities"],
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    );
}

#[test]
fn a_task_finishing_between_listen_and_acknowledgement_is_not_lost() {
    // The seed's recipe: subscribe first, then poll. Whichever way the race goes, the
    // client learns the terminal state.
    let server = Server::start(CONFIG);
    for _ in 0..10 {
        let id = tasks::create(&server, "slow_compute", json!({"seconds": 0.01}), &[]);
        let mut listen = Listen::open(&server, json!({"taskIds": [id]}), tasks_caps(), &[]);
        listen.next_message(5 * SECOND).unwrap();
        let polled = tasks::get(&server, &id);
        if tasks::is_terminal(&polled) {
            continue;
        }
        let terminal = (0..5)
            .filter_map(|_| listen.next_message(5 * SECOND))
            .map(|message| task_params(&message))
            .find(tasks::is_terminal);
        assert!(
            terminal.is_some(),
            "a terminal notification follows a working poll"
        );
        wait_terminal(&server, &id, 5 * SECOND);
    }
}

#[test]
fn streams_get_keep_alives_and_end_gracefully_at_their_lifetime() {
    let server = Server::start(&format!(
        "{CONFIG}[notifications]\nkeep_alive_ms = 100\nmax_stream_lifetime_ms = 700\n"
    ));
    let mut listen = Listen::open(&server, json!({"toolsListChanged": true}), json!({}), &[]);
    listen.next_message(5 * SECOND).unwrap();
    let comment = (0..20)
        .filter_map(|_| listen.next_line(SECOND))
        .find(|line| line.starts_with(':'));
    assert!(comment.is_some(), "a keep-alive comment arrives");
    let rest = listen.drain(5 * SECOND);
    let last = rest.last().expect("the graceful answer");
    assert_eq!(last["id"], 77);
    assert_eq!(last["result"]["resultType"], "complete");
    assert_eq!(
        last["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        77
    );
}

#[test]
fn subscriptions_per_identity_are_capped() {
    let server = Server::start(&format!(
        "{CONFIG}[notifications]\nmax_subscriptions_per_identity = 2\n"
    ));
    let mut first = Listen::open(&server, json!({"toolsListChanged": true}), json!({}), &[]);
    let mut second = Listen::open(&server, json!({"toolsListChanged": true}), json!({}), &[]);
    first.next_message(5 * SECOND).unwrap();
    second.next_message(5 * SECOND).unwrap();
    let third = server.request(
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
        json!({}),
    );
    assert_eq!(third.status, 429);
}

#[test]
fn shutdown_ends_every_stream_with_its_graceful_answer() {
    let mut server = Server::start(CONFIG);
    let mut streams: Vec<Listen> = (0..3)
        .map(|_| Listen::open(&server, json!({"promptsListChanged": true}), json!({}), &[]))
        .collect();
    for stream in &mut streams {
        stream.next_message(5 * SECOND).unwrap();
    }
    assert!(server.terminate(10 * SECOND));
    for stream in &mut streams {
        let rest = stream.drain(5 * SECOND);
        let last = rest.last().expect("a final message");
        assert_eq!(last["result"]["resultType"], "complete", "{last}");
    }
}

/// With no subscription following any task the relay reads nothing, and the janitor
/// still counts the outbox rows as delivered and prunes them: on SQLite all but the
/// newest (which keeps `seq` growing).
#[test]
fn outbox_rows_nobody_listens_for_are_pruned() {
    let server = Server::start(CONFIG);
    let ids: Vec<String> = (0..20)
        .map(|_| tasks::create(&server, "slow_compute", json!({"seconds": 0.01}), &[]))
        .collect();
    for id in &ids {
        wait_terminal(&server, id, 10 * SECOND);
    }
    let outbox_rows = || -> Option<u64> {
        server
            .get("/metrics")
            .text()
            .lines()
            .find_map(|line| line.strip_prefix("mcp_taskd_outbox_rows "))
            .and_then(|value| value.trim().parse().ok())
    };
    // SQLite keeps the newest row, whose `seq` the next one continues; PostgreSQL's
    // outbox positions are transaction ids: it may keep that row or none.
    let pruned_enough = |rows: Option<u64>| match postgres::backend() {
        postgres::Backend::Sqlite => rows == Some(1),
        postgres::Backend::Postgres => rows.is_some_and(|rows| rows <= 1),
    };
    let pruned = common::poll_until(10 * SECOND, || pruned_enough(outbox_rows()).then_some(()));
    assert!(pruned.is_some(), "outbox rows left: {:?}", outbox_rows());
}
