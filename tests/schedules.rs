//! Schedules (issue 49) through the real binary, on either backend (and two PostgreSQL
//! nodes): an `every = "1s"` schedule across a `kill -9` at a slot's time makes each
//! slot's task once, and what it missed is exactly what the store says it missed
//! (`missed = "skip"` and `"run_once"`); `overlap` skips, queues or cancels. What happened
//! is read from the store (`tasks list --json`, `tasks show --json`, `schedules list
//! --json`), not from the test's clock.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::common::{poll_until, postgres, tasks, Server};
use taskd_base::clock::{now_ms, parse_rfc3339};

const LIMIT: Duration = Duration::from_secs(30);

/// Runs `mcp-taskd ARGS` on the server of harness dir `dir`.
fn run(dir: &Path, args: &[&str]) -> Output {
    crate::common::binary()
        .args(args)
        .arg("--config")
        .arg(dir.join("config.toml"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("run mcp-taskd")
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let output = run(dir, args);
    assert!(
        output.status.success(),
        "mcp-taskd {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 output")
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

fn ms(value: &Value) -> i64 {
    parse_rfc3339(value.as_str().expect("a time")).expect("an RFC 3339 time")
}

/// A task a schedule started, as `tasks list --json` shows it.
#[derive(Debug, Clone)]
struct Run {
    id: String,
    slot: i64,
    status: String,
    created: i64,
    updated: i64,
}

/// Every task of schedule `name`, by slot; no slot twice.
fn runs(dir: &Path, name: &str) -> Vec<Run> {
    let listed = json_lines(&ok(dir, &["tasks", "list", "--json", "--limit", "100000"]));
    let mut runs: Vec<Run> = listed
        .iter()
        .filter(|task| task["schedule"]["name"] == name)
        .map(|task| Run {
            id: task["id"].as_str().expect("id").to_owned(),
            slot: ms(&task["schedule"]["slot"]),
            status: task["status"].as_str().expect("status").to_owned(),
            created: ms(&task["createdAt"]),
            updated: ms(&task["updatedAt"]),
        })
        .collect();
    runs.sort_by_key(|run| run.slot);
    let slots: BTreeSet<i64> = runs.iter().map(|run| run.slot).collect();
    assert_eq!(slots.len(), runs.len(), "a slot has two tasks: {runs:?}");
    runs
}

/// `schedules list --json`, by name.
fn schedule(dir: &Path, name: &str) -> Value {
    json_lines(&ok(dir, &["schedules", "list", "--json"]))
        .into_iter()
        .find(|schedule| schedule["name"] == name)
        .unwrap_or_else(|| panic!("no schedule {name}"))
}

fn count(schedule: &Value, what: &str) -> i64 {
    schedule["counts"][what].as_i64().expect("a count")
}

/// How many every-second slots from the first task's to the last slot the schedule
/// reached (whether it started a task or not) have no task.
fn absent(runs: &[Run], schedule: &Value) -> i64 {
    let first = runs[0].slot;
    let last = ms(&schedule["last"]["slot"]).max(runs[runs.len() - 1].slot);
    (last - first) / 1000 + 1 - runs.len() as i64
}

/// Waits until schedule `name` has `n` tasks of slots after `after` (Unix ms).
fn wait_runs(dir: &Path, name: &str, after: i64, n: usize) {
    poll_until(LIMIT, || {
        (runs(dir, name)
            .iter()
            .filter(|run| run.slot > after)
            .count()
            >= n)
            .then_some(())
    })
    .unwrap_or_else(|| panic!("schedule {name} made fewer than {n} tasks after {after}"));
}

/// Sleeps until just past the next whole second: a slot's time for `every = "1s"`.
fn sleep_to_next_second() {
    let now = now_ms();
    let next = (now / 1000 + 1) * 1000;
    std::thread::sleep(Duration::from_millis((next - now) as u64 + 2));
}

fn config(schedules: &str) -> String {
    format!(
        "[builtin]\nsets = [\"conformance\"]\n[workers]\nthreads = 8\nlease_ms = 1000\n\
         janitor_interval_ms = 50\nshutdown_grace_ms = 200\n{schedules}"
    )
}

fn every_second(name: &str, missed: &str) -> String {
    format!(
        "[[schedules]]\nname = \"{name}\"\ntool = \"slow_compute\"\n\
         arguments = {{ seconds = 0.05 }}\nevery = \"1s\"\nmissed = \"{missed}\"\n"
    )
}

/// Runs an every-second schedule for about ten seconds across a `kill -9` at a slot's
/// time and three seconds down; checks that every slot from the first to the last has
/// its task or is counted as not started, once.
fn across_a_kill(missed: &str) {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = temp.path();
    let config = config(&every_second("tick", missed));
    let mut server = Server::start_in(dir, &config);
    let begun = now_ms();
    wait_runs(dir, "tick", begun, 4);
    sleep_to_next_second();
    server.kill9();
    let killed = now_ms();
    std::thread::sleep(Duration::from_secs(3));
    let restarted = now_ms();
    let mut server = Server::start_in(dir, &config);
    wait_runs(dir, "tick", restarted, 3);
    assert!(server.terminate(LIMIT), "the server stops");

    let runs = runs(dir, "tick");
    let tick = schedule(dir, "tick");
    let absent = absent(&runs, &tick);
    let missed_count = count(&tick, "missed");
    let not_started = count(&tick, "skipped") + count(&tick, "refused");
    assert!(
        runs.iter().any(|run| run.slot < killed) && runs.iter().any(|run| run.slot > restarted),
        "tasks before the kill and after the restart: {runs:?}"
    );
    assert!(
        missed_count >= 2,
        "three seconds down miss at least two slots: {tick}"
    );
    // `run_once`: the restart's first task stands for the slots it missed, its own
    // included; `skip`: each missed slot is absent.
    let caught_up = i64::from(missed == "run_once");
    assert_eq!(
        absent,
        missed_count + not_started - caught_up,
        "{} tasks: {runs:?}\n{tick}",
        runs.len()
    );
    assert_eq!(count(&tick, "created"), runs.len() as i64, "{tick}");
    // Nothing ran twice, and what ran ran to its end.
    for run in &runs {
        assert_eq!(run.status, "completed", "{run:?}");
    }
}

#[test]
fn every_second_across_a_kill_skips_the_slots_missed_while_down() {
    across_a_kill("skip");
}

#[test]
fn every_second_across_a_kill_runs_once_for_the_slots_missed_while_down() {
    across_a_kill("run_once");
}

/// The attempts of task `id`: (start, end), from the store.
fn attempts(dir: &Path, id: &str) -> Vec<(i64, Option<i64>)> {
    let task: Value =
        serde_json::from_str(&ok(dir, &["tasks", "show", id, "--json"])).expect("a task");
    task["attempts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|attempt| {
            let end = match &attempt["endedAt"] {
                Value::Null => None,
                at => Some(ms(at)),
            };
            (ms(&attempt["startedAt"]), end)
        })
        .collect()
}

#[test]
fn overlap_skips_queues_or_cancels_the_previous_run() {
    let slow = |name: &str, overlap: &str| {
        format!(
            "[[schedules]]\nname = \"{name}\"\ntool = \"slow_compute\"\n\
             arguments = {{ seconds = 2.5 }}\nevery = \"1s\"\noverlap = \"{overlap}\"\n"
        )
    };
    let config = config(&format!(
        "{}{}{}",
        slow("skipping", "skip"),
        slow("queueing", "queue"),
        slow("cancelling", "cancel_previous")
    ));
    let mut server = Server::start(&config);
    let dir = server.dir.clone();
    let dir = dir.as_path();
    let begun = now_ms();
    wait_runs(dir, "cancelling", begun, 6);
    // The queued runs wait for each other, and a client reading one is told so (the
    // schedule's identity is the anonymous one every client has without tokens).
    let waiting = runs(dir, "queueing")
        .iter()
        .filter(|run| run.status == "working")
        .any(|run| {
            tasks::get(&server, &run.id)["statusMessage"]
                == "waiting: another run for schedule queueing is in progress"
        });
    assert!(waiting, "no queued run says it waits for the previous one");
    assert!(server.terminate(LIMIT), "the server stops");

    // skip: a run starts only once the previous one has ended; the slots between are
    // counted as skipped.
    let skipping = runs(dir, "skipping");
    assert!(skipping.len() >= 2, "{skipping:?}");
    for pair in skipping.windows(2) {
        assert!(
            pair[1].created >= pair[0].updated && pair[0].status == "completed",
            "a run started while the previous one ran: {pair:?}"
        );
    }
    let marked = schedule(dir, "skipping");
    let skipped = count(&marked, "skipped");
    assert_eq!(
        absent(&skipping, &marked),
        skipped,
        "{skipping:?}\n{marked}"
    );
    assert!(skipped >= 2);

    // queue: every slot has its task, and their attempts never overlap.
    let queueing = runs(dir, "queueing");
    let span = (queueing[queueing.len() - 1].slot - queueing[0].slot) / 1000 + 1;
    assert_eq!(
        span,
        queueing.len() as i64,
        "a slot without its task: {queueing:?}"
    );
    let mut intervals: Vec<(i64, i64)> = queueing
        .iter()
        .flat_map(|run| attempts(dir, &run.id))
        .map(|(start, end)| (start, end.unwrap_or(i64::MAX)))
        .collect();
    intervals.sort();
    assert!(intervals.len() >= 2, "{intervals:?}");
    for pair in intervals.windows(2) {
        assert!(
            pair[1].0 >= pair[0].1,
            "two queued runs at once: {intervals:?}"
        );
    }

    // cancel_previous: every slot has its task, and each one's successor cancelled it.
    let cancelling = runs(dir, "cancelling");
    let span = (cancelling[cancelling.len() - 1].slot - cancelling[0].slot) / 1000 + 1;
    assert_eq!(span, cancelling.len() as i64, "{cancelling:?}");
    for run in &cancelling[..cancelling.len() - 1] {
        assert_eq!(run.status, "cancelled", "{cancelling:?}");
    }
}

#[test]
fn a_schedule_runs_on_two_postgresql_nodes_once_per_slot_across_a_kill_of_the_scheduler() {
    let Some(cluster) = postgres::required_by(
        "a_schedule_runs_on_two_postgresql_nodes_once_per_slot_across_a_kill_of_the_scheduler",
    ) else {
        return;
    };
    let url = cluster.url(&cluster.create_database());
    let config = format!(
        "{}[store]\nbackend = \"postgres\"\nurl = \"{url}\"\npool_size = 8\n",
        config(&every_second("tick", "skip"))
    );
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let info = [("RUST_LOG", std::ffi::OsStr::new("info"))];
    let mut a = Server::start_in_with_env(dir_a.path(), &config, &info);
    let mut b = Server::start_in_with_env(dir_b.path(), &config, &info);
    let begun = now_ms();
    wait_runs(dir_a.path(), "tick", begun, 4);
    // The node that schedules is the upkeep leader; kill it at a slot's time.
    let leads = |server: &Server| {
        server
            .log_lines()
            .iter()
            .any(|line| line.contains("now runs the store-wide upkeep"))
    };
    let leader_is_a = poll_until(LIMIT, || {
        if leads(&a) {
            Some(true)
        } else {
            leads(&b).then_some(false)
        }
    })
    .expect("a node leads");
    let (leader, survivor) = if leader_is_a {
        (&mut a, dir_b.path())
    } else {
        (&mut b, dir_a.path())
    };
    sleep_to_next_second();
    leader.kill9();
    let killed = now_ms();
    wait_runs(survivor, "tick", killed, 4);
    let runs = runs(survivor, "tick");
    let tick = schedule(survivor, "tick");
    assert_eq!(
        absent(&runs, &tick),
        count(&tick, "missed") + count(&tick, "skipped") + count(&tick, "refused"),
        "{runs:?}\n{tick}"
    );
}

/// "admin-token" has the admin role; "alice-token" is alice's of tenant a.
const TOKENS: &str = "[[auth.tokens]]\nprincipal = \"boss\"\nroles = [\"admin\"]\n\
    sha256 = \"10a4c7c9fc5206d6f36dc6944a81bb6f4a3cb0e25014ae3b12e6c3e52712292a\"\n\
    [[auth.tokens]]\nprincipal = \"alice\"\ntenant = \"a\"\n\
    sha256 = \"9c220f200955d76c0a38d308225e0ef10c5f971acaf2f8d1d8f732affa5bd1dc\"\n";

#[test]
fn schedules_are_listed_for_admins_and_their_tasks_belong_to_their_identity() {
    let config = config(&format!(
        "{TOKENS}[[schedules]]\nname = \"nightly\"\ntool = \"slow_compute\"\n\
         arguments = {{ seconds = 0 }}\ncron = \"0 3 * * *\"\ntimezone = \"Europe/Berlin\"\n\
         principal = \"alice\"\ntenant = \"a\"\n\
         [[schedules]]\nname = \"often\"\ntool = \"slow_compute\"\n\
         arguments = {{ seconds = 0 }}\nevery = \"1s\"\nprincipal = \"alice\"\ntenant = \"a\"\n"
    ));
    let server = Server::start(&config);
    let dir = server.dir.clone();
    let api = |token: &str| {
        let request = server.raw_request(
            "GET",
            "/dashboard/api/schedules",
            &[("Authorization", token)],
            b"",
        );
        server.exchange(&request)
    };
    assert_eq!(api("Bearer alice-token").status, 403);
    let listed = api("Bearer admin-token");
    assert_eq!(listed.status, 200, "{}", listed.text());
    let listed = listed.json();
    let nightly = &listed[0];
    assert_eq!(nightly["timing"], "cron \"0 3 * * *\" in Europe/Berlin");
    let next = ms(&nightly["nextRun"]);
    // 03:00 in Berlin is 01:00 or 02:00 UTC, within a day.
    let hour = next.rem_euclid(86_400_000) / 3_600_000;
    assert!(
        (1..=2).contains(&hour) && next - now_ms() <= 86_400_000,
        "{nightly}"
    );
    assert_eq!(nightly["last"], Value::Null);
    assert_eq!(schedule(&dir, "nightly")["principal"], "alice");

    // The every-second schedule's tasks are alice's: her token reads them, the admin's
    // (another identity) finds nothing.
    wait_runs(&dir, "often", now_ms(), 1);
    let run = runs(&dir, "often").pop().expect("a run");
    let shown = ok(&dir, &["tasks", "show", &run.id]);
    assert!(
        shown.contains("often, the slot of 20"),
        "tasks show names the schedule: {shown}"
    );
    let read = |token: &str| {
        server.request_with(
            "tasks/get",
            serde_json::json!({"taskId": run.id}),
            crate::common::tasks_caps(),
            &[("Authorization", token)],
        )
    };
    assert_eq!(
        read("Bearer alice-token").result()["taskId"],
        run.id.as_str()
    );
    assert!(read("Bearer admin-token").json()["error"].is_object());
    // So are the tasks an operator starts as alice.
    let started = ok(
        &dir,
        &[
            "tasks",
            "start",
            "slow_compute",
            "--args",
            r#"{"seconds": 0}"#,
            "--principal",
            "alice",
            "--tenant",
            "a",
        ],
    );
    let started = started.trim();
    let got = server.request_with(
        "tasks/get",
        serde_json::json!({"taskId": started}),
        crate::common::tasks_caps(),
        &[("Authorization", "Bearer alice-token")],
    );
    assert_eq!(got.result()["taskId"], started);
}

#[test]
fn a_reload_adds_changes_and_removes_schedules() {
    let schedule = |name: &str, every: &str| {
        format!(
            "[[schedules]]\nname = \"{name}\"\ntool = \"slow_compute\"\n\
             arguments = {{ seconds = 0 }}\nevery = \"{every}\"\n"
        )
    };
    let server = Server::start(&config(&format!(
        "{}{}",
        schedule("kept", "1s"),
        schedule("dropped", "1s")
    )));
    let dir = server.dir.clone();
    wait_runs(&dir, "dropped", now_ms(), 2);
    // "kept" slows to every 2 s, "dropped" goes, "added" comes.
    server.rewrite_config(&config(&format!(
        "{}{}",
        schedule("kept", "2s"),
        schedule("added", "1s")
    )));
    let said = ok(&dir, &["reload"]);
    for line in [
        "schedules added: added",
        "schedules removed: dropped",
        "schedules changed: kept",
    ] {
        assert!(said.contains(line), "{said}");
    }
    let reloaded = now_ms();
    wait_runs(&dir, "added", reloaded, 2);
    wait_runs(&dir, "kept", reloaded, 2);
    let listed: Vec<String> = json_lines(&ok(&dir, &["schedules", "list", "--json"]))
        .iter()
        .map(|schedule| schedule["name"].as_str().expect("name").to_owned())
        .collect();
    assert_eq!(listed, ["kept", "added"]);
    // Nothing of "dropped" after the reload (a pass under way may have made one more).
    let dropped = runs(&dir, "dropped");
    assert!(
        dropped.iter().all(|run| run.slot <= reloaded + 1000),
        "{dropped:?}"
    );
    // "kept" went on at its new pace: whole even seconds.
    let kept = runs(&dir, "kept");
    let after: Vec<i64> = kept
        .iter()
        .filter(|run| run.slot > reloaded + 1000)
        .map(|run| run.slot)
        .collect();
    assert!(
        !after.is_empty() && after.iter().all(|slot| slot % 2000 == 0),
        "{kept:?}"
    );
}
