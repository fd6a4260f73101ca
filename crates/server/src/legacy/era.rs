//! Era selection on the one MCP endpoint: which protocol generation a request speaks.
//!
//! 2026-07-28 requests are stateless and carry the revision in `params._meta`; legacy
//! (initialize-based) requests carry a session header, or are an `initialize` without
//! that metadata. The rule never keys on `Mcp-Method`, nor on the mere presence of
//! `MCP-Protocol-Version`: legacy probes send both on a session-less `initialize`.

use serde_json::{Map, Value};

use taskd_protocol::envelope::META_PROTOCOL_VERSION;

/// Initialize-based revisions this server negotiates, newest first.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// Header values that mark a request as legacy when it has no session: the revisions
/// above plus the oldest one, which is refused with the supported list rather than
/// routed to the stateless path's header checks.
const LEGACY_HEADER_VALUES: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The revision a legacy client gets: the one it asked for if supported, else the newest.
pub fn negotiate(requested: Option<&str>) -> &'static str {
    requested
        .and_then(|asked| LEGACY_VERSIONS.iter().find(|known| **known == asked))
        .copied()
        .unwrap_or(LEGACY_VERSIONS[0])
}

/// Every revision the endpoint speaks, for errors that must name them.
pub fn all_versions() -> Vec<&'static str> {
    let mut all: Vec<&'static str> = taskd_protocol::SUPPORTED_VERSIONS.to_vec();
    all.extend_from_slice(LEGACY_VERSIONS);
    all
}

/// Whether a POSTed message is served by the legacy path. Cheap for 2026 requests: a
/// header lookup already made, then one map lookup in `_meta`.
pub fn is_legacy_post(session: Option<&str>, version: Option<&str>, message: &Value) -> bool {
    if session.is_some() {
        return true;
    }
    if version.is_some_and(|version| !LEGACY_HEADER_VALUES.contains(&version)) {
        return false;
    }
    let modern_meta = message
        .get("params")
        .and_then(|params| params.get("_meta"))
        .is_some_and(|meta| meta.get(META_PROTOCOL_VERSION).is_some());
    !modern_meta
}

/// Result fields only 2026-07-28 defines (strict legacy clients reject them).
const MODERN_RESULT_FIELDS: &[&str] = &["resultType", "ttlMs", "cacheScope"];

/// Removes the result fields only 2026-07-28 defines.
pub fn strip_modern_fields(fields: &mut Map<String, Value>) {
    for field in MODERN_RESULT_FIELDS {
        fields.remove(*field);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn routing_follows_session_then_header_then_meta() {
        let legacy_init =
            json!({"method": "initialize", "params": {"protocolVersion": "2025-11-25"}});
        let modern =
            json!({"method": "ping", "params": {"_meta": {META_PROTOCOL_VERSION: "2026-07-28"}}});
        assert!(is_legacy_post(None, None, &legacy_init));
        assert!(is_legacy_post(None, Some("2025-11-25"), &legacy_init));
        assert!(!is_legacy_post(None, Some("2026-07-28"), &legacy_init));
        assert!(!is_legacy_post(None, Some("1999-01-01"), &legacy_init));
        assert!(!is_legacy_post(None, None, &modern));
        assert!(!is_legacy_post(None, Some("2025-11-25"), &modern));
        assert!(is_legacy_post(Some("abc"), Some("2026-07-28"), &modern));
    }

    #[test]
    fn negotiation_answers_the_request_or_the_newest() {
        assert_eq!(negotiate(Some("2025-06-18")), "2025-06-18");
        assert_eq!(negotiate(Some("2025-03-26")), "2025-03-26");
        assert_eq!(negotiate(Some("2024-11-05")), "2025-11-25");
        assert_eq!(negotiate(Some("2026-07-28")), "2025-11-25");
        assert_eq!(negotiate(None), "2025-11-25");
    }
}
