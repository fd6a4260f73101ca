//! CORS for browser-based MCP clients (the Inspector, web apps): requests from an
//! allowed origin (loopback, or `server.allowed_origins`; the same rule as the
//! DNS-rebinding check) may call the MCP endpoint and read what clients read from the
//! answer: `WWW-Authenticate` (OAuth discovery and step-up), `Mcp-Session-Id` (legacy
//! sessions), `MCP-Protocol-Version` and `Retry-After`. A foreign origin gets no CORS
//! headers (and its requests are refused with 403 before anything else).
//!
//! Every response to an allowed cross-origin request carries the headers, whichever
//! path answers it (the tiny_http patch `Request::add_response_header`), so that even a
//! 401 challenge or a streamed answer is readable by the page.

use tiny_http::{Header, Response, StatusCode};

/// Headers a page may read from the answer.
const EXPOSED: &str = "WWW-Authenticate, Mcp-Session-Id, MCP-Protocol-Version, Retry-After";
/// Methods of the endpoint (GET and DELETE inside legacy sessions).
const METHODS: &str = "POST, GET, DELETE, OPTIONS";
/// Methods of the protected-resource metadata, which any origin may read.
const METADATA_METHODS: &str = "GET, OPTIONS";
/// How long a browser may cache a preflight answer, in seconds.
const MAX_AGE_S: &str = "600";

/// Marks every response to `request` as readable by `origin` (already allowed).
pub fn allow(request: &mut tiny_http::Request, origin: &str) {
    for (name, value) in [
        ("Access-Control-Allow-Origin", origin),
        ("Access-Control-Expose-Headers", EXPOSED),
        ("Vary", "Origin"),
    ] {
        if let Ok(header) = Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            request.add_response_header(header);
        }
    }
}

/// The answer to a preflight (`OPTIONS` with `Access-Control-Request-Method`) from an
/// allowed origin: the endpoint's methods, and the request headers the browser asked
/// for when each is a plain header name (MCP's `Mcp-Param-*` names vary per tool).
pub fn preflight(requested_headers: Option<&str>) -> Response<std::io::Cursor<Vec<u8>>> {
    // The origin itself was added to the request by `allow`.
    answer(METHODS, requested_headers, None)
}

/// The answer to a preflight for the protected-resource metadata: public, so any
/// origin (clients send `MCP-Protocol-Version` with it, which needs a preflight).
pub fn metadata_preflight(requested_headers: Option<&str>) -> Response<std::io::Cursor<Vec<u8>>> {
    answer(METADATA_METHODS, requested_headers, Some("*"))
}

fn answer(
    methods: &str,
    requested_headers: Option<&str>,
    origin: Option<&str>,
) -> Response<std::io::Cursor<Vec<u8>>> {
    let requested = requested_headers
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty() && name.bytes().all(is_token_byte))
        .collect::<Vec<_>>()
        .join(", ");
    let mut response = Response::new(
        StatusCode(204),
        Vec::new(),
        std::io::Cursor::new(Vec::new()),
        Some(0),
        None,
    );
    for (name, value) in [
        ("Access-Control-Allow-Origin", origin.unwrap_or_default()),
        ("Access-Control-Allow-Methods", methods),
        ("Access-Control-Allow-Headers", requested.as_str()),
        ("Access-Control-Max-Age", MAX_AGE_S),
    ] {
        if value.is_empty() {
            continue;
        }
        if let Ok(header) = Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response.add_header(header);
        }
    }
    response
}

/// RFC 9110 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
