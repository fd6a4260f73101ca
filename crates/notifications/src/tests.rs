//! Unit tests of the hub: who hears what, coalescing, order, waking, caps.

use super::*;

fn someone() -> Identity {
    Identity {
        endpoint: "/mcp".into(),
        issuer: String::new(),
        tenant: String::new(),
        principal: "someone".into(),
    }
}

fn frames(subscription: &Subscription) -> Vec<Frame> {
    match subscription.mailbox.wait(Duration::ZERO) {
        Delivery::Frames(frames) => frames,
        other => panic!("expected frames, got {other:?}"),
    }
}

fn task(task_id: &str, seq: i64) -> Frame {
    Frame::TaskChanged {
        task_id: task_id.into(),
        seq,
    }
}

#[test]
fn list_changes_reach_those_who_asked_and_coalesce() {
    let hub = Hub::new(NotificationLimits::default());
    let tools = hub
        .subscribe(
            &someone(),
            Filter {
                tools_list_changed: true,
                ..Filter::default()
            },
        )
        .unwrap();
    let prompts = hub
        .subscribe(
            &someone(),
            Filter {
                prompts_list_changed: true,
                ..Filter::default()
            },
        )
        .unwrap();
    for _ in 0..10_000 {
        hub.publish_list_changed(ListKind::Tools);
    }
    assert_eq!(frames(&tools), vec![Frame::ListChanged(ListKind::Tools)]);
    assert_eq!(prompts.mailbox.wait(Duration::ZERO), Delivery::Idle);
    assert_eq!(hub.open_subscriptions(), 2, "nobody is cut off");
    hub.publish_list_changed(ListKind::Prompts);
    hub.close_all();
    // What was pending still comes first, then the close.
    assert_eq!(
        frames(&prompts),
        vec![Frame::ListChanged(ListKind::Prompts)]
    );
    assert_eq!(prompts.mailbox.wait(Duration::ZERO), Delivery::Close);
    assert_eq!(tools.mailbox.wait(Duration::ZERO), Delivery::Close);
    assert!(hub.subscribe(&someone(), Filter::default()).is_err());
}

#[test]
fn task_hints_reach_only_the_subscriptions_naming_the_task_once_each() {
    let hub = Hub::new(NotificationLimits::default());
    let follows = |ids: &[&str]| Filter {
        task_ids: ids.iter().map(|id| (*id).to_owned()).collect(),
        ..Filter::default()
    };
    let a = hub.subscribe(&someone(), follows(&["a"])).unwrap();
    let ab = hub.subscribe(&someone(), follows(&["a", "b"])).unwrap();
    hub.publish_task_changed("b", 1);
    hub.publish_task_changed("c", 2);
    assert_eq!(a.mailbox.wait(Duration::ZERO), Delivery::Idle);
    assert_eq!(frames(&ab), vec![task("b", 1)]);
    // Many hints per task: one pending item each, in order of first hint, carrying
    // the newest change.
    for seq in 3..1_000 {
        hub.publish_task_changed(if seq % 2 == 0 { "b" } else { "a" }, seq);
    }
    assert_eq!(frames(&ab), vec![task("a", 999), task("b", 998)]);
    assert_eq!(frames(&a), vec![task("a", 999)]);
    hub.unsubscribe(a.key);
    hub.unsubscribe(ab.key);
    assert_eq!(hub.open_subscriptions(), 0);
    assert!(hub.lock().by_task.is_empty());
}

#[test]
fn pending_changes_keep_the_order_of_their_first_publication() {
    let hub = Hub::new(NotificationLimits::default());
    let everything = hub
        .subscribe(
            &someone(),
            Filter {
                tools_list_changed: true,
                prompts_list_changed: true,
                task_ids: vec!["t".into()],
            },
        )
        .unwrap();
    hub.publish_list_changed(ListKind::Prompts);
    hub.publish_task_changed("t", 5);
    hub.publish_list_changed(ListKind::Tools);
    hub.publish_list_changed(ListKind::Prompts);
    assert_eq!(
        frames(&everything),
        vec![
            Frame::ListChanged(ListKind::Prompts),
            task("t", 5),
            Frame::ListChanged(ListKind::Tools),
        ]
    );
    hub.publish_list_changed(ListKind::Tools);
    hub.publish_list_changed(ListKind::Prompts);
    assert_eq!(
        frames(&everything),
        vec![
            Frame::ListChanged(ListKind::Tools),
            Frame::ListChanged(ListKind::Prompts),
        ]
    );
}

#[test]
fn relays_hear_every_list_and_resource_change_once_and_are_not_subscriptions() {
    let hub = Hub::new(NotificationLimits {
        max_subscriptions: 1,
        ..NotificationLimits::default()
    });
    let relay = hub.relay().unwrap();
    let lists = hub
        .subscribe(
            &someone(),
            Filter {
                tools_list_changed: true,
                ..Filter::default()
            },
        )
        .unwrap();
    assert_eq!(hub.open_subscriptions(), 1, "the relay is not counted");
    for _ in 0..100 {
        hub.publish_resource_updated("test://a");
        hub.publish_list_changed(ListKind::Prompts);
        hub.publish_resource_updated("test://b");
    }
    let taken = match relay.wait(Duration::ZERO) {
        Delivery::Frames(frames) => frames,
        other => panic!("expected frames, got {other:?}"),
    };
    assert_eq!(
        taken,
        vec![
            Frame::ResourceUpdated("test://a".into()),
            Frame::ListChanged(ListKind::Prompts),
            Frame::ResourceUpdated("test://b".into()),
        ]
    );
    assert_eq!(lists.mailbox.wait(Duration::ZERO), Delivery::Idle);
    hub.close_all();
    assert_eq!(relay.wait(Duration::ZERO), Delivery::Close);
    assert!(hub.relay().is_none());
}

#[test]
fn relays_hear_the_tasks_they_follow_for_as_long_as_anyone_follows_them() {
    let hub = Hub::new(NotificationLimits::default());
    let relay = hub.relay().unwrap();
    hub.publish_task_changed("t-1", 1);
    assert_eq!(relay.wait(Duration::ZERO), Delivery::Idle);
    assert!(!hub.follows_any_task());

    // Following gives a first hint at once, so a change just before it is not missed.
    hub.relay_follow_task("t-1");
    hub.relay_follow_task("t-1");
    assert!(hub.follows_any_task() && hub.await_followers(Duration::ZERO));
    hub.publish_task_changed("t-1", 2);
    hub.publish_task_changed("t-2", 3);
    let frames = match relay.wait(Duration::ZERO) {
        Delivery::Frames(frames) => frames,
        other => panic!("expected frames, got {other:?}"),
    };
    assert_eq!(frames, vec![task("t-1", 2)]);

    // Each follow is undone by one unfollow.
    hub.relay_unfollow_task("t-1");
    hub.publish_task_changed("t-1", 4);
    assert_eq!(
        relay.wait(Duration::ZERO),
        Delivery::Frames(vec![task("t-1", 4)])
    );
    hub.relay_unfollow_task("t-1");
    assert!(!hub.follows_any_task());
    hub.publish_task_changed("t-1", 5);
    assert_eq!(relay.wait(Duration::ZERO), Delivery::Idle);
}

#[test]
fn a_waiting_stream_wakes_on_a_hint() {
    let hub = Arc::new(Hub::new(NotificationLimits::default()));
    let subscription = hub
        .subscribe(
            &someone(),
            Filter {
                task_ids: vec!["t".into()],
                ..Filter::default()
            },
        )
        .unwrap();
    let publisher = Arc::clone(&hub);
    let started = std::time::Instant::now();
    let thread = std::thread::spawn(move || publisher.publish_task_changed("t", 7));
    assert_eq!(
        subscription.mailbox.wait(Duration::from_secs(10)),
        Delivery::Frames(vec![task("t", 7)])
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    thread.join().unwrap();
}

#[test]
fn caps_subscriptions_per_identity() {
    let hub = Hub::new(NotificationLimits {
        max_subscriptions_per_identity: 2,
        ..NotificationLimits::default()
    });
    let _first = hub.subscribe(&someone(), Filter::default()).unwrap();
    let second = hub.subscribe(&someone(), Filter::default()).unwrap();
    assert_eq!(
        hub.subscribe(&someone(), Filter::default())
            .unwrap_err()
            .http_status,
        429
    );
    let other = Identity {
        principal: "other".into(),
        ..someone()
    };
    assert!(hub.subscribe(&other, Filter::default()).is_ok());
    hub.unsubscribe(second.key);
    assert!(hub.subscribe(&someone(), Filter::default()).is_ok());
}

#[test]
fn a_task_watch_wakes_on_its_task_only_and_ends_when_dropped() {
    let hub = Hub::new(NotificationLimits::default());
    let watch = hub.watch_task("t1");
    assert!(
        hub.follows_any_task(),
        "the outbox relay must read for a watch"
    );
    assert_eq!(hub.open_subscriptions(), 0, "a watch is not a subscription");
    hub.publish_task_changed("t2", 1);
    assert!(matches!(watch.mailbox.wait(Duration::ZERO), Delivery::Idle));
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| watch.wait(Duration::from_secs(10)));
        hub.publish_task_changed("t1", 2);
        assert!(waiter.join().expect("waiter"), "woken, not closed");
    });
    drop(watch);
    assert!(!hub.follows_any_task());
    let closing = hub.watch_task("t1");
    hub.close_all();
    assert!(
        !closing.wait(Duration::from_secs(10)),
        "shutdown ends the wait"
    );
}
