//! PostgreSQL (issue 18): the throwaway cluster of the harness, and several nodes —
//! real binaries — serving the tasks of one database.
//!
//! These tests need PostgreSQL whatever `MCP_TASKD_TEST_BACKEND` says; without it they
//! say `SKIPPED` and pass, unless `MCP_TASKD_REQUIRE_POSTGRES=1` (CI).

use std::path::Path;
use std::time::Duration;

use crate::common::poll_until;
use crate::common::postgres::{self, Cluster};

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
