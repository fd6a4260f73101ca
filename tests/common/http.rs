//! The raw HTTP/1.1 client: requests written byte by byte (so a test can send a foreign
//! `Host`, a lying length or a broken chunk), and the responses read back.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Server;

impl Server {
    /// Sends raw bytes as a POST to `path` with the given headers. `Host`,
    /// `Connection: close` and a correct `Content-Length` are added unless `headers`
    /// already names them (so a test can send a foreign `Host` or a lying length).
    pub fn post_raw(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpResponse {
        self.exchange(&self.raw_request("POST", path, headers, body))
    }

    /// The bytes of an HTTP/1.1 request as [`Server::post_raw`] sends it.
    pub fn raw_request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Vec<u8> {
        let has = |name: &str| headers.iter().any(|(h, _)| h.eq_ignore_ascii_case(name));
        let mut request = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
        if !has("Host") {
            request.extend_from_slice(format!("Host: {}\r\n", self.addr).as_bytes());
        }
        if !has("Connection") {
            request.extend_from_slice(b"Connection: close\r\n");
        }
        if !has("Content-Length") && !has("Transfer-Encoding") {
            request.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
        }
        for (name, value) in headers {
            request.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        request.extend_from_slice(b"\r\n");
        request.extend_from_slice(body);
        request
    }

    /// POSTs `body` with `Transfer-Encoding: chunked` (no `Content-Length`), in chunks of
    /// `chunk` bytes.
    pub fn post_chunked(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        chunk: usize,
    ) -> HttpResponse {
        let mut encoded = Vec::new();
        for piece in body.chunks(chunk.max(1)) {
            encoded.extend_from_slice(format!("{:X}\r\n", piece.len()).as_bytes());
            encoded.extend_from_slice(piece);
            encoded.extend_from_slice(b"\r\n");
        }
        encoded.extend_from_slice(b"0\r\n\r\n");
        let mut all: Vec<(&str, &str)> = vec![("Transfer-Encoding", "chunked")];
        all.extend_from_slice(headers);
        self.post_raw(path, &all, &encoded)
    }

    /// Sends `bytes` as they are, half-closes the connection and reads whatever comes
    /// back within `limit`. Never panics: write errors are ignored (the server may close
    /// early) and `None` means no parseable HTTP response arrived.
    pub fn try_exchange(&self, bytes: &[u8], limit: Duration) -> Option<HttpResponse> {
        HttpResponse::try_parse(&self.try_exchange_raw(bytes, limit)?)
    }

    /// Like [`Server::try_exchange`], returning every byte the server sent (possibly
    /// several responses); `None` only when the connection could not be made.
    pub fn try_exchange_raw(&self, bytes: &[u8], limit: Duration) -> Option<Vec<u8>> {
        let mut stream = TcpStream::connect(self.addr).ok()?;
        stream.set_read_timeout(Some(limit)).ok()?;
        stream.set_write_timeout(Some(limit)).ok()?;
        let _ = stream.write_all(bytes);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let deadline = Instant::now() + limit;
        let mut raw = Vec::new();
        let mut buffer = [0u8; 16 * 1024];
        while Instant::now() < deadline {
            match stream.read(&mut buffer) {
                // A signal to the test process (another test's child exiting) is not
                // the server's doing: read again.
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&buffer[..n]),
            }
        }
        Some(raw)
    }

    /// Sends a complete raw HTTP request and reads the whole response: up to its
    /// `Content-Length` when it has one (the server may keep reading an unfinished
    /// request body), otherwise to the end of the connection.
    pub fn exchange(&self, request: &[u8]) -> HttpResponse {
        let mut stream = TcpStream::connect(self.addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        stream.write_all(request).expect("write request");
        let started = Instant::now();
        let mut raw = Vec::new();
        let mut buffer = [0u8; 16 * 1024];
        let mut ended = "the server closed the connection".to_owned();
        while !response_complete(&raw) {
            match stream.read(&mut buffer) {
                Ok(0) => break,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    ended = format!("reading failed: {error}");
                    break;
                }
                Ok(n) => raw.extend_from_slice(&buffer[..n]),
            }
        }
        HttpResponse::try_parse(&raw).unwrap_or_else(|| {
            panic!(
                "not an HTTP response after {:?} ({ended}): {:?}",
                started.elapsed(),
                String::from_utf8_lossy(&raw[..raw.len().min(2000)])
            )
        })
    }

    pub fn get(&self, path: &str) -> HttpResponse {
        self.exchange(
            format!(
                "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                self.addr
            )
            .as_bytes(),
        )
    }
}

pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// Parses one HTTP response (status line, headers, body to the end of `raw`).
    pub fn try_parse(raw: &[u8]) -> Option<HttpResponse> {
        let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&raw[..split]).to_string();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .filter(|line| line.starts_with("HTTP/"))
            .and_then(|line| line.split(' ').nth(1))
            .and_then(|code| code.parse().ok())?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let rest = &raw[split + 4..];
        let chunked = headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
        let body = if chunked {
            dechunk(rest)
        } else {
            rest.to_vec()
        };
        Some(HttpResponse {
            status,
            headers,
            body,
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).to_string()
    }

    /// The single JSON document of an `application/json` body, or the last message of an
    /// SSE body (the response).
    pub fn json(&self) -> Value {
        if self
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream"))
        {
            return self.sse_messages().pop().expect("an SSE message");
        }
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("JSON body ({e}): {}", self.text()))
    }

    pub fn sse_messages(&self) -> Vec<Value> {
        self.text()
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|data| serde_json::from_str(data.trim()).expect("SSE data is JSON"))
            .collect()
    }

    pub fn result(&self) -> Value {
        let message = self.json();
        assert!(
            message.get("error").is_none(),
            "expected a result, got {message}"
        );
        message["result"].clone()
    }

    /// Asserts an error with this HTTP status and JSON-RPC code; returns the error.
    pub fn expect_error(&self, status: u16, code: i64) -> Value {
        assert_eq!(self.status, status, "status for {}", self.text());
        let message = self.json();
        assert_eq!(message["error"]["code"], code, "error code in {message}");
        message["error"].clone()
    }
}

impl HttpResponse {
    /// Reads one whole response with a `Content-Length` body from `stream`, leaving the
    /// connection open for the next.
    pub fn read_one(stream: &mut TcpStream) -> HttpResponse {
        let mut raw = Vec::new();
        let mut buffer = [0u8; 16 * 1024];
        while !response_complete(&raw) {
            match stream.read(&mut buffer) {
                Ok(0) => panic!(
                    "the connection ended before a whole response: {:?}",
                    String::from_utf8_lossy(&raw)
                ),
                Ok(n) => raw.extend_from_slice(&buffer[..n]),
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => panic!("reading the response: {error}"),
            }
        }
        HttpResponse::try_parse(&raw).expect("an HTTP response")
    }
}

/// Whether `raw` holds a whole response with a `Content-Length` body.
fn response_complete(raw: &[u8]) -> bool {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    head.lines()
        .filter_map(|line| line.strip_prefix("content-length:"))
        .find_map(|value| value.trim().parse::<usize>().ok())
        .is_some_and(|length| raw.len() >= split + 4 + length)
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..line_end]).trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            return out;
        }
        let start = line_end + 2;
        let end = (start + size).min(data.len());
        out.extend_from_slice(&data[start..end]);
        data = &data[(end + 2).min(data.len())..];
    }
}
