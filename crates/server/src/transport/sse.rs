//! A server-sent-events response written straight to the socket.
//!
//! tiny_http's own chunked writer buffers 8 KiB before sending anything, which would hold
//! progress notifications and listen-stream events back. So a streaming response takes
//! the raw connection writer and frames every event as its own HTTP chunk, flushed at
//! once. Each event's JSON sits on one `data:` line (clients parse line by line).

use std::io::{self, Write};

pub struct SseWriter {
    out: Box<dyn Write + Send>,
    chunked: bool,
    /// Bytes written to the connection so far (a listen stream compares it with what the
    /// kernel has not sent yet).
    written: u64,
}

impl SseWriter {
    /// Writes the `200 text/event-stream` head and takes over the connection. A request
    /// read while the server drains is its connection's last: the head says so.
    pub fn start(mut request: tiny_http::Request) -> io::Result<SseWriter> {
        let version = request.http_version();
        let chunked = (version.0, version.1) >= (1, 1);
        let last = if chunked && request.closes_connection() {
            "Connection: close\r\n"
        } else {
            ""
        };
        // Headers every answer to this request carries (CORS), written here since this
        // answer writes its own head.
        let extra: String = request
            .take_response_headers()
            .iter()
            .map(|header| format!("{}: {}\r\n", header.field, header.value))
            .collect();
        let mut out = request.into_writer();
        let framing = if chunked {
            "Transfer-Encoding: chunked"
        } else {
            "Connection: close"
        };
        write!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n\
             X-Accel-Buffering: no\r\n{extra}{last}{framing}\r\n\r\n"
        )?;
        out.flush()?;
        Ok(SseWriter {
            out,
            chunked,
            written: 0,
        })
    }

    /// Sends one JSON-RPC message as an SSE `message` event.
    pub fn send(&mut self, message: &serde_json::Value) -> io::Result<()> {
        self.write_chunk(format!("event: message\ndata: {message}\n\n").as_bytes())
    }

    /// Sends one JSON-RPC message as a `message` event with an `id`, so that a client can
    /// resume after it with `Last-Event-ID` (legacy GET streams).
    pub fn send_with_id(&mut self, id: u64, message: &serde_json::Value) -> io::Result<()> {
        self.write_chunk(format!("id: {id}\nevent: message\ndata: {message}\n\n").as_bytes())
    }

    /// An SSE comment, keeping idle streams open through proxies and client timeouts.
    pub fn keep_alive(&mut self) -> io::Result<()> {
        self.write_chunk(b":\n\n")
    }

    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Ends the response body.
    pub fn finish(mut self) -> io::Result<()> {
        if self.chunked {
            self.out.write_all(b"0\r\n\r\n")?;
        }
        self.out.flush()
    }

    fn write_chunk(&mut self, data: &[u8]) -> io::Result<()> {
        if self.chunked {
            let head = format!("{:X}\r\n", data.len());
            self.out.write_all(head.as_bytes())?;
            self.out.write_all(data)?;
            self.out.write_all(b"\r\n")?;
            self.written += (head.len() + data.len() + 2) as u64;
        } else {
            self.out.write_all(data)?;
            self.written += data.len() as u64;
        }
        self.out.flush()
    }
}
