//! W3C Trace Context as MCP carries it: `traceparent` and `tracestate` in a request's
//! `_meta` (both eras; the spec's "OpenTelemetry trace context"), or in the HTTP headers
//! of the same names. What does not follow the W3C format is ignored, as the W3C
//! specification asks: it never makes a request fail.
//!
//! A task stores the context it was created in (`tasks.trace_context`), so that every
//! later span of its life, in any process, joins the caller's trace; its command tools
//! see it as `TRACEPARENT` and `TRACESTATE`.

use serde_json::{Map, Value};

/// Longest `tracestate` kept (the W3C limit of 32 list members fits in 512 bytes as
/// vendors use it); a longer one is dropped, the `traceparent` kept.
const MAX_TRACESTATE: usize = 512;

/// A valid `traceparent` (normalized to version `00`), with its `tracestate` if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// The stored form: `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`
    /// (lowercase, [`TRACEPARENT_LEN`] bytes), then a space and the `tracestate` when
    /// there is one. One small allocation: task rows carry it.
    text: Box<str>,
}

/// Length of a version `00` `traceparent`.
const TRACEPARENT_LEN: usize = 55;

impl TraceContext {
    /// The context of `traceparent` and `tracestate` values, if `traceparent` follows
    /// the W3C format (a version other than `00` is read as `00`, as the specification
    /// asks of a parser of a later version). A `tracestate` that is too long or holds
    /// anything but printable ASCII is dropped: it goes into environments and logs.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<TraceContext> {
        let traceparent = traceparent.trim();
        let bytes = traceparent.as_bytes();
        let hex = |range: std::ops::Range<usize>| {
            bytes[range]
                .iter()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
        };
        let shape_ok = bytes.len() >= 55
            && bytes[2] == b'-'
            && bytes[35] == b'-'
            && bytes[52] == b'-'
            && hex(0..2)
            && hex(3..35)
            && hex(36..52)
            && hex(53..55);
        if !shape_ok {
            return None;
        }
        let version = &traceparent[..2];
        // Version 00 is exactly 55 characters; a later one may append fields after a dash.
        let length_ok = if version == "00" {
            bytes.len() == 55
        } else {
            bytes.len() == 55 || bytes[55] == b'-'
        };
        let all_zero = |range: std::ops::Range<usize>| bytes[range].iter().all(|b| *b == b'0');
        if version == "ff" || !length_ok || all_zero(3..35) || all_zero(36..52) {
            return None;
        }
        let tracestate = tracestate.map(str::trim).filter(|state| {
            !state.is_empty()
                && state.len() <= MAX_TRACESTATE
                && state.bytes().all(|b| (0x20..0x7f).contains(&b))
        });
        let text = match tracestate {
            Some(state) => format!("00{} {state}", &traceparent[2..55]),
            None => format!("00{}", &traceparent[2..55]),
        };
        Some(TraceContext { text: text.into() })
    }

    /// The context a request's `_meta` carries, if any.
    pub fn from_meta(meta: &Map<String, Value>) -> Option<TraceContext> {
        let traceparent = meta.get("traceparent")?.as_str()?;
        TraceContext::parse(traceparent, meta.get("tracestate").and_then(Value::as_str))
    }

    /// A context from its parts (the trace and span ids as bytes), written straight
    /// into its text: every span of a task asks, so no formatting machinery and no
    /// parse. `None` for the all-zero ids the W3C format forbids.
    pub fn from_ids(
        trace_id: [u8; 16],
        span_id: [u8; 8],
        sampled: bool,
        tracestate: Option<&str>,
    ) -> Option<TraceContext> {
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        fn push_hex(text: &mut String, bytes: &[u8]) {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            for byte in bytes {
                text.push(char::from(HEX[usize::from(byte >> 4)]));
                text.push(char::from(HEX[usize::from(byte & 0xf)]));
            }
        }
        let mut text = String::with_capacity(TRACEPARENT_LEN);
        text.push_str("00-");
        push_hex(&mut text, &trace_id);
        text.push('-');
        push_hex(&mut text, &span_id);
        text.push_str(if sampled { "-01" } else { "-00" });
        match tracestate {
            // Rare (a caller's vendor state): checked as any incoming one is.
            Some(state) => TraceContext::parse(&text, Some(state)),
            None => Some(TraceContext { text: text.into() }),
        }
    }

    pub fn traceparent(&self) -> &str {
        &self.text[..TRACEPARENT_LEN]
    }

    pub fn tracestate(&self) -> Option<&str> {
        self.text.get(TRACEPARENT_LEN + 1..)
    }

    /// The trace id, 32 lowercase hex digits.
    pub fn trace_id(&self) -> &str {
        &self.text[3..35]
    }

    /// The id of the span this context names as parent, 16 lowercase hex digits.
    pub fn span_id(&self) -> &str {
        &self.text[36..52]
    }

    /// Whether the caller recorded its span (the `sampled` flag).
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.text[53..55], 16).is_ok_and(|flags| flags & 1 == 1)
    }

    /// The stored form (`tasks.trace_context`): the `traceparent`, then a space and the
    /// `tracestate` when there is one (a `traceparent` never holds a space).
    pub fn to_stored(&self) -> String {
        self.text.to_string()
    }

    /// A context read back from [`TraceContext::to_stored`]'s form; `None` for
    /// anything else.
    pub fn from_stored(stored: &str) -> Option<TraceContext> {
        match stored.split_once(' ') {
            Some((traceparent, tracestate)) => TraceContext::parse(traceparent, Some(tracestate)),
            None => TraceContext::parse(stored, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_kept_and_its_parts_read() {
        let context = TraceContext::parse(PARENT, Some("rojo=00f067aa0ba902b7")).unwrap();
        assert_eq!(context.trace_id(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(context.span_id(), "00f067aa0ba902b7");
        assert!(context.sampled());
        assert_eq!(context.tracestate(), Some("rojo=00f067aa0ba902b7"));
        let stored = context.to_stored();
        assert_eq!(TraceContext::from_stored(&stored), Some(context));
        assert_eq!(
            TraceContext::from_stored(PARENT).unwrap().tracestate(),
            None
        );
    }

    #[test]
    fn a_context_from_ids_reads_as_the_parsed_one() {
        let parsed = TraceContext::parse(PARENT, None).unwrap();
        let trace = [
            0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80,
            0x31, 0x9c,
        ];
        let span = [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7];
        assert_eq!(
            TraceContext::from_ids(trace, span, true, None),
            Some(parsed)
        );
        let unsampled = TraceContext::from_ids(trace, span, false, Some("k=v")).unwrap();
        assert!(!unsampled.sampled());
        assert_eq!(unsampled.tracestate(), Some("k=v"));
        assert_eq!(TraceContext::from_ids([0; 16], span, true, None), None);
    }

    #[test]
    fn what_breaks_the_format_is_ignored() {
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7",
            "00-0AF7651916CD43DD8448EB211C80319C-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01-extra",
            "00_0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-0g",
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01\u{e9}",
        ] {
            assert_eq!(TraceContext::parse(bad, None), None, "{bad:?}");
        }
        // A later version is read as 00, its extra fields dropped.
        let later = "01-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-00-more";
        let context = TraceContext::parse(later, None).unwrap();
        assert_eq!(
            context.traceparent(),
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-00"
        );
        assert!(!context.sampled());
    }

    #[test]
    fn an_unsafe_tracestate_is_dropped_and_the_traceparent_kept() {
        for state in ["a=b\nc=d", "a=\u{0}", &"x".repeat(600), "  "] {
            let context = TraceContext::parse(PARENT, Some(state)).unwrap();
            assert_eq!(context.tracestate(), None, "{state:?}");
        }
    }

    #[test]
    fn meta_values_of_the_wrong_type_are_ignored() {
        let meta = serde_json::json!({ "traceparent": 7, "tracestate": "a=b" });
        assert_eq!(TraceContext::from_meta(meta.as_object().unwrap()), None);
        let meta = serde_json::json!({ "traceparent": PARENT, "tracestate": 7 });
        let context = TraceContext::from_meta(meta.as_object().unwrap()).unwrap();
        assert_eq!(context.tracestate(), None);
    }
}
