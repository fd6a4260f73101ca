use ascii::AsciiString;

use std::io::Error as IoError;
use std::io::Result as IoResult;
use std::io::{BufRead, BufReader, BufWriter, ErrorKind, Read};

use std::io::Write;
use std::net::SocketAddr;
use std::str::FromStr;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{HTTPVersion, Method};
use crate::request::{Answer, AnswerRoute, RequestBounds};
use crate::util::bounds::{Bounds, Budget, RateLimitedLog, StreamDeadlines, MAX_HEAD_BYTES};
use crate::util::RefinedTcpStream;
use crate::util::{SequentialReader, SequentialReaderBuilder, SequentialWriterBuilder};
use crate::Request;

/// A ClientConnection is an object that will store a socket to a client
/// and return Request objects.
pub struct ClientConnection {
    // address of the client
    remote_addr: IoResult<Option<SocketAddr>>,

    // sequence of Readers to the stream, so that the data is not read in
    //  the wrong order
    source: SequentialReaderBuilder<BufReader<RefinedTcpStream>>,

    // sequence of Writers to the stream, to avoid writing response #2 before
    //  response #1
    sink: SequentialWriterBuilder<BufWriter<RefinedTcpStream>>,

    // Reader to read the next header from
    next_header_source: SequentialReader<BufReader<RefinedTcpStream>>,

    // set to true if we know that the previous request is the last one
    no_more_requests: bool,

    // true if the connection goes through SSL
    secure: bool,

    // mcp-taskd patch: the connection's deadlines, the server-wide bounds and budgets,
    // the answer to the request handed out last (written by this thread), and whether
    // the connection must drain unread input before it closes.
    deadlines: Arc<StreamDeadlines>,
    shared: Arc<Shared>,
    pending_answer: Option<Receiver<Answer>>,
    linger: bool,

    // mcp-taskd patch: the response half's descriptor, handed to each request (see
    // `Request::socket_fd`).
    #[cfg(unix)]
    socket_fd: Option<std::os::unix::io::RawFd>,

    // mcp-taskd patch: this connection among those a drain may close while they wait
    // for their next request (see `Shared::waiting`).
    id: u64,
}

/// mcp-taskd patch: what every connection of one server shares.
pub(crate) struct Shared {
    pub(crate) bounds: Bounds,
    body_budget: Arc<Budget>,
    answer_budget: Arc<Budget>,
    errors: Mutex<RateLimitedLog>,
    /// Set by `Server::drain`: every request read from now on is answered with
    /// `Connection: close`, and its connection ends after the answer.
    draining: AtomicBool,
    /// Connections waiting for their next request: their response half's descriptor
    /// and since when. An entry is removed (under the lock) before its connection can
    /// close, so a descriptor here is always the connection's own.
    waiting: Mutex<HashMap<u64, (Waiting, Instant)>>,
    next_id: AtomicU64,
}

#[cfg(unix)]
type Waiting = std::os::unix::io::RawFd;
#[cfg(not(unix))]
type Waiting = ();

impl Shared {
    pub(crate) fn new(bounds: Bounds) -> Shared {
        Shared {
            body_budget: Budget::new(bounds.max_buffered_request_bytes),
            answer_budget: Budget::new(bounds.max_unsent_answer_bytes),
            bounds,
            errors: Mutex::new(RateLimitedLog::new(Duration::from_secs(10))),
            draining: AtomicBool::new(false),
            waiting: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        }
    }

    fn warn(&self, message: &str) {
        if let Ok(mut errors) = self.errors.lock() {
            errors.error(message);
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (Waiting, Instant)>> {
        // Each change is one insert or remove: a poisoned map is still whole.
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a drain has started.
    pub(crate) fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Starts a drain: see `Server::drain`.
    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Ends the wait of every connection that has waited for its next request `grace`
    /// since it began waiting or since the drain `started`, whichever is later; how
    /// many connections still wait.
    #[allow(unsafe_code)]
    pub(crate) fn close_waiting(&self, started: Instant, grace: Duration) -> usize {
        let now = Instant::now();
        let mut waiting = self.waiting();
        waiting.retain(|_, (_fd, since)| {
            if (*since).max(started) + grace > now {
                return true;
            }
            // Its read returns at once with end of input; the connection then ends
            // without an answer owed (no request had arrived).
            #[cfg(unix)]
            // SAFETY: the descriptor is the connection's, open while its entry is here.
            unsafe {
                libc::shutdown(*_fd, libc::SHUT_RD);
            }
            false
        });
        waiting.len()
    }
}

/// mcp-taskd patch: how long, and how much, a connection closing with unread input
/// keeps reading it, so that the client gets the answer rather than a reset.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1024 * 1024;

/// Error that can happen when reading a request.
#[derive(Debug)]
enum ReadError {
    WrongRequestLine,
    WrongHeader(HTTPVersion),
    /// the client sent an unrecognized `Expect` header
    ExpectationFailed(HTTPVersion),
    ReadIoError(IoError),
    /// mcp-taskd patch: the request did not arrive whole within its deadline.
    RequestTimeout,
    /// mcp-taskd patch: the request head is longer than `MAX_HEAD_BYTES`.
    HeadTooLong,
    /// mcp-taskd patch: the server-wide budget for buffered bodies is spent.
    BudgetSpent,
}

impl ClientConnection {
    /// Creates a new `ClientConnection` that takes ownership of the `TcpStream`.
    pub(crate) fn new(
        write_socket: RefinedTcpStream,
        mut read_socket: RefinedTcpStream,
        deadlines: Arc<StreamDeadlines>,
        shared: Arc<Shared>,
    ) -> ClientConnection {
        let remote_addr = read_socket.peer_addr();
        let secure = read_socket.secure();
        #[cfg(unix)]
        let socket_fd = write_socket.raw_fd();

        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let mut source = SequentialReaderBuilder::new(BufReader::with_capacity(1024, read_socket));
        let first_header = source.next().unwrap();

        ClientConnection {
            source,
            sink: SequentialWriterBuilder::new(BufWriter::with_capacity(1024, write_socket)),
            remote_addr,
            next_header_source: first_header,
            no_more_requests: false,
            secure,
            #[cfg(unix)]
            socket_fd,
            deadlines,
            shared,
            pending_answer: None,
            linger: false,
            id,
        }
    }

    /// mcp-taskd patch: waits for the answer to the request handed out last and writes
    /// it under a deadline that scales with its size. False when the connection must
    /// close (the answer was aborted, or could not be written in time).
    fn deliver_pending_answer(&mut self) -> bool {
        let Some(answers) = self.pending_answer.take() else {
            return true;
        };
        match answers.recv() {
            Ok(Answer::Written) => true,
            Ok(Answer::Bytes { buffer, from }) => {
                let rest = &buffer.bytes[from.min(buffer.bytes.len())..];
                let within = self.shared.bounds.write_deadline(rest.len());
                self.deadlines.set_write(Some(within));
                let written = match self.sink.next() {
                    Some(mut writer) => {
                        writer.write_all(rest).and_then(|()| writer.flush()).is_ok()
                    }
                    None => false,
                };
                self.deadlines.set_write(None);
                written
            }
            Ok(Answer::Abort) => {
                self.shared
                    .warn("an answer was dropped: unsent answers fill their server-wide budget");
                false
            }
            // The request took its writer (a stream): nothing to do.
            Err(_) => true,
        }
    }

    /// mcp-taskd patch: reads and discards what the client still sends (bounded in time
    /// and bytes) before the connection closes, so that closing with unread input does
    /// not reset the connection before the client has read its answer.
    fn linger(&mut self) {
        self.deadlines.set_read(Some(LINGER_TIME));
        let mut scratch = [0u8; 8 * 1024];
        let mut discarded = 0;
        while discarded < LINGER_BYTES {
            match self.next_header_source.read(&mut scratch) {
                Ok(n) if n > 0 => discarded += n,
                _ => break,
            }
        }
    }

    /// mcp-taskd patch: answers a request the server could not read, then closes.
    fn refuse(&mut self, status: u16, reason: &str, version: HTTPVersion) {
        use crate::{Header, Response, StatusCode};
        let body = format!("{{\"error\":\"{reason}\"}}");
        let mut response = Response::from_string(body).with_status_code(StatusCode(status));
        if let Ok(header) = Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..]) {
            response.add_header(header);
        }
        if status == 503 {
            if let Ok(header) = Header::from_bytes(&b"Retry-After"[..], &b"1"[..]) {
                response.add_header(header);
            }
        }
        self.deadlines
            .set_write(Some(self.shared.bounds.write_timeout));
        if let Some(writer) = self.sink.next() {
            response.raw_print(writer, version, &[], false, None).ok();
        }
    }

    /// true if the connection is HTTPS
    pub fn secure(&self) -> bool {
        self.secure
    }

    /// Reads the next line from self.next_header_source.
    ///
    /// Reads until `CRLF` is reached. The next read will start
    ///  at the first byte of the new line.
    ///
    /// mcp-taskd patch: `head_left` is what remains of `MAX_HEAD_BYTES`; a longer head is
    /// an `InvalidData` error instead of unbounded memory. The line is returned as bytes:
    /// the caller refuses a non-ASCII one with a 400 (an I/O error here closed the
    /// connection without an answer).
    ///
    /// mcp-taskd patch: the line is taken from the connection's buffer a chunk at a
    /// time (up to the next `\n`), not a byte at a time through three readers: a long
    /// header (a JWT access token is about a kilobyte) cost about 10 µs that way.
    fn read_next_line(&mut self, head_left: &mut usize) -> IoResult<Vec<u8>> {
        let mut buf = Vec::new();
        let reader = self.next_header_source.buffered()?;
        loop {
            let available = match reader.fill_buf() {
                Ok(available) => available,
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            if available.is_empty() {
                return Err(IoError::new(ErrorKind::ConnectionAborted, "Unexpected EOF"));
            }
            let newline = available.iter().position(|byte| *byte == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            if take > *head_left {
                return Err(IoError::new(
                    ErrorKind::InvalidData,
                    "request head too long",
                ));
            }
            *head_left -= take;
            buf.extend_from_slice(&available[..take]);
            reader.consume(take);
            // A line ends at CRLF; a bare LF is part of the line, as before.
            if newline.is_some() && buf.len() >= 2 && buf[buf.len() - 2] == b'\r' {
                buf.truncate(buf.len() - 2);
                return Ok(buf);
            }
        }
    }

    /// Reads a request from the stream.
    /// Blocks until the header has been read.
    fn read(&mut self) -> Result<Request, ReadError> {
        // mcp-taskd patch: an idle connection waits for its next request up to the idle
        // timeout; from the request's first byte, all of it (head and body) must arrive
        // within the request timeout.
        self.deadlines.set_read(None);
        let mut first = [0u8; 1];
        match self.next_header_source.read(&mut first) {
            Ok(1) => {}
            Ok(_) => {
                return Err(ReadError::ReadIoError(IoError::new(
                    ErrorKind::ConnectionAborted,
                    "Unexpected EOF",
                )))
            }
            Err(e) => return Err(ReadError::ReadIoError(e)),
        }
        self.deadlines
            .set_read(Some(self.shared.bounds.request_timeout));
        let mut head_left = MAX_HEAD_BYTES - 1;
        // A passed deadline may reach us wrapped (the chunked decoder rewraps errors).
        let deadlines = Arc::clone(&self.deadlines);
        let timed = |e: IoError| match e.kind() {
            ErrorKind::TimedOut | ErrorKind::WouldBlock => ReadError::RequestTimeout,
            ErrorKind::InvalidData => ReadError::HeadTooLong,
            _ if matches!(deadlines.read_remaining(), Some(Err(_))) => ReadError::RequestTimeout,
            _ => ReadError::ReadIoError(e),
        };
        let (method, path, version, headers) = {
            // reading the request line
            let (method, path, version) = {
                let rest = self.read_next_line(&mut head_left).map_err(timed)?;
                let mut line = vec![first[0]];
                line.extend_from_slice(&rest);
                let line =
                    AsciiString::from_ascii(line).map_err(|_| ReadError::WrongRequestLine)?;

                parse_request_line(
                    line.as_str().trim(), // TODO: remove this conversion
                )?
            };

            // getting all headers
            let headers = {
                let mut headers = Vec::new();
                loop {
                    let line = self.read_next_line(&mut head_left).map_err(timed)?;
                    let line = AsciiString::from_ascii(line)
                        .map_err(|_| ReadError::WrongHeader(version.clone()))?;

                    if line.is_empty() {
                        break;
                    };
                    headers.push(match FromStr::from_str(line.as_str().trim()) {
                        // TODO: remove this conversion
                        Ok(h) => h,
                        _ => return Err(ReadError::WrongHeader(version)),
                    });
                }

                headers
            };

            (method, path, version, headers)
        };

        // mcp-taskd patch: hand out the next request only once the previous one has
        // been answered. Upstream handed pipelined requests to several threads at once;
        // each response then waited for the one before it, so a thread answering a
        // later request blocked until an earlier one was answered — forever, if that
        // earlier answer was queued behind it on the same thread (the server answers
        // task creations from a completion thread after their commit). Waiting here,
        // after the headers arrived, costs nothing to a client that waits for each
        // answer before sending its next request: that answer is already written.
        self.sink.wait_for_previous();

        // building the writer for the request
        let writer = self.sink.next().unwrap();

        // follow-up for next potential request
        let mut data_source = self.source.next().unwrap();
        std::mem::swap(&mut self.next_header_source, &mut data_source);

        // building the next reader
        // mcp-taskd patch: the body is read here (see `new_request`), and the answer
        // comes back to this thread; a vanished peer address is not a panic.
        let (answers, answer_source) = mpsc::channel();
        let bounds = RequestBounds {
            max_body_bytes: self.shared.bounds.max_body_bytes,
            body_budget: Arc::clone(&self.shared.body_budget),
            answers: AnswerRoute {
                answers,
                budget: Arc::clone(&self.shared.answer_budget),
                deadlines: Arc::clone(&self.deadlines),
            },
        };
        let request = crate::request::new_request(
            self.secure,
            method,
            path,
            version.clone(),
            headers,
            self.remote_addr.as_ref().ok().copied().flatten(),
            data_source,
            writer,
            Some(bounds),
        )
        .map_err(|e| {
            use crate::request;
            match e {
                request::RequestCreationError::CreationIoError(e) => timed(e),
                request::RequestCreationError::ExpectationFailed => {
                    ReadError::ExpectationFailed(version)
                }
                request::RequestCreationError::BudgetSpent => ReadError::BudgetSpent,
            }
        })?;
        self.pending_answer = Some(answer_source);

        #[cfg(unix)]
        let request = request.with_socket_fd(self.socket_fd);

        // return the request
        Ok(request)
    }
}

impl Iterator for ClientConnection {
    type Item = Request;

    /// Blocks until the next Request is available.
    /// Returns None when no new Requests will come from the client.
    fn next(&mut self) -> Option<Request> {
        use crate::{Response, StatusCode};

        // mcp-taskd patch: the previous request's answer is written first, by this thread.
        if !self.deliver_pending_answer() {
            return None;
        }

        // the client sent a "connection: close" header in this previous request
        //  or is using HTTP 1.0, meaning that no new request will come
        if self.no_more_requests {
            if self.linger {
                self.linger();
            }
            return None;
        }

        loop {
            // mcp-taskd patch: while it waits for the next request, a drain may end it.
            #[cfg(unix)]
            if let Some(fd) = self.socket_fd {
                self.shared.waiting().insert(self.id, (fd, Instant::now()));
            }
            let read = self.read();
            #[cfg(unix)]
            self.shared.waiting().remove(&self.id);
            let mut rq = match read {
                Err(ReadError::WrongRequestLine) => {
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(400));
                    response
                        .raw_print(writer, HTTPVersion(1, 1), &[], false, None)
                        .ok();
                    return None; // we don't know where the next request would start,
                                 // se we have to close
                }

                Err(ReadError::WrongHeader(ver)) => {
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(400));
                    response.raw_print(writer, ver, &[], false, None).ok();
                    return None; // we don't know where the next request would start,
                                 // se we have to close
                }

                Err(ReadError::ReadIoError(ref err))
                    if matches!(err.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) =>
                {
                    // mcp-taskd patch: an idle or stalled connection is closed silently.
                    // Upstream queued a 408 behind the previous response, which a client
                    // reusing the connection could take as the answer to its next request.
                    return None;
                }

                Err(ReadError::ExpectationFailed(ver)) => {
                    let writer = self.sink.next().unwrap();
                    let response = Response::new_empty(StatusCode(417));
                    response.raw_print(writer, ver, &[], true, None).ok();
                    return None; // TODO: should be recoverable, but needs handling in case of body
                }

                Err(ReadError::ReadIoError(_)) => return None,

                // mcp-taskd patch: a request that did not arrive in time, or could not be
                // held, is answered and its connection closed (where the next request
                // would start is unknown).
                Err(ReadError::RequestTimeout) => {
                    self.refuse(408, "request not received in time", HTTPVersion(1, 1));
                    return None;
                }
                Err(ReadError::HeadTooLong) => {
                    self.refuse(431, "request head too long", HTTPVersion(1, 1));
                    return None;
                }
                Err(ReadError::BudgetSpent) => {
                    self.shared.warn(
                        "a request was refused: buffered bodies fill their server-wide budget",
                    );
                    self.refuse(503, "server busy", HTTPVersion(1, 1));
                    return None;
                }

                Ok(rq) => rq,
            };

            // checking HTTP version
            if *rq.http_version() > (1, 1) {
                // mcp-taskd patch: answer through the request's own writer and close.
                // Upstream wrote the 505 through a second writer that waited for the
                // request's (never released) one, then went on reading: the connection
                // deadlocked, leaking its thread and descriptor.
                let response = Response::from_string(
                    "This server only supports HTTP versions 1.0 and 1.1".to_owned(),
                )
                .with_status_code(StatusCode(505));
                let mut writer = rq.into_writer();
                response
                    .raw_print(&mut writer, HTTPVersion(1, 1), &[], false, None)
                    .ok();
                writer.flush().ok();
                return None;
            }

            // updating the status of the connection
            let connection_header = rq
                .headers()
                .iter()
                .find(|h| h.field.equiv("Connection"))
                .map(|h| h.value.as_str());

            let lowercase = connection_header.map(|h| h.to_ascii_lowercase());

            match lowercase {
                Some(ref val) if val.contains("close") => self.no_more_requests = true,
                Some(ref val) if val.contains("upgrade") => self.no_more_requests = true,
                Some(ref val)
                    if !val.contains("keep-alive") && *rq.http_version() == HTTPVersion(1, 0) =>
                {
                    self.no_more_requests = true
                }
                None if *rq.http_version() == HTTPVersion(1, 0) => self.no_more_requests = true,
                _ => (),
            };

            // mcp-taskd patch: a body left unread ends the connection after the answer.
            if rq.close_connection {
                self.no_more_requests = true;
                self.linger = true;
            }

            // mcp-taskd patch: while the server drains, this is the connection's last
            // request, and its answer says so (`Connection: close`), so that the client
            // opens its next connection to whoever accepts now.
            if self.shared.draining.load(Ordering::Acquire) {
                self.no_more_requests = true;
                rq.closes_connection = true;
            }

            // returning the request
            return Some(rq);
        }
    }
}

/// Parses a "HTTP/1.1" string.
fn parse_http_version(version: &str) -> Result<HTTPVersion, ReadError> {
    let (major, minor) = match version {
        "HTTP/0.9" => (0, 9),
        "HTTP/1.0" => (1, 0),
        "HTTP/1.1" => (1, 1),
        "HTTP/2.0" => (2, 0),
        "HTTP/3.0" => (3, 0),
        _ => return Err(ReadError::WrongRequestLine),
    };

    Ok(HTTPVersion(major, minor))
}

/// Parses the request line of the request.
/// eg. GET / HTTP/1.1
fn parse_request_line(line: &str) -> Result<(Method, String, HTTPVersion), ReadError> {
    let mut parts = line.split(' ');

    let method = parts.next().and_then(|w| w.parse().ok());
    let path = parts.next().map(ToOwned::to_owned);
    let version = parts.next().and_then(|w| parse_http_version(w).ok());

    method
        .and_then(|method| Some((method, path?, version?)))
        .ok_or(ReadError::WrongRequestLine)
}

#[cfg(test)]
mod test {
    #[test]
    fn test_parse_request_line() {
        let (method, path, ver) = super::parse_request_line("GET /hello HTTP/1.1").unwrap();

        assert!(method == crate::Method::Get);
        assert!(path == "/hello");
        assert!(ver == crate::common::HTTPVersion(1, 1));

        assert!(super::parse_request_line("GET /hello").is_err());
        assert!(super::parse_request_line("qsd qsd qsd").is_err());
    }
}
