//! Unit tests of the configuration: parsing, defaults and the start-up checks.

use super::*;
use taskd_engine::config::Synchronous;

#[test]
fn embedded_default_is_valid_and_loopback() {
    let config = Config::parse(EMBEDDED_DEFAULT).unwrap();
    assert!(config.server.listen.ip().is_loopback());
}

#[test]
fn unknown_keys_are_errors() {
    let error = Config::parse("[server]\nlisten_addr = \"127.0.0.1:1\"\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("listen_addr"), "{error}");
}

#[test]
fn remote_bind_needs_auth_and_hosts() {
    let error = Config::parse("[server]\nlisten = \"0.0.0.0:8080\"\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("auth.tokens"), "{error}");
}

#[test]
fn connection_bounds_are_checked() {
    let config = Config::parse(
        "[server]\nmax_connections = 10\nrequest_timeout_ms = 2000\n\
         [limits]\nmax_unsent_answer_bytes = 1048576\n",
    )
    .unwrap();
    assert_eq!(config.server.max_connections, 10);
    assert_eq!(config.server.request_timeout_ms, 2000);
    assert_eq!(config.limits.max_unsent_answer_bytes, 1024 * 1024);
    let error = Config::parse("[server]\nrequest_timeout_ms = 0\n").unwrap_err();
    assert!(matches!(error, ConfigError::ConnectionTimes), "{error}");
    let error = Config::parse("[limits]\nmax_buffered_request_bytes = 1024\n").unwrap_err();
    assert!(matches!(error, ConfigError::BufferedBelowBody), "{error}");
}

#[test]
fn the_dashboard_is_off_by_default_on_a_non_loopback_listener() {
    let digest = "0".repeat(64);
    let remote = format!(
        "[server]\nlisten = \"0.0.0.0:8080\"\nallowed_hosts = [\"box.example\"]\n\
         [[auth.tokens]]\nprincipal = \"ops\"\nsha256 = \"{digest}\"\nroles = [\"admin\"]\n"
    );
    assert!(!Config::parse(&remote).unwrap().dashboard_enabled());
    let enabled = format!("{remote}[dashboard]\nenabled = true\n");
    assert!(Config::parse(&enabled).unwrap().dashboard_enabled());
    assert!(Config::parse(EMBEDDED_DEFAULT).unwrap().dashboard_enabled());
}

#[test]
fn token_roles_and_the_dashboard_path_are_checked() {
    let digest = "0".repeat(64);
    let role = |role: &str| {
        format!(
            "[[auth.tokens]]\nprincipal = \"ops\"\nsha256 = \"{digest}\"\nroles = [\"{role}\"]\n"
        )
    };
    assert!(Config::parse(&role("admin")).is_ok());
    let error = Config::parse(&role("root")).unwrap_err().to_string();
    assert!(error.contains("unknown role \"root\""), "{error}");
    for path in ["dashboard", "/dashboard/", "/mcp", "/", "/a b"] {
        let config = format!("[dashboard]\npath = \"{path}\"\n");
        assert!(Config::parse(&config).is_err(), "{path} accepted");
    }
    assert!(Config::parse("[dashboard]\npath = \"/ops/ui\"\n").is_ok());
}

#[test]
fn the_edge_profile_is_valid_and_holds_less_than_the_defaults() {
    let edge = Config::parse(include_str!("../../../../examples/edge.toml")).unwrap();
    let default = Config::parse("").unwrap();
    assert!(edge.store.read_connections < default.store.read_connections);
    assert!(edge.store.cache_bytes < default.store.cache_bytes);
    assert!(edge.workers.threads < default.workers.threads);
    assert!(edge.limits.max_buffered_request_bytes < default.limits.max_buffered_request_bytes);
    assert!(edge.limits.max_unsent_answer_bytes < default.limits.max_unsent_answer_bytes);
    assert_eq!(edge.store.synchronous, Synchronous::Full);
}

#[test]
fn a_page_cache_below_sixteen_pages_is_refused() {
    let error = Config::parse("[store]\ncache_bytes = 4096\n")
        .unwrap_err()
        .to_string();
    assert!(error.contains("store.cache_bytes = 4096"), "{error}");
    assert!(Config::parse("[store]\ncache_bytes = 65536\n").is_ok());
}
