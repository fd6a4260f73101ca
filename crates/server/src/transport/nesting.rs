//! A pre-parse check of JSON nesting depth: a hostile body is refused before
//! `serde_json` recurses into it.

/// Deepest nesting of arrays and objects in `bytes`, stopping once past `limit`, so
/// that a hostile body is refused before the parser recurses into it.
pub(crate) fn nesting_exceeds(bytes: &[u8], limit: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::nesting_exceeds;

    #[test]
    fn nesting_ignores_brackets_in_strings() {
        assert!(!nesting_exceeds(br#"{"a":"[[[[[[[[[["}"#, 3));
        assert!(nesting_exceeds(b"[[[[", 3));
        assert!(!nesting_exceeds(br#"{"a":"\"[[[["}"#, 3));
    }
}
