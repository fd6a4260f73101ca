// Over 600 lines: one test per rule of the dashboard's API, over shared helpers.
//! The dashboard's JSON API through the real binary: who may use it (admin-role tokens,
//! browser sessions, nobody else on a server with tokens), what protects its actions
//! from cross-site requests, cancel and re-run, keyset paging of the task list, and the
//! task page's live tail of a task's output, and the webhooks view.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::tasks;
use crate::common::{poll_until, HttpResponse, Server};

/// "admin-token" has the admin role, "alice-token" does not.
pub(crate) const CONFIG: &str = "[builtin]\nsets = [\"conformance\", \"testing\"]\n\
    [workers]\nthreads = 2\nshutdown_grace_ms = 200\n\
    [[auth.tokens]]\nprincipal = \"boss\"\nroles = [\"admin\"]\n\
    sha256 = \"10a4c7c9fc5206d6f36dc6944a81bb6f4a3cb0e25014ae3b12e6c3e52712292a\"\n\
    [[auth.tokens]]\nprincipal = \"alice\"\ntenant = \"a\"\n\
    sha256 = \"9c220f200955d76c0a38d308225e0ef10c5f971acaf2f8d1d8f732affa5bd1dc\"\n";
pub(crate) const ADMIN: &str = "Bearer admin-token";
pub(crate) const ALICE: &str = "Bearer alice-token";

pub(crate) fn request(
    server: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> HttpResponse {
    server.exchange(&server.raw_request(method, path, headers, b""))
}

pub(crate) fn get(server: &Server, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
    request(server, "GET", path, headers)
}

pub(crate) fn admin_get(server: &Server, path: &str) -> Value {
    let response = get(server, path, &[("Authorization", ADMIN)]);
    assert_eq!(response.status, 200, "{path}: {}", response.text());
    response.json()
}

pub(crate) fn origin(server: &Server) -> String {
    format!("http://{}", server.addr)
}

/// Logs in with `token` through the login form's request; the cookie pair to send back.
pub(crate) fn login(server: &Server, token: &str) -> Result<String, u16> {
    let body = json!({ "token": token }).to_string();
    let origin = origin(server);
    let response = server.post_raw(
        "/dashboard/login",
        &[
            ("Origin", origin.as_str()),
            ("Content-Type", "application/json"),
        ],
        body.as_bytes(),
    );
    if response.status != 200 {
        return Err(response.status);
    }
    let cookie = response.header("Set-Cookie").expect("a session cookie");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/dashboard"] {
        assert!(cookie.contains(attribute), "{attribute} missing: {cookie}");
    }
    Ok(cookie.split(';').next().expect("name=value").to_owned())
}

#[test]
fn only_admin_tokens_reach_the_api_and_other_tokens_keep_mcp() {
    let server = Server::start(CONFIG);
    let overview = "/dashboard/api/overview";
    assert_eq!(get(&server, overview, &[]).status, 401, "no token");
    assert_eq!(
        get(&server, overview, &[("Authorization", "Bearer wrong")]).status,
        401
    );
    assert_eq!(
        get(&server, overview, &[("Authorization", ALICE)]).status,
        403,
        "a token without the admin role"
    );
    assert_eq!(login(&server, "alice-token"), Err(403));
    assert_eq!(login(&server, "nobody"), Err(401));
    // The same token still serves MCP.
    let task = tasks::create(
        &server,
        "slow_compute",
        json!({"seconds": 0}),
        &[("Authorization", ALICE)],
    );
    assert!(!task.is_empty());
    let overview = admin_get(&server, overview);
    assert!(overview["tasksByStatus"].is_object(), "{overview}");
    assert!(overview["workers"]["threads"].is_number(), "{overview}");
    // The page itself is served to anyone (it holds no data), with a strict CSP.
    let page = get(&server, "/dashboard/", &[]);
    assert_eq!(page.status, 200);
    let csp = page.header("Content-Security-Policy").expect("a CSP");
    assert!(csp.contains("default-src 'self'") && csp.contains("script-src 'self'"));
    assert!(!page.text().contains("<script>"), "no inline script");
}

/// Ten failed logins from one address lock that address out of the login form for the
/// rest of the minute, for the right token too; bearer access is not the form's.
#[test]
fn failed_logins_lock_the_form_for_that_address() {
    let server = Server::start(CONFIG);
    for _ in 0..10 {
        assert_eq!(login(&server, "guess"), Err(401));
    }
    let origin = origin(&server);
    let locked = server.post_raw(
        "/dashboard/login",
        &[
            ("Origin", origin.as_str()),
            ("Content-Type", "application/json"),
        ],
        json!({ "token": "admin-token" }).to_string().as_bytes(),
    );
    assert_eq!(locked.status, 429, "{}", locked.text());
    let retry_after: u64 = locked
        .header("Retry-After")
        .and_then(|seconds| seconds.parse().ok())
        .expect("Retry-After in seconds");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(
        get(
            &server,
            "/dashboard/api/overview",
            &[("Authorization", ADMIN)]
        )
        .status,
        200,
        "an admin bearer token still works"
    );
}

#[test]
fn browser_actions_need_the_sessions_csrf_token_and_an_origin() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start_in_with_env(dir.path(), CONFIG, &[("RUST_LOG", OsStr::new("info"))]);
    let task = tasks::create(
        &server,
        "slow_compute",
        json!({"seconds": 60}),
        &[("Authorization", ALICE)],
    );
    let cookie = login(&server, "admin-token").expect("an admin logs in");
    let session = get(&server, "/dashboard/api/session", &[("Cookie", &cookie)]);
    assert_eq!(session.status, 200, "{}", session.text());
    let csrf = session.json()["csrf"]
        .as_str()
        .expect("a CSRF token")
        .to_owned();
    let cancel = format!("/dashboard/api/tasks/{task}/cancel");
    let ours = origin(&server);
    let refused = [
        vec![("Cookie", cookie.as_str()), ("Origin", ours.as_str())],
        vec![("Cookie", cookie.as_str()), ("X-CSRF-Token", csrf.as_str())],
        vec![
            ("Cookie", cookie.as_str()),
            ("Origin", ours.as_str()),
            ("X-CSRF-Token", "0000"),
        ],
        vec![
            ("Cookie", cookie.as_str()),
            ("Origin", "https://evil.example"),
            ("X-CSRF-Token", csrf.as_str()),
        ],
    ];
    for headers in &refused {
        let response = request(&server, "POST", &cancel, headers);
        assert_eq!(response.status, 403, "{headers:?}: {}", response.text());
    }
    let path = format!("/dashboard/api/tasks/{task}");
    assert_eq!(admin_get(&server, &path)["status"], "working");
    let accepted = request(
        &server,
        "POST",
        &cancel,
        &[
            ("Cookie", &cookie),
            ("Origin", &ours),
            ("X-CSRF-Token", &csrf),
        ],
    );
    assert_eq!(accepted.status, 200, "{}", accepted.text());
    let cancelled = poll_until(Duration::from_secs(10), || {
        let detail = admin_get(&server, &path);
        (detail["status"] == "cancelled").then_some(detail)
    });
    assert!(cancelled.is_some(), "the task ends cancelled");
    assert!(
        server
            .log_lines()
            .iter()
            .any(|line| line.contains("dashboard: cancelled a task of tool slow_compute")),
        "the action is logged"
    );
    assert!(
        !server.log_lines().iter().any(|line| line.contains(&task)),
        "no task id in the log"
    );
}

#[test]
fn cancel_and_rerun_with_an_admin_token() {
    let server = Server::start(CONFIG);
    let auth = [("Authorization", ADMIN)];
    let done = tasks::create(
        &server,
        "slow_compute",
        json!({"seconds": 0}),
        &[("Authorization", ALICE)],
    );
    let finished = poll_until(Duration::from_secs(10), || {
        let detail = admin_get(&server, &format!("/dashboard/api/tasks/{done}"));
        (detail["status"] == "completed").then_some(())
    });
    assert!(finished.is_some(), "the first run completes");
    let rerun = request(
        &server,
        "POST",
        &format!("/dashboard/api/tasks/{done}/rerun"),
        &auth,
    );
    assert_eq!(rerun.status, 200, "{}", rerun.text());
    let new_id = rerun.json()["id"]
        .as_str()
        .expect("the new task")
        .to_owned();
    assert_ne!(new_id, done);
    let copy = admin_get(&server, &format!("/dashboard/api/tasks/{new_id}"));
    assert_eq!(copy["tool"], "slow_compute");
    assert_eq!(copy["principal"], "alice", "the copy keeps the binding");
    assert_eq!(
        copy["arguments"],
        json!({"seconds": 0}),
        "admins see arguments"
    );

    let running = tasks::create(
        &server,
        "slow_compute",
        json!({"seconds": 60}),
        &[("Authorization", ALICE)],
    );
    let cancel = request(
        &server,
        "POST",
        &format!("/dashboard/api/tasks/{running}/cancel"),
        &auth,
    );
    assert_eq!(cancel.status, 200, "{}", cancel.text());
    let ended = poll_until(Duration::from_secs(10), || {
        let detail = admin_get(&server, &format!("/dashboard/api/tasks/{running}"));
        (detail["status"] == "cancelled").then_some(())
    });
    assert!(ended.is_some(), "cancelled through the API");
    let missing = request(&server, "POST", "/dashboard/api/tasks/nope/rerun", &auth);
    assert_eq!(missing.status, 404);
}

#[test]
fn keyset_pages_list_every_task_once_newest_first() {
    let server = Server::start(CONFIG);
    let mut created = HashSet::new();
    for _ in 0..7 {
        created.insert(tasks::create(
            &server,
            "slow_compute",
            json!({"seconds": 0}),
            &[("Authorization", ALICE)],
        ));
    }
    let mut seen = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let mut path = "/dashboard/api/tasks?limit=3".to_owned();
        if let Some(cursor) = &before {
            path.push_str(&format!("&before={cursor}"));
        }
        let page = admin_get(&server, &path);
        let rows = page["tasks"].as_array().expect("rows");
        assert!(rows.len() <= 3);
        seen.extend(
            rows.iter()
                .map(|row| row["id"].as_str().expect("id").to_owned()),
        );
        match page["next"].as_str() {
            Some(next) => before = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 7, "{seen:?}");
    assert_eq!(seen.iter().cloned().collect::<HashSet<_>>(), created);
    assert!(
        seen.windows(2).all(|pair| pair[0] > pair[1]),
        "newest first"
    );
    let filtered = admin_get(&server, "/dashboard/api/tasks?tool=no_such_tool");
    assert_eq!(filtered["tasks"], json!([]));
    assert_eq!(filtered["next"], Value::Null);
    let by_principal = admin_get(&server, "/dashboard/api/tasks?principal=alice&limit=200");
    assert_eq!(by_principal["tasks"].as_array().map(Vec::len), Some(7));
}

#[test]
fn a_disabled_dashboard_is_not_there_and_a_foreign_host_is_refused() {
    let off = Server::start(&format!("{CONFIG}[dashboard]\nenabled = false\n"));
    let page = get(&off, "/dashboard/", &[]);
    assert_eq!(page.status, 404, "{}", page.text());
    let api = get(&off, "/dashboard/api/overview", &[("Authorization", ADMIN)]);
    assert_eq!(api.status, 404);

    let on = Server::start(CONFIG);
    let rebound = get(
        &on,
        "/dashboard/api/overview",
        &[("Host", "evil.example"), ("Authorization", ADMIN)],
    );
    assert_eq!(rebound.status, 403, "DNS rebinding: {}", rebound.text());
    let moved = get(&on, "/dashboard", &[]);
    assert_eq!(moved.status, 308);
    assert_eq!(moved.header("Location"), Some("/dashboard/"));
}

#[test]
fn the_task_page_shows_the_trace_id_and_the_viewer_link_template() {
    let config = format!(
        "{CONFIG}[telemetry]\ntrace_url = \"http://jaeger.local:16686/trace/{{trace_id}}\"\n"
    );
    let server = Server::start(&config);
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let created = crate::common::Rpc::tool("slow_compute", json!({"seconds": 0}))
        .caps(crate::common::tasks_caps())
        .meta(
            "traceparent",
            json!(format!("00-{trace_id}-00f067aa0ba902b7-01")),
        )
        .header("Authorization", ALICE)
        .send(&server)
        .result();
    let id = created["taskId"].as_str().expect("taskId");
    let session = admin_get(&server, "/dashboard/api/session");
    assert_eq!(
        session["traceUrl"],
        "http://jaeger.local:16686/trace/{trace_id}"
    );
    let task = admin_get(&server, &format!("/dashboard/api/tasks/{id}"));
    assert_eq!(task["traceId"], trace_id, "{task}");
    // The page builds the link from both (tests/browser covers the page itself).
    let app = get(&server, "/dashboard/app.js", &[]).text();
    assert!(app.contains("{trace_id}") && app.contains("fact-trace"));
}

/// Whether the browser session `cookie` still opens the API.
fn session_opens(server: &Server, cookie: &str) -> bool {
    let status = get(server, "/dashboard/api/session", &[("Cookie", cookie)]).status;
    assert!(status == 200 || status == 401, "{status}");
    status == 200
}

/// Logins per identity (issue 29): one beyond the share ends that identity's oldest,
/// never another identity's; a token's own share wins over the default; a logout ends
/// its login on the server, not only in its browser; each ending is counted.
#[test]
fn an_identitys_logins_beyond_its_share_end_its_own_oldest_and_a_logout_ends_one() {
    let config = format!(
        "{CONFIG}[dashboard]\nmax_logins_per_identity = 2\n\
         [[auth.tokens]]\nprincipal = \"ops\"\nroles = [\"admin\"]\nmax_dashboard_logins = 1\n\
         sha256 = \"d9310c002af91822beb0b3487d8b04f85bf6bf1f8a5496bff7d35fc7c5a29def\"\n"
    );
    let server = Server::start(&config);
    let ops = login(&server, "ops-token").expect("ops logs in");
    let first = login(&server, "admin-token").expect("boss logs in");
    let second = login(&server, "admin-token").expect("again");
    assert!(session_opens(&server, &first) && session_opens(&server, &second));
    // A third login of boss's (share 2) ends boss's oldest; ops's login stays.
    let third = login(&server, "admin-token").expect("a third time");
    assert!(!session_opens(&server, &first), "boss's oldest login ended");
    assert!(session_opens(&server, &second) && session_opens(&server, &third));
    assert!(
        session_opens(&server, &ops),
        "another identity's login stays"
    );
    // ops's own share is one.
    let ops_again = login(&server, "ops-token").expect("ops again");
    assert!(!session_opens(&server, &ops) && session_opens(&server, &ops_again));
    let refusals = server
        .get("/metrics")
        .text()
        .lines()
        .find(|line| line.starts_with("mcp_taskd_quota_refusals_total{quota=\"dashboard_logins\"}"))
        .map(str::to_owned);
    assert_eq!(
        refusals.as_deref(),
        Some("mcp_taskd_quota_refusals_total{quota=\"dashboard_logins\"} 2")
    );
    // A logout ends the login wherever its cookie is kept.
    let origin = origin(&server);
    let logout = server.post_raw(
        "/dashboard/logout",
        &[("Origin", origin.as_str()), ("Cookie", second.as_str())],
        b"",
    );
    assert_eq!(logout.status, 200);
    assert!(!session_opens(&server, &second), "logged out on the server");
    assert!(session_opens(&server, &third));
}

/// The dashboard lists each identity's unfinished tasks (as `mcp-taskd stats` does),
/// to admins only.
#[test]
fn the_identities_view_shows_each_identitys_unfinished_tasks() {
    let server = Server::start(CONFIG);
    let task = tasks::create(
        &server,
        "slow_compute",
        json!({"seconds": 30}),
        &[("Authorization", ALICE)],
    );
    let alice = poll_until(Duration::from_secs(10), || {
        let view = admin_get(&server, "/dashboard/api/identities");
        view["identities"]
            .as_array()?
            .iter()
            .find(|identity| identity["principal"] == "alice")
            .filter(|alice| {
                let count = |key: &str| alice[key].as_u64().unwrap_or(0);
                count("queued") + count("running") == 1
            })
            .cloned()
    })
    .expect("alice's task is listed");
    assert_eq!(alice["tenant"], "a", "{alice}");
    assert_eq!(alice["refusals"]["task_rate"], 0, "{alice}");
    let refused = get(
        &server,
        "/dashboard/api/identities",
        &[("Authorization", ALICE)],
    );
    assert_eq!(
        refused.status, 403,
        "not for a token without the admin role"
    );
    tasks::cancel(&server, &task, &[("Authorization", ALICE)]);
}

/// [`CONFIG`] with tests/scripts/chatty.py served as `chatty` (its `$WORK` is `work`;
/// retries after 50 ms), and as `chatty_capped`, which keeps 1,000 bytes of output.
fn chatty_config(work: &std::path::Path) -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/chatty.py");
    let tool = |name: &str, extra: &str| {
        format!(
            "[[tools]]\nname = \"{name}\"\ndescription = \"prints\"\n\
             command = [\"python3\", \"{script}\"]\nenv = {{ WORK = \"{work}\" }}\n\
             backoff_ms = 50\n{extra}\n",
            script = script.display(),
            work = work.display(),
        )
    };
    format!(
        "{CONFIG}{}{}",
        tool("chatty", ""),
        tool("chatty_capped", "output_max_bytes = 1000")
    )
}

/// The task page's live tail, read as the page reads it: `after` the last position.
fn output_page(server: &Server, task: &str, after: i64) -> Value {
    admin_get(
        server,
        &format!("/dashboard/api/tasks/{task}/output?after={after}"),
    )
}

/// The texts of a page's lines.
fn texts(page: &Value) -> Vec<String> {
    page["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|line| line["text"].as_str().expect("text").to_owned())
        .collect()
}

/// A line a running command prints shows in the live tail while it runs (each attempt's
/// in turn, with its stream), following from the last position reads each line once,
/// and the last read after the task ends says nothing more will come.
#[test]
fn the_live_tail_shows_a_running_commands_lines_as_they_are_printed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("work dir");
    let server = Server::start_in(dir.path(), &chatty_config(&work));
    let task = tasks::create(
        &server,
        "chatty",
        json!({"mode": "tail"}),
        &[("Authorization", ALICE)],
    );
    // The first attempt fails; the second prints, then waits for `go`.
    poll_until(Duration::from_secs(30), || {
        work.join("printed-2").exists().then_some(())
    })
    .expect("the second attempt printed");
    let printed = std::time::Instant::now();
    let running = poll_until(Duration::from_secs(10), || {
        let page = output_page(&server, &task, 0);
        texts(&page)
            .contains(&"step 003 of the build".to_owned())
            .then_some(page)
    })
    .expect("the running attempt's lines show");
    assert!(
        printed.elapsed() < Duration::from_secs(2),
        "shown {:?} after being printed",
        printed.elapsed()
    );
    assert_eq!(running["status"], "working", "{running}");
    assert_eq!(running["final"], false, "{running}");
    assert_eq!(running["more"], false, "{running}");
    assert_eq!(running["dropped"], 0, "{running}");
    let lines = running["lines"].as_array().expect("lines");
    assert_eq!(running["first"], lines[0]["position"], "{running}");
    assert_eq!(running["next"], lines[lines.len() - 1]["position"]);
    // Each stream of each attempt in the order printed. Between an attempt's stdout and
    // stderr there is none: both pipes are read in one poll turn, so lines printed to
    // both at once come in either order (docs/command-tools.md).
    let printed = |attempt: i64, stream: &str| -> Vec<&str> {
        lines
            .iter()
            .filter(|line| line["attempt"] == attempt && line["stream"] == stream)
            .map(|line| line["text"].as_str().expect("text"))
            .collect()
    };
    assert_eq!(
        printed(1, "stderr"),
        ["fetching sources (attempt 1)", "error: mirror unreachable"],
        "{running}"
    );
    assert_eq!(
        printed(2, "stderr"),
        ["<img src=x onerror=\"document.title='injected'\"> stays text"],
        "{running}"
    );
    assert_eq!(
        printed(2, "stdout"),
        [
            "step 001 of the build",
            "step 002 of the build",
            "step 003 of the build"
        ],
        "{running}"
    );
    // Attempts follow each other: the second's lines come after the first's.
    let attempts: Vec<i64> = lines
        .iter()
        .map(|line| line["attempt"].as_i64().expect("attempt"))
        .collect();
    assert!(
        attempts.windows(2).all(|pair| pair[0] <= pair[1]),
        "{running}"
    );
    let attempt_of = |text: &str| {
        let line = lines.iter().find(|line| line["text"] == text).expect(text);
        (line["attempt"].clone(), line["stream"].clone())
    };
    assert_eq!(
        attempt_of("error: mirror unreachable"),
        (json!(1), json!("stderr"))
    );
    assert_eq!(
        attempt_of("step 001 of the build"),
        (json!(2), json!("stdout"))
    );
    // A small page says more lines wait.
    let small = admin_get(
        &server,
        &format!("/dashboard/api/tasks/{task}/output?after=0&limit=2"),
    );
    assert_eq!(small["lines"].as_array().map(Vec::len), Some(2));
    assert_eq!(small["more"], true, "{small}");

    // Following from the last position: each line once, then the end.
    let mut after = running["next"].as_i64().expect("next");
    let mut followed = Vec::new();
    std::fs::write(work.join("go"), b"").expect("go");
    let last = poll_until(Duration::from_secs(30), || {
        let page = output_page(&server, &task, after);
        for line in page["lines"].as_array().expect("lines") {
            let position = line["position"].as_i64().expect("position");
            assert!(position > after, "{position} read again after {after}");
            after = position;
            followed.push(line["text"].as_str().expect("text").to_owned());
        }
        assert_eq!(page["next"], json!(after));
        (page["final"] == true).then_some(page)
    })
    .expect("the tail ends once the task has ended");
    assert_eq!(last["status"], "completed", "{last}");
    assert_eq!(
        followed,
        [
            "finishing 001",
            "finishing 002",
            "finishing 003",
            "build finished"
        ]
    );
    // Read again, nothing more comes.
    let again = output_page(&server, &task, after);
    assert_eq!(again["lines"], json!([]));
    assert_eq!(again["final"], true);
}

/// A task whose output is over its cap: the tail holds only the kept (newest) lines,
/// says how many were dropped, and where the kept lines begin.
#[test]
fn the_live_tail_holds_only_the_kept_lines_and_counts_the_dropped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("work dir");
    let server = Server::start_in(dir.path(), &chatty_config(&work));
    // 400 lines of 50 bytes: 20,000 bytes, of which 1,000 are kept.
    let task = tasks::create(
        &server,
        "chatty_capped",
        json!({"mode": "lines", "count": 400, "width": 50}),
        &[("Authorization", ALICE)],
    );
    let page = poll_until(Duration::from_secs(30), || {
        let page = output_page(&server, &task, 0);
        (page["final"] == true).then_some(page)
    })
    .expect("the task ends");
    let kept = texts(&page);
    assert_eq!(kept.len(), 20, "{page}");
    assert!(kept[0].starts_with("line 000381 "), "{page}");
    assert!(kept[19].starts_with("line 000400 "), "{page}");
    assert_eq!(page["dropped"], 380, "{page}");
    assert_eq!(page["first"], page["lines"][0]["position"], "{page}");
    // After the last line: none, and still where the kept lines begin.
    let next = page["next"].as_i64().expect("next");
    let after = output_page(&server, &task, next);
    assert_eq!(after["lines"], json!([]));
    assert_eq!(after["first"], page["first"]);
    assert_eq!(after["next"], json!(next));
}

/// Who may not see a task on the dashboard (anyone without the admin role, the task's
/// own creator included) gets the answer an unknown task gets, byte for byte; bad
/// positions are refused with a reason and change nothing.
#[test]
fn the_live_tail_is_for_whoever_sees_the_task_and_refuses_bad_positions() {
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("work dir");
    let server = Server::start_in(dir.path(), &chatty_config(&work));
    let task = tasks::create(
        &server,
        "chatty",
        json!({"mode": "lines", "count": 3}),
        &[("Authorization", ALICE)],
    );
    let done = poll_until(Duration::from_secs(30), || {
        let page = output_page(&server, &task, 0);
        (page["final"] == true).then_some(page)
    })
    .expect("the task ends");
    assert_eq!(texts(&done).len(), 3, "{done}");

    let unknown = "0123456789abcdef0123456789abcdef";
    for headers in [
        vec![("Authorization", ALICE)],
        vec![],
        vec![("Authorization", "Bearer wrong")],
        vec![("Cookie", "mcp_taskd_dashboard=1.2.3.4")],
    ] {
        let theirs = get(
            &server,
            &format!("/dashboard/api/tasks/{task}/output"),
            &headers,
        );
        let missing = get(
            &server,
            &format!("/dashboard/api/tasks/{unknown}/output"),
            &headers,
        );
        assert!(
            theirs.status == 401 || theirs.status == 403,
            "{headers:?}: {}",
            theirs.status
        );
        assert_eq!(
            (theirs.status, theirs.text()),
            (missing.status, missing.text()),
            "{headers:?}"
        );
        assert!(!theirs.text().contains("line 0000"), "{}", theirs.text());
    }
    let missing = get(
        &server,
        &format!("/dashboard/api/tasks/{unknown}/output"),
        &[("Authorization", ADMIN)],
    );
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json(), json!({"error": "no such task"}));

    for bad in ["-1", "abc", "1.5", "", "%zz", "99999999999999999999"] {
        let response = get(
            &server,
            &format!("/dashboard/api/tasks/{task}/output?after={bad}"),
            &[("Authorization", ADMIN)],
        );
        assert_eq!(response.status, 400, "after={bad}: {}", response.text());
        assert_eq!(
            response.json(),
            json!({"error": "after: a line position, a whole number (0 or more)"}),
            "after={bad}"
        );
    }
    let limit = get(
        &server,
        &format!("/dashboard/api/tasks/{task}/output?limit=0"),
        &[("Authorization", ADMIN)],
    );
    assert_eq!(limit.status, 400, "{}", limit.text());
    assert_eq!(
        output_page(&server, &task, 0),
        done,
        "the refused reads changed nothing"
    );
    let detail = admin_get(&server, &format!("/dashboard/api/tasks/{task}"));
    assert_eq!(detail["status"], "completed");
}

#[test]
fn the_webhooks_view_shows_dead_deliveries_and_sends_them_again_for_admins_only() {
    // A receiver that refuses connections: every attempt fails, and after 1 s the
    // delivery is dead.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = closed.local_addr().expect("its address").port();
    drop(closed);
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("hook.secret"),
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
    )
    .expect("secret");
    let config = format!(
        "{CONFIG}[[webhooks]]\nname = \"ops\"\nurl = \"http://127.0.0.1:{port}/in?token=s3cret\"\n\
         events = [\"task.completed\"]\nsecret_file = {:?}\nallow_http = [\"127.0.0.1\"]\n\
         retry_for = \"1s\"\n",
        dir.path().join("hook.secret").display().to_string()
    );
    let server = Server::start_in(dir.path(), &config);
    let task = tasks::create(
        &server,
        "slow_compute",
        json!({"seconds": 0}),
        &[("Authorization", ALICE)],
    );
    let view = poll_until(Duration::from_secs(20), || {
        let view = admin_get(&server, "/dashboard/api/webhooks?state=dead");
        (view["webhooks"][0]["dead"] == 1).then_some(view)
    })
    .expect("the delivery is dead after its second");
    let webhook = &view["webhooks"][0];
    assert_eq!(webhook["name"], "ops");
    assert_eq!(
        webhook["url"],
        format!("http://127.0.0.1:{port}/in"),
        "never the query"
    );
    let delivery = &view["deliveries"][0];
    assert_eq!(delivery["taskId"], task.as_str());
    assert_eq!(delivery["state"], "dead");
    assert!(delivery["lastError"]
        .as_str()
        .is_some_and(|e| !e.is_empty()));
    assert!(!view.to_string().contains("s3cret"));
    assert_eq!(
        get(
            &server,
            "/dashboard/api/webhooks",
            &[("Authorization", ALICE)]
        )
        .status,
        403
    );
    assert_eq!(
        get(
            &server,
            "/dashboard/api/webhooks?state=lost",
            &[("Authorization", ADMIN)]
        )
        .status,
        400
    );
    // From a browser session: the CSRF token and an Origin, as for cancel.
    let cookie = login(&server, "admin-token").expect("an admin logs in");
    let csrf = get(&server, "/dashboard/api/session", &[("Cookie", &cookie)]).json()["csrf"]
        .as_str()
        .expect("a CSRF token")
        .to_owned();
    let ours = origin(&server);
    let retry = "/dashboard/api/webhooks/ops/retry";
    let forged = request(
        &server,
        "POST",
        retry,
        &[("Cookie", &cookie), ("Origin", &ours)],
    );
    assert_eq!(forged.status, 403, "no CSRF token");
    let unknown = request(
        &server,
        "POST",
        "/dashboard/api/webhooks/nobody/retry",
        &[("Authorization", ADMIN)],
    );
    assert_eq!(unknown.status, 404);
    let retried = request(
        &server,
        "POST",
        retry,
        &[
            ("Cookie", &cookie),
            ("Origin", &ours),
            ("X-CSRF-Token", &csrf),
        ],
    );
    assert_eq!(retried.status, 200, "{}", retried.text());
    assert_eq!(retried.json()["retried"], 1);
    let pending = admin_get(&server, "/dashboard/api/webhooks");
    assert!(
        pending["webhooks"][0]["pending"] == 1 || pending["webhooks"][0]["dead"] == 1,
        "pending again (or dead again already): {pending}"
    );
}
