//! Unit tests of the legacy sessions table: quotas, eviction, durability.

use super::*;

fn someone(principal: &str) -> Identity {
    Identity {
        endpoint: "/mcp".into(),
        issuer: String::new(),
        tenant: "t".into(),
        principal: principal.into(),
    }
}

/// Opens a session for `who` with a share that never binds.
fn open(sessions: &Sessions, who: &Identity) -> Result<Arc<Session>, Refused> {
    sessions
        .open(
            who,
            usize::MAX,
            Credential::Local,
            Negotiated {
                version: "2025-11-25",
                capabilities: ClientCapabilities::default(),
                client_info: Value::Null,
            },
            false,
        )
        .map(|opened| opened.session)
}

fn hub() -> Arc<Hub> {
    Arc::new(Hub::new(taskd_notifications::NotificationLimits::default()))
}

fn limits(max_sessions: usize, idle_timeout_ms: u64) -> SessionLimits {
    SessionLimits {
        max_sessions,
        idle_timeout_ms,
        ..SessionLimits::default()
    }
}

#[test]
fn a_session_is_only_found_by_its_opener() {
    let sessions = Sessions::new(limits(4, 60_000), hub(), None);
    let alice = someone("alice");
    let session = open(&sessions, &alice).unwrap();
    assert!(sessions.get(&session.id, &alice).is_ok());
    assert_eq!(
        sessions.get(&session.id, &someone("bob")).err(),
        Some(Refused::NotFound)
    );
    assert_eq!(
        sessions.end(&session.id, &someone("bob")),
        Err(Refused::NotFound)
    );
    assert_eq!(sessions.end(&session.id, &alice), Ok(()));
    assert_eq!(
        sessions.get(&session.id, &alice).err(),
        Some(Refused::NotFound)
    );
}

#[test]
fn a_full_table_of_busy_sessions_refuses_until_they_expire() {
    let sessions = Sessions::new(limits(1, 50), hub(), None);
    let alice = someone("alice");
    let first = open(&sessions, &alice).unwrap();
    // An open GET stream: ending it would interrupt its client.
    let (live, _events) = crossbeam_channel::bounded(1);
    first.attach_stream(live, None);
    sessions.touch(&first.id);
    assert_eq!(open(&sessions, &someone("bob")).err(), Some(Refused::Full));
    std::thread::sleep(Duration::from_millis(60));
    assert!(open(&sessions, &someone("bob")).is_ok());
    assert!(!sessions.is_open(&first.id));
}

#[test]
fn beyond_its_share_an_identity_ends_its_own_least_recently_used_session() {
    let sessions = Sessions::new(limits(100, 60_000), hub(), None);
    let (alice, bob) = (someone("alice"), someone("bob"));
    let opened = |who: &Identity| {
        sessions
            .open(
                who,
                2,
                Credential::Local,
                Negotiated {
                    version: "2025-11-25",
                    capabilities: ClientCapabilities::default(),
                    client_info: Value::Null,
                },
                false,
            )
            .unwrap()
    };
    let bobs = opened(&bob);
    let a = opened(&alice);
    let b = opened(&alice);
    assert!(a.ended.is_none() && b.ended.is_none());
    sessions.get(&a.session.id, &alice).unwrap();
    let c = opened(&alice);
    assert_eq!(c.ended, Some(Ended::OwnOldest));
    assert_eq!(
        sessions.get(&b.session.id, &alice).err(),
        Some(Refused::NotFound),
        "the least recently used one ended"
    );
    assert!(sessions.is_open(&a.session.id) && sessions.is_open(&c.session.id));
    assert!(
        sessions.is_open(&bobs.session.id),
        "another identity's stays"
    );
}

#[test]
fn a_full_table_ends_the_least_recently_used_idle_session_before_refusing() {
    let sessions = Sessions::new(limits(3, 60_000), hub(), None);
    let flooder = someone("flooder");
    let busy = open(&sessions, &flooder).unwrap();
    let (live, _events) = crossbeam_channel::bounded(1);
    busy.attach_stream(live, None);
    let idle_old = open(&sessions, &flooder).unwrap();
    let idle_new = open(&sessions, &flooder).unwrap();
    sessions.touch(&busy.id);
    let opened = sessions
        .open(
            &someone("other"),
            64,
            Credential::Local,
            Negotiated {
                version: "2025-11-25",
                capabilities: ClientCapabilities::default(),
                client_info: Value::Null,
            },
            false,
        )
        .unwrap();
    assert_eq!(opened.ended, Some(Ended::Idle));
    assert!(!sessions.is_open(&idle_old.id));
    assert!(sessions.is_open(&busy.id) && sessions.is_open(&idle_new.id));
}

#[test]
fn a_session_follows_a_bounded_number_of_tasks_until_they_end_or_it_closes() {
    let hub = hub();
    let sessions = Sessions::new(limits(4, 60_000), Arc::clone(&hub), None);
    let alice = someone("a");
    let session = open(&sessions, &alice).unwrap();
    for n in 0..=MAX_FOLLOWED_TASKS {
        session.follow_task(&format!("t-{n}"), "working");
    }
    assert!(!session.follows_task("t-0"), "the oldest is forgotten");
    assert!(session.follows_task("t-1") && hub.follows_any_task());
    assert!(!session.note_task_status("t-1", "working", false));
    assert!(session.note_task_status("t-1", "input_required", false));
    assert!(session.note_task_status("t-1", "completed", true));
    assert!(
        !session.follows_task("t-1"),
        "nothing after a terminal status"
    );
    assert_eq!(sessions.end(&session.id, &alice), Ok(()));
    assert!(!hub.follows_any_task(), "a closed session follows nothing");
    session.follow_task("t-late", "working");
    assert!(!hub.follows_any_task());
}

#[test]
fn replay_starts_after_the_last_seen_event() {
    let sessions = Sessions::new(limits(4, 60_000), hub(), None);
    let session = open(&sessions, &someone("a")).unwrap();
    for n in 0..5 {
        session.push_event(Value::from(n), 3);
    }
    let (live, _events) = crossbeam_channel::bounded(4);
    let replay = session.attach_stream(live, Some(3));
    let ids: Vec<u64> = replay.iter().map(|event| event.id).collect();
    assert_eq!(ids, vec![4, 5]);
}

#[test]
fn a_stop_ends_every_get_stream_and_keeps_the_sessions_and_their_events() {
    let sessions = Sessions::new(limits(4, 60_000), hub(), None);
    let alice = someone("alice");
    let session = open(&sessions, &alice).unwrap();
    let (live, events) = crossbeam_channel::bounded(4);
    session.attach_stream(live, None);
    session.push_event(serde_json::json!({"n": 1}), 8);
    assert!(!sessions.streams_ended());

    sessions.end_streams();
    assert!(sessions.streams_ended(), "a stream opened now ends at once");
    // The stream reads what was sent, then its channel's end: it finishes its response.
    assert_eq!(events.recv().map(|event| event.id).ok(), Some(1));
    assert!(events.recv().is_err(), "the stream's channel ended");
    // The session goes on, and keeps its events for the stream its client opens next.
    assert!(sessions.get(&session.id, &alice).is_ok());
    session.push_event(serde_json::json!({"n": 2}), 8);
    let (again, _events) = crossbeam_channel::bounded(4);
    let replay = session.attach_stream(again, Some(1));
    assert_eq!(replay.iter().map(|event| event.id).collect::<Vec<_>>(), [2]);
}
