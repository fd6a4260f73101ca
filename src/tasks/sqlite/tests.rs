//! Store fixtures shared by the engine's unit tests, and tests of error mapping,
//! opening and migrating.

use super::migrations::{migrations, SCHEMA};
use super::*;

/// Rows in `table`, read through the pool.
pub(crate) fn rows_in(store: &Store, table: &str) -> i64 {
    store
        .read()
        .unwrap()
        .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

/// The identity every test task is bound to.
pub(crate) fn identity() -> Identity {
    Identity {
        endpoint: "/mcp".into(),
        issuer: String::new(),
        tenant: "t".into(),
        principal: "p".into(),
    }
}

/// A task created at `now`, with a TTL, three attempts and a short backoff.
pub(crate) fn task_at(id: &str, now: i64) -> NewTask {
    NewTask {
        id: id.to_owned(),
        identity: identity(),
        tool: "tool".into(),
        origin: br#"{"arguments":{"n":1}}"#.to_vec(),
        input_responses: "{}".into(),
        now,
        ttl_ms: Some(60_000),
        poll_interval_ms: 500,
        max_attempts: 3,
        backoff_ms: 10,
        timeout_ms: 60_000,
        idempotency_key: None,
        arguments_digest: None,
        trace: None,
        priority: 0,
        stride: NewTask::stride(1),
    }
}

/// A store on a fresh temporary data dir (kept alive by the returned guard).
pub(crate) fn fresh_store() -> (tempfile::TempDir, Arc<Store>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &StoreConfig::default())
        .unwrap()
        .store;
    (dir, store)
}

#[test]
fn sqlite_errors_are_sorted_into_what_the_engine_can_act_on() {
    let failure = |code| {
        classify(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(code),
            None,
        ))
    };
    assert!(matches!(
        failure(rusqlite::ffi::SQLITE_FULL),
        StoreError::Full(_)
    ));
    assert!(matches!(
        failure(rusqlite::ffi::SQLITE_READONLY),
        StoreError::ReadOnly(_)
    ));
    assert!(matches!(
        failure(rusqlite::ffi::SQLITE_CORRUPT),
        StoreError::Corrupt(_)
    ));
    assert!(matches!(
        failure(rusqlite::ffi::SQLITE_NOTADB),
        StoreError::Corrupt(_)
    ));
    assert!(matches!(
        failure(rusqlite::ffi::SQLITE_BUSY),
        StoreError::Unavailable(_)
    ));
    assert!(matches!(
        failure(rusqlite::ffi::SQLITE_CONSTRAINT),
        StoreError::Other(_)
    ));
    assert!(matches!(
        classify(rusqlite::Error::QueryReturnedNoRows),
        StoreError::Other(_)
    ));
}

#[test]
fn migrate_is_idempotent_and_pragmas_are_verified() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig::default();
    let store = Store::open(dir.path(), &config).unwrap().store;
    let version: u32 = store
        .read()
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version as usize, migrations(SCHEMA).unwrap().len());
    let temp_store = |conn: &Connection| -> i64 {
        conn.query_row("PRAGMA temp_store", [], |r| r.get(0))
            .unwrap()
    };
    let writers = store.write(move |conn| Ok(temp_store(conn))).unwrap();
    assert_eq!(writers, 2, "the writer's savepoint journals stay in memory");
    assert_eq!(
        temp_store(&store.read().unwrap()),
        0,
        "readers keep the default"
    );
    let second = Store::open(dir.path(), &config);
    assert!(second.is_err(), "the data dir is locked");
    drop(store);
}

#[test]
fn the_store_opens_any_data_dir_path_and_its_readers_cannot_write() {
    // A data dir whose name needs escaping in a SQLite URI.
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("odd?name#with%");
    std::fs::create_dir(&dir).unwrap();
    let store = Store::open(&dir, &StoreConfig::default()).unwrap().store;
    store
        .write(|conn| {
            conn.execute(
                "INSERT INTO outbox (task_id, created_at) VALUES ('t', 1)",
                [],
            )?;
            Ok(())
        })
        .unwrap();
    let reader = store.read().unwrap();
    let rows: i64 = reader
        .query_row("SELECT COUNT(*) FROM outbox", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        rows, 1,
        "the store opened the database in the odd directory"
    );
    let written = reader.execute(
        "INSERT INTO outbox (task_id, created_at) VALUES ('u', 1)",
        [],
    );
    assert!(written.is_err(), "pool connections are query-only");
}

/// The issuer is part of the binding: the same tenant and principal vouched for by
/// another issuer (or by a static token, whose issuer is empty) finds nothing, and an
/// idempotency key is its own per issuer.
#[test]
fn a_task_is_bound_to_its_issuer_too() {
    use crate::tasks::TaskStore;
    let (_dir, store) = fresh_store();
    let now = now_ms();
    let oauth = Identity {
        issuer: "https://idp.example".into(),
        ..identity()
    };
    let keyed = |id: &str, identity: &Identity| NewTask {
        identity: identity.clone(),
        idempotency_key: Some("k".into()),
        arguments_digest: Some(vec![1]),
        ..task_at(id, now)
    };
    let by_idp = keyed("by-idp", &oauth);
    store
        .write(move |conn| sql::create::create_task(conn, &by_idp))
        .unwrap();
    assert!(store.find_authorized(&oauth, "by-idp").unwrap().is_some());
    assert!(store
        .find_authorized(&identity(), "by-idp")
        .unwrap()
        .is_none());
    let elsewhere = Identity {
        issuer: "https://other.example".into(),
        ..identity()
    };
    assert!(store
        .find_authorized(&elsewhere, "by-idp")
        .unwrap()
        .is_none());
    assert!(store
        .list_authorized(&identity(), "", 10)
        .unwrap()
        .is_empty());
    // The static token's identity holds the same key for a task of its own.
    let by_static = keyed("static", &identity());
    let created = store
        .write(move |conn| sql::create::create_task(conn, &by_static))
        .unwrap();
    assert!(matches!(created, Created::Task(ref task) if task.id == "static"));
    assert_eq!(rows_in(&store, "tasks"), 2);
}
