//! Reading a request's headers as the 2026-07-28 Streamable HTTP transport says to (the
//! MCP header vocabulary itself, `Mcp-Name` and `Mcp-Param-*`, is
//! `taskd_protocol::headers`).

/// The first header called `name` (case-insensitive), with surrounding spaces and tabs
/// removed (the transport says optional whitespace must not matter).
pub fn header<'r>(request: &'r tiny_http::Request, name: &str) -> Option<&'r str> {
    request
        .headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str().trim_matches([' ', '\t']))
}
