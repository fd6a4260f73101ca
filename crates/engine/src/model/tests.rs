//! Unit tests of the engine's records: origins, statuses, turns, digests.

use super::*;

#[test]
fn an_origin_leaves_out_the_usual_version_and_capabilities_and_reads_them_back() {
    let usual = Origin {
        v: ORIGIN_VERSION,
        tool: "noop_task".into(),
        arguments: Map::new(),
        protocol_version: "2026-07-28".into(),
        capabilities: origin_capabilities(),
    };
    let stored = serde_json::to_string(&usual).unwrap();
    assert_eq!(stored, r#"{"v":2,"tool":"noop_task","arguments":{}}"#);
    let read: Origin = serde_json::from_str(&stored).unwrap();
    assert_eq!(read.protocol_version, "2026-07-28");
    assert_eq!(read.capabilities, origin_capabilities());

    // Version 1, as stored before: both fields present, same meaning.
    let v1 = r#"{"v":1,"tool":"noop_task","arguments":{},"protocol_version":"2026-07-28","capabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#;
    let read: Origin = serde_json::from_str(v1).unwrap();
    assert_eq!(read.protocol_version, "2026-07-28");
    assert_eq!(read.capabilities, origin_capabilities());

    // Anything else is kept, even an empty capability set.
    let other = Origin {
        protocol_version: "2025-11-25".into(),
        capabilities: Map::new(),
        ..usual
    };
    let stored = serde_json::to_string(&other).unwrap();
    let read: Origin = serde_json::from_str(&stored).unwrap();
    assert_eq!(read.protocol_version, "2025-11-25");
    assert_eq!(read.capabilities, Map::new());
    assert!(stored.contains(r#""capabilities":{}"#), "{stored}");
}

#[test]
fn the_last_retry_fails_with_the_json_rpc_error_the_sql_layer_used_to_build() {
    let Finish::Failed { error } = (Finish::Retry {
        reason: "lost".into(),
    })
    .resolve(3, 3, false) else {
        panic!("the last retry fails the task");
    };
    assert_eq!(
        error,
        r#"{"code":-32603,"message":"Task failed after 3 attempts: lost"}"#
    );
    assert_eq!(
        Finish::reused_input_key_error(),
        r#"{"code":-32603,"message":"The tool reused an input request key"}"#
    );
    assert!(matches!(
        Finish::Release.resolve(1, 3, true),
        Finish::Cancelled
    ));
    assert!(matches!(
        (Finish::Completed {
            result: "{}".into()
        })
        .resolve(1, 3, true),
        Finish::Completed { .. }
    ));
}

#[test]
fn the_arguments_digest_ignores_key_order_and_nothing_else() {
    let digest = |value: serde_json::Value| arguments_digest(value.as_object().expect("an object"));
    let one = digest(serde_json::json!({"a": 1, "b": {"x": [1, "2"], "y": null}}));
    assert_eq!(one.len(), 32);
    assert_eq!(
        one,
        digest(serde_json::json!({"b": {"y": null, "x": [1, "2"]}, "a": 1}))
    );
    for other in [
        serde_json::json!({"a": 2, "b": {"x": [1, "2"], "y": null}}),
        serde_json::json!({"a": 1, "b": {"x": ["2", 1], "y": null}}),
        serde_json::json!({"a": 1, "b": {"x": [1, 2], "y": null}}),
        serde_json::json!({"a": 1, "b": {"x": [1, "2"]}}),
        serde_json::json!({"a": 1.0, "b": {"x": [1, "2"], "y": null}}),
    ] {
        assert_ne!(one, digest(other));
    }
}
