//! Wall-clock time as the wire and the store use it.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as i64)
        .unwrap_or(0)
}

/// An RFC 3339 / ISO 8601 UTC timestamp with millisecond precision.
pub fn rfc3339(ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|time| time.format(&Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".into())
}

/// The Unix ms of an RFC 3339 timestamp (`2026-03-01T09:00:00Z`, any offset);
/// `None` for any other text.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let time = OffsetDateTime::parse(text.trim(), &Rfc3339).ok()?;
    i64::try_from(time.unix_timestamp_nanos() / 1_000_000).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_iso_8601() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            super::rfc3339(1_764_460_800_123),
            "2025-11-30T00:00:00.123Z"
        );
    }

    #[test]
    fn reads_rfc_3339_back_with_any_offset() {
        assert_eq!(
            super::parse_rfc3339("2025-11-30T00:00:00.123Z"),
            Some(1_764_460_800_123)
        );
        assert_eq!(
            super::parse_rfc3339("2025-11-30T01:00:00+01:00"),
            Some(1_764_460_800_000)
        );
        assert_eq!(super::parse_rfc3339("tomorrow"), None);
    }
}
