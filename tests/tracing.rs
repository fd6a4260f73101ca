//! OpenTelemetry: what the real binary exports, received by a small OTLP/HTTP collector
//! (tests/scripts/otlp_receiver.py) that decodes it with the official protobuf
//! definitions (PyPI `opentelemetry-proto`, installed by .ci/otel.sh). A task's spans
//! must form one trace under the caller's span, across a retry and a `kill -9`; a dead
//! collector must change nothing for clients.
//!
//! Without the venv these tests say so and pass, unless `MCP_TASKD_REQUIRE_OTEL` is set
//! (CI sets it).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::{poll_until, tasks_caps, Rpc, Server};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(30);

/// The client's span: the parent every request span must name.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// The venv's python (.ci/otel.sh), or `None` (and a note) when it is not installed.
fn otel_python() -> Option<PathBuf> {
    let python = std::env::var_os("MCP_TASKD_OTEL_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            let home = std::env::var_os("HOME")?;
            Some(Path::new(&home).join(".cache/mcp-taskd-otel/venv/bin/python"))
        })
        .filter(|python| python.is_file());
    if python.is_none() {
        assert!(
            std::env::var_os("MCP_TASKD_REQUIRE_OTEL").is_none(),
            "MCP_TASKD_REQUIRE_OTEL is set and no OpenTelemetry venv was found: run .ci/otel.sh"
        );
        eprintln!("skipped: no OpenTelemetry venv (run .ci/otel.sh)");
    }
    python
}

fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scripts")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// The OTLP collector: a child process writing what it decodes to a file.
struct Collector {
    child: Child,
    port: u16,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Collector {
    fn start(python: &Path) -> Collector {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("received.jsonl");
        let mut child = Command::new(python)
            .arg(script("otlp_receiver.py"))
            .arg(&out)
            .arg("300")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the OTLP receiver");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the receiver's port");
        let port = line.trim().parse().expect("a port number");
        Collector {
            child,
            port,
            out,
            _dir: dir,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far.
    fn spans(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| line["signal"] == "span")
            .collect()
    }

    /// Every metric received so far, export after export.
    fn metrics(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| line["signal"] == "metric")
            .collect()
    }

    /// Waits until `done` holds of the spans received, and returns them.
    fn wait_for(&self, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        poll_until(LIMIT, || {
            let spans = self.spans();
            done(&spans).then_some(spans)
        })
        .unwrap_or_else(|| panic!("never received {what}: {:#?}", self.spans()))
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|span| span["name"] == name).collect()
}

fn attempt_of(span: &Value) -> i64 {
    span["attributes"]["mcp_taskd.attempt"]
        .as_i64()
        .unwrap_or(-1)
}

/// The one span named `name` of attempt `attempt`.
fn of_attempt<'a>(spans: &'a [Value], name: &str, attempt: i64) -> &'a Value {
    let found: Vec<&Value> = named(spans, name)
        .into_iter()
        .filter(|span| attempt_of(span) == attempt)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {name} of attempt {attempt}: {spans:#?}"
    );
    found[0]
}

fn config(collector: &str, work: &Path, extra: &str) -> String {
    format!(
        "[builtin]\nsets = []\n[workers]\nlease_ms = 3000\njanitor_interval_ms = 100\n\n\
         [telemetry]\notlp_endpoint = \"{collector}\"\nbatch_delay_ms = 100\n{extra}\n\n\
         [[tools]]\nname = \"traced\"\ndescription = \"traced.sh\"\ncommand = [{script:?}]\n\
         env = {{ WORK = {work:?} }}\nbackoff_ms = 50\nmax_attempts = 4\ntask_policy = \"required\"\n\
         input_schema = {{ type = \"object\" }}\n",
        script = script("traced.sh"),
        work = work.to_string_lossy(),
    )
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_callers_trace_follows_its_task_through_a_retry_a_crash_and_a_restart() {
    let Some(python) = otel_python() else {
        return;
    };
    let collector = Collector::start(&python);
    let work = tempfile::tempdir().expect("temp dir");
    let data = tempfile::tempdir().expect("temp dir");
    // Secrets a span must never carry: an argument, a bearer token, the result.
    let token = "tok-9d2c1e-secret";
    let auth = format!(
        "[[auth.tokens]]\nprincipal = \"alice\"\nsha256 = \"{}\"\n",
        sha256_hex(token)
    );
    let config = config(&collector.endpoint(), work.path(), "")
        .replace("[[tools]]", &format!("{auth}\n[[tools]]"));
    let mut server = Server::start_in(data.path(), &config);
    let traceparent = format!("00-{TRACE_ID}-{CLIENT_SPAN}-01");
    let call = Rpc::tool("traced", json!({"secret": "arg-5e1f-secret"}))
        .caps(tasks_caps())
        .meta("traceparent", json!(traceparent))
        .meta("tracestate", json!("vendor=abc"))
        .header("Authorization", &format!("Bearer {token}"));
    let created = call.send(&server).result();
    let task = created["taskId"].as_str().expect("taskId").to_owned();

    // Run 1 crashed, run 2 hangs: its queue wait is exported before the crash.
    collector.wait_for("the second attempt's queue wait", |spans| {
        named(spans, "task_queued traced")
            .iter()
            .any(|span| attempt_of(span) == 2)
            && !named(spans, "task_attempt traced").is_empty()
    });
    assert_eq!(lines(&work.path().join("runs")).len(), 2);
    server.kill9();
    let server = Server::start_in(data.path(), &config);
    let done = poll_until(LIMIT, || {
        let task = Rpc::new("tasks/get", json!({"taskId": task}))
            .caps(tasks_caps())
            .header("Authorization", &format!("Bearer {token}"))
            .send(&server)
            .result();
        (task["status"] == "completed").then_some(task)
    })
    .expect("the task completes after the restart");
    assert_eq!(done["result"]["content"][0]["text"], "result-marker-7f3a");

    let spans = collector.wait_for("the third attempt", |spans| {
        named(spans, "task_attempt traced")
            .iter()
            .any(|span| attempt_of(span) == 3)
    });
    // Every span of the task is in the caller's trace, and names the task (reads of
    // it name it too, in the traces of their own requests).
    let of_task: Vec<&Value> = spans
        .iter()
        .filter(|span| span["attributes"]["mcp.task.id"] == task.as_str())
        .filter(|span| span["name"] != "tasks/get")
        .collect();
    assert!(of_task.len() >= 10, "{of_task:#?}");
    for span in &of_task {
        assert_eq!(span["trace_id"], TRACE_ID, "{span:#}");
    }
    // The request, under the client's span.
    let request = named(&spans, "tools/call traced");
    assert_eq!(request.len(), 1, "{spans:#?}");
    let request = request[0];
    assert_eq!(request["parent_span_id"], CLIENT_SPAN);
    assert_eq!(request["kind"], 2, "SERVER");
    assert_eq!(request["attributes"]["mcp.method.name"], "tools/call");
    assert_eq!(request["attributes"]["gen_ai.tool.name"], "traced");
    assert_eq!(request["attributes"]["jsonrpc.request.id"], "7");
    assert_eq!(request["attributes"]["mcp.task.id"], task.as_str());
    assert_eq!(request["resource"]["service.name"], "mcp-taskd");
    // The creation, under the request; everything of the task's life under it.
    let creation = named(&spans, "create_task traced");
    assert_eq!(creation.len(), 1);
    let creation = creation[0];
    assert_eq!(creation["parent_span_id"], request["span_id"]);
    for attempt in 1..=3 {
        let queued = of_attempt(&spans, "task_queued traced", attempt);
        assert_eq!(queued["parent_span_id"], creation["span_id"], "{queued:#}");
    }
    // Attempt 2 died with the server (kill -9): no span; 1 and 3 ended, each with
    // its tool run and its program under it.
    assert!(named(&spans, "task_attempt traced")
        .iter()
        .all(|span| attempt_of(span) != 2));
    for (attempt, outcome, exit) in [(1, "retry", 3), (3, "completed", 0)] {
        let run = of_attempt(&spans, "task_attempt traced", attempt);
        assert_eq!(run["parent_span_id"], creation["span_id"]);
        assert_eq!(run["attributes"]["mcp_taskd.outcome"], outcome);
        assert_eq!(run["attributes"]["mcp_taskd.retry_count"], attempt - 1);
        let tool = of_attempt(&spans, "execute_tool traced", attempt);
        assert_eq!(tool["parent_span_id"], run["span_id"]);
        let program: Vec<&Value> = named(&spans, "exec traced.sh")
            .into_iter()
            .filter(|span| span["parent_span_id"] == tool["span_id"])
            .collect();
        assert_eq!(program.len(), 1, "{spans:#?}");
        assert_eq!(program[0]["attributes"]["process.exit.code"], exit);
        if attempt == 3 {
            // The program saw its own span as TRACEPARENT.
            let seen = lines(&work.path().join("traces"));
            assert_eq!(
                seen[2],
                format!(
                    "00-{TRACE_ID}-{}-01",
                    program[0]["span_id"].as_str().unwrap()
                )
            );
        }
    }
    // The retried run failed visibly; the tracestate went along.
    let first = of_attempt(&spans, "execute_tool traced", 1);
    assert_eq!(first["attributes"]["error.type"], "retry");
    assert_eq!(first["status"]["code"], 2, "ERROR");
    // tasks/get reads are spans too, naming the task.
    assert!(named(&spans, "tasks/get")
        .iter()
        .any(|span| span["attributes"]["mcp.task.id"] == task.as_str()));
    // Nothing sensitive in any attribute or status of any span.
    let all = serde_json::to_string(&spans).expect("JSON");
    for secret in [token, "arg-5e1f-secret", "result-marker-7f3a", "alice"] {
        assert!(!all.contains(secret), "{secret} leaked into a span");
    }
}

/// Lowercase hex SHA-256 of `text` (what `[[auth.tokens]]` stores).
fn sha256_hex(text: &str) -> String {
    let output = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes())?;
            child.wait_with_output()
        })
        .expect("sha256sum");
    String::from_utf8_lossy(&output.stdout)[..64].to_owned()
}

/// A server with the demo tools exporting to `collector`; `extra` goes into its
/// `[telemetry]`.
fn with_demo_tools(collector: &str, work: &Path, extra: &str) -> Server {
    Server::start(&format!(
        "{}\n[builtin]\nsets = [\"demo\"]\n",
        config(collector, work, extra).replace("[builtin]\nsets = []\n", "")
    ))
}

/// A server with the demo tools whose collector is a port nothing listens on (every
/// export fails at once); `extra` goes into its `[telemetry]`.
fn with_dead_collector(work: &Path, extra: &str) -> Server {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    with_demo_tools(&endpoint, work, extra)
}

#[test]
fn a_dead_collector_changes_nothing_for_clients() {
    let work = tempfile::tempdir().expect("temp dir");
    let server = with_dead_collector(work.path(), "");
    for _ in 0..20 {
        let echo = server
            .call_tool("echo", json!({"text": "hi"}), json!({}))
            .result();
        assert_eq!(echo["content"][0]["text"], "hi");
    }
    // Two runs on record: traced.sh's next run is its third, which finishes at once.
    std::fs::write(work.path().join("runs"), "x\ny\n").expect("runs");
    let created = server.call_tool("traced", json!({}), tasks_caps()).result();
    let task = created["taskId"].as_str().expect("taskId").to_owned();
    poll_until(LIMIT, || {
        let task = server
            .request("tasks/get", json!({"taskId": task}), tasks_caps())
            .result();
        (task["status"] == "completed").then_some(())
    })
    .expect("the task completes");
    // The spans were dropped, and counted.
    let dropped = poll_until(LIMIT, || {
        let page = server.get("/metrics").text();
        page.lines()
            .find(|line| {
                line.starts_with("mcp_taskd_spans_dropped_total{reason=\"export_failed\"}")
            })
            .and_then(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .filter(|count| *count > 0)
    });
    assert!(dropped.is_some(), "{}", server.get("/metrics").text());
}

#[test]
fn spans_beyond_the_export_budget_are_dropped_and_counted_and_clients_see_nothing() {
    let work = tempfile::tempdir().expect("temp dir");
    let server = with_dead_collector(work.path(), "max_spans_per_second = 2");
    // One span a request; two a second may go out, in a burst of a second's worth.
    for _ in 0..20 {
        let echo = server
            .call_tool("echo", json!({"text": "hi"}), json!({}))
            .result();
        assert_eq!(echo["content"][0]["text"], "hi");
    }
    let page = server.get("/metrics").text();
    let count = |series: &str| series_in(&page, series);
    // Most requests are not traced at all (no room for a trace when they began); a
    // span already under way when the room ran out is dropped at its end.
    let untraced = count("mcp_taskd_traces_over_budget_total");
    let dropped = count("mcp_taskd_spans_dropped_total{reason=\"over_budget\"}");
    assert!(untraced >= 10, "{untraced} requests untraced: {page}");
    assert!(
        (10..=20).contains(&(untraced + dropped)),
        "{untraced} untraced + {dropped} dropped: {page}"
    );
}

/// The value of the series `series` (a counter, without labels or with) on the
/// metrics page `page`.
fn series_in(page: &str, series: &str) -> u64 {
    let prefix = format!("{series} ");
    page.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|count| count.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no {series} in {page}"))
}

#[test]
fn a_request_begun_over_the_budget_is_not_traced_nor_is_its_task() {
    let Some(python) = otel_python() else {
        return;
    };
    let collector = Collector::start(&python);
    let work = tempfile::tempdir().expect("temp dir");
    let server = with_demo_tools(
        &collector.endpoint(),
        work.path(),
        "max_spans_per_second = 1",
    );
    let untraced = || {
        let page = server.get("/metrics").text();
        series_in(&page, "mcp_taskd_traces_over_budget_total")
    };
    let create = || {
        let created = Rpc::tool("noop_task", json!({}))
            .caps(tasks_caps())
            .send(&server)
            .result();
        created["taskId"].as_str().expect("taskId").to_owned()
    };
    let completed = |task: &str| {
        poll_until(LIMIT, || {
            let got = Rpc::new("tasks/get", json!({"taskId": task}))
                .caps(tasks_caps())
                .send(&server)
                .result();
            (got["status"] == "completed").then_some(())
        })
        .expect("the task completes");
    };
    // One span a second: a task's five spend the budget, so the next creation soon
    // after finds no room for its trace (tried until one does: the box may be slow).
    let (unsampled, traced) = (
        poll_until(LIMIT, || {
            let before = untraced();
            let task = create();
            let after = untraced();
            completed(&task);
            (after == before + 1).then_some(task)
        })
        .expect("a creation over the budget"),
        poll_until(LIMIT, || {
            let before = untraced();
            let task = create();
            (untraced() == before).then_some(task)
        })
        .expect("a creation within the budget, once it has room again"),
    );
    // Spans are exported in the order they end: once the traced task's creation is in,
    // anything of the untraced task (which ended before it was created) would be too.
    let spans = collector.wait_for("the traced task's creation", |spans| {
        spans.iter().any(|span| {
            span["name"] == "create_task noop_task"
                && span["attributes"]["mcp.task.id"] == traced.as_str()
        })
    });
    // (The `tasks/get` reads that waited for it are requests of their own, each traced
    // or not by the room there was when it came.)
    let of_unsampled: Vec<&Value> = spans
        .iter()
        .filter(|span| span["attributes"]["mcp.task.id"] == unsampled.as_str())
        .filter(|span| span["name"] != "tasks/get")
        .collect();
    assert!(of_unsampled.is_empty(), "{of_unsampled:#?}");
}

#[test]
fn a_client_traced_by_the_official_python_sdk_propagates_into_our_spans() {
    let Some(python) = otel_python() else {
        return;
    };
    let collector = Collector::start(&python);
    let work = tempfile::tempdir().expect("temp dir");
    let server = Server::start(&config(&collector.endpoint(), work.path(), ""));
    let output = Command::new(&python)
        .arg(script("otel_client.py"))
        .arg(format!("http://{}/mcp", server.addr))
        .output()
        .expect("run the traced client");
    assert!(output.status.success(), "{output:?}");
    let client: Value = serde_json::from_slice(&output.stdout).expect("the client's JSON");
    let trace_id = client["trace_id"].as_str().expect("trace id").to_owned();
    let span_id = client["span_id"].as_str().expect("span id").to_owned();
    let spans = collector.wait_for("the request's span", |spans| {
        named(spans, "tools/list")
            .iter()
            .any(|span| span["trace_id"] == trace_id.as_str())
    });
    let request = named(&spans, "tools/list")
        .into_iter()
        .find(|span| span["trace_id"] == trace_id.as_str())
        .expect("found above");
    assert_eq!(request["parent_span_id"], span_id.as_str());
}

#[test]
fn json_logs_name_the_task_and_its_trace() {
    let work = tempfile::tempdir().expect("temp dir");
    let data = tempfile::tempdir().expect("temp dir");
    // Telemetry off: the log still names the caller's trace.
    let config = format!(
        "[log]\nformat = \"json\"\n\n{}",
        config("http://127.0.0.1:9", work.path(), "").replace(
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:9\"\n",
            "[telemetry]\n"
        )
    );
    let server = Server::start_in_with_env(
        data.path(),
        &config,
        &[("RUST_LOG", std::ffi::OsStr::new("info"))],
    );
    let traceparent = format!("00-{TRACE_ID}-{CLIENT_SPAN}-01");
    let created = Rpc::tool("traced", json!({"secret": "arg-5e1f-secret"}))
        .caps(tasks_caps())
        .meta("traceparent", json!(traceparent))
        .send(&server)
        .result();
    let task = created["taskId"].as_str().expect("taskId").to_owned();
    // Run 1 exits 3: the worker logs the failed attempt.
    let line = poll_until(LIMIT, || {
        server
            .log_lines()
            .into_iter()
            .find(|line| line.contains("failed attempt 1"))
    })
    .expect("the failed attempt is logged");
    let line: Value = serde_json::from_str(&line).expect("a JSON object a line");
    assert_eq!(line["level"], "WARN", "{line}");
    assert_eq!(line["target"], "taskd_engine::workers::attempt");
    assert_eq!(line["task_id"], task.as_str(), "{line}");
    assert_eq!(line["trace_id"], TRACE_ID, "{line}");
    assert!(line["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')));
    for line in server.log_lines() {
        let parsed: Value = serde_json::from_str(&line).expect("every line is JSON");
        assert!(parsed["message"].is_string(), "{line}");
        assert!(!line.contains("arg-5e1f-secret"), "{line}");
    }
}

/// The value an export gave `mcp_taskd_requests_total{method, outcome="result"}` of the
/// service named `service`, at its highest.
fn requests_answered(metrics: &[Value], service: &str, method: &str) -> Option<i64> {
    metrics
        .iter()
        .filter(|metric| metric["name"] == "mcp_taskd_requests_total")
        .filter(|metric| metric["resource"]["service.name"] == service)
        .flat_map(|metric| metric["points"].as_array().cloned().unwrap_or_default())
        .filter(|point| {
            point["attributes"]["method"] == method && point["attributes"]["outcome"] == "result"
        })
        .filter_map(|point| point["value"].as_i64())
        .max()
}

#[test]
fn the_metrics_page_goes_to_the_collector_every_interval_and_once_more_at_a_stop() {
    let Some(python) = otel_python() else {
        return;
    };
    let collector = Collector::start(&python);
    let work = tempfile::tempdir().expect("temp dir");
    let extra = "metrics_interval_ms = 200\nservice_name = \"metered\"";
    let server = Server::start(&config(&collector.endpoint(), work.path(), extra));
    for _ in 0..3 {
        server.request("tools/list", json!({}), json!({})).result();
    }
    // The store's gauges are on a page only when its statistics were read in time (a
    // loaded box may miss one export): wait for an export that has them too.
    let names = [
        "mcp_taskd_requests_total",
        "mcp_taskd_queue_wait_seconds",
        "mcp_taskd_oldest_ready_job_age_seconds",
    ];
    let metrics = poll_until(LIMIT, || {
        let metrics = collector.metrics();
        let complete = names
            .iter()
            .all(|name| metrics.iter().any(|metric| metric["name"] == *name));
        (complete && requests_answered(&metrics, "metered", "tools/list") >= Some(3))
            .then_some(metrics)
    })
    .unwrap_or_else(|| panic!("no export counted the calls: {:#?}", collector.metrics()));
    let last = |name: &str| {
        metrics
            .iter()
            .rev()
            .find(|metric| metric["name"] == name)
            .unwrap_or_else(|| panic!("{name} never exported: {metrics:#?}"))
            .clone()
    };
    // A counter is a cumulative (2) monotonic sum; a histogram keeps its buckets, per
    // bucket, with the page's 16 bounds; a gauge in seconds says so.
    let requests = last("mcp_taskd_requests_total");
    assert_eq!(
        (
            &requests["type"],
            &requests["monotonic"],
            &requests["temporality"]
        ),
        (&json!("sum"), &json!(true), &json!(2)),
        "{requests}"
    );
    let wait = last("mcp_taskd_queue_wait_seconds");
    assert_eq!(
        (&wait["type"], &wait["unit"]),
        (&json!("histogram"), &json!("s"))
    );
    let point = &wait["points"][0];
    assert_eq!(point["attributes"]["tool"], "traced", "{wait}");
    assert_eq!(point["bounds"].as_array().map(Vec::len), Some(16), "{wait}");
    assert_eq!(
        point["buckets"].as_array().map(Vec::len),
        Some(17),
        "{wait}"
    );
    let age = last("mcp_taskd_oldest_ready_job_age_seconds");
    assert_eq!((&age["type"], &age["unit"]), (&json!("gauge"), &json!("s")));
    assert_eq!(
        requests["resource"]["service.version"],
        env!("CARGO_PKG_VERSION")
    );
    // Exactly the page's families, each with its points (labels bounded as there).
    let page = server.get("/metrics").text();
    for metric in &metrics {
        let name = metric["name"].as_str().unwrap_or_default();
        assert!(
            page.contains(&format!("# TYPE {name} ")),
            "{name} is on the page"
        );
    }
    drop(server);

    // With the default interval (a minute), the one export is the last, at the stop.
    let extra = "service_name = \"stopped\"";
    let mut server = Server::start(&config(&collector.endpoint(), work.path(), extra));
    for _ in 0..2 {
        server.request("tools/list", json!({}), json!({})).result();
    }
    assert_eq!(
        requests_answered(&collector.metrics(), "stopped", "tools/list"),
        None
    );
    assert!(server.terminate(LIMIT), "a graceful stop");
    assert_eq!(
        requests_answered(&collector.metrics(), "stopped", "tools/list"),
        Some(2),
        "the last export went out before the process ended"
    );
}
