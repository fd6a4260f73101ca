//! The relay's HTTP/1.1 client: one request per connection over a plain `TcpStream`.
//!
//! Why not an HTTP client crate: the relay talks to one `mcp-taskd serve`, normally on
//! loopback (a systemd service), and needs exactly four things — a POST whose answer is
//! JSON or an SSE stream read event by event as it arrives, a long-lived GET SSE stream,
//! a DELETE, and the status and headers of each. That is a small, fully testable piece
//! of std code, whereas a client crate would bring a TLS stack and its build time for
//! nothing the relay uses. `https://` URLs are refused with a clear message (put the
//! relay on the server's host, or tunnel to its loopback port).
//!
//! `Connection: close` on every request keeps the framing simple (the body ends with the
//! connection when it has neither a length nor chunks); connections to loopback are
//! cheap.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest status line or header line accepted.
const MAX_HEAD_LINE: u64 = 16 * 1024;

/// Where the server's MCP endpoint is.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `host:port`, as connected to and sent in `Host`.
    authority: String,
    path: String,
}

impl Endpoint {
    /// Parses `http://host[:port][/path]` (the path defaults to `/mcp`).
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let rest = if let Some(rest) = url.strip_prefix("http://") {
            rest
        } else if url.starts_with("https://") {
            return Err(
                "https is not supported: run the relay on the server's host and \
                        connect to its loopback http:// address"
                    .into(),
            );
        } else {
            return Err("expected an http:// URL, such as http://127.0.0.1:8080/mcp".into());
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/mcp"),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err("expected host[:port] after http://".into());
        }
        let has_port = authority
            .rsplit_once(':')
            .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
            && !authority.ends_with(']');
        let authority = if has_port {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        Ok(Endpoint {
            authority,
            path: path.to_owned(),
        })
    }
}

/// A response whose body has not been read yet.
pub struct Response {
    pub status: u16,
    headers: Vec<(String, String)>,
    body: BufReader<Body>,
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

/// Sends one request and reads the response head. `timeout` bounds every read (none
/// for answers that may take as long as a tool runs, and for streams).
pub fn send(
    endpoint: &Endpoint,
    method: &str,
    headers: &[(String, String)],
    body: &[u8],
    timeout: Option<Duration>,
) -> io::Result<Response> {
    let stream = connect(&endpoint.authority)?;
    stream.set_read_timeout(timeout)?;
    stream.set_nodelay(true)?;
    let mut head = format!(
        "{method} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
        endpoint.path,
        endpoint.authority,
        body.len()
    );
    for (name, value) in headers {
        if value.contains(['\r', '\n']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name} header value has a line break"),
            ));
        }
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut writer = &stream;
    writer.write_all(head.as_bytes())?;
    writer.write_all(body)?;
    writer.flush()?;
    let mut reader = BufReader::new(stream);
    let status_line = read_head_line(&mut reader)?;
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| invalid("the answer is not HTTP"))?;
    let mut headers = Vec::new();
    loop {
        let line = read_head_line(&mut reader)?;
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(field, _)| field.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    };
    let framing = if method == "HEAD" || status == 204 || status == 304 {
        Framing::Length(0)
    } else if find("Transfer-Encoding").is_some_and(|coding| coding.eq_ignore_ascii_case("chunked"))
    {
        Framing::Chunked {
            left: 0,
            done: false,
        }
    } else if let Some(length) = find("Content-Length").and_then(|length| length.parse().ok()) {
        Framing::Length(length)
    } else {
        Framing::ToEnd
    };
    Ok(Response {
        status,
        headers,
        body: BufReader::new(Body {
            connection: reader,
            framing,
        }),
    })
}

fn connect(authority: &str) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the host name resolves to nothing");
    for address in authority.to_socket_addrs()? {
        match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
            Ok(stream) => return Ok(stream),
            Err(error) => last = error,
        }
    }
    Err(last)
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_owned())
}

fn read_head_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = Vec::new();
    reader.take(MAX_HEAD_LINE).read_until(b'\n', &mut line)?;
    if line.last() != Some(&b'\n') {
        return Err(invalid("the answer ended inside its head"));
    }
    String::from_utf8(line)
        .map(|line| line.trim_end_matches(['\r', '\n']).to_owned())
        .map_err(|_| invalid("the answer's head is not UTF-8"))
}

/// How the body is delimited.
enum Framing {
    Length(u64),
    Chunked { left: u64, done: bool },
    ToEnd,
}

/// A response body, de-chunked.
struct Body {
    connection: BufReader<TcpStream>,
    framing: Framing,
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.framing {
            Framing::ToEnd => self.connection.read(buf),
            Framing::Length(left) => {
                if *left == 0 || buf.is_empty() {
                    return Ok(0);
                }
                let most = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                let read = self.connection.read(&mut buf[..most])?;
                if read == 0 {
                    return Err(invalid("the answer ended before its length"));
                }
                *left -= read as u64;
                Ok(read)
            }
            Framing::Chunked { left, done } => {
                if *done || buf.is_empty() {
                    return Ok(0);
                }
                if *left == 0 {
                    let line = read_head_line(&mut self.connection)?;
                    let size = line.split(';').next().unwrap_or("").trim();
                    let size = u64::from_str_radix(size, 16)
                        .map_err(|_| invalid("a bad chunk size in the answer"))?;
                    if size == 0 {
                        *done = true;
                        return Ok(0);
                    }
                    *left = size;
                }
                let most = buf.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                let read = self.connection.read(&mut buf[..most])?;
                if read == 0 {
                    return Err(invalid("the answer ended inside a chunk"));
                }
                *left -= read as u64;
                if *left == 0 {
                    // The CRLF after the chunk's data.
                    read_head_line(&mut self.connection)?;
                }
                Ok(read)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_host_port_and_path() {
        let endpoint = Endpoint::parse("http://127.0.0.1:8080/mcp").unwrap();
        assert_eq!(endpoint.authority, "127.0.0.1:8080");
        assert_eq!(endpoint.path, "/mcp");
        let endpoint = Endpoint::parse("http://localhost").unwrap();
        assert_eq!(endpoint.authority, "localhost:80");
        assert_eq!(endpoint.path, "/mcp");
        assert!(Endpoint::parse("https://example.test/mcp")
            .unwrap_err()
            .contains("https"));
        assert!(Endpoint::parse("ftp://x").is_err());
        assert!(Endpoint::parse("http://user@host/").is_err());
    }
}
