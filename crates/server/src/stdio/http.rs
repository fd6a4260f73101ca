//! The relay's HTTP client: ureq, the project's one HTTP client (the OTLP exporter and
//! OAuth use it too), with rustls and the system's trust store, so that `--connect`
//! reaches a remote server over `https://` as well as a local one over `http://`.
//!
//! The relay needs four things of it: a POST whose answer is JSON or an SSE stream read
//! event by event as it arrives, a long-lived GET SSE stream, a DELETE, and the status
//! and headers of each. Bodies are read lazily from ureq's reader, so a stream's events
//! reach the host as the server sends them.

use std::io::{self, BufRead, BufReader, Read};
use std::sync::OnceLock;
use std::time::Duration;

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the server's MCP endpoint is.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The whole URL, its path defaulted to `/mcp`.
    url: String,
}

/// Why `--connect`'s URL names no endpoint this relay can reach.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("expected an http:// or https:// URL, such as http://127.0.0.1:8080/mcp")]
    Scheme,
    #[error("expected host[:port] after {scheme}://")]
    Authority { scheme: &'static str },
    #[error("not a URL: {0}")]
    Unparsable(String),
}

impl Endpoint {
    /// Parses `http://host[:port][/path]` or `https://…` (the path defaults to `/mcp`).
    pub fn parse(url: &str) -> Result<Endpoint, EndpointError> {
        let (scheme, rest) = if let Some(rest) = url.strip_prefix("http://") {
            ("http", rest)
        } else if let Some(rest) = url.strip_prefix("https://") {
            ("https", rest)
        } else {
            return Err(EndpointError::Scheme);
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/mcp"),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(EndpointError::Authority { scheme });
        }
        let url = format!("{scheme}://{authority}{path}");
        url.parse::<ureq::http::Uri>()
            .map_err(|error| EndpointError::Unparsable(error.to_string()))?;
        Ok(Endpoint { url })
    }
}

/// A response whose body has not been read yet.
pub struct Response {
    pub status: u16,
    headers: Vec<(String, String)>,
    body: BufReader<Box<dyn Read + Send>>,
}

impl Response {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(field, _)| field.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    pub fn is_event_stream(&self) -> bool {
        self.header("Content-Type")
            .is_some_and(|kind| kind.trim_start().starts_with("text/event-stream"))
    }

    /// The whole body (bounded by `limit` bytes).
    pub fn read_body(mut self, limit: u64) -> io::Result<Vec<u8>> {
        let mut body = Vec::new();
        self.body.by_ref().take(limit).read_to_end(&mut body)?;
        Ok(body)
    }

    /// Calls `each` with every SSE event's `id` and data (its `data:` lines joined)
    /// as the events arrive, until the stream ends or `each` returns `false`.
    pub fn for_each_event(
        mut self,
        mut each: impl FnMut(Option<&str>, &str) -> bool,
    ) -> io::Result<()> {
        let mut data = String::new();
        let mut id: Option<String> = None;
        let mut line = String::new();
        loop {
            line.clear();
            if self.body.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let text = line.trim_end_matches(['\r', '\n']);
            if text.is_empty() {
                if !data.is_empty() && !each(id.as_deref(), &data) {
                    return Ok(());
                }
                data.clear();
                continue;
            }
            let (field, value) = match text.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (text, ""),
            };
            match field {
                "data" => {
                    if !data.is_empty() {
                        data.push('\n');
                    }
                    data.push_str(value);
                }
                "id" => id = Some(value.to_owned()),
                _ => {}
            }
        }
    }
}

/// The agent for calls bounded by `timeout` (the wait for the answer and each read of
/// its body), or unbounded (answers that may take as long as a tool runs, and streams);
/// each kept, so that connections are reused. HTTP error statuses are answers here, not
/// errors: the relay reads them.
fn agent(timeout: Option<Duration>) -> ureq::Agent {
    static BOUNDED: OnceLock<(Duration, ureq::Agent)> = OnceLock::new();
    static UNBOUNDED: OnceLock<ureq::Agent> = OnceLock::new();
    let build = |timeout: Option<Duration>| -> ureq::Agent {
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::PlatformVerifier)
            .build();
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_recv_response(timeout)
            .timeout_recv_body(timeout)
            .tls_config(tls)
            .build()
            .into()
    };
    match timeout {
        None => UNBOUNDED.get_or_init(|| build(None)).clone(),
        Some(limit) => {
            let (kept, agent) = BOUNDED.get_or_init(|| (limit, build(Some(limit))));
            if *kept == limit {
                agent.clone()
            } else {
                build(Some(limit))
            }
        }
    }
}

/// Sends one request and reads the response head. `timeout` bounds the wait for the
/// answer and each read of its body (none for answers that may take as long as a tool
/// runs, and for streams).
pub fn send(
    endpoint: &Endpoint,
    method: &str,
    headers: &[(String, String)],
    body: &[u8],
    timeout: Option<Duration>,
) -> io::Result<Response> {
    let mut request = ureq::http::Request::builder()
        .method(method)
        .uri(&endpoint.url);
    for (name, value) in headers {
        if value.contains(['\r', '\n']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name} header value has a line break"),
            ));
        }
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request
        .body(body.to_vec())
        .map_err(|error| io::Error::new(io::ErrorKind::InvalidInput, error.to_string()))?;
    let response = agent(timeout).run(request).map_err(|error| match error {
        ureq::Error::Io(error) => error,
        other => io::Error::other(other.to_string()),
    })?;
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect();
    let reader: Box<dyn Read + Send> = Box::new(response.into_body().into_reader());
    Ok(Response {
        status,
        headers,
        body: BufReader::new(reader),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_scheme_host_port_and_path() {
        let endpoint = Endpoint::parse("http://127.0.0.1:8080/mcp").unwrap();
        assert_eq!(endpoint.url, "http://127.0.0.1:8080/mcp");
        let endpoint = Endpoint::parse("http://localhost").unwrap();
        assert_eq!(endpoint.url, "http://localhost/mcp");
        let endpoint = Endpoint::parse("https://tasks.example.test/team/mcp").unwrap();
        assert_eq!(endpoint.url, "https://tasks.example.test/team/mcp");
        assert!(Endpoint::parse("ftp://x").is_err());
        assert!(Endpoint::parse("http://user@host/").is_err());
        assert!(Endpoint::parse("http:///mcp").is_err());
    }
}
