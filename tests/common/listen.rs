//! `subscriptions/listen` streams, read line by line as clients do.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{Server, VERSION};

/// An open `subscriptions/listen` stream, read line by line as clients do.
pub struct Listen {
    reader: BufReader<TcpStream>,
    pub status: u16,
}

impl Listen {
    /// Opens a listen stream with `notifications` as the filter.
    pub fn open(
        server: &Server,
        notifications: Value,
        capabilities: Value,
        headers: &[(&str, &str)],
    ) -> Listen {
        Listen::open_on(
            TcpStream::connect(server.addr).expect("connect"),
            server,
            notifications,
            capabilities,
            headers,
        )
    }

    /// Like [`Listen::open`], over a socket with a tiny receive buffer: a client that
    /// stops reading then pushes back on the server after a few kilobytes.
    pub fn open_small_buffer(server: &Server, notifications: Value) -> Listen {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
        socket.connect(&server.addr.into()).expect("connect");
        Listen::open_on(socket.into(), server, notifications, json!({}), &[])
    }

    fn open_on(
        mut stream: TcpStream,
        server: &Server,
        notifications: Value,
        capabilities: Value,
        headers: &[(&str, &str)],
    ) -> Listen {
        let body = json!({"jsonrpc": "2.0", "id": 77, "method": "subscriptions/listen", "params": {
            "notifications": notifications,
            "_meta": {"io.modelcontextprotocol/protocolVersion": VERSION,
                      "io.modelcontextprotocol/clientCapabilities": capabilities}}})
        .to_string();
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {VERSION}\r\n\
             Mcp-Method: subscriptions/listen\r\nContent-Length: {}\r\n",
            server.addr,
            body.len()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(&body);
        stream.write_all(request.as_bytes()).expect("send listen");
        let mut reader = BufReader::new(stream);
        let mut status_line = String::new();
        reader.read_line(&mut status_line).expect("status line");
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status");
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("header line");
            if line == "\r\n" || line.is_empty() {
                break;
            }
        }
        Listen { reader, status }
    }

    /// Half-closes the connection: the client sends nothing more but still reads.
    pub fn shutdown_write(&self) {
        self.reader
            .get_ref()
            .shutdown(std::net::Shutdown::Write)
            .expect("shutdown");
    }

    /// The next raw line, or `None` on timeout or end of stream.
    pub fn next_line(&mut self, limit: Duration) -> Option<String> {
        self.reader.get_ref().set_read_timeout(Some(limit)).ok()?;
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim_end().to_owned()),
        }
    }

    /// The next JSON-RPC message (SSE `data:` line), or `None` on timeout or end.
    pub fn next_message(&mut self, limit: Duration) -> Option<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let line = self.next_line(left.max(Duration::from_millis(1)))?;
            if let Some(data) = line.strip_prefix("data:") {
                return Some(serde_json::from_str(data.trim()).expect("SSE data is JSON"));
            }
        }
    }

    /// Reads messages until the stream ends (or `limit` passes); returns them all.
    pub fn drain(&mut self, limit: Duration) -> Vec<Value> {
        let deadline = Instant::now() + limit;
        let mut messages = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.next_message(left) {
                Some(message) => messages.push(message),
                None => break,
            }
        }
        messages
    }
}
