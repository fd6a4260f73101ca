//! # Simple usage
//!
//! ## Creating the server
//!
//! The easiest way to create a server is to call `Server::http()`.
//!
//! The `http()` function returns an `IoResult<Server>` which will return an error
//! in the case where the server creation fails (for example if the listening port is already
//! occupied).
//!
//! ```no_run
//! let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! ```
//!
//! A newly-created `Server` will immediately start listening for incoming connections and HTTP
//! requests.
//!
//! ## Receiving requests
//!
//! Calling `server.recv()` will block until the next request is available.
//! This function returns an `IoResult<Request>`, so you need to handle the possible errors.
//!
//! ```no_run
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//!
//! loop {
//!     // blocks until the next request is received
//!     let request = match server.recv() {
//!         Ok(rq) => rq,
//!         Err(e) => { println!("error: {}", e); break }
//!     };
//!
//!     // do something with the request
//!     // ...
//! }
//! ```
//!
//! In a real-case scenario, you will probably want to spawn multiple worker tasks and call
//! `server.recv()` on all of them. Like this:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use std::thread;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! let server = Arc::new(server);
//! let mut guards = Vec::with_capacity(4);
//!
//! for _ in (0 .. 4) {
//!     let server = server.clone();
//!
//!     let guard = thread::spawn(move || {
//!         loop {
//!             let rq = server.recv().unwrap();
//!
//!             // ...
//!         }
//!     });
//!
//!     guards.push(guard);
//! }
//! ```
//!
//! If you don't want to block, you can call `server.try_recv()` instead.
//!
//! ## Handling requests
//!
//! The `Request` object returned by `server.recv()` contains informations about the client's request.
//! The most useful methods are probably `request.method()` and `request.url()` which return
//! the requested method (`GET`, `POST`, etc.) and url.
//!
//! To handle a request, you need to create a `Response` object. See the docs of this object for
//! more infos. Here is an example of creating a `Response` from a file:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! ```
//!
//! All that remains to do is call `request.respond()`:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! # let request = server.recv().unwrap();
//! # let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! let _ = request.respond(response);
//! ```
// mcp-taskd patch: `deny`, not `forbid`: the drain (patch 17) makes two system calls
// std has no safe form of (`poll(2)` on the listener and a wake socket, `shutdown(2)` of
// a connection waiting for its next request), each allowed where it is made.
#![deny(unsafe_code)]
#![deny(rust_2018_idioms)]
#![allow(clippy::match_like_matches_macro)]
// mcp-taskd patch: upstream code predates this compiler's unused-code lints.
#![allow(unused)]

#[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
use zeroize::Zeroizing;

use std::error::Error;
use std::io::Error as IoError;
use std::io::ErrorKind as IoErrorKind;
use std::io::Result as IoResult;
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use client::ClientConnection;
use connection::Connection;
use util::MessagesQueue;

pub use common::{HTTPVersion, Header, HeaderField, Method, StatusCode};
pub use connection::{ConfigListenAddr, ListenAddr, Listener};
pub use request::{ReadWrite, Request};
pub use response::{Response, ResponseBox};
pub use test::TestRequest;
pub use util::bounds::{Bounds, ListenerHealth};
use util::bounds::{RateLimitedLog, StreamDeadlines};
use util::RefinedTcpStream;

mod client;
mod common;
mod connection;
mod request;
mod response;
mod ssl;
mod test;
mod util;

/// mcp-taskd patch: longest a single socket write may block when no overall deadline
/// is set (a subscriber that stopped reading its stream).
const SOCKET_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// mcp-taskd patch: pauses between failed `accept()` calls, doubling from the first.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// mcp-taskd patch: EMFILE, ENFILE (Linux numbering): the process or the system is
/// out of descriptors.
fn is_descriptor_exhaustion(error: &IoError) -> bool {
    matches!(error.raw_os_error(), Some(23 | 24))
}

/// mcp-taskd patch: answers a connection the server will not serve with a `503` and
/// closes it, on the accept thread and without ever blocking: the socket is fresh, so
/// its send buffer takes the few bytes. What the client already sent is read first, so
/// that closing does not reset the connection before the answer is read.
fn refuse(sock: Connection, reason: &str) {
    use std::io::{Read, Write};
    let mut sock = sock;
    if sock.set_nonblocking().is_err() {
        return;
    }
    let mut scratch = [0u8; 4096];
    for _ in 0..4 {
        match sock.read(&mut scratch) {
            Ok(n) if n > 0 => continue,
            _ => break,
        }
    }
    let body = format!("{{\"status\":\"unavailable\",\"reason\":\"{reason}\"}}");
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\
         Retry-After: 1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = sock.write_all(answer.as_bytes());
    let _ = sock.shutdown(Shutdown::Write);
}

/// The main class of this library.
///
/// Destroying this object will immediately close the listening socket and the reading
///  part of all the client's connections. Requests that have already been returned by
///  the `recv()` function will not close and the responses will be transferred to the client.
pub struct Server {
    // should be false as long as the server exists
    // when set to true, all the subtasks will close within a few hundreds ms
    close: Arc<AtomicBool>,

    // queue for messages received by child threads
    messages: Arc<MessagesQueue<Message>>,

    // result of TcpListener::local_addr()
    listening_addr: ListenAddr,

    // mcp-taskd patch: whether the accept loop can take connections.
    health: Arc<ListenerHealth>,

    // mcp-taskd patch: the handler of a server that answers on connection threads
    // (`None` for one that queues requests for `recv`).
    handler: Option<Arc<OnceLock<Handler>>>,

    // mcp-taskd patch: what the connections share (a drain's state among it), and the
    // way to wake the accept loop so that it stops without accepting (see `drain`).
    shared: Arc<client::Shared>,
    #[cfg(unix)]
    wake: std::os::unix::net::UnixStream,
}

/// mcp-taskd patch: handles one request on its connection's own thread (see
/// [`Server::http_on_connection_threads`]).
pub type Handler = Arc<dyn Fn(Request) + Send + Sync>;

enum Message {
    Error(IoError),
    NewRequest(Request),
}

impl From<IoError> for Message {
    fn from(e: IoError) -> Message {
        Message::Error(e)
    }
}

impl From<Request> for Message {
    fn from(rq: Request) -> Message {
        Message::NewRequest(rq)
    }
}

// this trait is to make sure that Server implements Share and Send
#[doc(hidden)]
trait MustBeShareDummy: Sync + Send {}
#[doc(hidden)]
impl MustBeShareDummy for Server {}

pub struct IncomingRequests<'a> {
    server: &'a Server,
}

/// Represents the parameters required to create a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The addresses to try to listen to.
    pub addr: ConfigListenAddr,

    /// If `Some`, then the server will use SSL to encode the communications.
    pub ssl: Option<SslConfig>,
}

/// Configuration of the server for SSL.
#[derive(Debug, Clone)]
pub struct SslConfig {
    /// Contains the public certificate to send to clients.
    pub certificate: Vec<u8>,
    /// Contains the ultra-secret private key used to decode communications.
    pub private_key: Vec<u8>,
}

impl Server {
    /// Shortcut for a simple server on a specific address.
    #[inline]
    pub fn http<A>(addr: A) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::from_socket_addrs(addr)?,
            ssl: None,
        })
    }

    /// Shortcut for an HTTPS server on a specific address.
    #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
    #[inline]
    pub fn https<A>(
        addr: A,
        config: SslConfig,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::from_socket_addrs(addr)?,
            ssl: Some(config),
        })
    }

    #[cfg(unix)]
    #[inline]
    /// Shortcut for a UNIX socket server at a specific path
    pub fn http_unix(
        path: &std::path::Path,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::unix_from_path(path),
            ssl: None,
        })
    }

    /// Builds a new server that listens on the specified address.
    pub fn new(config: ServerConfig) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        let listener = config.addr.bind()?;
        Self::from_listener(listener, config.ssl)
    }

    /// Builds a new server using the specified TCP listener.
    ///
    /// This is useful if you've constructed TcpListener using some less usual method
    /// such as from systemd. For other cases, you probably want the `new()` function.
    pub fn from_listener<L: Into<Listener>>(
        listener: L,
        ssl_config: Option<SslConfig>,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Self::from_listener_with_bounds(listener, ssl_config, Bounds::default())
    }

    /// mcp-taskd patch: an HTTP server on `addr` that enforces `bounds` and hands each
    /// request to the handler given to [`Server::serve`], on the thread of the
    /// connection it came from, instead of queueing it for `recv`. That thread reads
    /// the request, runs the handler, and writes the answer: one thread wakes per
    /// request instead of three (the connection's, a `recv` thread's, then the
    /// connection's again to take the answer back). Connections accepted before
    /// `serve` is called wait for it.
    pub fn http_on_connection_threads<A>(
        addr: A,
        bounds: Bounds,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        let listener = ConfigListenAddr::from_socket_addrs(addr)?.bind()?;
        Self::start(listener, None, bounds, Some(Arc::new(OnceLock::new())))
    }

    /// mcp-taskd patch: sets the handler of a server built by
    /// [`Server::http_on_connection_threads`]; later calls, and calls on a server that
    /// queues requests for `recv`, change nothing.
    pub fn serve(&self, handler: Handler) {
        if let Some(slot) = &self.handler {
            let _ = slot.set(handler);
        }
    }

    /// mcp-taskd patch: [`Server::http_on_connection_threads`] on a listener this
    /// process was given (systemd socket activation) instead of one it binds.
    pub fn from_listener_on_connection_threads<L: Into<Listener>>(
        listener: L,
        bounds: Bounds,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Self::start(listener, None, bounds, Some(Arc::new(OnceLock::new())))
    }

    /// mcp-taskd patch: a graceful stop that leaves new connections to whoever accepts
    /// next. The accept loop stops at once without accepting again, and closes this
    /// process's descriptor of the listening socket: connections the kernel has queued,
    /// and those that arrive later, wait for another holder of the socket (the service
    /// manager that passed it, and the process it starts next). Every request read from
    /// now on is answered with `Connection: close`, and its connection ends after the
    /// answer; a connection that waits for its next request for `grace` (counted from
    /// now at the earliest) is ended without one. So a client that sends its next
    /// request within `grace` of its last answer has it answered here, and every other
    /// one opens a new connection, which is queued. Calling it again changes nothing.
    pub fn drain(&self, grace: Duration) {
        self.stop_accepting();
        if self.shared.draining() {
            return;
        }
        self.shared.start_draining();
        let shared = Arc::clone(&self.shared);
        let started = Instant::now();
        let tick = (grace / 4).max(Duration::from_millis(10));
        thread::spawn(move || loop {
            thread::sleep(tick);
            let still_waiting = shared.close_waiting(started, grace);
            // The server and every connection are gone: nothing can wait any more.
            if still_waiting == 0 && Arc::strong_count(&shared) == 1 {
                break;
            }
        });
    }

    /// mcp-taskd patch: ends the accept loop without another `accept()`.
    fn stop_accepting(&self) {
        self.close.store(true, Relaxed);
        #[cfg(unix)]
        {
            use std::io::Write;
            let _ = (&self.wake).write(&[1]);
        }
    }

    /// mcp-taskd patch: an HTTP server on `addr` that enforces `bounds`.
    pub fn http_with_bounds<A>(
        addr: A,
        bounds: Bounds,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        let listener = ConfigListenAddr::from_socket_addrs(addr)?.bind()?;
        Self::from_listener_with_bounds(listener, None, bounds)
    }

    /// mcp-taskd patch: whether the server can accept connections now.
    pub fn health(&self) -> Arc<ListenerHealth> {
        Arc::clone(&self.health)
    }

    /// mcp-taskd patch: [`Server::from_listener`] with explicit [`Bounds`].
    pub fn from_listener_with_bounds<L: Into<Listener>>(
        listener: L,
        ssl_config: Option<SslConfig>,
        bounds: Bounds,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Self::start(listener, ssl_config, bounds, None)
    }

    fn start<L: Into<Listener>>(
        listener: L,
        ssl_config: Option<SslConfig>,
        bounds: Bounds,
        handler: Option<Arc<OnceLock<Handler>>>,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        let listener = listener.into();
        // building the "close" variable
        let close_trigger = Arc::new(AtomicBool::new(false));

        // building the TcpListener
        let (server, local_addr) = {
            let local_addr = listener.local_addr()?;
            log::debug!("Server listening on {}", local_addr);
            (listener, local_addr)
        };

        // building the SSL capabilities
        #[cfg(all(feature = "ssl-openssl", feature = "ssl-rustls"))]
        compile_error!(
            "Features 'ssl-openssl' and 'ssl-rustls' must not be enabled at the same time"
        );
        #[cfg(not(any(feature = "ssl-openssl", feature = "ssl-rustls")))]
        type SslContext = ();
        #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
        type SslContext = crate::ssl::SslContextImpl;
        let ssl: Option<SslContext> = {
            match ssl_config {
                #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
                Some(config) => Some(SslContext::from_pem(
                    config.certificate,
                    Zeroizing::new(config.private_key),
                )?),
                #[cfg(not(any(feature = "ssl-openssl", feature = "ssl-rustls")))]
                Some(_) => return Err(
                    "Building a server with SSL requires enabling the `ssl` feature in tiny-http"
                        .into(),
                ),
                None => None,
            }
        };

        // creating a task where server.accept() is continuously called
        // and ClientConnection objects are pushed in the messages queue
        let messages = MessagesQueue::with_capacity(8);

        // mcp-taskd patch: the accept loop never ends before the server does (upstream
        // stopped on the first `accept()` error, and panicked on EMFILE, leaving a
        // listening socket that nobody accepted from), and caps open connections.
        let health = ListenerHealth::new(bounds.max_connections);
        let shared = Arc::new(client::Shared::new(bounds));
        let server_shared = Arc::clone(&shared);
        // A byte on this pair ends the accept loop's wait (`Server::stop_accepting`).
        #[cfg(unix)]
        let (wake, woken) = std::os::unix::net::UnixStream::pair()?;
        let inside_health = Arc::clone(&health);
        let inside_close_trigger = close_trigger.clone();
        let inside_messages = messages.clone();
        let inside_handler = handler.clone();
        thread::spawn(move || {
            let health = inside_health;
            // a tasks pool is used to dispatch the connections into threads
            let tasks_pool = util::TaskPool::new();
            // A descriptor kept in reserve: when the process runs out, it is given up
            // to accept one pending connection and tell it why it is refused.
            let mut spare = std::fs::File::open("/dev/null").ok();
            let mut backoff = Duration::ZERO;
            let mut errors = RateLimitedLog::new(Duration::from_secs(10));

            log::debug!("Running accept thread");
            while !inside_close_trigger.load(Relaxed) {
                // mcp-taskd patch: wait for a connection or for the stop, whichever
                // comes first; a stop never accepts one more (see `Server::drain`).
                #[cfg(unix)]
                if !connection_or_stop(&server, &woken) {
                    break;
                }
                let sock = match server.accept() {
                    Ok((sock, _)) => {
                        backoff = Duration::ZERO;
                        sock
                    }
                    Err(e) => {
                        health.record_failure(e.to_string());
                        errors.error(&format!("cannot accept a connection: {e}"));
                        if is_descriptor_exhaustion(&e) {
                            if let Some(file) = spare.take() {
                                drop(file);
                                if let Ok((sock, _)) = server.accept() {
                                    refuse(sock, "out of file descriptors");
                                }
                                spare = std::fs::File::open("/dev/null").ok();
                            }
                        }
                        backoff = (backoff * 2).clamp(ACCEPT_BACKOFF_MIN, ACCEPT_BACKOFF_MAX);
                        thread::sleep(backoff);
                        continue;
                    }
                };
                if health.at_capacity() {
                    refuse(sock, "connection limit reached");
                    continue;
                }
                let slot = health.open_slot();
                let deadlines = StreamDeadlines::new();
                let idle_timeout = shared.bounds.idle_timeout;
                let halves = match ssl {
                    None => match sock.try_clone() {
                        Ok(read_half) => Ok(RefinedTcpStream::from_halves(
                            read_half,
                            sock,
                            Arc::clone(&deadlines),
                            idle_timeout,
                            slot,
                        )),
                        Err(e) => {
                            if is_descriptor_exhaustion(&e) {
                                refuse(sock, "out of file descriptors");
                            }
                            Err(e)
                        }
                    },
                    #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
                    Some(ref ssl) => {
                        // trying to apply SSL over the connection
                        // if an error occurs, we just close the socket and resume listening
                        let sock = match ssl.accept(sock) {
                            Ok(s) => s,
                            Err(_) => continue,
                        };

                        RefinedTcpStream::new(sock, Arc::clone(&deadlines), idle_timeout, slot)
                    }
                    #[cfg(not(any(feature = "ssl-openssl", feature = "ssl-rustls")))]
                    Some(ref _ssl) => unreachable!(),
                };
                let (read_closable, write_closable) = match halves {
                    Ok(halves) => halves,
                    Err(e) => {
                        // The socket is closed on drop; the client sees the connection end.
                        health.record_failure(e.to_string());
                        errors.error(&format!("cannot set up a connection: {e}"));
                        backoff = (backoff * 2).clamp(ACCEPT_BACKOFF_MIN, ACCEPT_BACKOFF_MAX);
                        thread::sleep(backoff);
                        continue;
                    }
                };
                let client = ClientConnection::new(
                    write_closable,
                    read_closable,
                    deadlines,
                    Arc::clone(&shared),
                );

                let messages = inside_messages.clone();
                let handler = inside_handler.clone();
                let mut client = Some(client);
                let spawned = tasks_pool.spawn(Box::new(move || {
                    if let Some(client) = client.take() {
                        if let Some(handler) = &handler {
                            // mcp-taskd patch: answer on this thread (see
                            // `http_on_connection_threads`). The next request is read
                            // once this one's answer is written (patch 9).
                            let handler = handler.wait();
                            for rq in client {
                                handler(rq);
                            }
                        } else if client.secure() {
                            // Synchronization is needed for HTTPS requests to avoid a deadlock
                            let (sender, receiver) = mpsc::channel();
                            for rq in client {
                                messages.push(rq.with_notify_sender(sender.clone()).into());
                                if receiver.recv().is_err() {
                                    break;
                                }
                            }
                        } else {
                            for rq in client {
                                messages.push(rq.into());
                            }
                        }
                    }
                }));
                if let Err(e) = spawned {
                    // The connection was dropped with the task, which closed it.
                    health.record_failure(e.to_string());
                    errors.error(&format!("cannot start a connection thread: {e}"));
                    thread::sleep(ACCEPT_BACKOFF_MIN);
                }
            }
            log::debug!("Terminating accept thread");
        });

        // result
        Ok(Server {
            messages,
            close: close_trigger,
            listening_addr: local_addr,
            health,
            handler,
            shared: server_shared,
            #[cfg(unix)]
            wake,
        })
    }

    /// Returns an iterator for all the incoming requests.
    ///
    /// The iterator will return `None` if the server socket is shutdown.
    #[inline]
    pub fn incoming_requests(&self) -> IncomingRequests<'_> {
        IncomingRequests { server: self }
    }

    /// Returns the address the server is listening to.
    #[inline]
    pub fn server_addr(&self) -> ListenAddr {
        self.listening_addr.clone()
    }

    /// Returns the number of clients currently connected to the server.
    pub fn num_connections(&self) -> usize {
        unimplemented!()
        //self.requests_receiver.lock().len()
    }

    /// Blocks until an HTTP request has been submitted and returns it.
    pub fn recv(&self) -> IoResult<Request> {
        match self.messages.pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(rq),
            None => Err(IoError::new(IoErrorKind::Other, "thread unblocked")),
        }
    }

    /// Same as `recv()` but doesn't block longer than timeout
    pub fn recv_timeout(&self, timeout: Duration) -> IoResult<Option<Request>> {
        match self.messages.pop_timeout(timeout) {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Same as `recv()` but doesn't block.
    pub fn try_recv(&self) -> IoResult<Option<Request>> {
        match self.messages.try_pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Unblock thread stuck in recv() or incoming_requests().
    /// If there are several such threads, only one is unblocked.
    /// This method allows graceful shutdown of server.
    pub fn unblock(&self) {
        self.messages.unblock();
    }
}

impl Iterator for IncomingRequests<'_> {
    type Item = Request;
    fn next(&mut self) -> Option<Request> {
        self.server.recv().ok()
    }
}

/// mcp-taskd patch: waits until `listener` has a connection to accept (true) or a byte
/// arrives on `woken` (false: stop). Interrupted waits are made again.
#[cfg(unix)]
#[allow(unsafe_code)]
fn connection_or_stop(listener: &Listener, woken: &std::os::unix::net::UnixStream) -> bool {
    use std::os::unix::io::AsRawFd;
    let mut fds = [
        libc::pollfd {
            fd: listener.raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: woken.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: two valid pollfd entries, for descriptors open for this call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if ready < 0 {
            if IoError::last_os_error().kind() == IoErrorKind::Interrupted {
                continue;
            }
            // Let `accept()` report whatever is wrong with the listener.
            return true;
        }
        if fds[1].revents != 0 {
            return false;
        }
        return true;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_accepting();
        // mcp-taskd patch: on Unix the accept loop is woken by `stop_accepting`; a
        // connection to ourselves would land in the queue that another holder of a
        // passed socket serves next.
        #[cfg(not(unix))]
        {
        // Connect briefly to ourselves to unblock the accept thread
        let maybe_stream = match &self.listening_addr {
            ListenAddr::IP(addr) => TcpStream::connect(addr).map(Connection::from),
            #[cfg(unix)]
            ListenAddr::Unix(addr) => {
                // TODO: use connect_addr when its stabilized.
                let path = addr.as_pathname().unwrap();
                std::os::unix::net::UnixStream::connect(path).map(Connection::from)
            }
        };
        if let Ok(stream) = maybe_stream {
            let _ = stream.shutdown(Shutdown::Both);
        }
        }

        #[cfg(unix)]
        if let ListenAddr::Unix(addr) = &self.listening_addr {
            if let Some(path) = addr.as_pathname() {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}
