use std::io::Error as IoError;
use std::io::{self, Cursor, ErrorKind, Read, Write};

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use std::sync::mpsc::Sender;
use std::sync::Arc;

use crate::util::bounds::{Budget, BudgetedBuffer, Reservation, StreamDeadlines};
use crate::util::{EqualReader, FusedReader};
use crate::{HTTPVersion, Header, Method, Response, StatusCode};
// mcp-taskd patch: our decoder, which accepts a trailer section (util/chunked_decoder.rs).
use crate::util::ChunkedDecoder as Decoder;

/// Represents an HTTP request made by a client.
///
/// A `Request` object is what is produced by the server, and is your what
/// your code must analyse and answer.
///
/// This object implements the `Send` trait, therefore you can dispatch your requests to
/// worker threads.
///
/// # Pipelining
///
/// If a client sends multiple requests in a row (without waiting for the response), then you will
/// get multiple `Request` objects simultaneously. This is called *requests pipelining*.
/// Tiny-http automatically reorders the responses so that you don't need to worry about the order
/// in which you call `respond` or `into_writer`.
///
/// This mechanic is disabled if:
///
///  - The body of a request is large enough (handling requires pipelining requires storing the
///    body of the request in a buffer ; if the body is too big, tiny-http will avoid doing that)
///  - A request sends a `Expect: 100-continue` header (which means that the client waits to
///    know whether its body will be processed before sending it)
///  - A request sends a `Connection: close` header or `Connection: upgrade` header (used for
///    websockets), which indicates that this is the last request that will be received on this
///    connection
///
/// # Automatic cleanup
///
/// If a `Request` object is destroyed without `into_writer` or `respond` being called,
/// an empty response with a 500 status code (internal server error) will automatically be
/// sent back to the client.
/// This means that if your code fails during the handling of a request, this "internal server
/// error" response will automatically be sent during the stack unwinding.
///
/// # Testing
///
/// If you want to build fake requests to test your server, use [`TestRequest`](crate::test::TestRequest).
pub struct Request {
    // where to read the body from
    data_reader: Option<Box<dyn Read + Send + 'static>>,

    // if this writer is empty, then the request has been answered
    response_writer: Option<Box<dyn Write + Send + 'static>>,

    remote_addr: Option<SocketAddr>,

    // true if HTTPS, false if HTTP
    secure: bool,

    method: Method,

    path: String,

    http_version: HTTPVersion,

    headers: Vec<Header>,

    body_length: Option<usize>,

    // true if a `100 Continue` response must be sent when `as_reader()` is called
    must_send_continue: bool,

    // If Some, a message must be sent after responding
    notify_when_responded: Option<Sender<()>>,

    // mcp-taskd patch: where `respond` hands its answer, whole, for the connection's
    // own thread to write (see `Answer`), so that no request thread waits on a client
    // that reads slowly or not at all.
    answers: Option<AnswerRoute>,

    // mcp-taskd patch: the body was left unread, so the connection must close after
    // the answer (the next request would start somewhere in the body).
    pub(crate) close_connection: bool,

    // mcp-taskd patch: the server drains, so this is the connection's last request,
    // and its answer says `Connection: close`.
    pub(crate) closes_connection: bool,

    // mcp-taskd patch: the connection's response descriptor (see `socket_fd`).
    #[cfg(unix)]
    socket_fd: Option<std::os::unix::io::RawFd>,

    // mcp-taskd patch: headers every response to this request carries (CORS), whichever
    // code path answers it (see `add_response_header`). Boxed: most requests have none,
    // and the request is moved around by value.
    response_headers: Option<Box<Vec<Header>>>,
}

/// mcp-taskd patch: an answer handed from `Request::respond` to the connection thread.
pub(crate) enum Answer {
    /// The request thread wrote the whole answer itself.
    Written,
    /// The response, head and body, counted against the unsent-answer budget; the
    /// request thread already wrote the bytes before `from`.
    Bytes { buffer: BudgetedBuffer, from: usize },
    /// The answer did not fit the budget: the connection is closed instead.
    Abort,
}

/// mcp-taskd patch: how long a request thread may spend writing an answer itself
/// before handing the rest to the connection's thread. A client that reads gets its
/// answer without a thread hop; one that does not costs the request thread this much.
const DIRECT_WRITE_TIME: std::time::Duration = std::time::Duration::from_millis(5);

/// mcp-taskd patch: where an answer goes on a bounded connection.
pub(crate) struct AnswerRoute {
    pub(crate) answers: Sender<Answer>,
    pub(crate) budget: Arc<Budget>,
    pub(crate) deadlines: Arc<StreamDeadlines>,
}

/// mcp-taskd patch: what a bounded connection reads and where its answer goes.
pub(crate) struct RequestBounds {
    pub(crate) max_body_bytes: usize,
    pub(crate) body_budget: Arc<Budget>,
    pub(crate) answers: AnswerRoute,
}

/// mcp-taskd patch: a body read whole before the request is handed out.
struct HeldBody {
    body: Cursor<Vec<u8>>,
    _reservation: Reservation,
}

impl Read for HeldBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.body.read(buf)
    }
}

struct NotifyOnDrop<R> {
    sender: Sender<()>,
    inner: R,
}

impl<R: Read> Read for NotifyOnDrop<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf)
    }
}
impl<R: Write> Write for NotifyOnDrop<R> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
impl<R> Drop for NotifyOnDrop<R> {
    fn drop(&mut self) {
        self.sender.send(()).unwrap();
    }
}

/// Error that can happen when building a `Request` object.
#[derive(Debug)]
pub enum RequestCreationError {
    /// The client sent an `Expect` header that was not recognized by tiny-http.
    ExpectationFailed,

    /// Error while reading data from the socket during the creation of the `Request`.
    CreationIoError(IoError),

    /// mcp-taskd patch: the server-wide budget for buffered bodies is spent.
    BudgetSpent,
}

impl From<IoError> for RequestCreationError {
    fn from(err: IoError) -> RequestCreationError {
        RequestCreationError::CreationIoError(err)
    }
}

/// Builds a new request.
///
/// After the request line and headers have been read from the socket, a new `Request` object
/// is built.
///
/// You must pass a `Read` that will allow the `Request` object to read from the incoming data.
/// It is the responsibility of the `Request` to read only the data of the request and not further.
///
/// The `Write` object will be used by the `Request` to write the response.
#[allow(clippy::too_many_arguments)]
pub fn new_request<R, W>(
    secure: bool,
    method: Method,
    path: String,
    version: HTTPVersion,
    headers: Vec<Header>,
    remote_addr: Option<SocketAddr>,
    mut source_data: R,
    mut writer: W,
    bounds: Option<RequestBounds>,
) -> Result<Request, RequestCreationError>
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    // finding the transfer-encoding header
    let transfer_encoding = headers
        .iter()
        .find(|h: &&Header| h.field.equiv("Transfer-Encoding"))
        .map(|h| h.value.clone());

    // finding the content-length header
    let content_length = if transfer_encoding.is_some() {
        // if transfer-encoding is specified, the Content-Length
        // header must be ignored (RFC2616 #4.4)
        None
    } else {
        headers
            .iter()
            .find(|h: &&Header| h.field.equiv("Content-Length"))
            .and_then(|h| FromStr::from_str(h.value.as_str()).ok())
    };

    // true if the client sent a `Expect: 100-continue` header
    let expects_continue = {
        match headers
            .iter()
            .find(|h: &&Header| h.field.equiv("Expect"))
            .map(|h| h.value.as_str())
        {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("100-continue") => true,
            _ => return Err(RequestCreationError::ExpectationFailed),
        }
    };

    // true if the client sent a `Connection: upgrade` header
    let connection_upgrade = {
        match headers
            .iter()
            .find(|h: &&Header| h.field.equiv("Connection"))
            .map(|h| h.value.as_str())
        {
            Some(v) if v.to_ascii_lowercase().contains("upgrade") => true,
            _ => false,
        }
    };

    // mcp-taskd patch: on a bounded connection the whole body is read here, on the
    // connection's thread and under its deadline, so that a request thread never waits
    // on a slow sender; a body declared longer than the limit is not read at all.
    if let Some(bounds) = bounds {
        let declared_too_long = content_length.is_some_and(|l| l > bounds.max_body_bytes);
        let has_body = content_length.is_some_and(|l| l > 0) || transfer_encoding.is_some();
        let mut must_send_continue = expects_continue;
        let mut close_connection = declared_too_long;
        let mut held = BudgetedBuffer {
            bytes: Vec::new(),
            reservation: bounds.body_budget.reservation(),
        };
        if has_body && !declared_too_long {
            if expects_continue {
                writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
                writer.flush()?;
                must_send_continue = false;
            }
            let limit = bounds.max_body_bytes as u64 + 1;
            let copied = match content_length {
                Some(length) => io::copy(&mut (&mut source_data).take(length as u64), &mut held)
                    .and_then(|copied| {
                        if copied < length as u64 {
                            let info = "Connection has been closed before we received enough data";
                            Err(IoError::new(ErrorKind::ConnectionAborted, info))
                        } else {
                            Ok(copied)
                        }
                    }),
                None => io::copy(&mut Decoder::new(&mut source_data).take(limit), &mut held),
            };
            match copied {
                Err(e) if e.kind() == ErrorKind::OutOfMemory => {
                    return Err(RequestCreationError::BudgetSpent)
                }
                Err(e) => return Err(RequestCreationError::CreationIoError(e)),
                // A chunked body past the limit: the handler sees `limit + 1` bytes and
                // refuses it; the rest was never read.
                Ok(copied) => close_connection |= copied >= limit,
            }
        }
        return Ok(Request {
            data_reader: Some(Box::new(HeldBody {
                body: Cursor::new(held.bytes),
                _reservation: held.reservation,
            })),
            response_writer: Some(Box::new(writer) as Box<dyn Write + Send + 'static>),
            remote_addr,
            secure,
            method,
            path,
            http_version: version,
            headers,
            body_length: content_length,
            must_send_continue,
            notify_when_responded: None,
            answers: Some(bounds.answers),
            close_connection,
            closes_connection: false,
            #[cfg(unix)]
            socket_fd: None,
            response_headers: None,
        });
    }

    // we wrap `source_data` around a reading whose nature depends on the transfer-encoding and
    // content-length headers
    let reader = if connection_upgrade {
        // if we have a `Connection: upgrade`, always keeping the whole reader
        Box::new(source_data) as Box<dyn Read + Send + 'static>
    } else if let Some(content_length) = content_length {
        if content_length == 0 {
            Box::new(io::empty()) as Box<dyn Read + Send + 'static>
        } else if content_length <= 1024 && !expects_continue {
            // if the content-length is small enough, we just read everything into a buffer

            let mut buffer = vec![0; content_length];
            let mut offset = 0;

            while offset != content_length {
                let read = source_data.read(&mut buffer[offset..])?;
                if read == 0 {
                    // the socket returned EOF, but we were before the expected content-length
                    // aborting
                    let info = "Connection has been closed before we received enough data";
                    let err = IoError::new(ErrorKind::ConnectionAborted, info);
                    return Err(RequestCreationError::CreationIoError(err));
                }

                offset += read;
            }

            Box::new(Cursor::new(buffer)) as Box<dyn Read + Send + 'static>
        } else {
            let (data_reader, _) = EqualReader::new(source_data, content_length); // TODO:
            Box::new(FusedReader::new(data_reader)) as Box<dyn Read + Send + 'static>
        }
    } else if transfer_encoding.is_some() {
        // if a transfer-encoding was specified, then "chunked" is ALWAYS applied
        // over the message (RFC2616 #3.6)
        Box::new(FusedReader::new(Decoder::new(source_data))) as Box<dyn Read + Send + 'static>
    } else {
        // if we have neither a Content-Length nor a Transfer-Encoding,
        // assuming that we have no data
        // TODO: could also be multipart/byteranges
        Box::new(io::empty()) as Box<dyn Read + Send + 'static>
    };

    Ok(Request {
        data_reader: Some(reader),
        response_writer: Some(Box::new(writer) as Box<dyn Write + Send + 'static>),
        remote_addr,
        secure,
        method,
        path,
        http_version: version,
        headers,
        body_length: content_length,
        must_send_continue: expects_continue,
        notify_when_responded: None,
        answers: None,
        close_connection: false,
        closes_connection: false,
        response_headers: None,
        #[cfg(unix)]
        socket_fd: None,
    })
}

impl Request {
    /// Returns true if the request was made through HTTPS.
    #[inline]
    pub fn secure(&self) -> bool {
        self.secure
    }

    /// Returns the method requested by the client (eg. `GET`, `POST`, etc.).
    #[inline]
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// Returns the resource requested by the client.
    #[inline]
    pub fn url(&self) -> &str {
        &self.path
    }

    /// Returns a list of all headers sent by the client.
    #[inline]
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }

    /// Returns the HTTP version of the request.
    #[inline]
    pub fn http_version(&self) -> &HTTPVersion {
        &self.http_version
    }

    /// Returns the length of the body in bytes.
    ///
    /// Returns `None` if the length is unknown.
    #[inline]
    pub fn body_length(&self) -> Option<usize> {
        self.body_length
    }

    /// mcp-taskd patch: the descriptor the response is written to, when the request
    /// came over a plain socket. It stays open as long as the writer returned by
    /// [`Request::into_writer`] lives, so a long-lived response can ask the kernel about
    /// the connection (has the peer hung up? is it reading?) without reading from it.
    #[cfg(unix)]
    pub fn socket_fd(&self) -> Option<std::os::unix::io::RawFd> {
        self.socket_fd
    }

    #[cfg(unix)]
    pub(crate) fn with_socket_fd(mut self, fd: Option<std::os::unix::io::RawFd>) -> Self {
        self.socket_fd = fd;
        self
    }

    /// Returns the address of the client that sent this request.
    ///
    /// The address is always `Some` for TCP listeners, but always `None` for UNIX listeners
    /// (as the remote address of a UNIX client is almost always unnamed).
    ///
    /// Note that this is gathered from the socket. If you receive the request from a proxy,
    /// this function will return the address of the proxy and not the address of the actual
    /// user.
    #[inline]
    pub fn remote_addr(&self) -> Option<&SocketAddr> {
        self.remote_addr.as_ref()
    }

    /// Sends a response with a `Connection: upgrade` header, then turns the `Request` into a `Stream`.
    ///
    /// The main purpose of this function is to support websockets.
    /// If you detect that the request wants to use some kind of protocol upgrade, you can
    ///  call this function to obtain full control of the socket stream.
    ///
    /// If you call this on a non-websocket request, tiny-http will wait until this `Stream` object
    ///  is destroyed before continuing to read or write on the socket. Therefore you should always
    ///  destroy it as soon as possible.
    pub fn upgrade<R: Read>(
        mut self,
        protocol: &str,
        response: Response<R>,
    ) -> Box<dyn ReadWrite + Send> {
        use crate::util::CustomStream;

        response
            .raw_print(
                self.response_writer.as_mut().unwrap().by_ref(),
                self.http_version.clone(),
                &self.headers,
                false,
                Some(protocol),
            )
            .ok(); // TODO: unused result

        self.response_writer.as_mut().unwrap().flush().ok(); // TODO: unused result

        let stream = CustomStream::new(self.extract_reader_impl(), self.extract_writer_impl());
        if let Some(sender) = self.notify_when_responded.take() {
            let stream = NotifyOnDrop {
                sender,
                inner: stream,
            };
            Box::new(stream) as Box<dyn ReadWrite + Send>
        } else {
            Box::new(stream) as Box<dyn ReadWrite + Send>
        }
    }

    /// Allows to read the body of the request.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # extern crate rustc_serialize;
    /// # extern crate tiny_http;
    /// # use rustc_serialize::json::Json;
    /// # use std::io::Read;
    /// # fn get_content_type(_: &tiny_http::Request) -> &'static str { "" }
    /// # fn main() {
    /// # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
    /// let mut request = server.recv().unwrap();
    ///
    /// if get_content_type(&request) == "application/json" {
    ///     let mut content = String::new();
    ///     request.as_reader().read_to_string(&mut content).unwrap();
    ///     let json: Json = content.parse().unwrap();
    /// }
    /// # }
    /// ```
    ///
    /// If the client sent a `Expect: 100-continue` header with the request, calling this
    ///  function will send back a `100 Continue` response.
    #[inline]
    pub fn as_reader(&mut self) -> &mut dyn Read {
        if self.must_send_continue {
            let msg = Response::new_empty(StatusCode(100));
            msg.raw_print(
                self.response_writer.as_mut().unwrap().by_ref(),
                self.http_version.clone(),
                &self.headers,
                true,
                None,
            )
            .ok();
            self.response_writer.as_mut().unwrap().flush().ok();
            self.must_send_continue = false;
        }

        self.data_reader.as_mut().unwrap()
    }

    /// Turns the `Request` into a writer.
    ///
    /// The writer has a raw access to the stream to the user.
    /// This function is useful for things like CGI.
    ///
    /// Note that the destruction of the `Writer` object may trigger
    /// some events. For exemple if a client has sent multiple requests and the requests
    /// have been processed in parallel, the destruction of a writer will trigger
    /// the writing of the next response.
    /// Therefore you should always destroy the `Writer` as soon as possible.
    #[inline]
    pub fn into_writer(mut self) -> Box<dyn Write + Send + 'static> {
        let writer = self.extract_writer_impl();
        if let Some(sender) = self.notify_when_responded.take() {
            let writer = NotifyOnDrop {
                sender,
                inner: writer,
            };
            Box::new(writer) as Box<dyn Write + Send + 'static>
        } else {
            writer
        }
    }

    /// Extract the response `Writer` object from the Request, dropping this `Writer` has the same side effects
    /// as the object returned by `into_writer` above.
    ///
    /// This may only be called once on a single request.
    fn extract_writer_impl(&mut self) -> Box<dyn Write + Send + 'static> {
        use std::mem;

        assert!(self.response_writer.is_some());

        let mut writer = None;
        mem::swap(&mut self.response_writer, &mut writer);
        writer.unwrap()
    }

    /// Extract the body `Reader` object from the Request.
    ///
    /// This may only be called once on a single request.
    fn extract_reader_impl(&mut self) -> Box<dyn Read + Send + 'static> {
        use std::mem;

        assert!(self.data_reader.is_some());

        let mut reader = None;
        mem::swap(&mut self.data_reader, &mut reader);
        reader.unwrap()
    }

    /// Sends a response to this request.
    #[inline]
    pub fn respond<R>(mut self, response: Response<R>) -> Result<(), IoError>
    where
        R: Read,
    {
        let res = self.respond_impl(response);
        if let Some(sender) = self.notify_when_responded.take() {
            sender.send(()).unwrap();
        }
        res
    }

    /// mcp-taskd patch: a header that the response to this request carries, whatever
    /// answers it: `respond` adds it, and a caller that takes the raw writer
    /// (`into_writer`) writes `take_response_headers` itself.
    pub fn add_response_header(&mut self, header: Header) {
        self.response_headers
            .get_or_insert_with(Default::default)
            .push(header);
    }

    /// mcp-taskd patch: whether the connection ends after this request's answer (the
    /// server drains), for a caller that writes the response head itself and must say
    /// `Connection: close` there.
    pub fn closes_connection(&self) -> bool {
        self.closes_connection
    }

    /// mcp-taskd patch: the headers of `add_response_header`, for a caller that writes
    /// the response head itself.
    pub fn take_response_headers(&mut self) -> Vec<Header> {
        self.response_headers
            .take()
            .map(|headers| *headers)
            .unwrap_or_default()
    }

    fn respond_impl<R>(&mut self, mut response: Response<R>) -> Result<(), IoError>
    where
        R: Read,
    {
        for header in self.take_response_headers() {
            response.add_header(header);
        }
        if self.closes_connection {
            response.close_connection();
        }
        let mut writer = self.extract_writer_impl();

        let do_not_send_body = self.method == Method::Head;

        // mcp-taskd patch: print the answer into memory (within the server-wide budget),
        // write what the socket takes within a few milliseconds, and hand the rest to
        // the connection thread, which writes it under a deadline that scales with its
        // size.
        if let Some(route) = self.answers.take() {
            let mut buffer = BudgetedBuffer {
                bytes: Vec::new(),
                reservation: route.budget.reservation(),
            };
            let printed = response.raw_print(
                &mut buffer,
                self.http_version.clone(),
                &self.headers,
                do_not_send_body,
                None,
            );
            let answer = match printed {
                Ok(()) => {
                    route.deadlines.set_write(Some(DIRECT_WRITE_TIME));
                    let mut from = 0;
                    while from < buffer.bytes.len() {
                        match writer.write(&buffer.bytes[from..]) {
                            Ok(n) if n > 0 => from += n,
                            _ => break,
                        }
                    }
                    // Bytes the writer still buffers go out before the rest (same writer).
                    let flushed = from == buffer.bytes.len() && writer.flush().is_ok();
                    route.deadlines.set_write(None);
                    if flushed {
                        Answer::Written
                    } else {
                        Answer::Bytes { buffer, from }
                    }
                }
                Err(_) => Answer::Abort,
            };
            drop(writer);
            // The connection may be gone already; then there is no one to answer.
            let _ = route.answers.send(answer);
            return Ok(());
        }

        Self::ignore_client_closing_errors(response.raw_print(
            writer.by_ref(),
            self.http_version.clone(),
            &self.headers,
            do_not_send_body,
            None,
        ))?;

        Self::ignore_client_closing_errors(writer.flush())
    }

    fn ignore_client_closing_errors(result: io::Result<()>) -> io::Result<()> {
        result.or_else(|err| match err.kind() {
            ErrorKind::BrokenPipe => Ok(()),
            ErrorKind::ConnectionAborted => Ok(()),
            ErrorKind::ConnectionRefused => Ok(()),
            ErrorKind::ConnectionReset => Ok(()),
            _ => Err(err),
        })
    }

    pub(crate) fn with_notify_sender(mut self, sender: Sender<()>) -> Self {
        self.notify_when_responded = Some(sender);
        self
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> Result<(), fmt::Error> {
        write!(
            formatter,
            "Request({} {} from {:?})",
            self.method, self.path, self.remote_addr
        )
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if self.response_writer.is_some() {
            let response = Response::empty(500);
            let _ = self.respond_impl(response); // ignoring any potential error
            if let Some(sender) = self.notify_when_responded.take() {
                sender.send(()).unwrap();
            }
        }
    }
}

/// Dummy trait that regroups the `Read` and `Write` traits.
///
/// Automatically implemented on all types that implement both `Read` and `Write`.
pub trait ReadWrite: Read + Write {}
impl<T> ReadWrite for T where T: Read + Write {}

#[cfg(test)]
mod tests {
    use super::Request;

    #[test]
    fn must_be_send() {
        #![allow(dead_code)]
        fn f<T: Send>(_: &T) {}
        fn bar(rq: &Request) {
            f(rq);
        }
    }
}
