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
        gate: None,
        run_after: None,
        schedule: None,
        rerun_of: None,
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
    use taskd_engine::TaskStore;
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

/// A store upgraded from time-ordered ids to row-keyed ones (`taskd_engine::ids`): the
/// tasks made before are found by their ids as before, new ones by the rows their ids
/// name, and a row key with a wrong random part, or another identity's id, finds
/// nothing. Pages and time bounds see both kinds in creation order.
#[test]
fn old_ids_are_still_found_and_a_row_key_alone_finds_nothing() {
    use taskd_engine::TaskStore;
    let dir = tempfile::tempdir().unwrap();
    let create = |store: &Store, task: NewTask| {
        let (sender, created) = std::sync::mpsc::channel();
        store.create(task).then(move |row| {
            let _ = sender.send(row.map(|created| match created {
                Created::Task(row) => row.id,
                Created::KeyInUse(_) | Created::SlotTaken => unreachable!("no key, no slot"),
            }));
        });
        created.recv().unwrap().unwrap()
    };
    let now = now_ms();
    let old: Vec<String> = {
        let store = Store::open(dir.path(), &StoreConfig::default())
            .unwrap()
            .store;
        (0..3)
            .map(|n| {
                create(
                    &store,
                    task_at(
                        &ids::time_ordered(now - 3_000 + n).unwrap(),
                        now - 3_000 + n,
                    ),
                )
            })
            .collect()
    };
    let store = Store::open(dir.path(), &StoreConfig::default())
        .unwrap()
        .store;
    let new: Vec<String> = (0..3)
        .map(|n| {
            let id = store.new_task_id(now + n).unwrap();
            create(&store, task_at(&id, now + n))
        })
        .collect();
    for (n, id) in new.iter().enumerate() {
        assert_eq!(ids::row_key(id), Some(4 + n as i64), "after the 3 old rows");
    }
    for id in old.iter().chain(&new) {
        let found = store.find_authorized(&identity(), id).unwrap();
        assert_eq!(found.map(|task| task.id).as_ref(), Some(id));
    }
    let stranger = Identity {
        principal: "someone else".into(),
        ..identity()
    };
    let forged = format!("{}{}", &new[1][..12], &new[0][12..]);
    for (who, id) in [
        (&identity(), forged.as_str()),
        (&identity(), "1000000000050123456789abcdef0123456789abcdef"),
        (&stranger, new[0].as_str()),
        (&stranger, old[0].as_str()),
    ] {
        assert!(store.find_authorized(who, id).unwrap().is_none(), "{id}");
        let gate = PayloadGate::new(1 << 20);
        let admitted = store.find_authorized_admitted(who, id, &gate).unwrap();
        assert!(matches!(admitted, Admitted::Unknown), "{id}");
    }
    let listed: Vec<String> = store
        .list_authorized(&identity(), "", 10)
        .unwrap()
        .into_iter()
        .map(|task| task.id)
        .collect();
    assert_eq!(
        listed,
        [old.clone(), new.clone()].concat(),
        "creation order"
    );
    let since = |ms: i64| {
        let filter = TaskFilter {
            created_since: Some(ms),
            ..TaskFilter::default()
        };
        store.list_tasks(&filter, None, 10).unwrap().tasks.len()
    };
    assert_eq!(since(0), 6);
    assert_eq!(since(now - 2_999), 5, "two old tasks and the new");
    assert_eq!(since(now + 1), 2, "two new tasks");
    assert_eq!(since(now + 3), 0);
    assert_eq!(store.stats_detail().unwrap().created_last_minute, 6);
}
