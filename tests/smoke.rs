//! The first things a person does: start the server, check health, discover, call a tool.

use crate::common::{self, Server, CONFORMANCE};
use serde_json::json;

#[test]
fn healthz_answers_once_serving() {
    let server = Server::start(CONFORMANCE);
    let health = server.get("/healthz");
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["status"], "ok");
}

#[test]
fn discover_lists_versions_capabilities_and_server_info() {
    let server = Server::start(CONFORMANCE);
    let response = server.request("server/discover", json!({}), json!({}));
    assert_eq!(response.status, 200);
    assert_eq!(response.header("cache-control"), Some("no-store"));
    let result = response.result();
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(
        result["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({})
    );
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-taskd"
    );
    assert!(result["ttlMs"].is_u64());
}

#[test]
fn embedded_default_serves_the_demo_echo_tool() {
    let server = Server::start("");
    let result = server
        .call_tool("echo", json!({"text": "hi there"}), json!({}))
        .result();
    assert_eq!(result["content"][0]["text"], "hi there");
    assert_eq!(result["resultType"], "complete");
}

#[test]
fn progress_notifications_stream_before_the_result() {
    let server = Server::start(CONFORMANCE);
    let response = server.request(
        "tools/call",
        json!({"name": "test_tool_with_progress", "_meta": {"progressToken": "p-1"}}),
        json!({}),
    );
    assert_eq!(response.header("content-type"), Some("text/event-stream"));
    assert_eq!(response.header("x-accel-buffering"), Some("no"));
    let messages = response.sse_messages();
    assert_eq!(
        messages.len(),
        4,
        "three progress notifications and the result"
    );
    let progress: Vec<f64> = messages[..3]
        .iter()
        .map(|m| {
            assert_eq!(m["method"], "notifications/progress");
            assert_eq!(m["params"]["progressToken"], "p-1");
            m["params"]["progress"].as_f64().unwrap()
        })
        .collect();
    assert_eq!(progress, vec![0.0, 50.0, 100.0]);
    assert_eq!(messages[3]["id"], 1);
    assert_eq!(messages[3]["result"]["resultType"], "complete");
}

#[test]
fn metrics_count_requests_and_tasks_without_revealing_contents() {
    let server = Server::start(CONFORMANCE);
    let created = server
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": "secret-label"}}),
            common::tasks_caps(),
        )
        .result();
    let task_id = created["taskId"].as_str().unwrap().to_owned();
    common::tasks::wait_terminal(&server, &task_id, std::time::Duration::from_secs(5));
    server.request("no/such-method", json!({}), json!({}));
    let page = server.get("/metrics");
    assert_eq!(page.status, 200);
    let text = page.text();
    assert!(
        text.contains("mcp_taskd_requests_total{method=\"tools/call\",outcome=\"result\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("mcp_taskd_requests_answered_early_total{status=\"404\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("mcp_taskd_tasks{status=\"completed\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("mcp_taskd_jobs{state=\"queued\"} 0"),
        "{text}"
    );
    assert!(
        !text.contains(&task_id) && !text.contains("secret-label") && !text.contains("no/such")
    );
}

#[test]
fn check_config_takes_the_file_with_or_without_config() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(&good, CONFORMANCE).unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[store]\nlocking = \"sometimes\"\n").unwrap();
    let check = |args: &[&std::ffi::OsStr]| {
        crate::common::binary()
            .arg("check-config")
            .args(args)
            .output()
            .expect("run mcp-taskd check-config")
    };
    for args in [
        vec![good.as_os_str()],
        vec!["--config".as_ref(), good.as_os_str()],
    ] {
        let output = check(&args);
        assert!(output.status.success(), "{args:?}: {output:?}");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            "configuration is valid\n"
        );
    }
    for args in [
        vec![bad.as_os_str()],
        vec!["--config".as_ref(), bad.as_os_str()],
    ] {
        let output = check(&args);
        assert!(!output.status.success(), "{args:?} accepted");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("locking"),
            "{args:?}: {output:?}"
        );
    }
    let both = check(&[good.as_os_str(), "--config".as_ref(), good.as_os_str()]);
    assert!(!both.status.success(), "two files are refused");
}

#[test]
fn version_names_the_release_and_the_commit_it_was_built_from() {
    let output = common::binary()
        .arg("--version")
        .output()
        .expect("run mcp-taskd --version");
    assert!(output.status.success(), "{output:?}");
    let version = String::from_utf8_lossy(&output.stdout);
    let commit = version
        .strip_prefix(&format!("mcp-taskd {} (commit ", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(")\n"))
        .unwrap_or_else(|| panic!("--version said {version:?}"));
    // Built in a git checkout (as here and in CI), it names HEAD as it was at build time;
    // elsewhere `unknown` (build.rs).
    let head = std::process::Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned());
    match head {
        Some(head) => assert!(
            commit.len() == 12 && head.starts_with(commit),
            "--version names {commit}, HEAD is {head}"
        ),
        None => assert_eq!(commit, "unknown"),
    }
}

#[test]
fn package_files_writes_a_man_page_per_command_and_three_completions() {
    let dir = tempfile::tempdir().unwrap();
    let output = common::binary()
        .arg("package-files")
        .arg(dir.path())
        .output()
        .expect("run mcp-taskd package-files");
    assert!(output.status.success(), "{output:?}");
    let mut pages: Vec<String> = std::fs::read_dir(dir.path().join("man"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    for command in [
        "serve",
        "stdio",
        "tasks-list",
        "stats",
        "backup",
        "check-config",
    ] {
        assert!(
            pages.contains(&format!("mcp-taskd-{command}.1")),
            "{command}: {pages:?}"
        );
    }
    let serve = std::fs::read_to_string(dir.path().join("man/mcp-taskd-serve.1")).unwrap();
    assert!(serve.contains("\\-\\-data\\-dir"), "{serve}");
    for completion in ["mcp-taskd.bash", "_mcp-taskd", "mcp-taskd.fish"] {
        let text = std::fs::read_to_string(dir.path().join("completions").join(completion))
            .unwrap_or_else(|e| panic!("{completion}: {e}"));
        assert!(text.contains("check-config"), "{completion}");
        assert!(
            !text.contains("package-files"),
            "{completion} offers the packaging mode"
        );
    }
}
